//! Webhooks (SPEC §10): subscription secrets, Standard Webhooks signatures, the retry schedule
//! with jitter, the receiver's `Retry-After`, and the rules a target URL must meet.

use std::net::{Ipv4Addr, Ipv6Addr};

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use super::encoding::{base64, from_base64, hex};
use super::error::ApiError;
use super::sealing::{Keyring, Sealed, NONCE_BYTES};

const SECRET_PREFIX: &str = "whsec_";
/// Attempts recorded in full: the first 1 KiB of a receiver's answer.
pub const RESPONSE_EXCERPT_BYTES: usize = 1024;
/// The error recorded for an attempt whose worker stopped before it recorded an outcome: the next
/// attempt writes it down when it finds the hold run out. Whether the receiver got it is unknown.
pub const INTERRUPTED_ATTEMPT: &str = "interrupted: the worker stopped before recording an outcome";
/// The event types the gateway emits.
pub const EVENT_TYPES: [&str; 4] =
    ["contact.created", "message.created", "scenario.run.started", "release_marker.created"];

/// `whsec_` + base64 of 24 random bytes.
pub fn new_secret(random: &[u8; 24]) -> String {
    format!("{SECRET_PREFIX}{}", base64(random))
}

/// The HMAC key of a secret: the base64-decoded part after `whsec_`.
pub fn signing_key(secret: &str) -> Option<Vec<u8>> {
    from_base64(secret.strip_prefix(SECRET_PREFIX)?)
}

/// A subscription's signing secret as D1 keeps it (SPEC §13). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoredSecret {
    /// Sealed under the webhook secrets' key ([`Keyring::for_webhook_secrets`]), bound to the
    /// subscription's id.
    Sealed(Sealed),
    /// A `whsec_` secret written before secrets were sealed: it signs as before until the minute
    /// cron seals it (`app::seal_plaintext_secrets`).
    Plaintext(String),
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoredSecret::Sealed(sealed) => write!(f, "StoredSecret::{sealed:?}"),
            StoredSecret::Plaintext(_) => f.write_str("StoredSecret::Plaintext([redacted])"),
        }
    }
}

impl StoredSecret {
    /// Seals `secret` for the subscription `webhook_id`; `nonce` is fresh random.
    pub fn seal(key: &Keyring, webhook_id: &str, secret: &str, nonce: [u8; NONCE_BYTES]) -> Self {
        StoredSecret::Sealed(key.seal(secret.as_bytes(), &secret_identity(webhook_id), nonce))
    }

    /// The column as stored: a `whsec_` secret is one from before sealing, anything else is sealed.
    pub fn from_column(text: String) -> Self {
        if text.starts_with(SECRET_PREFIX) {
            StoredSecret::Plaintext(text)
        } else {
            StoredSecret::Sealed(Sealed::from_stored(text))
        }
    }

    pub fn as_column(&self) -> &str {
        match self {
            StoredSecret::Sealed(sealed) => sealed.as_str(),
            StoredSecret::Plaintext(secret) => secret,
        }
    }

    /// The `whsec_` secret, or `None` when it was sealed for another subscription or under another
    /// pepper, or was changed.
    pub fn open(&self, key: &Keyring, webhook_id: &str) -> Option<String> {
        match self {
            StoredSecret::Sealed(sealed) => {
                String::from_utf8(key.open(sealed, &secret_identity(webhook_id))?).ok()
            }
            StoredSecret::Plaintext(secret) => Some(secret.clone()),
        }
    }
}

/// The associated data of a sealed secret: the subscription it belongs to.
fn secret_identity(webhook_id: &str) -> Vec<u8> {
    format!("webhook:{webhook_id}:secret").into_bytes()
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    parts.iter().for_each(|p| mac.update(p));
    mac.finalize().into_bytes().to_vec()
}

/// `webhook-signature` of Standard Webhooks: `v1,` + base64 HMAC-SHA256 over `id.timestamp.body`.
pub fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let ts = timestamp.to_string();
    format!("v1,{}", base64(&hmac(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()])))
}

/// `{prefix}-Signature`: `sha256=` + hex HMAC-SHA256 over the body.
pub fn body_signature(key: &[u8], body: &str) -> String {
    format!("sha256={}", hex(&hmac(key, &[body.as_bytes()])))
}

/// The headers of one attempt (SPEC §10), in order. `keys` are the subscription's signing keys,
/// the current one first and, during a rotation's grace, the previous one after it (SPEC §17):
/// `webhook-signature` carries one `v1,` entry per key, space-separated, in that order; the
/// prefixed body signature uses the current key only.
pub fn headers(
    prefix: &str,
    keys: &[Vec<u8>],
    delivery_id: &str,
    timestamp: i64,
    event: &str,
    request_id: &str,
    body: &str,
) -> Vec<(String, String)> {
    let current = keys.first().map_or(&[][..], Vec::as_slice);
    let signatures: Vec<String> =
        keys.iter().map(|key| standard_signature(key, delivery_id, timestamp, body)).collect();
    vec![
        ("content-type".into(), "application/json".into()),
        ("webhook-id".into(), delivery_id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        ("webhook-signature".into(), signatures.join(" ")),
        (format!("{prefix}-Event"), event.into()),
        (format!("{prefix}-Request-Id"), request_id.into()),
        (format!("{prefix}-Signature"), body_signature(current, body)),
    ]
}

/// The payload a subscriber receives: `{id, type, created_at, data}`.
pub fn payload(event_id: &str, event_type: &str, created_at: &str, data: Value) -> Value {
    json!({ "id": event_id, "type": event_type, "created_at": created_at, "data": data })
}

/// The longest receiver `Retry-After` honoured (SPEC §12.1): 24 hours.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 86_400;

/// Seconds to wait after the `failed_attempts`-th failed attempt, or `None` when the schedule is
/// used up and the delivery fails. `jitter` in [-1, 1] moves the delay by up to ±10 %; a longer
/// `Retry-After` from the receiver wins, up to [`MAX_RETRY_AFTER_SECONDS`].
pub fn retry_delay(
    failed_attempts: u32,
    schedule: &[u64],
    jitter: f64,
    retry_after: Option<u64>,
) -> Option<u64> {
    let base = *schedule.get(failed_attempts.checked_sub(1)? as usize)?;
    let jittered = (base as f64 * (1.0 + 0.1 * jitter.clamp(-1.0, 1.0))).round() as u64;
    Some(jittered.max(retry_after.unwrap_or(0).min(MAX_RETRY_AFTER_SECONDS)).max(1))
}

/// A receiver's `Retry-After`: delay-seconds, or an IMF-fixdate relative to `now_ms`; at most
/// [`MAX_RETRY_AFTER_SECONDS`] however far away it points (`99999999999`, a date in year 99999).
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<u64> {
    let v = value.trim();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(v) {
        // Too many digits for a u64 is still "later than the cap".
        return Some(v.parse::<u64>().unwrap_or(u64::MAX).min(MAX_RETRY_AFTER_SECONDS));
    }
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
    let parts: Vec<&str> = v.split_whitespace().collect();
    if parts.len() != 6 || parts[5] != "GMT" || !digits(parts[3]) {
        return None;
    }
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| *m == parts[2])? + 1;
    let year = parts[3].trim_start_matches('0');
    if year.len() > 4 {
        return Some(MAX_RETRY_AFTER_SECONDS); // after the year 9999
    }
    let iso = format!("{year:0>4}-{month:02}-{:0>2}T{}Z", parts[1], parts[4]);
    let at = super::time::parse_rfc3339(&iso)?;
    let seconds = at.saturating_sub(now_ms).max(0) / 1000;
    Some((seconds as u64).min(MAX_RETRY_AFTER_SECONDS))
}

