//! Checking a project's audit archive against its signed, chained digests (SPEC §22): the work
//! of `gatehouse logs verify`, on bytes already fetched, so it can be tested without a gateway.
//!
//! Given a run of consecutive digests (oldest first, each with its stored bytes), the public key
//! and a way to read an archive object's stored bytes, [`verify`] answers the first break it
//! finds, in the order a reader would want to hear it: a digest that is missing or does not
//! verify, a broken link, then each listed object (missing, changed, its rows not as listed), and
//! last any archive object no digest lists.

use base64::Engine as _;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use hex::encode as hex;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt;
use std::io::Read;

pub use gatehouse_wire::digests::{
    ArchivedObject, ArchivedObjects, AuditDigest, AuditPublicKey, DigestList, DigestedObject, ListedDigest,
    PreviousDigest, SignedHead,
};

impl crate::Client {
    /// `GET /public/v1/audit/public-key`: the key the project's digests verify under. Pin it
    /// (`gatehouse logs verify --public-key`) rather than trust the gateway you are checking.
    pub fn audit_public_key(&self) -> crate::Call<AuditPublicKey> {
        self.call(crate::client::Request::get("/public/v1/audit/public-key"))
    }

    /// `GET /public/v1/audit/head`: the project's chain head, signed by the gateway now (SPEC §23):
    /// which digest is the newest, and what is archived and not digested yet.
    pub fn audit_head(&self) -> crate::Call<SignedHead> {
        self.call(crate::client::Request::get("/public/v1/audit/head"))
    }

    /// `GET /public/v1/audit/digests?from&to`: the digests of periods starting in `[from, to)`
    /// (RFC 3339), oldest first.
    pub fn audit_digests(&self, from: &str, to: &str) -> crate::Call<DigestList> {
        self.call(crate::client::Request::get("/public/v1/audit/digests").query("from", from).query("to", to))
    }

    /// `GET /public/v1/audit/objects?from&to`: the archive objects whose first row is in the range.
    pub fn audit_objects(&self, from: &str, to: &str) -> crate::Call<ArchivedObjects> {
        self.call(crate::client::Request::get("/public/v1/audit/objects").query("from", from).query("to", to))
    }

    /// `GET /public/v1/audit/file?key=`: an archive object or digest, its bytes as stored.
    pub fn audit_file(&self, key: &str) -> crate::Call<Vec<u8>> {
        let mut call: crate::Call<Vec<u8>> =
            self.call(crate::client::Request::get("/public/v1/audit/file").query("key", key));
        call.decode = |bytes| Ok(bytes.to_vec());
        call
    }
}

/// The first thing found wrong, naming what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Break {
    /// No digest where one must be (a period in the range, or the one a link names).
    MissingDigest { key: String },
    /// Not a digest (not JSON of the format, or a field added).
    Unreadable { key: String, why: String },
    /// Signed by another key than the one given, or the signature does not verify.
    BadSignature { key: String },
    /// Its link names another digest, or another SHA-256 than the previous digest's bytes have.
    BrokenLink { key: String, expected: String, found: String },
    /// A listed object is not in the archive.
    MissingObject { key: String },
    /// A listed object's bytes are not the ones the digest pinned.
    ChangedObject { key: String },
    /// A listed object's rows are not as listed: their number, first or last id, or their order.
    Rows { key: String, why: String },
    /// An archive object in the range that no digest lists (added).
    Unlisted { key: String },
    /// An object two digests list (storage made it be written again after it was signed).
    ListedTwice { key: String },
    /// A digest file that is not the one its key names: another project's, another period's.
    Misplaced { key: String, why: String },
    /// The digests do not cover the range asked (none yet, or they begin after or end before it).
    NotCovered { why: String },
    /// The chain head the gateway signed names a newest digest that storage does not list: the
    /// history was cut off (digests deleted), which is not lag.
    CutOff { head: String },
    /// The chain head is not one the key signed for this project.
    BadHead { why: String },
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Break::MissingDigest { key } => write!(f, "digest {key} is missing"),
            Break::Unreadable { key, why } => write!(f, "digest {key} is not a digest: {why}"),
            Break::BadSignature { key } => {
                write!(f, "digest {key}: the signature does not verify under the public key")
            }
            Break::BrokenLink { key, expected, found } => {
                write!(f, "digest {key}: it links to {found}, but the previous digest is {expected}")
            }
            Break::MissingObject { key } => write!(f, "object {key} is listed by a digest but missing"),
            Break::ChangedObject { key } => {
                write!(f, "object {key} was changed: its SHA-256 is not the digest's")
            }
            Break::Rows { key, why } => write!(f, "object {key}: {why}"),
            Break::Unlisted { key } => write!(f, "object {key} is listed by no digest"),
            Break::ListedTwice { key } => write!(f, "object {key} is listed by two digests"),
            Break::Misplaced { key, why } => write!(f, "digest {key} is not the digest of its key: {why}"),
            Break::NotCovered { why } => write!(f, "the range is not covered: {why}"),
            Break::CutOff { head } => write!(
                f,
                "the history is cut off: the newest digest the gateway signed, {head}, is not in the listing"
            ),
            Break::BadHead { why } => write!(f, "the chain head does not verify: {why}"),
        }
    }
}

