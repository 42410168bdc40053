//! Typed configuration from the worker's vars and secrets (SPEC §1). The parser is pure: it reads
//! through a lookup function, so native tests feed it a map and the worker feeds it `Env`.

use std::collections::BTreeMap;

use crate::api_key::Scope;
use crate::queue::RetryPolicy;
use crate::rate_limit::LimitSpec;
use crate::sealing::Keyring;
use crate::upstream::{parse_upstreams, Upstream};

mod limits;
use crate::usage::Billable;

/// A plan in `PLANS` (SPEC §1, §20): each key's windows (any of `per_second`, `per_minute`,
/// `per_hour`, `per_day`; at least one) and the project's `monthly_quota` (left out: none).
pub type Plan = LimitSpec;

/// `Debug` leaves the secrets out (a `{:?}` in a log line must never print them).
#[derive(Clone, PartialEq)]
pub struct Config {
    pub plans: BTreeMap<String, Plan>,
    pub idempotency_ttl_seconds: u64,
    pub event_dedup_window_seconds: u64,
    /// Days the events table keeps an accepted event (`EVENT_RETENTION_DAYS`, default 30, SPEC §24):
    /// what `GET /public/v1/events` lists; older ones are purged by the minute cron.
    pub event_retention_days: u32,
    pub audit_retention_days: u32,
    /// Seconds an audit row stays in D1 (the hot tier) before the roll-up moves it to R2.
    pub audit_hot_seconds: u32,
    /// The D1 databases the audit log spreads over (`AUDIT_DATABASES`, SPEC §20): `AUDIT_DB`,
    /// `AUDIT_DB_1`, … A new project is put on one of them by its id, and stays there.
    pub audit_databases: u8,
    /// How many objects a key made from now on spreads its idempotency claims over
    /// (`CLAIM_SHARDS`, 1–64, SPEC §20); each key keeps the number it was made with.
    pub claim_shards: u32,
    pub webhook_retry_schedule: Vec<u64>,
    pub webhook_timeout_ms: u64,
    pub webhook_header_prefix: String,
    pub allow_private_webhook_urls: bool,
    /// `PRIVATE_WEBHOOK_ORIGINS`: origins (`http://127.0.0.1:4000`) accepted as webhook targets
    /// although they are loopback, private or plain http — these and no others (the test kit's
    /// sink, SPEC §21). Metadata and other special addresses stay refused.
    pub private_webhook_origins: Vec<String>,
    /// How overdue a pending delivery is before the minute sweep queues it again
    /// (`WEBHOOK_SWEEP_GRACE_SECONDS`, default 30): its own queued message normally comes first.
    /// The test kit sets 0: queue delays run on the real time, its clock runs ahead.
    pub webhook_sweep_grace_ms: i64,
    /// How long a failed queue message waits before its next try (SPEC §12.1).
    pub queue_retry: RetryPolicy,
    pub key_pepper: String,
    /// `KEY_PEPPER_PREVIOUS` during a rotation (SPEC §19): keys hashed and responses sealed under
    /// it keep working.
    pub key_pepper_previous: Option<String>,
    /// The id of `KEY_PEPPER` ([`crate::sealing::key_id`]) that key records carry (SPEC §26).
    pub key_pepper_id: String,
    /// The id of `KEY_PEPPER_PREVIOUS`, when set.
    pub key_pepper_previous_id: Option<String>,
    /// `WEBHOOK_SECRETS_KEY`: seals webhook signing secrets in D1; not the pepper (SPEC §19).
    pub webhook_secrets_key: String,
    pub webhook_secrets_key_previous: Option<String>,
    /// `AUDIT_SIGNING_KEY` (SPEC §22, §23): 32 random bytes as 64 hex digits, which the audit
    /// digests' Ed25519 key derives from; without it no digest is signed. The public key is
    /// published, so a human-chosen secret could be found offline: anything else is refused.
    pub audit_signing_key: Option<String>,
    /// `AUDIT_DIGEST_SECONDS`: the period of one digest (default 3600; at least 60).
    pub audit_digest_seconds: u32,
    /// `AUDIT_CHAIN_SINCE` (RFC 3339; unset: never): when this deployment moved to chain heads
    /// (SPEC §23). Only a chain's history before it is taken from D1 as a head starts; a new
    /// deployment leaves it unset and takes nothing from D1.
    pub audit_chain_since_ms: i64,
    /// `USAGE_PERIOD_SECONDS` (SPEC §22): the period usage is counted and exported by (default
    /// 3600; whole minutes dividing an hour).
    pub usage_period_seconds: u32,
    /// The route classes a plan exempts from its windows, its quota and billing
    /// (`PLANS.<plan>.exempt`, SPEC §23; `Scope::class`): none unless named.
    pub exempt: BTreeMap<String, Vec<String>>,
    /// A browser key's requests a minute from one visitor (address, IPv6 /64), per plan
    /// (`PLANS.<plan>.browser_per_address_per_minute`, SPEC §24); a plan without it: a tenth of
    /// its minute, at least 10 ([`Config::browser_per_address_per_minute`]).
    pub browser_per_address: BTreeMap<String, u32>,
    /// Which statuses bill, per plan (`PLANS.<plan>.billable`); a plan without it bills every
    /// authenticated request no limit refused.
    pub billable: BTreeMap<String, Billable>,
    pub admin_token: String,
    /// Proxied routes (SPEC §15), longest prefix first.
    pub upstreams: Vec<Upstream>,
    /// Signs forwarded requests (only); required when `upstreams` is not empty.
    pub origin_secret: Option<String>,
    /// `EVENTS_SECRET`: authenticates origin events (SPEC §19); unset, origin events are refused.
    pub events_secret: Option<String>,
    /// `EVENTS_PROJECTS`: the projects origin events may name (comma-separated); unset, any.
    pub events_projects: Option<Vec<String>>,
    /// Whether every request writes its log line (`REQUEST_LOG=all`) or only the ones answered
    /// with a server error (`errors`, the default): a line costs as much as the rest of a cheap
    /// request, and the audit log already has one row per request.
    pub log_every_request: bool,
    /// `SERVER_TIMING` (`on`, the default, or `off`): every answer carries `Server-Timing`
    /// (SPEC §16).
    pub server_timing: bool,
    /// `LEASE_ABOVE_PER_SECOND` (SPEC §20): a key that made at least this many requests in the
    /// current second leases credits to isolates, which then admit it without asking its guard
    /// (`0`: every key leases; `off`: none). Default [`DEFAULT_LEASE_ABOVE_PER_SECOND`].
    pub lease_above_per_second: Option<u32>,
    /// Reserve calls a second above which an event-ledger shard splits
    /// (`LEDGER_SPLIT_ABOVE_PER_SECOND`, SPEC §20; `0`: every call splits, to the deepest level).
    pub ledger_split_above_per_second: u32,
    /// `DASHBOARD_READS_PER_MINUTE`: what an owner key may read a minute under the dashboard
    /// budget ([`crate::budget`]), apart from its API windows (default 120).
    pub dashboard_reads_per_minute: u32,
}

