//! What the client reports while it works: one [`Notice`] per attempt, answer and wait.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What the client reports while it works (see [`crate::ClientBuilder::on_notice`]); its `Display` is
/// one line, as `gatehouse --verbose` prints it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Notice {
    /// An attempt is about to be sent.
    Attempt { method: String, path: String, attempt: u32, max_attempts: u32, idempotency_key: Option<String> },
    /// An attempt got an answer (`code` for error answers).
    Answered {
        method: String,
        path: String,
        status: u16,
        code: Option<String>,
        request_id: Option<String>,
        elapsed: Duration,
    },
    /// An attempt got no answer.
    NoAnswer { method: String, path: String, error: String, elapsed: Duration },
    /// The next attempt waits `wait` (`retry_after` when the server named the wait).
    Retry { wait: Duration, retry_after: Option<Duration> },
    /// The key's window is used up: the request waits for its reset instead of earning a 429.
    Paced { wait: Duration },
    /// Events that could not be delivered were kept in the buffer file.
    EventsBuffered { count: usize, path: PathBuf, error: String },
    /// Buffered events older than 47 h were dropped: the server's de-duplication window (48 h)
    /// would no longer recognise them, so sending them could record them twice.
    EventsDropped { count: usize, path: PathBuf },
}

impl Notice {
    /// Whether the notice is a warning (events buffered or dropped), which the default observer prints.
    pub fn is_warning(&self) -> bool {
        matches!(self, Notice::EventsBuffered { .. } | Notice::EventsDropped { .. })
    }
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Attempt { method, path, attempt, max_attempts, idempotency_key } => {
                write!(f, "→ {method} {path} (attempt {attempt}/{max_attempts}")?;
                if let Some(key) = idempotency_key {
                    write!(f, ", Idempotency-Key {key}")?;
                }
                write!(f, ")")
            }
            Notice::Answered { method, path, status, code, request_id, elapsed } => {
                write!(f, "← {status}")?;
                if let Some(code) = code {
                    write!(f, " {code}")?;
                }
                write!(f, " {method} {path} in {} ms", elapsed.as_millis())?;
                if let Some(id) = request_id {
                    write!(f, ", request {id}")?;
                }
                Ok(())
            }
            Notice::NoAnswer { method, path, error, elapsed } => {
                write!(f, "✗ {method} {path}: no answer after {} ms: {error}", elapsed.as_millis())
            }
            Notice::Retry { wait, retry_after } => match retry_after {
                Some(after) => write!(f, "  retrying in {:.2} s (Retry-After: {} s)", wait.as_secs_f64(), after.as_secs()),
                None => write!(f, "  retrying in {:.2} s (exponential backoff)", wait.as_secs_f64()),
            },
            Notice::Paced { wait } => write!(
                f,
                "  no requests left in this rate window: waiting {:.2} s for its reset",
                wait.as_secs_f64()
            ),
            Notice::EventsBuffered { count, path, error } => {
                write!(f, "{count} event(s) kept in {} for a later flush ({error})", path.display())
            }
            Notice::EventsDropped { count, path } => write!(
                f,
                "dropped {count} buffered event(s) older than 47 h from {} (past the 48 h de-duplication window)",
                path.display()
            ),
        }
    }
}