/// What an intact run covered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub digests: usize,
    pub objects: usize,
    pub rows: u64,
    /// Objects whose first row is older than the span of the digest that lists them: written late
    /// (a row that arrived after its hour was archived) or back-dated by someone who could write
    /// D1 before the roll-up. Signed history either way, but not of the hour it claims.
    pub late: Vec<LateObject>,
}

/// An object listed by a digest whose span does not hold its first row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateObject {
    pub key: String,
    /// Its first row's time (RFC 3339).
    pub first_row: String,
    /// The digest that lists it, and when that digest was made (as it says).
    pub digest: String,
    pub made_at: Option<String>,
}

impl fmt::Display for LateObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "object {} (first row at {}) was listed late, by digest {}",
            self.key, self.first_row, self.digest
        )?;
        match &self.made_at {
            Some(made_at) => write!(f, " made at {made_at}"),
            None => Ok(()),
        }
    }
}

/// The public key from its base64 (as `GET /public/v1/audit/public-key` shows it).
pub fn public_key(base64: &str) -> Option<VerifyingKey> {
    let bytes: [u8; 32] = base64::engine::general_purpose::STANDARD.decode(base64).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

/// What a run of digests must be: the project's, covering `[from_ms, to_ms)` without a gap.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub project_id: &'a str,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Checks `digests` (consecutive, oldest first: `(key, Some(bytes))`, `None` for one not found):
/// each is the project's digest of the period its key names, in the form it was signed in, the
/// periods follow one another and cover `scope`'s range; the digest before the first (`before`:
/// its key and bytes, when the run does not start at the project's first digest), every object
/// they list (read with `object`: its stored bytes, `None` when missing) and that every key of
/// `archived` (the archive's objects in the range) is listed exactly once.
pub fn verify(
    key: &VerifyingKey,
    scope: &Scope<'_>,
    before: Option<(&str, &[u8])>,
    digests: &[(String, Option<Vec<u8>>)],
    mut object: impl FnMut(&str) -> Option<Vec<u8>>,
    archived: &[String],
) -> Result<Verified, Break> {
    let mut verified = Verified::default();
    // The digest before the first: signed, the project's and its key's, and ending where the
    // first starts (a link to any file with the right hash would otherwise start the chain).
    let mut previous: Option<(String, String, i64)> = match before {
        Some((k, bytes)) => {
            let (_, _, end) = read_digest(key, scope, k, bytes)?;
            Some((k.to_owned(), hex(Sha256::digest(bytes)), end))
        }
        None => None,
    };
    let mut listed = BTreeSet::new();
    let mut read = Vec::new();
    let mut covered: Option<(i64, i64)> = None;
    for (digest_key, bytes) in digests {
        let bytes = bytes.as_deref().ok_or_else(|| Break::MissingDigest { key: digest_key.clone() })?;
        let (digest, start, end) = read_digest(key, scope, digest_key, bytes)?;
        covered = match covered {
            None => Some((start, end)),
            Some((first, last)) if last == start => Some((first, end)),
            Some((_, last)) => {
                return Err(Break::MissingDigest {
                    key: format!("the digest of the period from {}", rfc3339(last)),
                })
            }
        };
        match (&previous, &digest.previous) {
            (Some((k, sha, _)), Some(link)) if &link.key != k || &link.sha256 != sha => {
                return Err(Break::BrokenLink {
                    key: digest_key.clone(),
                    expected: format!("{k} ({sha})"),
                    found: format!("{} ({})", link.key, link.sha256),
                })
            }
            (Some((k, _, previous_end)), Some(_)) if *previous_end != start => {
                return Err(Break::BrokenLink {
                    key: digest_key.clone(),
                    expected: format!("a digest ending at {}", digest.period_start),
                    found: format!("{k}, ending at {}", rfc3339(*previous_end)),
                })
            }
            (Some(_), Some(_)) | (None, None) => {}
            (Some((k, sha, _)), None) => {
                return Err(Break::BrokenLink {
                    key: digest_key.clone(),
                    expected: format!("{k} ({sha})"),
                    found: "no digest".into(),
                })
            }
            // The run starts at a digest that links to one before it: that one must be given.
            (None, Some(link)) => return Err(Break::MissingDigest { key: link.key.clone() }),
        }
        previous = Some((digest_key.clone(), hex(Sha256::digest(bytes)), end));
        for o in &digest.objects {
            if !listed.insert(o.key.clone()) {
                return Err(Break::ListedTwice { key: o.key.clone() });
            }
            read.push((o.clone(), digest_key, start, digest.made_at.clone()));
        }
        verified.digests += 1;
    }
    for (o, digest_key, start, made_at) in read {
        let bytes = object(&o.key).ok_or_else(|| Break::MissingObject { key: o.key.clone() })?;
        if hex(Sha256::digest(&bytes)) != o.sha256 {
            return Err(Break::ChangedObject { key: o.key.clone() });
        }
        let first_ts = check_rows(&o, &bytes)?;
        if first_ts < start {
            let (key, first_row, digest) = (o.key.clone(), rfc3339(first_ts), digest_key.clone());
            verified.late.push(LateObject { key, first_row, digest, made_at });
        }
        verified.rows += o.rows;
        verified.objects += 1;
    }
    match covered {
        // The chain ends before the range and nothing was archived since: nothing to cover.
        None if scope.to_ms <= scope.from_ms => {}
        None => return Err(Break::NotCovered { why: "no digest was found for it".into() }),
        Some((first, _)) if first > scope.from_ms => {
            return Err(Break::NotCovered { why: format!("the digests begin at {}", rfc3339(first)) })
        }
        Some((_, last)) if last < scope.to_ms => {
            let why = format!("the digests end at {} (later periods are not digested yet)", rfc3339(last));
            return Err(Break::NotCovered { why });
        }
        Some(_) => {}
    }
    if let Some(extra) = archived.iter().find(|k| !listed.contains(*k)) {
        return Err(Break::Unlisted { key: extra.clone() });
    }
    Ok(verified)
}

/// A digest file as signed: in its canonical form, under `key`, the project's digest of the period
/// its key names. Answers it with its span.
fn read_digest(
    key: &VerifyingKey,
    scope: &Scope<'_>,
    digest_key: &str,
    bytes: &[u8],
) -> Result<(AuditDigest, i64, i64), Break> {
    let unreadable = |why: String| Break::Unreadable { key: digest_key.to_owned(), why };
    let digest: AuditDigest = serde_json::from_slice(bytes).map_err(|e| unreadable(e.to_string()))?;
    let mut canonical = serde_json::to_vec(&digest).map_err(|e| unreadable(e.to_string()))?;
    canonical.push(b'\n');
    if canonical != bytes {
        return Err(unreadable("its bytes are not the form it was signed in".to_owned()));
    }
    check_signature(key, digest_key, &digest)?;
    let misplaced = |why: String| Break::Misplaced { key: digest_key.to_owned(), why };
    if digest.project_id != scope.project_id {
        return Err(misplaced(format!("it is project {}'s", digest.project_id)));
    }
    if digest_key != format!("audit/{}/digest/{}.json", digest.project_id, digest.period_start) {
        return Err(misplaced(format!("it is the digest of the period from {}", digest.period_start)));
    }
    match (unix_ms(&digest.period_start), unix_ms(&digest.period_end)) {
        (Some(start), Some(end)) if start < end => Ok((digest, start, end)),
        _ => Err(misplaced("its period is not a period".into())),
    }
}

/// What the chain head says of a run of listed digests (oldest first, from the range's start):
/// it checks the head's signature and project, keeps the digests up to the head's (later ones
/// are not part of the chain yet), and answers them with the range's end as far as the chain
/// must reach: the head's end, or `scope.to_ms` when objects archived before it wait to be
/// digested (then `verify` reports the range as not covered). A head that names a digest the
/// listing lacks is a cut-off history.
pub fn up_to_head<'a>(
    key: &VerifyingKey,
    head: &SignedHead,
    scope: &Scope<'_>,
    listed: &'a [ListedDigest],
) -> Result<(&'a [ListedDigest], i64), Break> {
    let bad = |why: &str| Break::BadHead { why: why.to_owned() };
    if public_key(&head.public_key) != Some(*key) {
        return Err(bad("it is signed by another key"));
    }
    let signature: [u8; 64] = head
        .signature
        .as_deref()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("it has no signature"))?;
    key.verify(&head.signed_bytes(), &Signature::from_bytes(&signature))
        .map_err(|_| bad("the signature does not verify"))?;
    if head.project_id != scope.project_id {
        return Err(bad(&format!("it is project {}'s", head.project_id)));
    }
    // A chain that never started in its head (digests all from before SPEC §23): the listing is
    // the chain and must cover the range, as it had to then.
    if !head.started {
        return Ok((listed, scope.to_ms));
    }
    let covered_to = unix_ms(&head.covered_to).ok_or_else(|| bad("covered_to is not a time"))?;
    let chain = match listed.iter().position(|d| d.key == head.digest_key) {
        Some(i) => &listed[..=i],
        // No digest yet, or the head's digest ends before the range: nothing listed belongs.
        None if head.sequence == 0 || covered_to <= scope.from_ms => &listed[..0],
        None => return Err(Break::CutOff { head: head.digest_key.clone() }),
    };
    let waiting = head.oldest_pending.as_deref().and_then(unix_ms).is_some_and(|t| t < scope.to_ms);
    let to = match waiting {
        true => scope.to_ms,
        false => scope.to_ms.min(covered_to),
    };
    Ok((chain, to))
}