/// A key's guard serves a few hundred calls a second (docs/operations/capacity.md): from 100 a
/// second on, a key's isolates hold leases and ask it about once a second each instead.
pub const DEFAULT_LEASE_ABOVE_PER_SECOND: u32 = 100;

/// A hot key's idempotent requests spread over its guard and 31 claim objects (SPEC §20, §23):
/// each keeps a claim row for the idempotency TTL, so at 1,000 idempotent requests/s on one key a
/// claim object holds about 0.7 GB (`scripts/simulate soak`), within the 1 GB budget of an object.
pub const DEFAULT_CLAIM_SHARDS: u32 = 32;

/// The sweep leaves an overdue delivery this long to its own queued message.
pub const DEFAULT_WEBHOOK_SWEEP_GRACE_SECONDS: u64 = 30;

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("plans", &self.plans)
            .field("idempotency_ttl_seconds", &self.idempotency_ttl_seconds)
            .field("event_dedup_window_seconds", &self.event_dedup_window_seconds)
            .field("event_retention_days", &self.event_retention_days)
            .field("audit_retention_days", &self.audit_retention_days)
            .field("audit_hot_seconds", &self.audit_hot_seconds)
            .field("audit_databases", &self.audit_databases)
            .field("claim_shards", &self.claim_shards)
            .field("webhook_retry_schedule", &self.webhook_retry_schedule)
            .field("webhook_timeout_ms", &self.webhook_timeout_ms)
            .field("webhook_header_prefix", &self.webhook_header_prefix)
            .field("allow_private_webhook_urls", &self.allow_private_webhook_urls)
            .field("private_webhook_origins", &self.private_webhook_origins)
            .field("webhook_sweep_grace_ms", &self.webhook_sweep_grace_ms)
            .field("queue_retry", &self.queue_retry)
            .field("key_pepper", &"[redacted]")
            .field("key_pepper_previous", &self.key_pepper_previous.as_ref().map(|_| "[redacted]"))
            .field("webhook_secrets_key", &"[redacted]")
            .field("audit_signing_key", &self.audit_signing_key.as_ref().map(|_| "[redacted]"))
            .field("audit_digest_seconds", &self.audit_digest_seconds)
            .field("usage_period_seconds", &self.usage_period_seconds)
            .field("billable", &self.billable)
            .field("exempt", &self.exempt)
            .field("browser_per_address", &self.browser_per_address)
            .field(
                "webhook_secrets_key_previous",
                &self.webhook_secrets_key_previous.as_ref().map(|_| "[redacted]"),
            )
            .field("admin_token", &"[redacted]")
            .field("upstreams", &self.upstreams.iter().map(|u| &u.prefix).collect::<Vec<_>>())
            .field("origin_secret", &self.origin_secret.as_ref().map(|_| "[redacted]"))
            .field("events_secret", &self.events_secret.as_ref().map(|_| "[redacted]"))
            .field("events_projects", &self.events_projects)
            .field("log_every_request", &self.log_every_request)
            .field("server_timing", &self.server_timing)
            .field("lease_above_per_second", &self.lease_above_per_second)
            .field("ledger_split_above_per_second", &self.ledger_split_above_per_second)
            .field("dashboard_reads_per_minute", &self.dashboard_reads_per_minute)
            .finish()
    }
}

pub const DEFAULT_PLAN: &str = "trial";
const DEFAULT_PLANS: &str = r#"{"trial":{"per_minute":30,"monthly_quota":10000},"business":{"per_minute":2000,"monthly_quota":10000000}}"#;

/// A var or secret that is missing where required, or does not parse. Operators see it in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "configuration: {}", self.0)
    }
}