/// What an attempt keeps of the receiver's answer: its first [`RESPONSE_EXCERPT_BYTES`] bytes
/// as text, never longer than that many bytes (invalid UTF-8, or a character cut by the limit,
/// becomes U+FFFD and the text is cut back to a character boundary within the limit).
pub fn response_excerpt(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(RESPONSE_EXCERPT_BYTES)];
    let mut text = String::from_utf8_lossy(head).into_owned();
    let mut end = text.len().min(RESPONSE_EXCERPT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// Checks a subscription URL (SPEC §10, §13): `https` only, no credentials, and no target in an
/// IANA special-purpose block, a metadata host or an internal name (see [`target_refusal`]).
/// `allow_private` (local development and tests) lets `http` through and lifts the refusal of
/// loopback and private targets only ([`Block::Local`]), never of the rest.
pub fn check_url(raw: &str, allow_private: bool) -> Result<url::Url, ApiError> {
    target_refusal(raw, allow_private)
        .map_err(|why| ApiError::unprocessable(format!("url {why}")).with_detail("field", "url"))
}

/// The rule of [`check_url`] as a pure verdict: the parsed URL, or why it is refused (completing
/// "url …"). Hostnames are not resolved (a Worker cannot, and Cloudflare's `fetch` does not reach
/// private networks): a name is refused only when it is a known internal or metadata name.
/// IPv4 in any spelling (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, `%31…`) reaches this as an
/// address: the `url` crate parses hosts the WHATWG way. A host must be ASCII (an international
/// name in its `xn--` form): the worker carries no Unicode mapping tables, so full-width or other
/// non-ASCII spellings of a host are refused rather than mapped.
pub fn target_refusal(raw: &str, allow_private: bool) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|_| {
        if raw.is_ascii() {
            "is not an absolute URL"
        } else {
            "must have an ASCII host (an international name in its xn-- form)"
        }
        .to_owned()
    })?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err("must use https".into()),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain credentials".into());
    }
    let block = match url.host() {
        None => return Err("has no host".into()),
        Some(url::Host::Domain(d)) => name_block(d),
        Some(url::Host::Ipv4(ip)) => v4_block(ip),
        Some(url::Host::Ipv6(ip)) => v6_block(ip),
    };
    match block {
        None => Ok(url),
        Some(Local(_)) if allow_private => Ok(url),
        Some(Local(what) | Special(what)) => Err(format!("must not point to {what}")),
    }
}

/// Why a target is refused, and whether `ALLOW_PRIVATE_WEBHOOK_URLS` lifts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Loopback, RFC 1918 private, IPv6 unique-local, `localhost`: allowed with the switch.
    Local(&'static str),
    /// Every other special-purpose target: never a webhook target.
    Special(&'static str),
}

use Block::{Local, Special};

/// IPv4 special-purpose blocks (IANA registry, plus multicast and metadata), first match wins.
const V4_BLOCKS: &[(Ipv4Addr, u8, Block)] = &[
    (Ipv4Addr::new(127, 0, 0, 0), 8, Local("a loopback address (127.0.0.0/8)")),
    (Ipv4Addr::new(10, 0, 0, 0), 8, Local("a private address (10.0.0.0/8)")),
    (Ipv4Addr::new(172, 16, 0, 0), 12, Local("a private address (172.16.0.0/12)")),
    (Ipv4Addr::new(192, 168, 0, 0), 16, Local("a private address (192.168.0.0/16)")),
    (Ipv4Addr::new(169, 254, 169, 254), 32, Special("a cloud metadata address (169.254.169.254)")),
    (Ipv4Addr::new(0, 0, 0, 0), 8, Special("a \"this network\" address (0.0.0.0/8)")),
    (Ipv4Addr::new(100, 64, 0, 0), 10, Special("a shared (CGNAT) address (100.64.0.0/10)")),
    (Ipv4Addr::new(169, 254, 0, 0), 16, Special("a link-local address (169.254.0.0/16)")),
    (Ipv4Addr::new(192, 0, 0, 0), 24, Special("an IETF protocol assignment (192.0.0.0/24)")),
    (Ipv4Addr::new(192, 0, 2, 0), 24, Special("a documentation address (192.0.2.0/24)")),
    (Ipv4Addr::new(192, 31, 196, 0), 24, Special("an AS112 address (192.31.196.0/24)")),
    (Ipv4Addr::new(192, 52, 193, 0), 24, Special("an AMT address (192.52.193.0/24)")),
    (Ipv4Addr::new(192, 88, 99, 0), 24, Special("a 6to4 relay anycast address (192.88.99.0/24)")),
    (Ipv4Addr::new(192, 175, 48, 0), 24, Special("an AS112 address (192.175.48.0/24)")),
    (Ipv4Addr::new(198, 18, 0, 0), 15, Special("a benchmarking address (198.18.0.0/15)")),
    (Ipv4Addr::new(198, 51, 100, 0), 24, Special("a documentation address (198.51.100.0/24)")),
    (Ipv4Addr::new(203, 0, 113, 0), 24, Special("a documentation address (203.0.113.0/24)")),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Special("a multicast address (224.0.0.0/4)")),
    (Ipv4Addr::new(255, 255, 255, 255), 32, Special("the broadcast address (255.255.255.255)")),
    (Ipv4Addr::new(240, 0, 0, 0), 4, Special("a reserved address (240.0.0.0/4)")),
];

