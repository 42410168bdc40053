//! A subscription: its URL, the event types it takes, its secrets during a rotation (SPEC §17).

use gatehouse_wire::to_json;
use gatehouse_wire::webhooks as wire;

use serde_json::Value;

use super::secret::{public_key_of, Scheme, SigningKey, StoredSecret};
use crate::error::ApiError;
use crate::sealing::Keyring;

/// The event types the gateway emits.
pub const EVENT_TYPES: [&str; 6] = [
    "contact.created",
    "message.created",
    "scenario.run.started",
    "release_marker.created",
    "usage.hourly",
    "usage.adjustment",
];

/// Whether a subscription to `events` takes an event of `event_type`: one it names, or any but
/// the gateway's own usage events for `"*"` (SPEC §22: billing events are delivered only where
/// asked for, so a `"*"` receiver is not sent a new kind of event it never expected).
pub fn subscribes(events: &[String], event_type: &str) -> bool {
    events.iter().any(|e| {
        e == event_type || (e == "*" && !event_type.starts_with(crate::usage::RESERVED_EVENT_PREFIX))
    })
}

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

/// The `data` of a sample event of `event_type` (`POST /public/v1/webhooks/trigger`, SPEC §21): the
/// shape a real event of a built-in type carries, with ids and values that say it is a sample;
/// for an origin's type, `{"sample": true}`.
pub fn sample_data(event_type: &str, created_at: &str) -> Value {
    match event_type {
        "contact.created" => serde_json::json!({
            "id": "ct_sample", "name": "Sample Contact", "phone": "+15550100000",
            "email": "sample@example.com", "external_id": null, "created_at": created_at,
        }),
        "message.created" => serde_json::json!({
            "id": "msg_sample", "contact_id": "ct_sample", "text": "A sample message",
            "status": "queued", "created_at": created_at,
        }),
        "scenario.run.started" => serde_json::json!({
            "run_id": "run_sample", "scenario_id": "scn_sample", "contact_id": "ct_sample",
            "variables": {}, "status": "started",
        }),
        "release_marker.created" => serde_json::json!({
            "id": "rm_sample", "project_id": "prj_sample", "version": "v0.0.0-sample", "ts": created_at,
            "environment": "sample", "commit": null, "created_at": created_at,
        }),
        // No records and a value of 0: a billing receiver that takes a sample for real bills nothing.
        "usage.hourly" | "usage.adjustment" => serde_json::json!({
            "project_id": "prj_sample", "meter": "requests", "period_start": created_at,
            "period_end": created_at, "sequence": u32::from(event_type == "usage.adjustment"),
            "object": "usage/prj_sample/sample.ndjson", "value": 0, "records": [],
            "records_complete": true,
        }),
        _ => serde_json::json!({ "sample": true }),
    }
}

/// The error of an attempt of a `cli` subscription's delivery while no listener is connected.
pub const NO_LISTENER: &str = "no listener connected (gatehouse listen)";

/// What a `cli` subscription stores as its URL: no URL a receiver can have.
pub const CLI_URL: &str = "cli:listen";

/// A subscription. `Debug` leaves the signing secret out.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    pub project_id: String,
    /// What its owner calls the endpoint (SPEC §26), at most 200 characters (as a key's name).
    pub name: Option<String>,
    pub url: String,
    pub events: Vec<String>,
    pub secret: StoredSecret,
    /// A `v1a` subscription's public key (`whpk_…`, SPEC §25), the current secret's; `None`: `v1`.
    pub public_key: Option<String>,
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
        let info = wire::Webhook {
            id: self.id.clone(),
            kind: if self.is_cli() { "cli" } else { "url" }.into(),
            url: (!self.is_cli()).then(|| self.url.clone()),
            events: self.events.clone(),
            // D1 holds active, disabled or deleted (a CHECK constraint); a deleted one is never shown.
            status: wire::WebhookStatus::parse(&self.status).unwrap_or(wire::WebhookStatus::Unknown),
            disabled_reason: self.disabled_reason.clone(),
            created_at: crate::time::rfc3339(self.created_at),
            previous_secret_expires_at: self.previous_secret_until(now_ms).map(crate::time::rfc3339),
            signature: self.scheme().as_str().to_owned(),
            public_key: self.public_key.clone(),
            name: self.name.clone(),
        };
        match secret {
            // A v1a key pair's private half never leaves the gateway.
            Some(secret) => {
                let secret = (self.scheme() == Scheme::V1).then(|| secret.to_owned());
                to_json(&wire::CreatedWebhook { secret, info })
            }
            None => to_json(&info),
        }
    }

    /// The subscription with the public key its sealed secret makes (SPEC §25), never the word of
    /// the `public_key` column alone: someone who can write D1 but holds no `WEBHOOK_SECRETS_KEY`
    /// could put a key of their own there, and receivers would trust it. `None` for a `v1` secret
    /// (or one that does not open).
    pub fn bound_to_secret(mut self, key: &Keyring) -> Self {
        self.public_key = self.secret.open(key, &self.id).and_then(|secret| public_key_of(&secret));
        self
    }

    /// How its attempts are signed now (a `v1a` subscription has a public key).
    pub fn scheme(&self) -> Scheme {
        match self.public_key {
            Some(_) => Scheme::V1a,
            None => Scheme::V1,
        }
    }
}

