//! The operator's dead letters (SPEC §12.1, `ADMIN_TOKEN`): `GET /admin/v1/dead-letters` lists
//! them, `POST /admin/v1/dead-letters/redrive` sends them back to the queues they came from.

use std::collections::BTreeSet;

use serde_json::json;

use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::{DeadLetters, PortError, Ports, Redrive};
use gatehouse_core::queue::{dead_letter_page, redrive_request, DeadLetter, REDRIVE_MAX};

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn list_dead_letters(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let (queue, page) = dead_letter_page(call.query)?;
        let letters = self.dead_letters.dead_letters(queue.as_deref(), &page).await.map_err(unavailable)?;
        Ok(Reply::ok(page.respond(letters, DeadLetter::position, DeadLetter::view)))
    }

    pub(super) async fn redrive_dead_letters(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let ids = redrive_request(&call.body)?;
        let report = redrive(&self.dead_letters, &self.redrive, ids.as_deref(), call.now_ms)
            .await
            .map_err(unavailable)?;
        let mut reply = Reply::ok(json!({
            "redriven": report.redriven,
            "failed": report.failed,
            "skipped": report.skipped,
        }));
        reply.log = report.error;
        Ok(reply)
    }
}

/// What a re-drive did: letters sent back, letters whose send failed (still `dead`, try again),
/// named letters that are unknown or re-driven already, and the first error for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RedriveReport {
    pub redriven: usize,
    pub failed: usize,
    pub skipped: usize,
    pub error: Option<String>,
}

/// Sends each letter not re-driven yet (the named ones, or up to [`REDRIVE_MAX`] of all) back to
/// its queue, then marks it re-driven. A letter sent but not marked stays listed as dead and a
/// later re-drive sends it again: the consumers store each message once, so that is harmless.
pub async fn redrive<L: DeadLetters, R: Redrive>(
    letters: &L,
    queues: &R,
    ids: Option<&[String]>,
    now_ms: i64,
) -> Result<RedriveReport, PortError> {
    let found = letters.undriven(ids, REDRIVE_MAX).await?;
    let mut report = RedriveReport {
        skipped: ids.map_or(0, |ids| ids.iter().collect::<BTreeSet<_>>().len().saturating_sub(found.len())),
        ..RedriveReport::default()
    };
    for letter in found {
        let sent = queues.resend(&letter.queue, &letter.body).await;
        let outcome = match sent {
            Ok(()) => {
                report.redriven += 1;
                letters
                    .mark_redriven(&letter.id, now_ms)
                    .await
                    .map_err(|e| format!("marking {}: {e}", letter.id))
            }
            Err(e) => {
                report.failed += 1;
                Err(format!("re-sending {} to {}: {e}", letter.id, letter.queue))
            }
        };
        if let (Err(e), None) = (outcome, &report.error) {
            report.error = Some(format!("dead-letter re-drive: {e}"));
        }
    }
    Ok(report)
}
