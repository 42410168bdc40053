//! Proxy mode (SPEC §15): the request forwarded to an origin, its answer, and the client's body
//! streamed through.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

use super::PortError;
use crate::upstream::OriginTarget;

/// A request forwarded to a proxied route's origin (SPEC §15), headers as they are sent.
#[derive(Debug)]
pub struct OriginRequest<'a> {
    pub target: &'a OriginTarget,
    pub url: String,
    pub method: &'a str,
    pub headers: Vec<(String, String)>,
    pub body: OutgoingBody<'a>,
    pub timeout_ms: u64,
}

/// The body a forwarded request carries (SPEC §19 "Memory").
#[derive(Debug)]
pub enum OutgoingBody<'a> {
    /// Held whole (at most [`crate::upstream::SIGNED_BODY_LIMIT`] bytes): its hash is signed.
    Held(&'a [u8]),
    /// The bytes read so far, then the rest of the client's stream as it arrives (the body's
    /// [`RequestBody::into_rest`]), never held: at most `limit` bytes in all, else the origin
    /// call ends with [`OriginOutcome::BodyTooLarge`].
    Streamed { head: &'a [u8], rest: PassThrough, limit: usize },
}

/// How the origin answered.
#[derive(Debug)]
pub enum OriginOutcome {
    Answered(OriginAnswer),
    /// No answer (or not the first [`crate::upstream::STORED_ANSWER_LIMIT`] bytes of its
    /// body) within the route's `timeout_ms`.
    TimedOut,
    /// The connection failed; the cause is for the log.
    Unreachable(String),
    /// A streamed body went over its limit on the way: the origin call was ended.
    BodyTooLarge,
    /// The client's stream of a streamed body broke off (the cause is for the answer): the
    /// origin call was ended, so the origin never saw the body end.
    BodyBroken(String),
}

#[derive(Debug)]
pub struct OriginAnswer {
    pub status: u16,
    /// As the origin sent them (the app decides which the client sees).
    pub headers: Vec<(String, String)>,
    pub body: AnswerBody,
}

/// An origin's answer body: read whole while it fits the stored-answer limit, else streamed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerBody {
    /// The whole body, at most `STORED_ANSWER_LIMIT` bytes: it can be kept for replay.
    Whole(Vec<u8>),
    /// Larger: the bytes read so far, then the rest as it streams from the origin.
    Streaming { head: Vec<u8>, rest: PassThrough, declared_len: Option<u64> },
}

/// The unread rest of an origin's answer or of a client's body, handed to the runtime as it is:
/// opaque to the app (the worker's adapter puts its stream here and takes it back when it builds
/// the response or the origin's request).
#[derive(Clone)]
pub struct PassThrough(Rc<RefCell<Option<Box<dyn Any>>>>);

impl PassThrough {
    pub fn new<T: 'static>(rest: T) -> Self {
        PassThrough(Rc::new(RefCell::new(Some(Box::new(rest)))))
    }

    /// The rest, once, if it is a `T`.
    pub fn take<T: 'static>(&self) -> Option<T> {
        let rest = self.0.borrow_mut().take()?;
        rest.downcast::<T>().ok().map(|b| *b)
    }
}

impl PartialEq for PassThrough {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PassThrough {}

impl std::fmt::Debug for PassThrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PassThrough")
    }
}

/// Proxied routes' origins: an `http(s)` URL or a service binding, one request each, no
/// redirects followed, within the route's timeout.
pub trait Origin {
    async fn forward(&self, request: OriginRequest<'_>) -> OriginOutcome;
}

/// The request's body as the client streams it, read only once the route, the caller and the
/// declared size allow it, and only as far as the route's limit (`core::body::CappedBody`).
/// Dropping it cancels the rest of the stream.
pub trait RequestBody: Sized + 'static {
    /// `Content-Length`, when the client sent one.
    fn declared_len(&self) -> Option<u64>;
    /// The next chunk as it arrives; `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, PortError>;
    /// The chunks not read yet, for the origin's adapter to stream on unheld (by default the body
    /// itself).
    fn into_rest(self) -> PassThrough {
        PassThrough::new(self)
    }
}
