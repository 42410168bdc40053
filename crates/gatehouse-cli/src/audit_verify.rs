//! `gatehouse logs verify --from --to [--public-key]` (SPEC §22, §23): fetches the project's
//! chain head (signed by the gateway now), its digests from `from` on as far as the head (later
//! ones too: an object written late for the range is listed by a later digest), the digest the
//! first one links to, every object they list and the archive's objects of the range, and checks
//! them with `gatehouse_client::digests`. A listing that lacks the head's digest is a cut-off
//! history; a range past the head's end is covered when nothing archived before its end waits to
//! be digested (an idle project has no digest per period). Prints one line: what was verified,
//! or the first break (exit 1).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use gatehouse_client::digests::{self, AuditDigest, Scope};
use gatehouse_client::{Client, Error};

use crate::Failure;

pub async fn run(client: &Client, from: &str, to: &str, public_key: Option<&str>) -> Result<(), Failure> {
    let key = match public_key {
        Some(key) => key.to_owned(),
        None => {
            let key = client.audit_public_key().await?.public_key;
            eprintln!(
                "gatehouse: verifying under the gateway's own public key {key}; pin it with --public-key"
            );
            key
        }
    };
    let key = digests::public_key(&key)
        .ok_or_else(|| Failure::Usage("--public-key is not a base64 Ed25519 public key".into()))?;
    let time = |name: &str, value: &str| {
        digests::unix_ms(value)
            .ok_or_else(|| Failure::Usage(format!("--{name} is not an RFC 3339 time: {value}")))
    };
    let project_id = client.me().await?.project_id;
    let scope = Scope { project_id: &project_id, from_ms: time("from", from)?, to_ms: time("to", to)? };
    let now = humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(1)).to_string();
    let head = client.audit_head().await?;
    for warning in head_warnings(&head, SystemTime::now()) {
        eprintln!("gatehouse: {warning}");
    }
    let mut listed = Vec::new();
    loop {
        let start = listed.last().map_or(from.to_owned(), |d: &digests::ListedDigest| d.period_end.clone());
        let page = client.audit_digests(&start, &now).await?;
        listed.extend(page.data);
        if !page.more {
            break;
        }
    }
    let (listed, to_ms) = match digests::up_to_head(&key, &head, &scope, &listed) {
        Ok(cut) => cut,
        Err(b) => return broken(&b),
    };
    let chain_scope = Scope { to_ms, ..scope };
    let mut files = Vec::new();
    for d in listed {
        files.push((d.key.clone(), fetch(client, &d.key).await?));
    }
    // The digest the first one links to (its file must be there with the hash linked).
    let first_link = files
        .first()
        .and_then(|(_, bytes)| bytes.as_deref())
        .and_then(|b| serde_json::from_slice::<AuditDigest>(b).ok())
        .and_then(|d| d.previous);
    let before = match &first_link {
        Some(link) => Some((link.key.clone(), fetch(client, &link.key).await?)),
        None => None,
    };
    let before = match &before {
        Some((k, Some(bytes))) => Some((k.as_str(), bytes.as_slice())),
        Some((k, None)) => return broken(&digests::Break::MissingDigest { key: k.clone() }),
        None => None,
    };
    let mut objects = BTreeMap::new();
    for (_, bytes) in &files {
        let Some(digest) = bytes.as_deref().and_then(|b| serde_json::from_slice::<AuditDigest>(b).ok())
        else {
            continue;
        };
        for o in digest.objects {
            if let Some(bytes) = fetch(client, &o.key).await? {
                objects.insert(o.key, bytes);
            }
        }
    }
    // The archive's objects of the range, a month at a time (the most one listing covers).
    let mut archived = Vec::new();
    let mut start = scope.from_ms;
    while start < scope.to_ms {
        let end = (start + 31 * 86_400_000).min(scope.to_ms);
        let (a, b) = (digests::rfc3339(start), digests::rfc3339(end));
        archived.extend(client.audit_objects(&a, &b).await?.data.into_iter().map(|o| o.key));
        start = end;
    }
    if let Err(b) = digests::newest_is_the_heads(&head, &files) {
        return broken(&b);
    }
    match digests::verify(&key, &chain_scope, before, &files, |k| objects.get(k).cloned(), &archived) {
        Ok(v) => {
            let last = listed.last().map_or("-", |d| d.period_end.as_str());
            let idle = match to_ms < scope.to_ms {
                true => format!("; nothing archived since {} waits for a digest", head.covered_to),
                false => String::new(),
            };
            println!(
                "intact: {} digests, {} objects, {} rows (digests from {from} to {last}{idle}; the hot tier's rows are covered from their roll-up on)",
                v.digests, v.objects, v.rows
            );
            for late in &v.late {
                println!("late: {late} (its rows were written late or back-dated before the roll-up)");
            }
            Ok(())
        }
        Err(b) => broken(&b),
    }
}

