//! `Idempotency-Key` (SPEC §5): the header's grammar, the request fingerprint, and the decision a
//! key's guard makes for a claim. The guard stores claims; this module only decides.

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

use super::canonical_json;
use super::encoding::hex;
use super::error::{ApiError, ErrorCode};
use super::sealing::{Keyring, Sealed, NONCE_BYTES};
use super::tagged::{deserialize_tagged, field, unit, unknown, Tagged};

pub const HEADER: &str = "Idempotency-Key";
/// A claim whose execution died is released after this lease.
pub const LEASE_MS: i64 = 60_000;

/// The most objects one key's claims spread over (SPEC §20): its guard and up to 63 claim objects.
pub const MAX_CLAIM_SHARDS: u32 = 64;

/// The object that holds a key's claim of `idempotency_key` (SPEC §20): the claims of one key are
/// spread over `shards` objects by the `Idempotency-Key` — shard 0 is the key's guard (named
/// `key_hash`), which takes such a claim in the same round trip as its rate decision; shard `s` is
/// the object `{key_hash}:claims:{s}`, a name no key hash, client address or operator guard takes.
/// The same key and `Idempotency-Key` always find the same object.
pub fn claim_object(key_hash: &str, shards: u32, idempotency_key: &str) -> String {
    let shards = u64::from(shards.clamp(1, MAX_CLAIM_SHARDS));
    match super::encoding::fnv1a(idempotency_key.as_bytes()) % shards {
        0 => key_hash.to_owned(),
        shard => format!("{key_hash}:claims:{shard}"),
    }
}

/// What a route asks of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPolicy {
    /// Not honoured (reads, ingestion).
    Ignored,
    /// Honoured when sent: 1–255 characters.
    Optional,
    /// Required, with its own length bounds (release markers: 8–128).
    Required { min: usize, max: usize },
}

/// Reads the header under the route's policy. `None` when the route ignores it or it was not sent
/// where optional. The key is an RFC 9651 sf-string (`"…"`, any printable ASCII, `\"` and `\\`
/// escaped: what a browser sends, SPEC §25) or, as before, a bare run of visible ASCII without a
/// comma. The runtime joins a repeated header with `", "`, so anything after a closing quote, or
/// a comma in a bare key, means the header was sent twice.
pub fn parse_key(header: Option<&str>, policy: KeyPolicy) -> Result<Option<String>, ApiError> {
    let (min, max) = match policy {
        KeyPolicy::Ignored => return Ok(None),
        KeyPolicy::Optional => (1, 255),
        KeyPolicy::Required { min, max } => (min, max),
    };
    let Some(raw) = header else {
        return match policy {
            KeyPolicy::Required { .. } => Err(ApiError::new(
                ErrorCode::IdempotencyKeyRequired,
                format!("This route requires an {HEADER} header ({min}–{max} characters)."),
            )
            .with_detail("header", HEADER)),
            _ => Ok(None),
        };
    };
    let invalid =
        |why: &str| ApiError::unprocessable(format!("{HEADER} {why}")).with_detail("header", HEADER);
    let raw = raw.trim();
    let key = match raw.strip_prefix('"') {
        Some(quoted) => sf_string(quoted).map_err(invalid)?,
        None if raw.contains(',') => return Err(invalid("was sent more than once, or contains a comma.")),
        None if !raw.bytes().all(|b| (0x21..=0x7e).contains(&b)) => {
            return Err(invalid("may contain only visible ASCII characters (or be a quoted sf-string)."))
        }
        None => raw.to_owned(),
    };
    if !(min..=max).contains(&key.len()) {
        return Err(invalid(&format!("must be {min} to {max} characters long.")));
    }
    Ok(Some(key))
}