/// IPv6 special-purpose blocks (IANA registry, plus site-local, multicast and metadata), first
/// match wins; anything outside global unicast `2000::/3` is refused after them.
const V6_BLOCKS: &[(Ipv6Addr, u8, Block)] = &[
    (Ipv6Addr::LOCALHOST, 128, Local("a loopback address (::1)")),
    (Ipv6Addr::UNSPECIFIED, 128, Special("the unspecified address (::)")),
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96, Special("an IPv4-mapped address (::ffff:0:0/96)")),
    (Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96, Special("an IPv4-translated address (::ffff:0:0:0/96)")),
    (Ipv6Addr::UNSPECIFIED, 96, Special("an IPv4-compatible address (::/96)")),
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, Special("a NAT64 address (64:ff9b::/96)")),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, Special("a local NAT64 address (64:ff9b:1::/48)")),
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, Special("a discard-only address (100::/64)")),
    (Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0), 64, Special("a dummy-prefix address (100:0:0:1::/64)")),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, Special("a Teredo address (2001::/32)")),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, Special("an IETF protocol assignment (2001::/23)")),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, Special("a documentation address (2001:db8::/32)")),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, Special("a 6to4 address (2002::/16)")),
    (Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0), 48, Special("an AS112 address (2620:4f:8000::/48)")),
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, Special("a documentation address (3fff::/20)")),
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, Special("an SRv6 SID address (5f00::/16)")),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        128,
        Special("a cloud metadata address (fd00:ec2::254)"),
    ),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, Local("a unique-local address (fc00::/7)")),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, Special("a link-local address (fe80::/10)")),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, Special("a site-local address (fec0::/10)")),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Special("a multicast address (ff00::/8)")),
];

/// Hostnames of cloud metadata services (GCP, AWS, Tencent); 169.254.169.254 and friends are
/// refused as addresses.
const METADATA_NAMES: [&str; 6] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
];

/// Name suffixes that never resolve on the public internet (RFC 6761, 6762, 8375, ICANN's
/// `.internal`).
const INTERNAL_SUFFIXES: [&str; 6] = [".internal", ".local", ".home.arpa", ".test", ".invalid", ".localhost"];

fn v4_block(ip: Ipv4Addr) -> Option<Block> {
    let bits = ip.to_bits();
    let mask = |len: u8| u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    V4_BLOCKS.iter().find(|(net, len, _)| bits & mask(*len) == net.to_bits()).map(|b| b.2)
}

fn v6_block(ip: Ipv6Addr) -> Option<Block> {
    let bits = ip.to_bits();
    let mask = |len: u8| u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    let found = V6_BLOCKS.iter().find(|(net, len, _)| bits & mask(*len) == net.to_bits()).map(|b| b.2);
    let global_unicast = ip.segments()[0] & 0xe000 == 0x2000;
    found.or((!global_unicast).then_some(Special("a reserved address (outside 2000::/3)")))
}

/// A hostname (not an IP literal; the `url` crate lowercased it and applied IDNA).
fn name_block(domain: &str) -> Option<Block> {
    let d = domain.trim_end_matches('.');
    let dotted = format!(".{d}");
    if d == "localhost" || d.ends_with(".localhost") {
        Some(Local("a loopback name (localhost)"))
    } else if METADATA_NAMES.contains(&d) {
        Some(Special("a cloud metadata host"))
    } else if INTERNAL_SUFFIXES.iter().any(|s| dotted.ends_with(s)) {
        Some(Special("an internal name (.internal, .local, .home.arpa, .test, .invalid)"))
    } else if !d.contains('.') {
        Some(Special("a single-label (internal) name"))
    } else {
        None
    }
}

/// `events` of a subscription: known types or `"*"`, at least one, no repeats.
/// The grammar of an event type, the built-in ones and an origin's (SPEC §15): `[a-z0-9_.]{1,64}`.
pub fn is_event_type(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
}

/// A subscription's `events`: `"*"`, the built-in types, or any type an origin may send
/// (`[a-z0-9_.]{1,64}`, SPEC §15), each once.
pub fn check_events(events: &[String]) -> Result<(), ApiError> {
    let invalid = |why: String| ApiError::unprocessable(why).with_detail("field", "events");
    if events.is_empty() {
        return Err(invalid(r#"events must name at least one event type, or "*""#.into()));
    }
    for (i, e) in events.iter().enumerate() {
        if e != "*" && !is_event_type(e) {
            return Err(invalid(format!(
                "event type {e:?} is not \"*\" nor 1–64 characters of a-z, 0-9, _ and . (built-in: {})",
                EVENT_TYPES.join(", ")
            ))
            .with_detail("known", EVENT_TYPES.to_vec()));
        }
        if events[..i].contains(e) {
            return Err(invalid(format!("{e:?} is listed twice")));
        }
    }
    Ok(())
}

/// What the webhook queue carries: a delivery to attempt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeliveryMessage {
    Delivery { delivery_id: String },
}

/// A subscription. `Debug` leaves the signing secret out.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    pub project_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub secret: StoredSecret,
    /// The secret a rotation replaced, and until when attempts are signed with it too (SPEC §17).
    pub previous_secret: Option<(StoredSecret, i64)>,
    pub status: String,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
}

/// The default grace of a secret rotation (SPEC §17: 24 hours), and the longest one (7 days).
pub const DEFAULT_ROTATION_GRACE_SECONDS: u64 = 86_400;
pub const MAX_ROTATION_GRACE_SECONDS: u64 = 604_800;

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("project_id", &self.project_id)
            .field("url", &self.url)
            .field("events", &self.events)
            .field("secret", &"[redacted]")
            .field("previous_secret_until", &self.previous_secret.as_ref().map(|(_, until)| until))
            .field("status", &self.status)
            .field("disabled_reason", &self.disabled_reason)
            .field("created_at", &self.created_at)
            .finish()
    }
}

impl Webhook {
    /// As the API shows it at `now_ms`; the (opened) secret only at creation and rotation.
    pub fn view(&self, secret: Option<&str>, now_ms: i64) -> Value {
        let mut v = json!({
            "id": self.id,
            "url": self.url,
            "events": self.events,
            "status": self.status,
            "disabled_reason": self.disabled_reason,
            "created_at": super::time::rfc3339(self.created_at),
            "previous_secret_expires_at": self.previous_secret_until(now_ms).map(super::time::rfc3339),
        });
        if let Some(secret) = secret {
            v["secret"] = Value::String(secret.to_owned());
        }
        v
    }
}

