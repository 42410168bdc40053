//! The [`RequestBody`] port over a `worker::Request`.

use crate::ports::{PortError, RequestBody};

pub struct WorkerBody(pub worker::Request);

impl RequestBody for WorkerBody {
    fn declared_len(&self) -> Option<u64> {
        self.0.headers().get("content-length").ok().flatten()?.trim().parse().ok()
    }

    async fn read(mut self) -> Result<Vec<u8>, PortError> {
        self.0.bytes().await.map_err(PortError::from_display)
    }
}