/// The newest digest of a chain cut at the head (the last of `digests`, as fetched) is, byte for
/// byte, the one the head names: another file under its key (one a run signed and the head never
/// took, put back by someone) is a break.
pub fn newest_is_the_heads(head: &SignedHead, digests: &[(String, Option<Vec<u8>>)]) -> Result<(), Break> {
    match digests.last() {
        Some((key, Some(bytes))) if head.started && *key == head.digest_key => {
            match hex(Sha256::digest(bytes)) == head.digest_sha256 {
                true => Ok(()),
                false => Err(Break::BadHead {
                    why: format!("storage holds other bytes under {key} than the digest the head names"),
                }),
            }
        }
        _ => Ok(()),
    }
}

/// Unix ms of an RFC 3339 time (as digests write it, or with fewer digits or none of a second).
pub fn unix_ms(time: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(time).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
}

/// RFC 3339 with milliseconds, as digests and the audit routes write times.
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn check_signature(key: &VerifyingKey, digest_key: &str, digest: &AuditDigest) -> Result<(), Break> {
    let bad = || Break::BadSignature { key: digest_key.to_owned() };
    if public_key(&digest.public_key) != Some(*key) {
        return Err(bad());
    }
    let signature = digest.signature.as_deref().ok_or_else(bad)?;
    let signature: [u8; 64] = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .ok()
        .and_then(|s| s.try_into().ok())
        .ok_or_else(bad)?;
    key.verify(&digest.signed_bytes(), &Signature::from_bytes(&signature)).map_err(|_| bad())
}