impl Webhook {
    /// Until when the previous secret still signs, if a rotation's grace runs at `now_ms`.
    pub fn previous_secret_until(&self, now_ms: i64) -> Option<i64> {
        self.previous_secret.as_ref().map(|(_, until)| *until).filter(|until| *until > now_ms)
    }

    /// The signing keys of an attempt at `now_ms`: the current secret's, then the previous one's
    /// while its grace runs. `None` when the current secret cannot be opened; a previous secret
    /// that cannot be opened is left out.
    pub fn signing_keys(&self, key: &Keyring, now_ms: i64) -> Option<Vec<Vec<u8>>> {
        let current = signing_key(&self.secret.open(key, &self.id)?)?;
        let previous = self
            .previous_secret
            .as_ref()
            .filter(|(_, until)| *until > now_ms)
            .and_then(|(secret, _)| signing_key(&secret.open(key, &self.id)?));
        Some(std::iter::once(current).chain(previous).collect())
    }
}

/// An event a request emitted, on its way into delivery rows for every matching subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingEvent {
    pub event_id: String,
    pub event_type: &'static str,
    /// The id of the row the event is about: deliveries are written only if it was.
    pub subject_id: String,
    pub payload: String,
    pub request_id: String,
    pub project_id: String,
    pub created_at: i64,
}

impl OutgoingEvent {
    pub fn new(
        event_id: String,
        event_type: &'static str,
        subject_id: &str,
        data: Value,
        request_id: &str,
        project_id: &str,
        now_ms: i64,
    ) -> Self {
        let body = payload(&event_id, event_type, &super::time::rfc3339(now_ms), data).to_string();
        OutgoingEvent {
            event_id,
            event_type,
            subject_id: subject_id.to_owned(),
            payload: body,
            request_id: request_id.to_owned(),
            project_id: project_id.to_owned(),
            created_at: now_ms,
        }
    }
}

/// A delivery of one event to one subscription.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Delivery {
    pub id: String,
    pub project_id: String,
    pub webhook_id: String,
    pub event_id: String,
    pub event: String,
    pub payload: String,
    pub request_id: String,
    pub status: String,
    pub attempts: u32,
    /// The attempts taken before the schedule last started over (a recovery, SPEC §17): the
    /// schedule's step after an attempt is the one of `attempts - schedule_from`.
    #[serde(default)]
    pub schedule_from: u32,
    pub scheduled_at: i64,
    pub last_response_code: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One attempt, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Attempt {
    pub delivery_id: String,
    pub attempt: u32,
    pub started_at: i64,
    pub duration_ms: i64,
    pub response_code: Option<u16>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub next_retry_at: Option<i64>,
}

impl Delivery {
    pub fn view(&self, attempts: &[Attempt]) -> Value {
        use super::time::rfc3339;
        json!({
            "id": self.id,
            "webhook_id": self.webhook_id,
            "event_id": self.event_id,
            "event": self.event,
            "request_id": self.request_id,
            "status": self.status,
            "attempt": self.attempts,
            "scheduled_at": if self.status == "pending" { Some(rfc3339(self.scheduled_at)) } else { None },
            "last_response_code": self.last_response_code,
            "last_error": self.last_error,
            "created_at": rfc3339(self.created_at),
            "payload": serde_json::from_str::<Value>(&self.payload).unwrap_or(Value::Null),
            "attempts": attempts.iter().filter(|a| a.delivery_id == self.id).map(|a| json!({
                "attempt": a.attempt,
                "started_at": rfc3339(a.started_at),
                "duration_ms": a.duration_ms,
                "response_code": a.response_code,
                "response_body": a.response_excerpt,
                "error": a.error,
                "next_retry_at": a.next_retry_at.map(rfc3339),
            })).collect::<Vec<_>>(),
        })
    }
}

/// What a receiver answered, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverOutcome {
    Answered {
        status: u16,
        retry_after: Option<String>,
        excerpt: String,
    },
    /// A timeout or a network error.
    Unreachable(String),
}

/// What one attempt decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub status: &'static str,
    pub next_attempt_ms: Option<i64>,
    pub response_code: Option<u16>,
    pub error: Option<String>,
    /// 410 Gone: the subscription is disabled and its pending deliveries fail.
    pub disable_subscription: bool,
}

/// Judges the `attempt`-th attempt (1-based): 2xx delivered; 410 fails and disables; anything
/// else is retried on the schedule, and fails when the schedule is used up.
pub fn judge(attempt: u32, reply: &ReceiverOutcome, schedule: &[u64], jitter: f64, now_ms: i64) -> Judgement {
    let (code, error, retry_after) = match reply {
        ReceiverOutcome::Answered { status, .. } if (200..300).contains(status) => {
            return Judgement {
                status: "delivered",
                next_attempt_ms: None,
                response_code: Some(*status),
                error: None,
                disable_subscription: false,
            };
        }
        ReceiverOutcome::Answered { status: 410, .. } => {
            return Judgement {
                status: "failed",
                next_attempt_ms: None,
                response_code: Some(410),
                error: Some("410 Gone: the subscription was disabled".into()),
                disable_subscription: true,
            };
        }
        ReceiverOutcome::Answered { status, retry_after, .. } => {
            let honoured = matches!(status, 429 | 503)
                .then(|| retry_after.as_deref().and_then(|v| parse_retry_after(v, now_ms)))
                .flatten();
            (Some(*status), Some(format!("receiver answered {status}")), honoured)
        }
        ReceiverOutcome::Unreachable(e) => (None, Some(e.clone()), None),
    };
    match retry_delay(attempt, schedule, jitter, retry_after) {
        Some(delay) => Judgement {
            status: "pending",
            next_attempt_ms: Some(
                now_ms.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX).saturating_mul(1000)),
            ),
            response_code: code,
            error,
            disable_subscription: false,
        },
        None => Judgement {
            status: "failed",
            next_attempt_ms: None,
            response_code: code,
            error,
            disable_subscription: false,
        },
    }
}