/// The secrets the worker reads (`wrangler secret put`, `.dev.vars` locally), never vars.
pub const SECRETS: [&str; 8] = [
    "KEY_PEPPER",
    "KEY_PEPPER_PREVIOUS",
    "WEBHOOK_SECRETS_KEY",
    "WEBHOOK_SECRETS_KEY_PREVIOUS",
    "ADMIN_TOKEN",
    "ORIGIN_SECRET",
    "EVENTS_SECRET",
    "AUDIT_SIGNING_KEY",
];

impl Config {
    /// Every `service:BINDING` origin of `UPSTREAMS` names a binding the worker has (`bound`;
    /// SPEC §15: a bad route is a configuration error, not a 502 on each request).
    pub fn check_services(&self, bound: impl Fn(&str) -> bool) -> Result<(), ConfigError> {
        for upstream in &self.upstreams {
            if let crate::upstream::OriginTarget::Service(binding) = &upstream.origin {
                if !bound(binding) {
                    return Err(ConfigError(format!(
                        "UPSTREAMS: the origin of {} is service:{binding}, but no service binding {binding} is configured",
                        upstream.prefix
                    )));
                }
            }
        }
        Ok(())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let number = |name: &str, default: u64| -> Result<u64, ConfigError> {
            match get(name) {
                None => Ok(default),
                Some(v) => {
                    v.trim().parse().map_err(|_| ConfigError(format!("{name}={v:?} is not a whole number")))
                }
            }
        };
        let secret = |name: &str| -> Result<String, ConfigError> {
            match get(name) {
                Some(v) if v.len() >= 16 => Ok(v),
                Some(_) => Err(ConfigError(format!("{name} must be at least 16 characters"))),
                None => Err(ConfigError(format!("secret {name} is not set"))),
            }
        };

        let plans_json = get("PLANS").unwrap_or_else(|| DEFAULT_PLANS.to_owned());
        let invalid = |e: String| ConfigError(format!("PLANS is not valid: {e}"));
        let raw: BTreeMap<String, serde_json::Map<String, serde_json::Value>> =
            serde_json::from_str(&plans_json).map_err(|e| invalid(e.to_string()))?;
        // `billable` (SPEC §22) sits beside the limits; the rest is the plan's limits.
        let (mut plans, mut billable, mut exempt) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut browser_per_address = BTreeMap::new();
        for (name, mut fields) in raw {
            if let Some(n) = fields.remove("browser_per_address_per_minute") {
                let n = n.as_u64().filter(|n| (1..=u64::from(u32::MAX)).contains(n)).ok_or_else(|| {
                    invalid(format!(
                        "{name:?} browser_per_address_per_minute must be a whole number, at least 1"
                    ))
                })?;
                browser_per_address.insert(name.clone(), n as u32);
            }
            if let Some(list) = fields.remove("exempt") {
                let classes: Vec<String> = serde_json::from_value(list)
                    .map_err(|_| invalid(format!("{name:?} exempt must be a list of route classes")))?;
                if let Some(unknown) = classes.iter().find(|c| !Scope::CLASSES.contains(&c.as_str())) {
                    let known = Scope::CLASSES.join(", ");
                    return Err(invalid(format!(
                        "{name:?} exempt names {unknown:?}; the classes are {known}"
                    )));
                }
                exempt.insert(name.clone(), classes);
            }
            if let Some(list) = fields.remove("billable") {
                billable.insert(
                    name.clone(),
                    Billable::parse(&list).map_err(|e| invalid(format!("{name:?} {e}")))?,
                );
            }
            let plan: Plan =
                serde_json::from_value(fields.into()).map_err(|e| invalid(format!("{name:?} {e}")))?;
            plans.insert(name, plan);
        }
        if !plans.contains_key(DEFAULT_PLAN) {
            return Err(ConfigError(format!("PLANS must define the {DEFAULT_PLAN:?} plan")));
        }
        for (name, plan) in &plans {
            if let Some(field) = plan.zero_field() {
                return Err(ConfigError(format!("PLANS: {name:?} {field} must be at least 1")));
            }
            if plan.windows().iter().all(Option::is_none) {
                return Err(ConfigError(format!(
                    "PLANS: {name:?} must limit a window (per_second, per_minute, per_hour or per_day)"
                )));
            }
        }

        let usage_period_seconds = match number("USAGE_PERIOD_SECONDS", 3_600)? {
            n if crate::usage::valid_period_seconds(n) => n as u32,
            n => {
                return Err(ConfigError(format!(
                "USAGE_PERIOD_SECONDS={n} must be whole minutes that divide an hour (60, 300, 900, 3600, …)"
            )))
            }
        };

        let max = crate::audit::MAX_AUDIT_DATABASES;
        let audit_databases = match number("AUDIT_DATABASES", 1)? {
            n @ 1.. if n <= u64::from(max) => n as u8,
            n => return Err(ConfigError(format!("AUDIT_DATABASES={n} must be between 1 and {max}"))),
        };

        let private_webhook_origins = get("PRIVATE_WEBHOOK_ORIGINS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(|o| match url::Url::parse(o) {
                Ok(u)
                    if u.has_host()
                        && matches!(u.scheme(), "http" | "https")
                        && u.path() == "/"
                        && u.query().is_none() =>
                {
                    Ok(u.origin().ascii_serialization())
                }
                _ => Err(ConfigError(format!(
                    "PRIVATE_WEBHOOK_ORIGINS: {o:?} is not an origin like http://127.0.0.1:4000"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;

        let claim_shards = match number("CLAIM_SHARDS", DEFAULT_CLAIM_SHARDS.into())? {
            n @ 1.. if n <= u64::from(crate::idempotency::MAX_CLAIM_SHARDS) => n as u32,
            n => {
                let max = crate::idempotency::MAX_CLAIM_SHARDS;
                return Err(ConfigError(format!("CLAIM_SHARDS={n} must be between 1 and {max}")));
            }
        };

        let schedule_text = get("WEBHOOK_RETRY_SCHEDULE").unwrap_or_else(|| "30,300,1800,7200,21600".into());
        let webhook_retry_schedule = schedule_text
            .split(',')
            .map(|s| s.trim().parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                ConfigError(format!("WEBHOOK_RETRY_SCHEDULE={schedule_text:?} is not a list of seconds"))
            })?;

        let allow_private = get("ALLOW_PRIVATE_WEBHOOK_URLS").unwrap_or_default();
        let allow_private_webhook_urls = match allow_private.trim() {
            "" | "false" => false,
            "true" => true,
            other => {
                return Err(ConfigError(format!("ALLOW_PRIVATE_WEBHOOK_URLS={other:?} is not true or false")))
            }
        };

        let log_every_request = match get("REQUEST_LOG").unwrap_or_default().trim() {
            "" | "errors" => false,
            "all" => true,
            other => return Err(ConfigError(format!("REQUEST_LOG={other:?} is not all or errors"))),
        };

        let server_timing = match get("SERVER_TIMING").unwrap_or_default().trim() {
            "" | "on" => true,
            "off" => false,
            other => return Err(ConfigError(format!("SERVER_TIMING={other:?} is not on or off"))),
        };

        let lease_above_per_second = match get("LEASE_ABOVE_PER_SECOND").as_deref().map(str::trim) {
            None | Some("") => Some(DEFAULT_LEASE_ABOVE_PER_SECOND),
            Some("off") => None,
            Some(n) => Some(n.parse().map_err(|_| {
                ConfigError(format!("LEASE_ABOVE_PER_SECOND={n:?} is not a whole number or off"))
            })?),
        };

        let dashboard_reads_per_minute =
            match number("DASHBOARD_READS_PER_MINUTE", crate::budget::DEFAULT_READS_PER_MINUTE.into())? {
                n @ 1..=100_000 => n as u32,
                n => {
                    return Err(ConfigError(format!(
                        "DASHBOARD_READS_PER_MINUTE={n} must be between 1 and 100000"
                    )))
                }
            };

        let upstreams = parse_upstreams(get("UPSTREAMS").as_deref().unwrap_or("[]")).map_err(ConfigError)?;
        let origin_secret = match get("ORIGIN_SECRET").filter(|s| !s.is_empty()) {
            Some(_) => Some(secret("ORIGIN_SECRET")?),
            None if upstreams.is_empty() => None,
            None => return Err(ConfigError("secret ORIGIN_SECRET is not set (UPSTREAMS needs it)".into())),
        };
        let optional_secret = |name: &str| match get(name).filter(|s| !s.is_empty()) {
            Some(_) => secret(name).map(Some),
            None => Ok(None),
        };
        let events_secret = optional_secret("EVENTS_SECRET")?;
        let events_projects = get("EVENTS_PROJECTS")
            .filter(|s| !s.trim().is_empty())
            .map(|list| list.split(',').map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect());
        let key_pepper = secret("KEY_PEPPER")?;
        let key_pepper_previous = optional_secret("KEY_PEPPER_PREVIOUS")?;
        let webhook_secrets_key = secret("WEBHOOK_SECRETS_KEY")?;
        let webhook_secrets_key_previous = optional_secret("WEBHOOK_SECRETS_KEY_PREVIOUS")?;
        if key_pepper_previous.as_ref() == Some(&key_pepper) {
            return Err(ConfigError("KEY_PEPPER_PREVIOUS is the same as KEY_PEPPER".into()));
        }
        if [Some(&key_pepper), key_pepper_previous.as_ref()].contains(&Some(&webhook_secrets_key)) {
            return Err(ConfigError(
                "WEBHOOK_SECRETS_KEY must not be a pepper (SPEC §19: separate secrets)".into(),
            ));
        }
        if origin_secret.is_some() && origin_secret == events_secret {
            return Err(ConfigError("EVENTS_SECRET must not be ORIGIN_SECRET (SPEC §19)".into()));
        }
        // A route whose cost is above a plan's limit in any window could never pass (SPEC §19).
        for upstream in &upstreams {
            for (name, plan) in &plans {
                let windows = crate::rate_limit::Window::ALL.into_iter();
                if let Some((w, limit)) =
                    windows.filter_map(|w| plan.window(w).map(|l| (w, l))).find(|(_, l)| upstream.cost > *l)
                {
                    return Err(ConfigError(format!(
                        "UPSTREAMS: {:?} costs {} but plan {name:?} allows {limit} a {}",
                        upstream.prefix,
                        upstream.cost,
                        w.name()
                    )));
                }
            }
        }

        Ok(Config {
            dashboard_reads_per_minute,
            log_every_request,
            server_timing,
            lease_above_per_second,
            ledger_split_above_per_second: number(
                "LEDGER_SPLIT_ABOVE_PER_SECOND",
                crate::ledger::shards::SPLIT_ABOVE_PER_SECOND.into(),
            )?
            .min(u64::from(u32::MAX)) as u32,
            upstreams,
            origin_secret,
            events_secret,
            events_projects,
            plans,
            idempotency_ttl_seconds: number("IDEMPOTENCY_TTL_SECONDS", 86_400)?,
            event_dedup_window_seconds: number("EVENT_DEDUP_WINDOW_SECONDS", 172_800)?,
            event_retention_days: number("EVENT_RETENTION_DAYS", 30)?.clamp(1, 3_650) as u32,
            audit_retention_days: number("AUDIT_RETENTION_DAYS", 90)? as u32,
            audit_hot_seconds: number("AUDIT_HOT_SECONDS", 3_600)?.min(u64::from(u32::MAX)) as u32,
            audit_databases,
            claim_shards,
            private_webhook_origins,
            webhook_sweep_grace_ms: number(
                "WEBHOOK_SWEEP_GRACE_SECONDS",
                DEFAULT_WEBHOOK_SWEEP_GRACE_SECONDS,
            )?
            .min(86_400) as i64
                * 1000,
            webhook_retry_schedule,
            webhook_timeout_ms: number("WEBHOOK_TIMEOUT_MS", 15_000)?,
            webhook_header_prefix: get("WEBHOOK_HEADER_PREFIX").unwrap_or_else(|| "X-Gatehouse".into()),
            allow_private_webhook_urls,
            queue_retry: RetryPolicy {
                base_seconds: number("QUEUE_RETRY_BASE_SECONDS", 5)?.min(43_200) as u32,
                max_seconds: number("QUEUE_RETRY_MAX_SECONDS", 3_600)?.min(43_200) as u32,
            },
            key_pepper_id: crate::sealing::key_id(key_pepper.as_bytes()),
            key_pepper_previous_id: key_pepper_previous
                .as_deref()
                .map(|p| crate::sealing::key_id(p.as_bytes())),
            key_pepper,
            key_pepper_previous,
            webhook_secrets_key,
            webhook_secrets_key_previous,
            audit_signing_key: get("AUDIT_SIGNING_KEY")
                .filter(|s| !s.is_empty())
                .map(|s| random_key("AUDIT_SIGNING_KEY", s))
                .transpose()?,
            audit_digest_seconds: number("AUDIT_DIGEST_SECONDS", 3_600)?.clamp(60, 86_400) as u32,
            audit_chain_since_ms: match get("AUDIT_CHAIN_SINCE").filter(|s| !s.trim().is_empty()) {
                None => i64::MIN,
                Some(s) => crate::time::parse_rfc3339(s.trim()).ok_or_else(|| {
                    ConfigError(format!(
                        "AUDIT_CHAIN_SINCE={s} is not an RFC 3339 time (2026-12-06T00:00:00Z)"
                    ))
                })?,
            },
            usage_period_seconds,
            billable,
            exempt,
            browser_per_address,
            admin_token: secret("ADMIN_TOKEN")?,
        })
    }

    /// The peppers keys are hashed under: the current one first.
    pub fn peppers(&self) -> Vec<&str> {
        std::iter::once(self.key_pepper.as_str()).chain(self.key_pepper_previous.as_deref()).collect()
    }

    /// The keys of a caller's kept responses (SPEC §13, §19).
    pub fn response_keys(&self, api_key: &str) -> Keyring {
        Keyring::for_responses(&self.peppers(), api_key)
    }

    /// The keys of webhook signing secrets in D1 (SPEC §13, §19).
    pub fn webhook_secrets_keys(&self) -> Keyring {
        let keys: Vec<&str> = std::iter::once(self.webhook_secrets_key.as_str())
            .chain(self.webhook_secrets_key_previous.as_deref())
            .collect();
        Keyring::for_webhook_secrets(&keys, &self.peppers())
    }
}

/// A secret that must be 32 random bytes, written as 64 hex digits (SPEC §23): `head -c 32
/// /dev/urandom | od -An -tx1 | tr -d ' \n'` makes one, as `scripts/setup` and `scripts/deploy` do.
/// Text written as hex (every byte printable) is refused too: it is a chosen word, not random.
fn random_key(name: &str, value: String) -> Result<String, ConfigError> {
    let refuse = |why: &str| {
        Err(ConfigError(format!(
            "{name} must be 32 random bytes written as 64 hex digits ({why}); make one with: \
             head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'"
        )))
    };
    // Kept as written (the signing key derives from the text: changing its case would change it).
    if value.len() != 64 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return refuse(&format!("it is {} characters", value.chars().count()));
    }
    let bytes: Vec<u8> =
        (0..32).map(|i| u8::from_str_radix(&value[2 * i..2 * i + 2], 16).unwrap_or(0)).collect();
    if bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        return refuse("it is text written as hex, not random bytes");
    }
    // 32 random bytes take some 30 distinct values; a pattern (zeros, a repeated word) takes few.
    let distinct = bytes.iter().collect::<std::collections::BTreeSet<_>>().len();
    if distinct < 16 {
        return refuse(&format!("it has {distinct} distinct bytes: a pattern, not random bytes"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_key::KeyRecord;
    use crate::rate_limit::Limits;

    fn with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: BTreeMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    const SECRETS: [(&str, &str); 3] = [
        ("KEY_PEPPER", "pepper-pepper-pepper"),
        ("ADMIN_TOKEN", "admin-admin-admin-admin"),
        ("WEBHOOK_SECRETS_KEY", "webhooks-webhooks-webhooks"),
    ];

    /// SPEC §26: a broken configuration's message is shown on `/health`, so it never carries a
    /// secret's value, whatever is wrong with it.
    #[test]
    fn errors_never_show_a_secret() {
        let value = "secret-value-0123456789";
        let broken: [&[(&str, &str)]; 6] = [
            &[("KEY_PEPPER", "short-secret"), SECRETS[1], SECRETS[2]],
            &[SECRETS[0], SECRETS[1], SECRETS[2], ("KEY_PEPPER_PREVIOUS", "pepper-pepper-pepper")],
            &[SECRETS[0], SECRETS[1], ("WEBHOOK_SECRETS_KEY", "pepper-pepper-pepper")],
            &[SECRETS[0], SECRETS[1], SECRETS[2], ("AUDIT_SIGNING_KEY", value)],
            &[
                SECRETS[0],
                SECRETS[1],
                SECRETS[2],
                ("UPSTREAMS", r#"[{"prefix":"/a/","origin":"http://127.0.0.1:9"}]"#),
                ("ORIGIN_SECRET", value),
                ("EVENTS_SECRET", value),
            ],
            &[SECRETS[0], SECRETS[1], SECRETS[2], ("EVENTS_SECRET", "tiny")],
        ];
        for vars in broken {
            let message = with(vars).unwrap_err().to_string();
            for (name, secret) in vars.iter().filter(|(name, _)| super::SECRETS.contains(name)) {
                assert!(!message.contains(secret), "{message} shows {name}");
            }
        }
    }

    #[test]
    fn defaults_match_spec_section_1() {
        let c = with(&SECRETS).unwrap();
        assert_eq!(
            c.plans["trial"],
            Plan { per_minute: Some(30), monthly_quota: Some(10_000), ..Default::default() }
        );
        assert_eq!(c.plans["business"].per_minute, Some(2000));
        assert_eq!(c.idempotency_ttl_seconds, 86_400);
        assert_eq!(c.event_dedup_window_seconds, 172_800);
        assert_eq!(c.audit_retention_days, 90);
        assert_eq!(c.audit_hot_seconds, 3_600);
        assert_eq!(c.audit_databases, 1);
        assert_eq!(c.webhook_retry_schedule, vec![30, 300, 1800, 7200, 21600]);
        assert_eq!(c.webhook_timeout_ms, 15_000);
        assert_eq!(c.webhook_header_prefix, "X-Gatehouse");
        assert!(!c.allow_private_webhook_urls);
        assert_eq!(c.queue_retry, RetryPolicy { base_seconds: 5, max_seconds: 3_600 });
    }

    #[test]
    fn upstreams_need_an_origin_secret_and_bad_ones_are_named() {
        let route = r#"[{"prefix":"/shop/v1/","origin":"http://127.0.0.1:9000"}]"#;
        let mut vars = SECRETS.to_vec();
        vars.push(("UPSTREAMS", route));
        assert!(with(&vars).unwrap_err().0.contains("ORIGIN_SECRET"));
        vars.push(("ORIGIN_SECRET", "short"));
        assert!(with(&vars).unwrap_err().0.contains("ORIGIN_SECRET must be at least 16"));
        vars.pop();
        vars.push(("ORIGIN_SECRET", "origin-origin-origin"));
        let config = with(&vars).unwrap();
        assert_eq!(config.upstreams[0].prefix, "/shop/v1/");
        assert!(!format!("{config:?}").contains("origin-origin"));
        vars[3] = ("UPSTREAMS", r#"[{"prefix":"/public/","origin":"http://127.0.0.1:9000"}]"#);
        let e = with(&vars).unwrap_err().to_string();
        assert!(e.contains("UPSTREAMS[0]") && e.contains("overlaps"), "{e}");
        assert_eq!(with(&SECRETS).unwrap().origin_secret, None);
    }

    #[test]
    fn debug_output_never_prints_the_secrets() {
        let shown = format!("{:?}", with(&SECRETS).unwrap());
        assert!(!shown.contains("pepper-pepper") && !shown.contains("admin-admin"), "{shown}");
        assert!(shown.contains("webhook_timeout_ms: 15000"), "{shown}");
    }

    #[test]
    fn missing_or_short_secrets_are_errors() {
        assert!(with(&[SECRETS[0]]).is_err());
        assert!(with(&[("KEY_PEPPER", "short"), SECRETS[1], SECRETS[2]]).is_err());
        assert!(with(&SECRETS[..2]).unwrap_err().0.contains("WEBHOOK_SECRETS_KEY"));
    }

    #[test]
    fn secrets_of_different_purposes_must_differ() {
        let mut vars = SECRETS.to_vec();
        vars.push(("KEY_PEPPER_PREVIOUS", "pepper-pepper-pepper"));
        assert!(with(&vars).unwrap_err().0.contains("KEY_PEPPER_PREVIOUS"));
        vars.pop();
        vars[2] = ("WEBHOOK_SECRETS_KEY", "pepper-pepper-pepper");
        assert!(with(&vars).unwrap_err().0.contains("WEBHOOK_SECRETS_KEY"));
        let mut vars = SECRETS.to_vec();
        vars.push(("UPSTREAMS", r#"[{"prefix":"/shop/","origin":"http://127.0.0.1:9000"}]"#));
        vars.push(("ORIGIN_SECRET", "origin-origin-origin"));
        vars.push(("EVENTS_SECRET", "origin-origin-origin"));
        assert!(with(&vars).unwrap_err().0.contains("EVENTS_SECRET"));
        vars.pop();
        vars.push(("EVENTS_SECRET", "events-events-events"));
        vars.push(("EVENTS_PROJECTS", " prj_a, prj_b ,"));
        let config = with(&vars).unwrap();
        assert_eq!(config.events_projects, Some(vec!["prj_a".to_owned(), "prj_b".to_owned()]));
        assert!(!format!("{config:?}").contains("events-events"));
    }

    #[test]
    fn a_route_costing_more_than_a_plan_allows_is_refused_at_start() {
        let mut vars = SECRETS.to_vec();
        vars.push(("ORIGIN_SECRET", "origin-origin-origin"));
        vars.push((
            "PLANS",
            r#"{"trial":{"per_minute":4,"monthly_quota":9},"pro":{"per_minute":90,"monthly_quota":9}}"#,
        ));
        vars.push(("UPSTREAMS", r#"[{"prefix":"/shop/","origin":"http://127.0.0.1:9000","cost":5}]"#));
        let e = with(&vars).unwrap_err().0;
        assert!(e.contains("costs 5") && e.contains("trial"), "{e}");
        vars.pop();
        vars.push(("UPSTREAMS", r#"[{"prefix":"/shop/","origin":"http://127.0.0.1:9000","cost":4}]"#));
        assert!(with(&vars).is_ok());
    }

    #[test]
    fn a_browser_keys_window_per_visitor_is_the_plans_or_a_tenth_of_its_minute() {
        let mut vars = SECRETS.to_vec();
        vars.push((
            "PLANS",
            r#"{"trial":{"per_minute":30},"pro":{"per_minute":2000,"browser_per_address_per_minute":50},
                "burst":{"per_second":20},"slow":{"per_day":2880}}"#,
        ));
        let c = with(&vars).unwrap();
        let key = |plan: &str| {
            KeyRecord::fresh(
                "key_b",
                "prj_1",
                crate::api_key::KeyType::Browser,
                plan,
                "h".into(),
                "gh_b_x".into(),
                0,
            )
        };
        let per_visitor = |plan: &str| c.browser_per_address_per_minute(&key(plan));
        assert_eq!(per_visitor("trial"), 10, "a tenth of 30 is below the floor");
        assert_eq!(per_visitor("pro"), 50);
        assert_eq!(per_visitor("burst"), 120);
        assert_eq!(per_visitor("slow"), 10);
        assert_eq!(per_visitor("gone"), 10, "a plan PLANS lost is trial");
        vars.pop();
        vars.push(("PLANS", r#"{"trial":{"per_minute":30},"business":{"per_minute":2000}}"#));
        let c = with(&vars).unwrap();
        let lowered = KeyRecord { rate_limit_per_minute: Some(300), ..key("business") };
        assert_eq!(c.browser_per_address_per_minute(&key("business")), 200);
        assert_eq!(c.browser_per_address_per_minute(&lowered), 30, "a tenth of the key's own minute");
        vars.pop();
        vars.push(("PLANS", r#"{"trial":{"per_minute":30,"browser_per_address_per_minute":0}}"#));
        assert!(with(&vars).unwrap_err().0.contains("browser_per_address_per_minute"));
    }

    #[test]
    fn a_plan_may_say_which_statuses_bill_and_the_usage_period_divides_an_hour() {
        let mut vars = SECRETS.to_vec();
        vars.push((
            "PLANS",
            r#"{"trial":{"per_minute":30},"metered":{"per_minute":9,"billable":["2xx","404"]}}"#,
        ));
        let c = with(&vars).unwrap();
        assert_eq!(c.plans["metered"], LimitSpec { per_minute: Some(9), ..Default::default() });
        assert!(c.bills("metered", 201) && c.bills("metered", 404) && !c.bills("metered", 400));
        assert!(c.bills("trial", 400) && !c.bills("trial", 429), "no list: every status but 429");
        assert!(c.bills("gone", 500), "a plan no longer in PLANS bills as trial does");
        assert_eq!(c.usage_period_ms(), 3_600_000);
        vars.pop();
        vars.push(("PLANS", r#"{"trial":{"per_minute":30,"billable":["2XX"]}}"#));
        let e = with(&vars).unwrap_err().0;
        assert!(e.contains("PLANS") && e.contains("billable"), "{e}");
        vars.pop();
        vars.push(("PLANS", r#"{"trial":{"per_minute":30,"billabel":["2xx"]}}"#));
        assert!(with(&vars).unwrap_err().0.contains("billabel"), "any other field is refused");
        vars.pop();
        for (period, ok) in [("60", true), ("900", true), ("45", false), ("7200", false), ("420", false)] {
            vars.push(("USAGE_PERIOD_SECONDS", period));
            assert_eq!(with(&vars).is_ok(), ok, "{period}");
            vars.pop();
        }
    }

    #[test]
    fn rejects_bad_vars_with_their_name() {
        let mut vars = SECRETS.to_vec();
        vars.push(("PLANS", r#"{"business":{"per_minute":1,"monthly_quota":1}}"#));
        assert!(with(&vars).unwrap_err().0.contains("trial"));
        vars.pop();
        vars.push(("IDEMPOTENCY_TTL_SECONDS", "soon"));
        assert!(with(&vars).unwrap_err().0.contains("IDEMPOTENCY_TTL_SECONDS"));
        vars.pop();
        for bad in ["ftp://x", "http://127.0.0.1:4000/hooks", "127.0.0.1:4000"] {
            vars.push(("PRIVATE_WEBHOOK_ORIGINS", bad));
            assert!(with(&vars).unwrap_err().0.contains("PRIVATE_WEBHOOK_ORIGINS"), "{bad}");
            vars.pop();
        }
        vars.push(("PRIVATE_WEBHOOK_ORIGINS", " http://127.0.0.1:4000 , https://Sink.Example "));
        assert_eq!(
            with(&vars).unwrap().private_webhook_origins,
            ["http://127.0.0.1:4000", "https://sink.example"]
        );
        vars.pop();
        for bad in ["0", "65", "eight"] {
            vars.push(("CLAIM_SHARDS", bad));
            assert!(with(&vars).unwrap_err().0.contains("CLAIM_SHARDS"), "{bad}");
            vars.pop();
        }
        assert_eq!(with(&vars).unwrap().claim_shards, DEFAULT_CLAIM_SHARDS);
        for bad in ["0", "33"] {
            vars.push(("AUDIT_DATABASES", bad));
            assert!(with(&vars).unwrap_err().0.contains("AUDIT_DATABASES"), "{bad}");
            vars.pop();
        }
        vars.push(("AUDIT_DATABASES", "3"));
        assert_eq!(with(&vars).unwrap().audit_databases, 3);
    }

    #[test]
    fn a_key_override_only_lowers_its_plan_limit() {
        let mut vars = SECRETS.to_vec();
        vars.push((
            "PLANS",
            r#"{"trial":{"per_minute":30,"monthly_quota":200},"pro":{"per_minute":600,"monthly_quota":9}}"#,
        ));
        let config = with(&vars).unwrap();
        let key = |plan: &str, rate: Option<u32>| KeyRecord {
            rate_limit_per_minute: rate,
            ..KeyRecord::fresh(
                "key_1",
                "prj_1",
                crate::api_key::KeyType::Server,
                plan,
                String::new(),
                String::new(),
                0,
            )
        };
        assert_eq!(config.limits(&key("pro", None)), Limits::per_minute(600));
        assert_eq!(config.limits(&key("pro", Some(100))), Limits::per_minute(100));
        // Set under "pro", then the project moved to trial: the override never lifts the plan.
        assert_eq!(config.limits(&key("trial", Some(100))), Limits::per_minute(30));
        // A plan removed from PLANS falls back to trial.
        assert_eq!(config.limits(&key("gone", None)), Limits::per_minute(30));
        // The quota is the project's, not the key's.
        let levels = config.levels(&key("trial", None));
        assert_eq!(
            levels,
            vec![("project:prj_1".to_owned(), LimitSpec { monthly_quota: Some(200), ..Default::default() })]
        );
        // A key's own windows lower the plan's; a window the plan leaves open stays open.
        let mut own = key("pro", None);
        own.limits = Some(LimitSpec { per_second: Some(3), per_minute: Some(50), ..Default::default() });
        assert_eq!(config.limits(&own), Limits::per_minute(50));
    }

    #[test]
    fn the_audit_signing_key_is_32_random_bytes_and_nothing_else() {
        let with_key = |key: &str| {
            let mut vars = SECRETS.to_vec();
            vars.push(("AUDIT_SIGNING_KEY", key));
            with(&vars)
        };
        let random = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert_eq!(with_key(random).unwrap().audit_signing_key.as_deref(), Some(random));
        for short in ["correct horse battery staple", "0123456789abcdef0123456789abcdef"] {
            assert!(with_key(short).unwrap_err().0.contains("64 hex digits"), "{short}");
        }
        // Chosen text written as hex: 64 hex digits, every byte printable.
        let chosen: String = b"password-password-password-12345".iter().map(|b| format!("{b:02x}")).collect();
        assert!(with_key(&chosen).unwrap_err().0.contains("text written as hex"));
        assert!(with_key(&"0".repeat(64)).unwrap_err().0.contains("distinct bytes"));
        assert!(with_key(&format!("{random}\n")).unwrap_err().0.contains("65 characters"));
        let upper = random.to_ascii_uppercase();
        assert_eq!(with_key(&upper).unwrap().audit_signing_key, Some(upper), "kept as written");
        assert_eq!(with_key("").unwrap().audit_signing_key, None);
    }

    #[test]
    fn the_chain_since_is_a_time_or_never() {
        let with_since = |since: &str| {
            let mut vars = SECRETS.to_vec();
            vars.push(("AUDIT_CHAIN_SINCE", since));
            with(&vars)
        };
        assert_eq!(with(&SECRETS).unwrap().audit_chain_since_ms, i64::MIN);
        assert_eq!(with_since("").unwrap().audit_chain_since_ms, i64::MIN);
        assert_eq!(with_since("2026-12-06T00:00:00Z").unwrap().audit_chain_since_ms, 1_796_515_200_000);
        let bad = with_since("yesterday").unwrap_err();
        assert!(bad.0.contains("AUDIT_CHAIN_SINCE=yesterday"), "{bad:?}");
    }
}