/// The object's rows (gzip NDJSON, one JSON object with `ts` and `request_id` per line): as many
/// as listed, the listed first and last, in order of `(ts, request_id)`. Answers the first row's
/// time.
fn check_rows(o: &DigestedObject, gzip: &[u8]) -> Result<i64, Break> {
    let rows_wrong = |why: String| Break::Rows { key: o.key.clone(), why };
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(gzip)
        .read_to_string(&mut text)
        .map_err(|e| rows_wrong(format!("not gzip NDJSON: {e}")))?;
    let mut ids = Vec::new();
    let mut first_ts = None;
    let mut last: Option<(i64, String)> = None;
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let row: serde_json::Value =
            serde_json::from_str(line).map_err(|e| rows_wrong(format!("row {} is not JSON: {e}", n + 1)))?;
        let id = row["request_id"].as_str().unwrap_or_default().to_owned();
        let ts = row["ts"].as_i64().unwrap_or_default();
        if last.as_ref().is_some_and(|(t, i)| (ts, &id) <= (*t, i)) {
            return Err(rows_wrong(format!("row {} ({id}) is out of order", n + 1)));
        }
        first_ts.get_or_insert(ts);
        last = Some((ts, id.clone()));
        ids.push(id);
    }
    if ids.len() as u64 != o.rows {
        return Err(rows_wrong(format!("{} rows, the digest lists {}", ids.len(), o.rows)));
    }
    if ids.first() != Some(&o.first_request_id) || ids.last() != Some(&o.last_request_id) {
        return Err(rows_wrong("its first or last row is not the digest's".into()));
    }
    first_ts.ok_or_else(|| rows_wrong("it holds no row".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};
    use std::collections::BTreeMap;
    use std::io::Write;

    const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

    fn gzip(rows: &[(i64, &str)]) -> Vec<u8> {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for (ts, id) in rows {
            writeln!(z, r#"{{"request_id":"{id}","ts":{ts},"status":200}}"#).unwrap();
        }
        z.finish().unwrap()
    }

    /// A project's archive: two periods, one object each, and their signed, chained digests.
    struct Archive {
        key: SigningKey,
        objects: BTreeMap<String, Vec<u8>>,
        digests: Vec<(String, Option<Vec<u8>>)>,
    }

    fn signed(key: &SigningKey, mut d: AuditDigest) -> Vec<u8> {
        d.public_key = B64.encode(key.verifying_key().as_bytes());
        d.signature = Some(B64.encode(key.sign(&d.signed_bytes()).to_bytes()));
        let mut file = serde_json::to_vec(&d).unwrap();
        file.push(b'\n');
        file
    }

    fn digest(period: usize, objects: Vec<DigestedObject>, previous: Option<(&str, &[u8])>) -> AuditDigest {
        AuditDigest {
            version: 1,
            project_id: "prj_1".into(),
            period_start: format!("2026-12-02T1{period}:00:00.000Z"),
            period_end: format!("2026-12-02T1{}:00:00.000Z", period + 1),
            made_at: None,
            objects,
            previous: previous.map(|(k, b)| PreviousDigest { key: k.into(), sha256: hex(Sha256::digest(b)) }),
            algorithm: "ed25519".into(),
            public_key: String::new(),
            signature: None,
        }
    }

    fn listed(key: &str, bytes: &[u8], rows: &[(i64, &str)]) -> DigestedObject {
        DigestedObject {
            key: key.into(),
            sha256: hex(Sha256::digest(bytes)),
            rows: rows.len() as u64,
            first_request_id: rows[0].1.into(),
            last_request_id: rows[rows.len() - 1].1.into(),
        }
    }

    /// The key of the digest of period `p` (hour 1p of the day).
    fn k(p: usize) -> String {
        format!("audit/prj_1/digest/2026-12-02T1{p}:00:00.000Z.json")
    }

    /// Hours 10 to 13 of the day.
    const SCOPE: Scope<'static> = Scope { project_id: "prj_1", from_ms: H10, to_ms: H10 + 3 * 3_600_000 };

    /// 10:00 of the day, and 12:00.
    const H10: i64 = 1_796_205_600_000;
    const H12: i64 = H10 + 7_200_000;

    fn archive() -> Archive {
        let key = SigningKey::from_bytes(&[7; 32]);
        let rows_a = [(H10 + 1, "r1"), (H10 + 2, "r2"), (H10 + 3, "r3")];
        let rows_b = [(H12 + 10, "r4"), (H12 + 11, "r5")];
        let (a, b) = (gzip(&rows_a), gzip(&rows_b));
        let d0 = signed(&key, digest(0, vec![listed("audit/prj_1/a", &a, &rows_a)], None));
        // Period 1 had no traffic: an empty digest.
        let d1 = signed(&key, digest(1, vec![], Some((&k(0), &d0))));
        let d2 = signed(&key, digest(2, vec![listed("audit/prj_1/b", &b, &rows_b)], Some((&k(1), &d1))));
        Archive {
            key,
            objects: [("audit/prj_1/a".to_owned(), a), ("audit/prj_1/b".to_owned(), b)].into(),
            digests: vec![(k(0), Some(d0)), (k(1), Some(d1)), (k(2), Some(d2))],
        }
    }

    fn check(a: &Archive) -> Result<Verified, Break> {
        let keys: Vec<String> = a.objects.keys().cloned().collect();
        verify(&a.key.verifying_key(), &SCOPE, None, &a.digests, |k| a.objects.get(k).cloned(), &keys)
    }

    #[test]
    fn an_intact_archive_verifies() {
        assert_eq!(check(&archive()), Ok(Verified { digests: 3, objects: 2, rows: 5, late: vec![] }));
        let a = archive();
        let pk = public_key(&B64.encode(a.key.verifying_key().as_bytes())).unwrap();
        assert_eq!(pk, a.key.verifying_key());
    }

    /// What a writer of the bucket without the signing key can do, each caught and named.
    #[test]
    fn every_change_without_the_signing_key_is_named() {
        // One byte of an object flipped.
        let mut a = archive();
        let bytes = a.objects.get_mut("audit/prj_1/a").unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        assert_eq!(check(&a), Err(Break::ChangedObject { key: "audit/prj_1/a".into() }));
        // A row removed and the object written again (not re-signed).
        let mut a = archive();
        a.objects.insert("audit/prj_1/a".into(), gzip(&[(1, "r1"), (3, "r3")]));
        assert_eq!(check(&a), Err(Break::ChangedObject { key: "audit/prj_1/a".into() }));
        // An object deleted; one added.
        let mut a = archive();
        a.objects.remove("audit/prj_1/b");
        let keys = vec!["audit/prj_1/a".to_owned()];
        let found =
            verify(&a.key.verifying_key(), &SCOPE, None, &a.digests, |k| a.objects.get(k).cloned(), &keys);
        assert_eq!(found, Err(Break::MissingObject { key: "audit/prj_1/b".into() }));
        let mut a = archive();
        a.objects.insert("audit/prj_1/c".into(), gzip(&[(20, "r9")]));
        assert_eq!(check(&a), Err(Break::Unlisted { key: "audit/prj_1/c".into() }));
        // An object written again after it was signed, and signed again (SPEC §23, H2).
        let mut a = archive();
        let (bytes, rows) =
            (a.objects["audit/prj_1/a"].clone(), [(H10 + 1, "r1"), (H10 + 2, "r2"), (H10 + 3, "r3")]);
        let d2 = a.digests[2].1.clone().unwrap();
        let again = digest(3, vec![listed("audit/prj_1/a", &bytes, &rows)], Some((&k(2), &d2)));
        a.digests.push((k(3), Some(signed(&a.key, again))));
        let wide = Scope { to_ms: SCOPE.to_ms + 3_600_000, ..SCOPE };
        let keys: Vec<String> = a.objects.keys().cloned().collect();
        let found =
            verify(&a.key.verifying_key(), &wide, None, &a.digests, |k| a.objects.get(k).cloned(), &keys);
        assert_eq!(found, Err(Break::ListedTwice { key: "audit/prj_1/a".into() }));
        // A digest deleted (even the empty one of a quiet period).
        let mut a = archive();
        a.digests[1].1 = None;
        assert_eq!(check(&a), Err(Break::MissingDigest { key: k(1) }));
        // A digest changed (a row count), or replaced by one signed with another key.
        let mut a = archive();
        let text = String::from_utf8(a.digests[0].1.clone().unwrap()).unwrap();
        a.digests[0].1 = Some(text.replace(r#""rows":3"#, r#""rows":2"#).into_bytes());
        assert_eq!(check(&a), Err(Break::BadSignature { key: k(0) }));
        let mut a = archive();
        let forger = SigningKey::from_bytes(&[9; 32]);
        let d1: AuditDigest = serde_json::from_slice(a.digests[1].1.as_ref().unwrap()).unwrap();
        a.digests[1].1 = Some(signed(&forger, d1));
        assert_eq!(check(&a), Err(Break::BadSignature { key: k(1) }));
        // Digests reordered: the links do not match.
        let mut a = archive();
        a.digests.swap(1, 2);
        assert!(check(&a).is_err(), "swapped digests");
        // A run that starts after the first digest needs the one before it.
        let a = archive();
        let keys = vec!["audit/prj_1/b".to_owned()];
        let later = &a.digests[1..];
        let scope = Scope { from_ms: SCOPE.from_ms + 3_600_000, ..SCOPE };
        let found = verify(&a.key.verifying_key(), &scope, None, later, |k| a.objects.get(k).cloned(), &keys);
        assert_eq!(found, Err(Break::MissingDigest { key: k(0) }));
        let d0 = a.digests[0].1.clone().unwrap();
        let found = verify(
            &a.key.verifying_key(),
            &scope,
            Some((&k(0), &d0)),
            later,
            |k| a.objects.get(k).cloned(),
            &keys,
        );
        assert_eq!(found, Ok(Verified { digests: 2, objects: 1, rows: 2, late: vec![] }));
    }

    /// SPEC §23 (review L1): the digest the first one links to is checked as a digest — signed,
    /// the project's, ending where the first starts — not only hashed: a link to any file with
    /// the right hash (one storage made up) would otherwise start the chain.
    #[test]
    fn the_digest_the_first_links_to_is_checked_as_a_digest() {
        let a = archive();
        let scope = Scope { from_ms: H12, ..SCOPE };
        let keys = vec!["audit/prj_1/b".to_owned()];
        let b = a.objects["audit/prj_1/b"].clone();
        let rows_b = [(H12 + 10, "r4"), (H12 + 11, "r5")];
        // Digest 2 linking to `before` (key, bytes), signed with the real key.
        let run = |before_key: &str, before: &[u8]| {
            let d2 = digest(2, vec![listed("audit/prj_1/b", &b, &rows_b)], Some((before_key, before)));
            let digests = vec![(k(2), Some(signed(&a.key, d2)))];
            verify(
                &a.key.verifying_key(),
                &scope,
                Some((before_key, before)),
                &digests,
                |k| a.objects.get(k).cloned(),
                &keys,
            )
        };
        let d1 = a.digests[1].1.clone().unwrap();
        assert_eq!(run(&k(1), &d1).map(|v| v.digests), Ok(1));
        // A file storage made up under digest 1's key.
        assert!(matches!(run(&k(1), b"{}\n"), Err(Break::Unreadable { key, .. }) if key == k(1)));
        // Digest 1 signed by another key.
        let forger = SigningKey::from_bytes(&[9; 32]);
        let forged = signed(&forger, serde_json::from_slice(&d1).unwrap());
        assert_eq!(run(&k(1), &forged), Err(Break::BadSignature { key: k(1) }));
        // Another project's digest 1.
        let mut other: AuditDigest = serde_json::from_slice(&d1).unwrap();
        other.project_id = "prj_2".into();
        let other = signed(&a.key, other);
        assert!(matches!(run(&k(1), &other), Err(Break::Misplaced { key, .. }) if key == k(1)));
        // A real digest that does not end where the first starts (digest 0, ending at 11:00).
        let d0 = a.digests[0].1.clone().unwrap();
        assert!(matches!(run(&k(0), &d0), Err(Break::BrokenLink { key, .. }) if key == k(2)));
    }

    /// SPEC §23 (review M2): an object whose first row is older than the span of the digest that
    /// lists it (a row back-dated in D1 before the roll-up, or one that arrived late) verifies, and
    /// is reported with the digest that listed it.
    #[test]
    fn an_object_older_than_its_digest_is_reported_late() {
        let mut a = archive();
        let rows_b = [(H10 + 10, "r4"), (H12 + 11, "r5")];
        let b = gzip(&rows_b);
        let d1 = a.digests[1].1.clone().unwrap();
        let mut d2 = digest(2, vec![listed("audit/prj_1/b", &b, &rows_b)], Some((&k(1), &d1)));
        d2.made_at = Some("2026-12-02T13:01:00.000Z".into());
        a.digests[2].1 = Some(signed(&a.key, d2));
        a.objects.insert("audit/prj_1/b".into(), b);
        let late = LateObject {
            key: "audit/prj_1/b".into(),
            first_row: rfc3339(H10 + 10),
            digest: k(2),
            made_at: Some("2026-12-02T13:01:00.000Z".into()),
        };
        assert_eq!(check(&a).map(|v| v.late), Ok(vec![late.clone()]));
        assert_eq!(
            late.to_string(),
            "object audit/prj_1/b (first row at 2026-12-02T10:00:00.010Z) was listed late, by digest \
             audit/prj_1/digest/2026-12-02T12:00:00.000Z.json made at 2026-12-02T13:01:00.000Z"
        );
        assert_eq!(check(&archive()).map(|v| v.late), Ok(vec![]));
    }

    /// Rows as the digest's signer saw them but out of order (a fault of the writer, not a
    /// forgery): named too.
    #[test]
    fn rows_out_of_order_or_miscounted_are_named() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let rows = [(2, "r2"), (1, "r1")];
        let bytes = gzip(&rows);
        let d = signed(&key, digest(0, vec![listed("o", &bytes, &rows)], None));
        let objects: BTreeMap<String, Vec<u8>> = [("o".to_owned(), bytes)].into();
        let scope = Scope { to_ms: SCOPE.from_ms + 3_600_000, ..SCOPE };
        let found =
            verify(&key.verifying_key(), &scope, None, &[(k(0), Some(d))], |k| objects.get(k).cloned(), &[]);
        assert!(matches!(found, Err(Break::Rows { why, .. }) if why.contains("out of order")));
    }

    /// Found by the review: a run that skips a period (its digest gone; the next links over it).
    #[test]
    fn a_period_without_a_digest_inside_the_run_is_named() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let d0 = signed(&key, digest(0, vec![], None));
        let d2 = signed(&key, digest(2, vec![], Some((&k(0), &d0))));
        let run = vec![(k(0), Some(d0)), (k(2), Some(d2))];
        let found = verify(&key.verifying_key(), &SCOPE, None, &run, |_| None, &[]);
        assert!(matches!(found, Err(Break::MissingDigest { .. })), "{found:?}");
    }

    /// Found by the review: nothing verified is not intact, nor a run that ends before the range.
    #[test]
    fn a_run_that_does_not_cover_the_range_is_not_intact() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let found = verify(&key.verifying_key(), &SCOPE, None, &[], |_| None, &[]);
        assert!(matches!(found, Err(Break::NotCovered { .. })), "{found:?}");
        let mut a = archive();
        a.digests.pop();
        a.objects.remove("audit/prj_1/b");
        assert!(matches!(check(&a), Err(Break::NotCovered { .. })), "the last period's digest dropped");
    }

    /// Found by the review: a digest file is bound to the project and period its key names.
    #[test]
    fn a_digest_file_is_bound_to_the_project_and_period_of_its_key() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let d0 = signed(&key, digest(0, vec![], None));
        let d1 = signed(&key, digest(1, vec![], Some((&k(0), &d0))));
        let scope = Scope { from_ms: SCOPE.from_ms + 7_200_000, ..SCOPE };
        // The newest digest (period 2) replaced by period 1's file.
        let found =
            verify(&key.verifying_key(), &scope, Some((&k(0), &d0)), &[(k(2), Some(d1))], |_| None, &[]);
        assert!(matches!(found, Err(Break::Misplaced { .. })), "{found:?}");
        // Another project's first digest (one signing key per deployment) at this project's key.
        let mut other = digest(2, vec![], None);
        other.project_id = "prj_2".into();
        let found =
            verify(&key.verifying_key(), &scope, None, &[(k(2), Some(signed(&key, other)))], |_| None, &[]);
        assert!(matches!(found, Err(Break::Misplaced { .. })), "{found:?}");
    }

    /// Found by the review: the newest digest's bytes changed (same fields) is a change.
    #[test]
    fn a_digest_file_in_another_encoding_is_named() {
        let mut a = archive();
        a.digests[2].1.as_mut().unwrap().insert(1, b' ');
        assert!(matches!(check(&a), Err(Break::Unreadable { .. })));
    }

    fn head(
        key: &SigningKey,
        sequence: u64,
        digest: &str,
        covered_to: &str,
        oldest_pending: Option<&str>,
    ) -> SignedHead {
        let mut h = SignedHead {
            project_id: "prj_1".into(),
            as_of: "2026-12-02T15:00:00.000Z".into(),
            started: true,
            sequence,
            covered_to: covered_to.into(),
            digest_key: digest.into(),
            digest_sha256: String::new(),
            pending_objects: u64::from(oldest_pending.is_some()),
            oldest_pending: oldest_pending.map(str::to_owned),
            algorithm: "ed25519".into(),
            public_key: B64.encode(key.verifying_key().as_bytes()),
            signature: None,
        };
        h.signature = Some(B64.encode(key.sign(&h.signed_bytes()).to_bytes()));
        h
    }

    fn listing(keys: &[usize]) -> Vec<ListedDigest> {
        keys.iter()
            .map(|p| ListedDigest {
                period_start: format!("2026-12-02T1{p}:00:00.000Z"),
                period_end: format!("2026-12-02T1{}:00:00.000Z", p + 1),
                key: k(*p),
                sha256: String::new(),
                objects: 0,
            })
            .collect()
    }

    /// SPEC §23: the signed head says which digest is the newest. Digests listed after it are not
    /// the chain's yet; a listing that lacks it was cut off (main read that as lag); a range past
    /// its end is covered when nothing archived waits, and not when something does.
    #[test]
    fn the_chain_head_cuts_the_listing_and_finds_a_cut_off_history() {
        let a = archive();
        let verifying = a.key.verifying_key();
        let h1 = head(&a.key, 2, &k(1), "2026-12-02T12:00:00.000Z", None);
        let all = listing(&[0, 1, 2]);
        let (chain, to) = up_to_head(&verifying, &h1, &SCOPE, &all).unwrap();
        assert_eq!(
            (chain.len(), to),
            (2, unix_ms("2026-12-02T12:00:00.000Z").unwrap()),
            "digest 2 is past the head"
        );
        // The newest digests deleted (listing and all): a cut-off history, not lag.
        let h2 = head(&a.key, 3, &k(2), "2026-12-02T13:00:00.000Z", None);
        assert_eq!(up_to_head(&verifying, &h2, &SCOPE, &listing(&[0, 1])), Err(Break::CutOff { head: k(2) }));
        // Idle since hour 13 with nothing waiting: a range to 14:00 is covered by the head's end.
        let wide = Scope { to_ms: SCOPE.to_ms + 3_600_000, ..SCOPE };
        let (chain, to) = up_to_head(&verifying, &h2, &wide, &all).unwrap();
        assert_eq!((chain.len(), to), (3, SCOPE.to_ms));
        let objects = |k: &str| a.objects.get(k).cloned();
        assert_eq!(
            verify(&verifying, &Scope { to_ms: to, ..wide }, None, &a.digests, objects, &[])
                .map(|v| v.digests),
            Ok(3)
        );
        // An object archived at 13:10 waits: the range to 14:00 is not covered yet.
        let waiting = head(&a.key, 3, &k(2), "2026-12-02T13:00:00.000Z", Some("2026-12-02T13:10:00.000Z"));
        let (_, to) = up_to_head(&verifying, &waiting, &wide, &all).unwrap();
        assert_eq!(to, wide.to_ms);
        assert!(matches!(
            verify(&verifying, &Scope { to_ms: to, ..wide }, None, &a.digests, objects, &[]),
            Err(Break::NotCovered { .. })
        ));
        // A head signed by another key, or changed after signing, or another project's.
        let other = SigningKey::from_bytes(&[9; 32]);
        let forged = head(&other, 3, &k(2), "2026-12-02T13:00:00.000Z", None);
        assert!(matches!(up_to_head(&verifying, &forged, &SCOPE, &all), Err(Break::BadHead { .. })));
        let mut changed = h1.clone();
        changed.digest_key = k(0);
        assert!(matches!(up_to_head(&verifying, &changed, &SCOPE, &all), Err(Break::BadHead { .. })));
        let theirs = Scope { project_id: "prj_2", ..SCOPE };
        assert!(matches!(up_to_head(&verifying, &h1, &theirs, &all), Err(Break::BadHead { .. })));
    }

    /// Found by a review: a head that never started (a project whose digests are all from before
    /// SPEC §23) made the listing be dropped and an empty range pass; and the newest digest was
    /// matched by key only, so another signed file put under its key passed.
    #[test]
    fn a_chain_without_a_head_is_the_listing_and_the_newest_digest_is_the_heads_byte_for_byte() {
        let a = archive();
        let verifying = a.key.verifying_key();
        let mut never = head(&a.key, 0, "", "1970-01-01T00:00:00.000Z", None);
        never.started = false;
        never.signature = Some(B64.encode(a.key.sign(&never.signed_bytes()).to_bytes()));
        let all = listing(&[0, 1, 2]);
        let (chain, to) = up_to_head(&verifying, &never, &SCOPE, &all).unwrap();
        assert_eq!((chain.len(), to), (3, SCOPE.to_ms), "the whole listing, the whole range");
        let objects = |k: &str| a.objects.get(k).cloned();
        // With the digests gone, the range is not covered (main: "intact: 0 digests").
        assert!(matches!(verify(&verifying, &SCOPE, None, &[], objects, &[]), Err(Break::NotCovered { .. })));
        // The newest digest must be the head's bytes.
        let newest = a.digests[2].1.clone().unwrap();
        let mut h = head(&a.key, 3, &k(2), "2026-12-02T13:00:00.000Z", None);
        h.digest_sha256 = hex(Sha256::digest(&newest));
        assert_eq!(newest_is_the_heads(&h, &a.digests), Ok(()));
        let mut other = a.digests.clone();
        other[2].1 =
            Some(signed(&a.key, digest(2, vec![], Some((&k(1), a.digests[1].1.as_deref().unwrap())))));
        assert!(matches!(newest_is_the_heads(&h, &other), Err(Break::BadHead { .. })));
    }
}
