//! The [`RequestBody`] port over the runtime's request body stream (a `ReadableStream`): chunks
//! as they arrive, never the whole body at once. (One `arrayBuffer()` call for a body with a
//! `Content-Length` was measured and dropped: after proxy-mode requests it left later requests
//! hanging in `wrangler dev`.) A body read only in part is left as it is, not
//! cancelled: the runtime discards the rest once the response is sent (a cancelled request body
//! makes `wrangler dev`'s proxy drop its connection to the worker and answer the next request 503).
//! The rest of a proxied body over 1 MiB is handed on unread ([`BodyRest`]): the origin's
//! request streams it (adapters/origin.rs), so it never enters wasm memory.

use js_sys::Uint8Array;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{ReadableStream, ReadableStreamDefaultReader, ReadableStreamReadResult};

use super::js_error;
use gatehouse_core::ports::{PassThrough, PortError, RequestBody};

/// The unread rest of a request body: the stream, or its reader once a chunk was read.
pub struct BodyRest {
    pub stream: Option<ReadableStream>,
    pub reader: Option<ReadableStreamDefaultReader>,
}

pub struct WorkerBody {
    declared_len: Option<u64>,
    /// The body until its first chunk is asked for (`None`: the request has none).
    stream: Option<ReadableStream>,
    reader: Option<ReadableStreamDefaultReader>,
}

impl WorkerBody {
    pub fn new(req: &web_sys::Request, content_length: Option<String>) -> Self {
        let declared_len = content_length.and_then(|n| n.trim().parse().ok());
        WorkerBody { declared_len, stream: req.body(), reader: None }
    }
}

impl RequestBody for WorkerBody {
    fn declared_len(&self) -> Option<u64> {
        self.declared_len
    }

    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        if let Some(stream) = self.stream.take() {
            self.reader = Some(stream.get_reader().unchecked_into());
        }
        let Some(reader) = &self.reader else { return Ok(None) };
        let result: ReadableStreamReadResult =
            JsFuture::from(reader.read()).await.map_err(js_error)?.unchecked_into();
        if result.get_done().unwrap_or(false) {
            self.reader = None;
            return Ok(None);
        }
        Ok(Some(Uint8Array::new(&result.get_value()).to_vec()))
    }

    fn into_rest(self) -> PassThrough {
        PassThrough::new(BodyRest { stream: self.stream, reader: self.reader })
    }
}