/// The rest of an sf-string after its opening quote (RFC 9651 §4.2.5), decoded; nothing may
/// follow its closing quote.
fn sf_string(rest: &str) -> Result<String, &'static str> {
    let mut key = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    loop {
        match chars.next() {
            Some('\\') => match chars.next() {
                Some(c @ ('"' | '\\')) => key.push(c),
                _ => return Err("has a backslash that escapes neither `\"` nor `\\`."),
            },
            Some('"') => break,
            Some(c) if (' '..='~').contains(&c) => key.push(c),
            Some(_) => return Err("may contain only printable ASCII characters."),
            None => return Err("has no closing quote."),
        }
    }
    match chars.as_str().is_empty() {
        true => Ok(key),
        false => Err("was sent more than once, or has text after its closing quote."),
    }
}

/// SHA-256 over method, path and the body in normalised form (SPEC §5, §19): a JSON body in the
/// form of [`canonical_json`] (key order, whitespace and escapes do not matter, numbers stay
/// exact); any other body, one naming a key twice included (its route refuses it), as it came.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut h = request_line(method, path);
    match canonical_json::canonical(body) {
        Ok(json) => h.update(json.as_bytes()),
        Err(_) => h.update(body),
    }
    hex(&h.finalize())
}

/// The fingerprint of a proxied request (SPEC §15, §19): its body is opaque, so its bytes count as
/// sent, and so does its `Content-Type` (the same bytes as another type are another request).
pub fn opaque_fingerprint(
    method: &str,
    path_and_query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> String {
    let mut h = request_line(method, path_and_query);
    match content_type {
        // Its length first: no type and body can read as another type and body.
        Some(content_type) => {
            h.update(format!("content-type {}:", content_type.len()).as_bytes());
            h.update(content_type.as_bytes());
        }
        None => h.update(b"no content-type:"),
    }
    h.update(body);
    hex(&h.finalize())
}

fn request_line(method: &str, path: &str) -> Sha256 {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b"\n");
    h.update(path.as_bytes());
    h.update(b"\n");
    h
}

/// A completed response as it is stored and replayed. `Debug` shows the body's length only: a
/// key's or a subscription's creation answers its secret.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
    pub request_id: String,
    /// A proxied answer's headers, replayed with it (built-in answers are JSON: none kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// `body` is base64: a proxied answer may be any bytes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub base64: bool,
    /// The request completed with a 2xx too large to keep (SPEC §15): its replay is 409
    /// `IDEMPOTENCY_RESPONSE_NOT_STORED`, never a second execution.
    #[serde(default, skip_serializing_if = "is_false")]
    pub not_stored: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

impl StoredResponse {
    /// The body's bytes as they were answered.
    pub fn body_bytes(&self) -> Vec<u8> {
        if self.base64 {
            super::encoding::from_base64(&self.body).unwrap_or_default()
        } else {
            self.body.clone().into_bytes()
        }
    }
}

impl std::fmt::Debug for StoredResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredResponse")
            .field("status", &self.status)
            .field("body", &format_args!("[{} bytes]", self.body.len()))
            .field("request_id", &self.request_id)
            .field("not_stored", &self.not_stored)
            .finish()
    }
}

/// A completed response as the response store and the guard keep it (SPEC §13): sealed under the
/// caller's API key, so only a request with that key reads it. `Debug` shows no body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KeptResponse {
    /// A sealed [`StoredResponse`] (JSON), bound to its API key id and `Idempotency-Key`.
    Sealed(Sealed),
    /// Written before responses were sealed (a JSON object where a sealed one is a string): read
    /// as it is until it expires with its key, at most the TTL after the upgrade.
    Plaintext(StoredResponse),
}

/// The entry of one `Idempotency-Key` of one API key: what its kept response is sealed to and
/// stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    pub api_key_id: &'a str,
    pub idempotency_key: &'a str,
}

impl Entry<'_> {
    /// Where the response store keeps the entry's response (SPEC §5): `papi:idem:{apiKeyId}:{key}`.
    /// It is also the associated data a kept response is sealed with, so a sealed response opens
    /// only for its own entry.
    pub fn storage_key(&self) -> String {
        format!("papi:idem:{}:{}", self.api_key_id, self.idempotency_key)
    }
}