/// An attempt whose target [`target_refusal`] refuses (the switch was turned off, or the row
/// predates the rules): no request is sent, and the delivery fails at once, since every later
/// attempt would be refused alike (a manual retry tries again, under the configuration of then).
pub fn refused(why: &str) -> Judgement {
    Judgement {
        status: "failed",
        next_attempt_ms: None,
        response_code: None,
        error: Some(format!("refused: url {why}")),
        disable_subscription: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector published in the README, computed with Python's `hmac` module.
    const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";

    /// SPEC §19: an origin event's `data` reaches the subscriber with its numbers as written.
    #[test]
    fn a_payload_keeps_the_numbers_of_its_data_as_written() {
        let data: Value = serde_json::from_str(r#"{"amount":123456789012345678901234567890.10}"#).unwrap();
        let body = payload("evt_1", "order.paid", "2026-12-01T00:00:00Z", data).to_string();
        assert!(body.contains(r#""amount":123456789012345678901234567890.10"#), "{body}");
    }

    #[test]
    fn debug_output_never_prints_the_signing_secret() {
        let hook = Webhook {
            id: "wh_1".into(),
            project_id: "prj_1".into(),
            url: "https://example.com/hook".into(),
            events: vec!["*".into()],
            secret: StoredSecret::Plaintext(SECRET.into()),
            previous_secret: Some((StoredSecret::Plaintext(SECRET.into()), 5)),
            status: "active".into(),
            disabled_reason: None,
            created_at: 1,
        };
        let shown = format!("{hook:?}");
        assert!(!shown.contains("whsec_") && shown.contains("example.com"), "{shown}");
        let sealed = Webhook { secret: StoredSecret::seal(&secrets_key(), "wh_1", SECRET, [1; 12]), ..hook };
        let shown = format!("{sealed:?}");
        assert!(!shown.contains(sealed.secret.as_column()), "{shown}");
    }

    fn secrets_key() -> Keyring {
        Keyring::for_webhook_secrets(
            &["webhook-secrets-key-of-32-bytes-len!"],
            &["pepper-of-at-least-32-bytes-length!!"],
        )
    }

    #[test]
    fn a_sealed_secret_round_trips_for_its_own_subscription_only() {
        let stored = StoredSecret::seal(&secrets_key(), "wh_1", SECRET, [2; 12]);
        let column = stored.as_column().to_owned();
        assert!(!column.contains("whsec_") && column.starts_with("v2."), "{column}");
        let read = StoredSecret::from_column(column);
        assert_eq!(read, stored);
        assert_eq!(read.open(&secrets_key(), "wh_1").as_deref(), Some(SECRET));
        assert_eq!(read.open(&secrets_key(), "wh_2"), None);
        let other = Keyring::for_webhook_secrets(
            &["another-secrets-key-of-32-bytes-len"],
            &["pepper-of-at-least-32-bytes-length!!"],
        );
        assert_eq!(read.open(&other, "wh_1"), None);
    }

    #[test]
    fn a_plaintext_secret_from_before_sealing_still_signs() {
        let read = StoredSecret::from_column(SECRET.to_owned());
        assert_eq!(read, StoredSecret::Plaintext(SECRET.into()));
        assert_eq!(read.as_column(), SECRET);
        let secret = read.open(&secrets_key(), "wh_1").unwrap();
        assert_eq!(signing_key(&secret).unwrap(), (0u8..24).collect::<Vec<_>>());
    }
    const ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
    const TS: i64 = 1_674_087_231;
    const BODY: &str = r#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;

    #[test]
    fn signs_the_published_test_vector() {
        let key = signing_key(SECRET).unwrap();
        assert_eq!(key, (0u8..24).collect::<Vec<_>>());
        assert_eq!(standard_signature(&key, ID, TS, BODY), "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=");
        assert_eq!(
            body_signature(&key, BODY),
            "sha256=ecc8ca8aaeedd26fe81e1b60575d0af93f999d134ec87c72fbcf94d367a673a0"
        );
        assert_eq!(new_secret(&std::array::from_fn(|i| i as u8)), SECRET);
        assert_eq!(signing_key("sk_nope"), None);
    }

    #[test]
    fn attempt_headers_carry_both_signatures_and_the_prefix() {
        let key = signing_key(SECRET).unwrap();
        let h = headers("X-Gatehouse", std::slice::from_ref(&key), ID, TS, "contact.created", "req-1", BODY);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("webhook-id"), Some(ID));
        assert_eq!(get("webhook-timestamp"), Some("1674087231"));
        assert_eq!(get("X-Gatehouse-Event"), Some("contact.created"));
        assert_eq!(get("X-Gatehouse-Request-Id"), Some("req-1"));
        assert!(get("X-Gatehouse-Signature").unwrap().starts_with("sha256="));
        assert_eq!(get("webhook-signature"), Some(standard_signature(&key, ID, TS, BODY).as_str()));
    }

    #[test]
    fn during_a_rotation_both_signatures_are_sent_new_first_and_the_body_signature_is_the_new_ones() {
        let old = signing_key(SECRET).unwrap();
        let new = vec![9u8; 24];
        let h = headers("X-Gatehouse", &[new.clone(), old.clone()], ID, TS, "contact.created", "r", BODY);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap();
        let expected =
            format!("{} {}", standard_signature(&new, ID, TS, BODY), standard_signature(&old, ID, TS, BODY));
        assert_eq!(get("webhook-signature"), expected);
        assert_eq!(get("X-Gatehouse-Signature"), body_signature(&new, BODY));
    }

    #[test]
    fn the_previous_secret_signs_only_until_its_grace_ends() {
        let key = secrets_key();
        let new_secret = new_secret(&[9; 24]);
        let hook = Webhook {
            id: "wh_1".into(),
            project_id: "prj_1".into(),
            url: "https://example.com/h".into(),
            events: vec!["*".into()],
            secret: StoredSecret::seal(&key, "wh_1", &new_secret, [1; 12]),
            previous_secret: Some((StoredSecret::seal(&key, "wh_1", SECRET, [2; 12]), 1_000)),
            status: "active".into(),
            disabled_reason: None,
            created_at: 0,
        };
        let old = signing_key(SECRET).unwrap();
        assert_eq!(hook.signing_keys(&key, 999), Some(vec![vec![9; 24], old]));
        assert_eq!(hook.signing_keys(&key, 1_000), Some(vec![vec![9; 24]]));
        assert_eq!(hook.previous_secret_until(999), Some(1_000));
        assert_eq!(hook.previous_secret_until(1_000), None);
    }

    #[test]
    fn schedule_is_30s_5m_30m_2h_6h_then_none() {
        let s = [30, 300, 1800, 7200, 21600];
        let delays: Vec<_> = (1..=6).map(|n| retry_delay(n, &s, 0.0, None)).collect();
        assert_eq!(delays, [Some(30), Some(300), Some(1800), Some(7200), Some(21600), None]);
        assert_eq!(retry_delay(0, &s, 0.0, None), None);
        assert_eq!(retry_delay(1, &s, 1.0, None), Some(33));
        assert_eq!(retry_delay(1, &s, -1.0, None), Some(27));
        assert_eq!(retry_delay(2, &s, -5.0, None), Some(270), "jitter is clamped to ±10 %");
        assert_eq!(retry_delay(1, &s, 0.0, Some(120)), Some(120), "a longer Retry-After wins");
        assert_eq!(retry_delay(2, &s, 0.0, Some(120)), Some(300), "a shorter one does not");
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = super::super::time::parse_rfc3339("1994-11-06T08:49:00Z").unwrap();
        assert_eq!(parse_retry_after("120", now), Some(120));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(37));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:48:00 GMT", now), Some(0), "a past date: now");
    }

    #[test]
    fn retry_after_is_honoured_up_to_24_hours_without_overflow() {
        let now = super::super::time::parse_rfc3339("2026-11-29T08:00:00Z").unwrap();
        assert_eq!(parse_retry_after("86400", now), Some(86_400));
        assert_eq!(parse_retry_after("86401", now), Some(MAX_RETRY_AFTER_SECONDS));
        assert_eq!(parse_retry_after("99999999999", now), Some(MAX_RETRY_AFTER_SECONDS));
        assert_eq!(parse_retry_after("184467440737095516150000", now), Some(86_400), "beyond u64");
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 08:00:00 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Fri, 31 Dec 99999999999 23:59:59 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Sun, 29 Nov 2026 09:00:00 GMT", now), Some(3600));
        let s = [30, 300];
        assert_eq!(retry_delay(1, &s, 0.0, Some(u64::MAX)), Some(86_400), "capped even if unparsed");
        let answered = ReceiverOutcome::Answered {
            status: 429,
            retry_after: Some("99999999999".into()),
            excerpt: String::new(),
        };
        let j = judge(1, &answered, &s, 0.0, now);
        assert_eq!(j.next_attempt_ms, Some(now + 86_400_000));
        let far = judge(1, &answered, &[u64::MAX / 2], 1.0, i64::MAX - 5);
        assert_eq!(far.next_attempt_ms, Some(i64::MAX), "saturates instead of overflowing");
    }

    #[test]
    fn excerpts_keep_at_most_1_kib_of_text() {
        assert_eq!(response_excerpt(b"ok"), "ok");
        assert_eq!(response_excerpt(&[b'a'; 5000]).len(), RESPONSE_EXCERPT_BYTES);
        // A 3-byte character straddling the limit is not kept whole, and the text stays ≤ 1 KiB.
        let mut body = vec![b'a'; RESPONSE_EXCERPT_BYTES - 1];
        body.extend("€€".as_bytes());
        let kept = response_excerpt(&body);
        assert!(kept.len() <= RESPONSE_EXCERPT_BYTES && kept.starts_with("aaa"), "{}", kept.len());
        // Invalid bytes grow into U+FFFD (3 bytes each); the text is cut back within the limit.
        let kept = response_excerpt(&[0xff; 2000]);
        assert!(kept.len() <= RESPONSE_EXCERPT_BYTES && kept.chars().all(|c| c == '\u{fffd}'));
        assert_eq!(response_excerpt(&[]), "");
    }

    /// What [`check_url`] must answer for a target, without and with `ALLOW_PRIVATE_WEBHOOK_URLS`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Want {
        /// Accepted either way.
        Public,
        /// Refused, but allowed with the switch (loopback, RFC 1918, ULA, `localhost`, `http`).
        Local,
        /// Refused either way.
        Never,
    }
    use Want::{Local as L, Never as N, Public as P};

    /// Every form of SPEC §10 and §13, with the words the refusal must carry ("" = not checked).
    const TARGETS: &[(&str, Want, &str)] = &[
        // Public targets.
        ("https://example.com/hook", P, ""),
        ("https://hooks.example.com/in?x=1", P, ""),
        ("https://example.com:8443/hook", P, ""),
        ("https://xn--bcher-kva.example/hook", P, ""), // an international name, written in ASCII
        ("https://[2606:4700::1111]/", P, ""),
        ("https://[2001:4860:4860::8888]/", P, ""),
        ("https://[2001:200::1]/", P, ""), // just past 2001::/23
        ("https://1.1.1.1/", P, ""),
        ("https://8.8.8.8:8443/x", P, ""),
        ("https://100.63.255.255/", P, ""), // just below 100.64/10
        ("https://100.128.0.1/", P, ""),    // just above it
        ("https://172.15.255.255/", P, ""),
        ("https://172.32.0.1/", P, ""),
        ("https://192.0.1.1/", P, ""),
        ("https://198.17.255.255/", P, ""),
        ("https://198.20.0.1/", P, ""),
        ("https://223.255.255.255/", P, ""),
        ("https://localhost.example.com/", P, ""),
        ("https://metadata.example.com/", P, ""),
        ("https://internal.example.com/", P, ""),
        // Loopback and private: the switch allows them.
        ("https://127.0.0.1/x", L, "loopback address (127.0.0.0/8)"),
        ("https://127.255.255.254/", L, "loopback"),
        ("https://10.1.2.3/x", L, "private address (10.0.0.0/8)"),
        ("https://172.16.0.1/x", L, "private address (172.16.0.0/12)"),
        ("https://172.31.255.255/", L, "172.16.0.0/12"),
        ("https://192.168.1.1/x", L, "private address (192.168.0.0/16)"),
        ("https://[::1]/", L, "loopback address (::1)"),
        ("https://[0:0:0:0:0:0:0:1]/", L, "loopback address (::1)"),
        ("https://[fd00::1]/", L, "unique-local address (fc00::/7)"),
        ("https://[fc00::1]/", L, "fc00::/7"),
        ("https://localhost/x", L, "loopback name"),
        ("https://LocalHost./x", L, "loopback name"),
        ("https://api.localhost/x", L, "loopback name"),
        ("https://ｌｏｃａｌｈｏｓｔ/", N, "ASCII host"), // full-width: refused, never mapped
        ("http://hooks.example.com/in", L, "must use https"),
        ("http://127.0.0.1:9000/hook", L, "must use https"),
        // IPv4 spelled otherwise: the url crate parses every spelling to the address.
        ("https://2130706433/", L, "127.0.0.0/8"),
        ("https://0177.0.0.1/", L, "127.0.0.0/8"),
        ("https://0x7f.1/", L, "127.0.0.0/8"),
        ("https://0x7F000001/", L, "127.0.0.0/8"),
        ("https://017700000001/", L, "127.0.0.0/8"),
        ("https://127.1/", L, "127.0.0.0/8"),
        ("https://127.0.1/", L, "127.0.0.0/8"),
        ("https://127.0.0.1./", L, "127.0.0.0/8"),
        ("https://%31%32%37.0.0.1/", L, "127.0.0.0/8"),
        ("https://１２７.０.０.１/", N, "ASCII host"),
        ("https://bücher.example/", N, "ASCII host"),
        ("https://012.0.0.1/", L, "10.0.0.0/8"),
        ("https://0xc0a80001/", L, "192.168.0.0/16"),
        ("https://2852039166/", N, "metadata address (169.254.169.254)"),
        ("https://0xa9.0xfe.0xa9.0xfe/", N, "metadata"),
        ("https://0251.0376.0251.0376/", N, "metadata"),
        ("https://0/", N, "0.0.0.0/8"),
        ("https://0x0/", N, "0.0.0.0/8"),
        ("https://3221225473/", N, "192.0.0.0/24"),
        ("https://3323068417/", N, "198.18.0.0/15"),
        ("https://0xc6.0x12.0.1/", N, "198.18.0.0/15"),
        // IPv4 special-purpose blocks the switch never lifts.
        ("https://0.0.0.0/", N, "\"this network\" address (0.0.0.0/8)"),
        ("https://0.1.2.3/", N, "0.0.0.0/8"),
        ("https://100.64.0.1/", N, "shared (CGNAT) address (100.64.0.0/10)"),
        ("https://100.127.255.255/", N, "100.64.0.0/10"),
        ("https://100.100.100.200/", N, "100.64.0.0/10"), // Alibaba Cloud metadata
        ("https://169.254.169.254/latest/meta-data", N, "cloud metadata address"),
        ("https://169.254.170.2/v2/credentials", N, "link-local address (169.254.0.0/16)"),
        ("https://169.254.0.1/", N, "169.254.0.0/16"),
        ("https://192.0.0.1/", N, "IETF protocol assignment (192.0.0.0/24)"),
        ("https://192.0.0.192/", N, "192.0.0.0/24"), // Oracle Cloud metadata
        ("https://192.0.0.170/", N, "192.0.0.0/24"),
        ("https://192.0.2.1/", N, "documentation address (192.0.2.0/24)"),
        ("https://192.31.196.1/", N, "AS112 address (192.31.196.0/24)"),
        ("https://192.52.193.1/", N, "AMT address (192.52.193.0/24)"),
        ("https://192.88.99.1/", N, "6to4 relay anycast address (192.88.99.0/24)"),
        ("https://192.175.48.1/", N, "AS112 address (192.175.48.0/24)"),
        ("https://198.18.0.1/", N, "benchmarking address (198.18.0.0/15)"),
        ("https://198.19.255.255/", N, "198.18.0.0/15"),
        ("https://198.51.100.7/", N, "documentation address (198.51.100.0/24)"),
        ("https://203.0.113.9/", N, "documentation address (203.0.113.0/24)"),
        ("https://224.0.0.1/", N, "multicast address (224.0.0.0/4)"),
        ("https://239.255.255.250/", N, "224.0.0.0/4"),
        ("https://240.0.0.1/", N, "reserved address (240.0.0.0/4)"),
        ("https://255.255.255.254/", N, "240.0.0.0/4"),
        ("https://255.255.255.255/", N, "broadcast address (255.255.255.255)"),
        // IPv6 special-purpose blocks, IPv4 embedded in IPv6 whatever the IPv4 address.
        ("https://[::]/", N, "unspecified address (::)"),
        ("https://[::127.0.0.1]/", N, "IPv4-compatible address (::/96)"),
        ("https://[::7f00:1]/", N, "::/96"),
        ("https://[::8.8.8.8]/", N, "::/96"),
        ("https://[::ffff:7f00:1]/", N, "IPv4-mapped address (::ffff:0:0/96)"),
        ("https://[::ffff:127.0.0.1]/", N, "::ffff:0:0/96"),
        ("https://[::ffff:8.8.8.8]/", N, "::ffff:0:0/96"),
        ("https://[::ffff:0:7f00:1]/", N, "IPv4-translated address (::ffff:0:0:0/96)"),
        ("https://[::ffff:0:808:808]/", N, "::ffff:0:0:0/96"),
        ("https://[64:ff9b::7f00:1]/", N, "NAT64 address (64:ff9b::/96)"),
        ("https://[64:ff9b::8.8.8.8]/", N, "64:ff9b::/96"),
        ("https://[64:ff9b:1::7f00:1]/", N, "local NAT64 address (64:ff9b:1::/48)"),
        ("https://[100::1]/", N, "discard-only address (100::/64)"),
        ("https://[100:0:0:1::1]/", N, "dummy-prefix address (100:0:0:1::/64)"),
        ("https://[2001::1]/", N, "Teredo address (2001::/32)"),
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", N, "2001::/32"),
        ("https://[2001:1::1]/", N, "IETF protocol assignment (2001::/23)"),
        ("https://[2001:2::1]/", N, "2001::/23"),
        ("https://[2001:1ff::1]/", N, "2001::/23"),
        ("https://[2001:db8::1]/", N, "documentation address (2001:db8::/32)"),
        ("https://[2002:7f00:1::]/", N, "6to4 address (2002::/16)"),
        ("https://[2002:808:808::1]/", N, "2002::/16"),
        ("https://[2620:4f:8000::1]/", N, "AS112 address (2620:4f:8000::/48)"),
        ("https://[3fff::1]/", N, "documentation address (3fff::/20)"),
        ("https://[5f00::1]/", N, "SRv6 SID address (5f00::/16)"),
        ("https://[fd00:ec2::254]/", N, "cloud metadata address (fd00:ec2::254)"),
        ("https://[fe80::1]/", N, "link-local address (fe80::/10)"),
        ("https://[febf::1]/", N, "fe80::/10"),
        ("https://[fec0::1]/", N, "site-local address (fec0::/10)"),
        ("https://[feff::1]/", N, "fec0::/10"),
        ("https://[ff02::1]/", N, "multicast address (ff00::/8)"),
        ("https://[ff05::1:3]/", N, "ff00::/8"),
        ("https://[1::1]/", N, "outside 2000::/3"),
        ("https://[4000::1]/", N, "outside 2000::/3"),
        ("https://[e000::1]/", N, "outside 2000::/3"),
        // Metadata and internal names (not resolved: known names only).
        ("https://metadata.google.internal/computeMetadata/v1/", N, "cloud metadata host"),
        ("https://METADATA.GOOGLE.INTERNAL./", N, "cloud metadata host"),
        ("https://metadata.goog/", N, "cloud metadata host"),
        ("https://metadata/", N, "cloud metadata host"),
        ("https://instance-data/", N, "cloud metadata host"),
        ("https://instance-data.ec2.internal/", N, "cloud metadata host"),
        ("https://metadata.tencentyun.com/", N, "cloud metadata host"),
        ("https://db.internal/", N, "internal name"),
        ("https://printer.local/", N, "internal name"),
        ("https://svc.cluster.local/", N, "internal name"),
        ("https://nas.home.arpa/", N, "internal name"),
        ("https://app.test/", N, "internal name"),
        ("https://x.invalid/", N, "internal name"),
        ("https://intranet/", N, "single-label"),
        // Not a usable URL at all.
        ("ftp://example.com", N, "must use https"),
        ("file:///etc/passwd", N, "must use https"),
        ("https://user:pw@example.com/", N, "credentials"),
        ("https://user@example.com/", N, "credentials"),
        ("not a url", N, "not an absolute URL"),
        ("https://[::1", N, "not an absolute URL"),
        ("https://1.2.3.4.5/", N, "not an absolute URL"),
        ("https://256.0.0.1/", N, "not an absolute URL"),
        ("https://0x100000000/", N, "not an absolute URL"),
        ("https://example.0x1/", N, "not an absolute URL"),
    ];

    #[test]
    fn every_special_purpose_target_is_refused_and_the_switch_lifts_only_loopback_and_private() {
        let mut wrong = Vec::new();
        for &(raw, want, words) in TARGETS {
            let strict = check_url(raw, false);
            let dev = check_url(raw, true);
            let got = match (&strict, &dev) {
                (Ok(_), Ok(_)) => P,
                (Err(_), Ok(_)) => L,
                (Err(_), Err(_)) => N,
                (Ok(_), Err(_)) => {
                    wrong.push(format!("{raw}: accepted strictly, refused with the switch"));
                    continue;
                }
            };
            if got != want {
                wrong.push(format!("{raw}: {got:?}, want {want:?} ({strict:?})"));
            }
            if let Err(e) = &strict {
                let shape = (e.code.status(), e.code.as_str(), e.details["field"].as_str());
                if shape != (422, "VALIDATION_ERROR", Some("url")) || !e.message.contains(words) {
                    wrong.push(format!("{raw}: {shape:?} {:?}, want the words {words:?}", e.message));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} targets wrong:\n{}",
            wrong.len(),
            TARGETS.len(),
            wrong.join("\n")
        );
    }

    #[test]
    fn the_url_crate_parses_every_ipv4_spelling_to_the_address() {
        for (raw, host) in [
            ("https://2130706433/", "127.0.0.1"),
            ("https://0177.0.0.1/", "127.0.0.1"),
            ("https://0x7f.1/", "127.0.0.1"),
            ("https://127.1/", "127.0.0.1"),
            ("https://127.0.0.1./", "127.0.0.1"),
            ("https://%31%32%37.0.0.1/", "127.0.0.1"),
            ("https://0xa9.0xfe.0xa9.0xfe/", "169.254.169.254"),
            ("https://[::127.0.0.1]/", "[::7f00:1]"),
            ("https://[::ffff:0:7f00:1]/", "[::ffff:0:7f00:1]"),
        ] {
            let url = url::Url::parse(raw).expect(raw);
            assert_eq!(url.host_str(), Some(host), "{raw}");
            if !host.starts_with('[') {
                assert!(matches!(url.host(), Some(url::Host::Ipv4(_))), "{raw} is an address, not a name");
            }
        }
    }

    #[test]
    fn a_refused_target_fails_the_delivery_at_once_with_its_reason() {
        let why = target_refusal("https://198.18.0.1/", true).unwrap_err();
        let j = refused(&why);
        assert_eq!(
            (j.status, j.next_attempt_ms, j.response_code, j.disable_subscription),
            ("failed", None, None, false)
        );
        assert_eq!(
            j.error.as_deref(),
            Some("refused: url must not point to a benchmarking address (198.18.0.0/15)")
        );
    }

    #[test]
    fn judges_attempts_by_status_and_schedule() {
        let s = [30, 300];
        let answered = |status, retry_after: Option<&str>| ReceiverOutcome::Answered {
            status,
            retry_after: retry_after.map(String::from),
            excerpt: String::new(),
        };
        assert_eq!(judge(1, &answered(204, None), &s, 0.0, 0).status, "delivered");
        let j = judge(1, &answered(500, None), &s, 0.0, 1000);
        assert_eq!((j.status, j.next_attempt_ms, j.response_code), ("pending", Some(31_000), Some(500)));
        assert_eq!(judge(3, &answered(500, None), &s, 0.0, 0).status, "failed");
        let gone = judge(1, &answered(410, None), &s, 0.0, 0);
        assert!(gone.disable_subscription && gone.status == "failed");
        assert_eq!(judge(1, &answered(503, Some("600")), &s, 0.0, 0).next_attempt_ms, Some(600_000));
        assert_eq!(
            judge(1, &answered(500, Some("600")), &s, 0.0, 0).next_attempt_ms,
            Some(30_000),
            "only 429/503"
        );
        let down = judge(2, &ReceiverOutcome::Unreachable("timed out".into()), &s, 0.0, 0);
        assert_eq!(
            (down.status, down.response_code, down.error.as_deref()),
            ("pending", None, Some("timed out"))
        );
    }

    #[test]
    fn events_are_known_types_or_star() {
        assert!(check_events(&["*".into()]).is_ok());
        assert!(check_events(&["contact.created".into(), "message.created".into()]).is_ok());
        assert!(check_events(&[]).is_err());
        // Origins send their own types (SPEC §15): any of the grammar is accepted.
        assert!(check_events(&["order.shipped".into(), "invoice_2.paid".into()]).is_ok());
        assert!(check_events(&["Order.Shipped".into()]).is_err());
        assert!(check_events(&["order-shipped".into()]).is_err());
        assert!(check_events(&["x".repeat(65)]).is_err());
        assert!(check_events(&["*".into(), "*".into()]).is_err());
    }
}