impl Webhook {
    /// A `cli` subscription (SPEC §21): no receiver URL; a listener (`gatehouse listen`) pulls its
    /// deliveries. Stored with [`CLI_URL`] in place of a URL.
    pub fn is_cli(&self) -> bool {
        self.url == CLI_URL
    }

    /// Until when the previous secret still signs, if a rotation's grace runs at `now_ms`.
    pub fn previous_secret_until(&self, now_ms: i64) -> Option<i64> {
        self.previous_secret.as_ref().map(|(_, until)| *until).filter(|until| *until > now_ms)
    }

    /// The signing keys of an attempt at `now_ms`: the current secret's, then the previous one's
    /// while its grace runs. `None` when the current secret cannot be opened; a previous secret
    /// that cannot be opened is left out.
    pub fn signing_keys(&self, key: &Keyring, now_ms: i64) -> Option<Vec<SigningKey>> {
        let current = SigningKey::of(&self.secret.open(key, &self.id)?)?;
        let previous = self
            .previous_secret
            .as_ref()
            .filter(|(_, until)| *until > now_ms)
            .and_then(|(secret, _)| SigningKey::of(&secret.open(key, &self.id)?));
        Some(std::iter::once(current).chain(previous).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::test_vectors::*;
    use crate::webhook::*;

    #[test]
    fn debug_output_never_prints_the_signing_secret() {
        let hook = Webhook {
            id: "wh_1".into(),
            project_id: "prj_1".into(),
            url: "https://example.com/hook".into(),
            events: vec!["*".into()],
            secret: StoredSecret::Plaintext(SECRET.into()),
            public_key: None,
            name: None,
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
            public_key: None,
            name: None,
            previous_secret: Some((StoredSecret::seal(&key, "wh_1", SECRET, [2; 12]), 1_000)),
            status: "active".into(),
            disabled_reason: None,
            created_at: 0,
        };
        let old = signing_key(SECRET).unwrap();
        assert_eq!(
            hook.signing_keys(&key, 999),
            Some(vec![SigningKey::Hmac(vec![9; 24]), SigningKey::Hmac(old)])
        );
        assert_eq!(hook.signing_keys(&key, 1_000), Some(vec![SigningKey::Hmac(vec![9; 24])]));
        assert_eq!(hook.previous_secret_until(999), Some(1_000));
        assert_eq!(hook.previous_secret_until(1_000), None);
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

    /// SPEC §25, what a D1 writer without the secrets key holds: the `public_key` column. Whatever
    /// it says, the subscription shows the key of its sealed secret.
    #[test]
    fn the_public_key_shown_is_the_sealed_secrets_not_the_columns() {
        let key = secrets_key();
        let secret = Scheme::V1a.new_secret(&[5; 32]);
        let real = public_key_of(&secret);
        let planted = Some(Scheme::V1a.new_secret(&[6; 32])).and_then(|s| public_key_of(&s));
        let hook = |sealed: &str, column: Option<String>| Webhook {
            id: "wh_1".into(),
            project_id: "prj_1".into(),
            url: "https://example.com/hook".into(),
            events: vec!["*".into()],
            secret: StoredSecret::seal(&key, "wh_1", sealed, [1; 12]),
            public_key: column,
            name: None,
            previous_secret: None,
            status: "active".into(),
            disabled_reason: None,
            created_at: 0,
        };
        assert_eq!(hook(&secret, planted.clone()).bound_to_secret(&key).public_key, real);
        assert_eq!(hook(&secret, None).bound_to_secret(&key).scheme(), Scheme::V1a);
        // A v1 secret has no public key, whatever the column says.
        let v1 = hook(SECRET, planted).bound_to_secret(&key);
        assert_eq!((v1.public_key.clone(), v1.scheme()), (None, Scheme::V1));
    }
}