impl KeptResponse {
    /// Seals `response` for `entry`; `nonce` is fresh random.
    pub fn seal(
        key: &Keyring,
        entry: Entry<'_>,
        response: &StoredResponse,
        nonce: [u8; NONCE_BYTES],
    ) -> Self {
        let json = serde_json::to_vec(response).expect("a stored response serialises");
        KeptResponse::Sealed(key.seal(&json, entry.storage_key().as_bytes(), nonce))
    }

    /// Seals `response` as [`Self::seal`] does, unless sealed it would not fit one Durable Object
    /// row beside its claim ([`KEPT_MAX_BYTES`], SPEC §19): then it seals the marker of a response
    /// answered but not kept (as a streamed answer's), so the key still completes and the origin
    /// is never called twice for it.
    pub fn seal_to_keep(
        key: &Keyring,
        entry: Entry<'_>,
        response: &StoredResponse,
        nonce: [u8; NONCE_BYTES],
    ) -> Self {
        let kept = Self::seal(key, entry, response, nonce);
        match &kept {
            KeptResponse::Sealed(sealed) if sealed.as_str().len() > KEPT_MAX_BYTES => {
                let marker = StoredResponse {
                    status: response.status,
                    request_id: response.request_id.clone(),
                    not_stored: true,
                    ..StoredResponse::default()
                };
                Self::seal(key, entry, &marker, nonce)
            }
            _ => kept,
        }
    }

    /// The response, or `None` when it was sealed under another API key or for another entry, or
    /// was changed.
    pub fn open(self, key: &Keyring, entry: Entry<'_>) -> Option<StoredResponse> {
        match self {
            KeptResponse::Sealed(sealed) => {
                let json = key.open(&sealed, entry.storage_key().as_bytes())?;
                serde_json::from_slice(&json).ok()
            }
            KeptResponse::Plaintext(response) => Some(response),
        }
    }
}

/// The largest sealed response a guard keeps in its claim's row: a Durable Object value is at most
/// 2,000,000 bytes, and the row's other columns need a little room.
pub const KEPT_MAX_BYTES: usize = super::platform::DO_MAX_VALUE_BYTES - 64 * 1024;

/// A claim as a guard remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub fingerprint: String,
    /// While running: when the lease ends. Once completed: when the key is forgotten.
    pub until_ms: i64,
    pub completed: bool,
    /// The execution failed (non-2xx) and gave the claim back.
    pub released: bool,
    /// The operation this claim executes: kept across a released claim and a lease that ran out,
    /// so that the same request executing again writes the same rows (see [`operation_seed`]).
    pub operation: String,
    /// The response, while the guard keeps it (see `adapters::` and the guard).
    pub response: Option<KeptResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "claim", rename_all = "snake_case")]
pub enum ClaimDecision {
    /// The claim is taken: execute `operation`.
    Execute { operation: String },
    /// Same key, same request, still running.
    InUse,
    /// Same key, different request.
    Reused,
    /// Same key, same request, completed: replay. The guard may hold the response itself;
    /// otherwise it is read from the response store.
    Replay { response: Option<KeptResponse> },
}

impl Tagged for ClaimDecision {
    const TAG: &'static str = "claim";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        match tag {
            "execute" => Ok(Self::Execute { operation: field(fields, "operation")? }),
            "in_use" => unit(fields, Self::InUse),
            "reused" => unit(fields, Self::Reused),
            "replay" => Ok(Self::Replay { response: field(fields, "response")? }),
            other => Err(unknown(other, &["execute", "in_use", "reused", "replay"])),
        }
    }
}

deserialize_tagged!(ClaimDecision);

