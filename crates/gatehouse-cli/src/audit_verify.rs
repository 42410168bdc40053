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
