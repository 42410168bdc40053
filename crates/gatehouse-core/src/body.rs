//! A request body read chunk by chunk within its route's limit (SPEC §3 413, §13): it never
//! holds more than the limit, the first chunk that would take it over ends the read, and its
//! buffer grows with the bytes that arrived, never with what the client declared (SPEC §19).

/// The most a body's buffer reserves before its bytes arrive, whatever `Content-Length` says: a
/// header claiming 99 MB must not take 99 MB of the isolate's memory (wasm memory never shrinks).
pub const RESERVE_LIMIT: usize = 64 * 1024;

/// The body would exceed its route's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// The bytes read so far, never more than `limit`.
#[derive(Debug)]
pub struct CappedBody {
    limit: usize,
    bytes: Vec<u8>,
}

impl CappedBody {
    /// An empty body for a route with this limit; `Err` when the declared `Content-Length` is
    /// over it already (nothing is read then).
    pub fn new(limit: usize, declared_len: Option<u64>) -> Result<Self, TooLarge> {
        if declared_len.is_some_and(|n| n > limit as u64) {
            return Err(TooLarge);
        }
        // A small declared length is allocated once; beyond that the buffer grows as bytes come.
        let capacity = declared_len.map_or(0, |n| n as usize).min(RESERVE_LIMIT);
        Ok(CappedBody { limit, bytes: Vec::with_capacity(capacity) })
    }

    /// Appends the next chunk, or refuses it when the body would go over the limit.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), TooLarge> {
        if chunk.len() > self.limit - self.bytes.len() {
            return Err(TooLarge);
        }
        let needed = self.bytes.len() + chunk.len();
        if needed > self.bytes.capacity() {
            // Grow by doubling, as a Vec does, but never past the limit.
            let target = needed.max(self.bytes.capacity() * 2).min(self.limit);
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_reading() {
        assert_eq!(CappedBody::new(1024, Some(1025)).unwrap_err(), TooLarge);
        assert!(CappedBody::new(1024, Some(1024)).is_ok());
        assert!(CappedBody::new(1024, None).is_ok());
    }

    #[test]
    fn a_declared_length_never_sizes_the_buffer() {
        let body = CappedBody::new(100_000_000, Some(99_000_000)).unwrap();
        assert!(body.bytes.capacity() <= RESERVE_LIMIT, "reserved {}", body.bytes.capacity());
        let small = CappedBody::new(1 << 20, Some(300)).unwrap();
        assert!(small.bytes.capacity() >= 300, "a small declared body is allocated once");
    }

    #[test]
    fn a_body_exactly_at_the_limit_passes() {
        let mut body = CappedBody::new(10, None).unwrap();
        body.push(b"01234").unwrap();
        body.push(b"").unwrap();
        body.push(b"56789").unwrap();
        assert_eq!(body.into_bytes(), b"0123456789");
    }

    #[test]
    fn the_chunk_that_would_go_over_is_refused_and_not_kept() {
        let mut body = CappedBody::new(10, None).unwrap();
        body.push(b"0123456").unwrap();
        assert_eq!(body.push(b"789a"), Err(TooLarge));
        assert_eq!(body.bytes.len(), 7, "the refused chunk was not appended");
        assert!(body.bytes.capacity() <= 10, "the buffer never grows past the limit");
    }

    #[test]
    fn the_buffer_never_grows_past_the_limit() {
        let limit = 1024 * 1024;
        let mut body = CappedBody::new(limit, None).unwrap();
        let chunk = vec![7u8; 65_536 - 1];
        while body.push(&chunk).is_ok() {
            assert!(body.bytes.capacity() <= limit);
        }
        assert_eq!(body.bytes.len(), 16 * (65_536 - 1));
        assert!(body.bytes.capacity() <= limit);
    }

    #[test]
    fn a_lying_content_length_does_not_lift_the_limit() {
        let mut body = CappedBody::new(10, Some(4)).unwrap();
        body.push(b"0123456789").unwrap();
        assert_eq!(body.push(b"x"), Err(TooLarge));
    }
}
