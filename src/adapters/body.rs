//! The [`RequestBody`] port over the runtime's request body stream (a `ReadableStream`): chunks
//! as they arrive, never the whole body at once. Dropping it cancels the stream.

use futures_util::StreamExt;
use worker::ByteStream;

use crate::ports::{PortError, RequestBody};

pub struct WorkerBody {
    declared_len: Option<u64>,
    /// `None` when the request has no body.
    stream: Option<ByteStream>,
}

impl WorkerBody {
    pub fn new(req: &worker::Request) -> Self {
        let declared_len =
            req.headers().get("content-length").ok().flatten().and_then(|n| n.trim().parse().ok());
        WorkerBody { declared_len, stream: req.inner().body().map(ByteStream::from) }
    }
}

impl RequestBody for WorkerBody {
    fn declared_len(&self) -> Option<u64> {
        self.declared_len
    }

    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        let Some(stream) = self.stream.as_mut() else { return Ok(None) };
        stream.next().await.transpose().map_err(PortError::from_display)
    }
}