/// A sealed response is a string, one from before the sealing an object (read without serde's
/// buffering of untagged enums, see [`crate::tagged`]).
impl<'de> Deserialize<'de> for KeptResponse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Kept;

        impl<'de> Visitor<'de> for Kept {
            type Value = KeptResponse;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sealed response (a string) or a stored response (an object)")
            }

            fn visit_str<E: serde::de::Error>(self, sealed: &str) -> Result<KeptResponse, E> {
                Ok(KeptResponse::Sealed(Sealed::from_stored(sealed.to_owned())))
            }

            fn visit_string<E: serde::de::Error>(self, sealed: String) -> Result<KeptResponse, E> {
                Ok(KeptResponse::Sealed(Sealed::from_stored(sealed)))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<KeptResponse, A::Error> {
                StoredResponse::deserialize(MapAccessDeserializer::new(map)).map(KeptResponse::Plaintext)
            }
        }

        d.deserialize_any(Kept)
    }
}

/// The decision for a request with `fingerprint` (made by `request_id`) given the claim the guard
/// holds for its key. A completed claim past its TTL is as good as none. A released claim, or a
/// lease that ran out before completion, is taken again; the same request then continues the
/// same operation (a write of the first execution that landed is found again, not repeated),
/// another request starts a new one.
pub fn decide_claim(
    existing: Option<&Claim>,
    fingerprint: &str,
    request_id: &str,
    now_ms: i64,
) -> ClaimDecision {
    match existing {
        Some(c) if !c.released && c.until_ms > now_ms => match (c.fingerprint == fingerprint, c.completed) {
            (false, _) => ClaimDecision::Reused,
            (true, false) => ClaimDecision::InUse,
            (true, true) => ClaimDecision::Replay { response: c.response.clone() },
        },
        Some(c) if !c.completed && c.fingerprint == fingerprint => {
            ClaimDecision::Execute { operation: c.operation.clone() }
        }
        _ => ClaimDecision::Execute { operation: request_id.to_owned() },
    }
}

/// The seed the ids an operation creates derive from: the same operation (one API key, one
/// `Idempotency-Key`, one claim lifetime) always creates the same ids, so executing it again after
/// a failure whose write landed finds those rows instead of writing new ones.
pub fn operation_seed(api_key_id: &str, idempotency_key: &str, operation: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [api_key_id, idempotency_key, operation] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    h.finalize().into()
}