/// A file's bytes; `None` when the archive has none of that key (a 404). Any other failure (the
/// gateway out of reach, a rate limit) is an error of the run, not a break of the archive.
async fn fetch(client: &Client, key: &str) -> Result<Option<Vec<u8>>, Failure> {
    match client.audit_file(key).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(Error::Api(e)) if e.status == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn broken(b: &digests::Break) -> Result<(), Failure> {
    println!("broken: {b}");
    Err(Failure::Reported)
}

/// How far a head's `as_of` may be from this machine's clock before it is worth a word (a head
/// signed long ago is a replay, or one of the clocks is wrong).
const AS_OF_SKEW_MS: i64 = 5 * 60_000;
/// The documented lag (SPEC §23): an archived object is digested within the hot window and two
/// periods; past three hours its project is behind.
const DOCUMENTED_LAG_MS: i64 = 3 * 3_600_000;

/// What the head says that a reader should hear before the verdict: an `as_of` far from now, and
/// objects waiting for a digest past the documented lag.
fn head_warnings(head: &digests::SignedHead, now: SystemTime) -> Vec<String> {
    let now_ms = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let mut warnings = Vec::new();
    match digests::unix_ms(&head.as_of) {
        Some(as_of) if (as_of - now_ms).abs() > AS_OF_SKEW_MS => warnings.push(format!(
            "the chain head was signed at {}, {} min from this machine's clock: a replayed head, or a clock is wrong",
            head.as_of,
            (as_of - now_ms).abs() / 60_000
        )),
        Some(_) => {}
        None => warnings.push(format!("the chain head's as_of is not a time: {}", head.as_of)),
    }
    if let Some(oldest) = head.oldest_pending.as_deref().and_then(digests::unix_ms) {
        if now_ms - oldest > DOCUMENTED_LAG_MS {
            warnings.push(format!(
                "objects wait for a digest past the documented lag of 3 h (the oldest from {}): the project's digests are behind or stalled",
                digests::rfc3339(oldest)
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(as_of: &str, oldest_pending: Option<&str>) -> digests::SignedHead {
        serde_json::from_value(serde_json::json!({
            "project_id": "prj_1", "as_of": as_of, "started": true, "sequence": 3,
            "covered_to": "2026-12-02T12:00:00.000Z", "digest_key": "k", "digest_sha256": "s",
            "pending_objects": 1, "oldest_pending": oldest_pending,
            "algorithm": "ed25519", "public_key": "p", "signature": null
        }))
        .unwrap()
    }

    /// Review L4 and M3: a head signed long ago (replayed) and objects waiting past the lag are
    /// said; a fresh head of a project on time says nothing.
    #[test]
    fn a_stale_head_and_a_stalled_chain_are_said() {
        let now = SystemTime::UNIX_EPOCH
            + Duration::from_millis(digests::unix_ms("2026-12-02T14:00:00Z").unwrap() as u64);
        assert!(head_warnings(&head("2026-12-02T13:58:00.000Z", Some("2026-12-02T12:30:00.000Z")), now)
            .is_empty());
        let stale = head_warnings(&head("2026-12-02T13:00:00.000Z", None), now);
        assert!(stale.len() == 1 && stale[0].contains("60 min from this machine's clock"), "{stale:?}");
        let stalled = head_warnings(&head("2026-12-02T14:00:00.000Z", Some("2026-12-02T10:30:00.000Z")), now);
        assert!(stalled.len() == 1 && stalled[0].contains("past the documented lag"), "{stalled:?}");
    }
}
