//! A proxied route's origin in memory: it answers by a script, records every request it
//! received (so a test counts the calls that reached it), and goes through the schedule's
//! [`Faults`]: a call may fail before the origin sees it (unreachable) or after it acted (the
//! gateway timed out while the origin did the work).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use crate::sim::{Fault, Faults};
use gatehouse_core::ports::{
    AnswerBody, Origin, OriginAnswer, OriginOutcome, OriginRequest, OutgoingBody, PassThrough,
};
use gatehouse_core::upstream::STORED_ANSWER_LIMIT;

/// A request as the origin received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The origin's script: the answer (status, body) to the `n`th request it receives (0-based).
pub type Script = Box<dyn Fn(&Received, usize) -> (u16, Vec<u8>)>;

pub struct FakeOrigin {
    pub faults: Rc<Faults>,
    pub script: Script,
    pub received: RefCell<Vec<Received>>,
}

impl FakeOrigin {
    pub fn new(faults: Rc<Faults>, script: Script) -> Self {
        FakeOrigin { faults, script, received: RefCell::default() }
    }

    fn serve(&self, request: &OriginRequest<'_>) -> OriginAnswer {
        let body = match &request.body {
            OutgoingBody::Held(bytes) => bytes.to_vec(),
            OutgoingBody::Streamed { head, rest, .. } => {
                let rest = rest.take::<VecDeque<Vec<u8>>>().unwrap_or_default();
                head.iter().copied().chain(rest.into_iter().flatten()).collect()
            }
        };
        let received = Received {
            method: request.method.to_owned(),
            url: request.url.clone(),
            headers: request.headers.clone(),
            body,
        };
        let n = self.received.borrow().len();
        let (status, body) = (self.script)(&received, n);
        self.received.borrow_mut().push(received);
        let body = if body.len() > STORED_ANSWER_LIMIT {
            let declared_len = Some(body.len() as u64);
            let rest = body[STORED_ANSWER_LIMIT..].to_vec();
            AnswerBody::Streaming {
                head: body[..STORED_ANSWER_LIMIT].to_vec(),
                rest: PassThrough::new(rest),
                declared_len,
            }
        } else {
            AnswerBody::Whole(body)
        };
        let headers =
            vec![("Content-Type".into(), "text/plain".into()), ("Connection".into(), "close".into())];
        OriginAnswer { status, headers, body }
    }
}

impl Origin for FakeOrigin {
    async fn forward(&self, mut request: OriginRequest<'_>) -> OriginOutcome {
        if let OutgoingBody::Streamed { head, rest, limit } = &mut request.body {
            // What the worker's stream does: the byte past the limit ends the call.
            let chunks = rest.take::<VecDeque<Vec<u8>>>().unwrap_or_default();
            if head.len() + chunks.iter().map(Vec::len).sum::<usize>() > *limit {
                return OriginOutcome::BodyTooLarge;
            }
            *rest = PassThrough::new(chunks);
        }
        match self.faults.call("origin.forward").await {
            Fault::FailBefore => OriginOutcome::Unreachable("origin.forward: injected failure".into()),
            Fault::FailAfter => {
                self.serve(&request);
                OriginOutcome::TimedOut
            }
            Fault::Ok => OriginOutcome::Answered(self.serve(&request)),
            Fault::Hang => OriginOutcome::TimedOut,
        }
    }
}