/// The error for a claim the request may not execute under.
pub fn refusal(decision: &ClaimDecision) -> Option<ApiError> {
    match decision {
        ClaimDecision::InUse => Some(
            ApiError::new(
                ErrorCode::IdempotencyKeyInUse,
                "A request with this Idempotency-Key is still being processed. Retry shortly.",
            )
            .with_detail("header", HEADER)
            .with_retry_after(1),
        ),
        ClaimDecision::Reused => Some(
            ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                "This Idempotency-Key was used for a different request (method, path or body).",
            )
            .with_detail("header", HEADER),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_keys_claims_spread_over_its_objects_by_the_idempotency_key() {
        let hash = "ab".repeat(32);
        let objects: Vec<String> = (0..400).map(|i| claim_object(&hash, 8, &format!("order-{i}"))).collect();
        // The same key and Idempotency-Key always find the same object.
        assert!((0..400).all(|i| claim_object(&hash, 8, &format!("order-{i}")) == objects[i]));
        let mut counts = std::collections::BTreeMap::new();
        for o in &objects {
            *counts.entry(o.as_str()).or_insert(0) += 1;
        }
        // Shard 0 is the key's guard itself; the others are named after the key and the shard.
        assert_eq!(counts.len(), 8, "{counts:?}");
        assert!(counts.contains_key(hash.as_str()));
        assert!((1..8).all(|s| counts.contains_key(format!("{hash}:claims:{s}").as_str())));
        assert!(counts.values().all(|n| (25..=75).contains(n)), "evenly enough: {counts:?}");
        // One object (keys made before claims were spread) is the guard; nonsense is clamped.
        assert!(["a", "b", "c"]
            .iter()
            .all(|k| claim_object(&hash, 1, k) == hash && claim_object(&hash, 0, k) == hash));
        assert!((0..400).all(|i| claim_object(&hash, 1000, &i.to_string())
            .rsplit(':')
            .next()
            .unwrap()
            .parse::<u32>()
            .map_or(true, |s| s < MAX_CLAIM_SHARDS)));
    }

    use super::*;

    const OPT: KeyPolicy = KeyPolicy::Optional;
    /// The entry most tests seal to.
    const ENTRY: Entry<'static> = Entry { api_key_id: "key_1", idempotency_key: "k-1" };
    const MARKER: KeyPolicy = KeyPolicy::Required { min: 8, max: 128 };

    #[test]
    fn key_grammar_accepts_visible_ascii_and_unquotes_sf_strings() {
        assert_eq!(parse_key(Some("abc-123_~!"), OPT).unwrap().as_deref(), Some("abc-123_~!"));
        assert_eq!(parse_key(Some("\"quoted-key\""), OPT).unwrap().as_deref(), Some("quoted-key"));
        // SPEC §25: any sf-string, as a browser sends it.
        for (sent, key) in [
            (r#""has space""#, "has space"),
            (r#""a,b""#, "a,b"),
            (r#""say \"hi\" \\o/""#, r#"say "hi" \o/"#),
            (r#"  "8e03978e-40d5-43e8-bc93-6894a57f9324"  "#, "8e03978e-40d5-43e8-bc93-6894a57f9324"),
            (r#"" ""#, " "),
        ] {
            assert_eq!(parse_key(Some(sent), OPT).unwrap().as_deref(), Some(key), "{sent}");
        }
        let longest = format!("\"{}\"", "k ".repeat(127) + "k");
        assert_eq!(parse_key(Some(&longest), OPT).unwrap().map(|k| k.len()), Some(255));
        assert_eq!(parse_key(Some(&"k".repeat(255)), OPT).unwrap().map(|k| k.len()), Some(255));
        assert_eq!(parse_key(None, OPT).unwrap(), None);
        assert_eq!(parse_key(Some("ignored anyway"), KeyPolicy::Ignored).unwrap(), None);
    }

    #[test]
    fn malformed_or_repeated_keys_are_422_with_the_header_named() {
        let too_long = format!("\"{}\"", "k".repeat(256));
        for bad in [
            "",
            "has space",
            "a,b",
            "abc, abc",
            "\"a\", \"b\"",
            "ключ",
            "\"\"",
            &"k".repeat(256),
            &too_long,
            "\"unterminated",
            r#""bad \q escape""#,
            "\"tab\there\"",
            "\"ключ\"",
            "\"a\"b",
        ] {
            let e = parse_key(Some(bad), OPT).unwrap_err();
            assert_eq!((e.status(), e.details["header"].as_str()), (422, Some(HEADER)), "{bad:?}");
        }
    }

    #[test]
    fn release_markers_require_8_to_128() {
        let e = parse_key(None, MARKER).unwrap_err();
        assert_eq!((e.status(), e.code.as_str()), (400, "IDEMPOTENCY_KEY_REQUIRED"));
        assert_eq!(parse_key(Some("short"), MARKER).unwrap_err().status(), 422);
        assert!(parse_key(Some("deploy-42"), MARKER).unwrap().is_some());
        assert_eq!(parse_key(Some(&"k".repeat(129)), MARKER).unwrap_err().status(), 422);
    }

    #[test]
    fn fingerprint_ignores_key_order_and_whitespace_but_not_values_method_or_path() {
        let a = fingerprint("POST", "/c", br#"{"b":1,"a":{"y":2,"x":[1,2]}}"#);
        let b = fingerprint("POST", "/c", b"{ \"a\" : {\"x\":[1, 2], \"y\":2},\n \"b\":1 }");
        assert_eq!(a, b);
        assert_ne!(a, fingerprint("POST", "/c", br#"{"b":2,"a":{"y":2,"x":[1,2]}}"#));
        assert_ne!(a, fingerprint("PUT", "/c", br#"{"b":1,"a":{"y":2,"x":[1,2]}}"#));
        assert_ne!(a, fingerprint("POST", "/d", br#"{"b":1,"a":{"y":2,"x":[1,2]}}"#));
        assert_ne!(fingerprint("POST", "/c", b"x y"), fingerprint("POST", "/c", b"x  y"));
        assert_eq!(a.len(), 64);
    }

    /// Numbers compare as written, not as a `f64` holds them; a key named twice is never merged
    /// into "the same request" as the body with one of its values (fails on main before this).
    #[test]
    fn fingerprint_keeps_numbers_exact_and_never_merges_a_key_named_twice() {
        let fp = |body: &str| fingerprint("POST", "/c", body.as_bytes());
        assert_ne!(fp(r#"{"n":18446744073709551616}"#), fp(r#"{"n":18446744073709551617}"#));
        assert_ne!(fp(r#"{"n":0.1000000000000000000001}"#), fp(r#"{"n":0.1}"#));
        assert_ne!(fp(r#"{"n":[9007199254740993]}"#), fp(r#"{"n":[9007199254740992]}"#));
        assert_ne!(fp(r#"{"a":1,"a":2}"#), fp(r#"{"a":2}"#));
        assert_eq!(fp(r#"{"s":"\u0041","n":1e2}"#), fp(r#"{"n":100.0, "s":"A"}"#));
        // What it was before for a body `Value` read exactly: a claim taken then still matches.
        let mut h = Sha256::new();
        h.update(b"POST\n/c\n{\"a\":[1,2.5,\"x\"],\"b\":null}");
        assert_eq!(fp(r#"{"b":null, "a":[1, 2.5, "x"]}"#), hex(&h.finalize()));
    }

    /// A proxied body is opaque: its bytes and its `Content-Type` count (fails on main before this
    /// commit, which normalised it as JSON and ignored the type).
    #[test]
    fn an_opaque_fingerprint_covers_the_bytes_and_the_content_type() {
        let fp =
            |ct: Option<&str>, body: &str| opaque_fingerprint("POST", "/shop/v1/o?x=1", ct, body.as_bytes());
        let json = Some("application/json");
        assert_eq!(fp(json, r#"{"a":1}"#), fp(json, r#"{"a":1}"#));
        assert_ne!(fp(json, r#"{"a":1}"#), fp(Some("text/plain"), r#"{"a":1}"#));
        assert_ne!(fp(json, r#"{"a":1}"#), fp(None, r#"{"a":1}"#));
        assert_ne!(fp(json, r#"{"a":1}"#), fp(json, r#"{ "a": 1 }"#));
        assert_ne!(fp(Some("a"), "b\nc"), fp(Some("a\nb"), "c"));
        assert_ne!(fp(json, "x"), opaque_fingerprint("POST", "/shop/v1/o?x=2", json, b"x"));
    }

    fn claim(fp: &str, until_ms: i64, completed: bool) -> Claim {
        Claim {
            fingerprint: fp.into(),
            until_ms,
            completed,
            released: false,
            operation: "op-1".into(),
            response: None,
        }
    }

    fn execute(operation: &str) -> ClaimDecision {
        ClaimDecision::Execute { operation: operation.into() }
    }

    #[test]
    fn debug_output_never_prints_a_stored_body() {
        let stored = StoredResponse {
            status: 201,
            body: r#"{"key":"gh_s_secret"}"#.into(),
            request_id: "r".into(),
            ..Default::default()
        };
        let shown = format!("{stored:?}");
        assert!(!shown.contains("gh_s_secret") && shown.contains("21 bytes"), "{shown}");
    }

    const PEPPER: &str = "pepper-of-at-least-32-bytes-length!!";

    fn created_key() -> StoredResponse {
        StoredResponse {
            status: 201,
            body: r#"{"key":"gh_s_issued"}"#.into(),
            request_id: "req-1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_kept_response_is_sealed_and_replays_exactly_with_the_same_api_key() {
        let key = Keyring::for_responses(&[PEPPER], "gh_o_caller");
        let kept = KeptResponse::seal(&key, ENTRY, &created_key(), [9; 12]);
        let stored = serde_json::to_string(&kept).unwrap();
        assert!(stored.starts_with(r#""v2."#) && !stored.contains("gh_s_issued"), "{stored}");
        let read: KeptResponse = serde_json::from_str(&stored).unwrap();
        assert_eq!(read.open(&key, ENTRY), Some(created_key()));
    }

    /// A proxied answer (SPEC §15) keeps its bytes (any, not only UTF-8) and its headers; a
    /// response of a built-in route written before these fields existed still reads.
    #[test]
    fn a_proxied_answer_replays_its_exact_bytes_and_headers() {
        let key = Keyring::for_responses(&[PEPPER], "gh_s_caller");
        let bytes = [0u8, 0xff, 0xfe, b'{', 0x80];
        let answer = StoredResponse {
            status: 200,
            body: crate::encoding::base64(&bytes),
            request_id: "req-1".into(),
            headers: vec![("content-type".into(), "application/octet-stream".into())],
            base64: true,
            not_stored: false,
        };
        let kept = KeptResponse::seal(&key, ENTRY, &answer, [3; 12]);
        let opened = kept.open(&key, ENTRY).unwrap();
        assert_eq!((opened.body_bytes(), &opened.headers), (bytes.to_vec(), &answer.headers));
        let older: StoredResponse =
            serde_json::from_str(r#"{"status":201,"body":"{}","request_id":"r"}"#).unwrap();
        assert_eq!((older.body_bytes(), older.base64, older.not_stored), (b"{}".to_vec(), false, false));
        assert_eq!(serde_json::to_string(&older).unwrap(), r#"{"status":201,"body":"{}","request_id":"r"}"#);
    }

    /// SPEC §19: a proxied 1 MiB answer with large headers sealed as base64 in JSON in AES in
    /// base64url is over a Durable Object row; it is kept as "answered, not stored" (main kept it
    /// whole, the guard's write failed and the origin was called again).
    #[test]
    fn a_response_too_large_for_a_guard_row_is_kept_as_answered_not_stored() {
        let key = Keyring::for_responses(&[PEPPER], "gh_s_caller");
        let answer = |body_bytes: usize, header_bytes: usize| StoredResponse {
            status: 200,
            body: crate::encoding::base64(&vec![7u8; body_bytes]),
            request_id: "req-1".into(),
            headers: vec![("x-large".into(), "h".repeat(header_bytes))],
            base64: true,
            not_stored: false,
        };
        let small = answer(1024, 10);
        let kept = KeptResponse::seal_to_keep(&key, ENTRY, &small, [1; 12]);
        assert_eq!(kept.open(&key, ENTRY), Some(small));
        let large = answer(1 << 20, 64 * 1024);
        let whole = serde_json::to_string(&KeptResponse::seal(&key, ENTRY, &large, [1; 12])).unwrap();
        assert!(whole.len() > KEPT_MAX_BYTES, "{} bytes", whole.len());
        let kept = KeptResponse::seal_to_keep(&key, ENTRY, &large, [1; 12]);
        assert!(serde_json::to_string(&kept).unwrap().len() < 1024);
        let opened = kept.open(&key, ENTRY).unwrap();
        assert!(opened.not_stored && opened.status == 200 && opened.body.is_empty());
    }

    #[test]
    fn a_kept_response_does_not_open_under_another_api_key_or_entry() {
        let key = Keyring::for_responses(&[PEPPER], "gh_o_caller");
        let kept = KeptResponse::seal(&key, ENTRY, &created_key(), [9; 12]);
        let other = Keyring::for_responses(&[PEPPER], "gh_o_someone-else");
        assert_eq!(kept.clone().open(&other, ENTRY), None);
        assert_eq!(kept.clone().open(&key, Entry { api_key_id: "key_1", idempotency_key: "k-2" }), None);
        assert_eq!(kept.open(&key, Entry { api_key_id: "key_2", idempotency_key: "k-1" }), None);
    }

    #[test]
    fn a_plaintext_response_kept_before_the_upgrade_still_replays() {
        let legacy = r#"{"status":201,"body":"{\"key\":\"gh_s_issued\"}","request_id":"req-1"}"#;
        let read: KeptResponse = serde_json::from_str(legacy).unwrap();
        assert!(matches!(read, KeptResponse::Plaintext(_)));
        let key = Keyring::for_responses(&[PEPPER], "gh_o_caller");
        assert_eq!(read.open(&key, ENTRY), Some(created_key()));
        // A claim of the guard from before the upgrade, with its response inline.
        let decision = format!(r#"{{"claim":"replay","response":{legacy}}}"#);
        let decision: ClaimDecision = serde_json::from_str(&decision).unwrap();
        assert_eq!(
            decision,
            ClaimDecision::Replay { response: Some(KeptResponse::Plaintext(created_key())) }
        );
    }

    #[test]
    fn decision_table_of_spec_section_5() {
        assert_eq!(decide_claim(None, "f", "req-2", 0), execute("req-2"));
        assert_eq!(decide_claim(Some(&claim("f", 100, false)), "f", "req-2", 50), ClaimDecision::InUse);
        assert_eq!(decide_claim(Some(&claim("f", 100, false)), "g", "req-2", 50), ClaimDecision::Reused);
        assert_eq!(decide_claim(Some(&claim("f", 100, true)), "g", "req-2", 50), ClaimDecision::Reused);
        assert_eq!(
            decide_claim(Some(&claim("f", 100, true)), "f", "req-2", 50),
            ClaimDecision::Replay { response: None }
        );
        // A completed key past its TTL executes anew, as a new operation.
        assert_eq!(decide_claim(Some(&claim("g", 100, true)), "f", "req-2", 101), execute("req-2"));
        assert_eq!(decide_claim(Some(&claim("f", 100, true)), "f", "req-2", 101), execute("req-2"));
    }

    #[test]
    fn a_lapsed_lease_or_a_released_claim_continues_the_same_operation_for_the_same_request() {
        assert_eq!(decide_claim(Some(&claim("f", 100, false)), "f", "req-2", 100), execute("op-1"));
        let released = Claim { released: true, ..claim("f", 100, false) };
        assert_eq!(decide_claim(Some(&released), "f", "req-2", 50), execute("op-1"));
        // Another request under the key after a failure is a new operation (nothing was stored).
        assert_eq!(decide_claim(Some(&released), "g", "req-2", 50), execute("req-2"));
        assert_eq!(decide_claim(Some(&claim("f", 100, false)), "g", "req-2", 100), execute("req-2"));
    }

    #[test]
    fn operation_seeds_differ_per_key_idempotency_key_and_operation() {
        let a = operation_seed("key_1", "k", "op");
        assert_eq!(a, operation_seed("key_1", "k", "op"));
        assert_ne!(a, operation_seed("key_2", "k", "op"));
        assert_ne!(a, operation_seed("key_1", "k2", "op"));
        assert_ne!(a, operation_seed("key_1", "k", "op2"));
        assert_ne!(operation_seed("a", "bc", "d"), operation_seed("ab", "c", "d"));
    }

    #[test]
    fn in_use_is_retryable_after_one_second_and_reused_is_final() {
        let e = refusal(&ClaimDecision::InUse).unwrap();
        assert_eq!((e.status(), e.code.retryable(), e.retry_after), (409, true, Some(1)));
        let e = refusal(&ClaimDecision::Reused).unwrap();
        assert_eq!((e.status(), e.code.as_str(), e.code.retryable()), (409, "IDEMPOTENCY_KEY_REUSED", false));
        assert!(refusal(&execute("op")).is_none());
    }
}
