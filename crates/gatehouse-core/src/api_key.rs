//! API keys: their four types and scopes, the secret's format, its 12-character display prefix,
//! and the peppered hash that is the only form we store (SPEC §2).

use gatehouse_wire::keys::KeyStatus;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The characters a key prefix may show: the first 12 of the secret.
pub const PREFIX_LEN: usize = 12;
/// Random base62 characters after `gh_<t>_` (≈ 238 bits).
const SECRET_LEN: usize = 40;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    Owner,
    Server,
    Browser,
    Cicd,
}

/// What a route needs a key to be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Keys, logs, webhooks of the project.
    ManageProject,
    /// The resource API of SPEC §6.
    Resources,
    /// Event ingestion of SPEC §7 (track, identify, replay).
    Ingest,
    /// `/v1/alias`: ingestion that browsers (publishable keys) may not do.
    Alias,
    /// Release markers of SPEC §8.
    ReleaseMarkers,
    /// Anything any valid key may read about itself (`/me`).
    SelfInfo,
    /// One of the dashboard's reads under its own budget (`Gatehouse-Budget: dashboard`,
    /// [`crate::budget`]): owner keys only, counted in the key's dashboard window and nowhere else.
    DashboardRead,
    /// A proxied route of `UPSTREAMS` (SPEC §15): the key types it admits, and how many units of
    /// the window (and of the monthly quota) one request costs.
    Upstream { key_types: KeyTypes, cost: u32 },
}

impl Scope {
    /// Whether it is counted under the dashboard budget instead of the key's credits (no lease of
    /// the key's credits admits it, and none is asked for with it).
    pub fn is_dashboard_read(self) -> bool {
        self == Scope::DashboardRead
    }

    /// The class of routes it is (SPEC §23): what a plan may exempt from counting and billing
    /// (`PLANS.<plan>.exempt`), whatever the key's type.
    pub fn class(self) -> &'static str {
        match self {
            Scope::ManageProject => "manage",
            Scope::Resources => "resources",
            Scope::Ingest | Scope::Alias => "ingest",
            Scope::ReleaseMarkers => "releases",
            Scope::SelfInfo => "self",
            Scope::DashboardRead => "dashboard",
            Scope::Upstream { .. } => "proxied",
        }
    }

    /// The classes a plan may exempt (`dashboard` reads count and bill in neither anyway).
    pub const CLASSES: [&'static str; 6] = ["manage", "resources", "ingest", "releases", "self", "proxied"];

    /// Units of the rate window and the monthly quota one admitted request takes (SPEC §4, §15).
    pub fn cost(self) -> u32 {
        match self {
            Scope::Upstream { cost, .. } => cost,
            _ => 1,
        }
    }
}

/// A set of key types, as a bit per type (it travels to the key's guard inside a [`Scope`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KeyTypes(u8);

impl KeyTypes {
    pub fn of(types: &[KeyType]) -> Self {
        KeyTypes(types.iter().fold(0, |bits, t| bits | t.bit()))
    }

    pub fn contains(self, t: KeyType) -> bool {
        self.0 & t.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// The type as the API names it.
impl From<KeyType> for gatehouse_wire::keys::KeyType {
    fn from(t: KeyType) -> Self {
        match t {
            KeyType::Owner => Self::Owner,
            KeyType::Server => Self::Server,
            KeyType::Browser => Self::Browser,
            KeyType::Cicd => Self::Cicd,
        }
    }
}

impl KeyType {
    pub const ALL: [KeyType; 4] = [Self::Owner, Self::Server, Self::Browser, Self::Cicd];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Server => "server",
            Self::Browser => "browser",
            Self::Cicd => "cicd",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// The letter inside the secret that tells its type at a glance: `gh_s_…` is a server key.
    fn tag(self) -> char {
        match self {
            Self::Owner => 'o',
            Self::Server => 's',
            Self::Browser => 'b',
            Self::Cicd => 'c',
        }
    }

    pub fn allows(self, scope: Scope) -> bool {
        use KeyType::*;
        match scope {
            Scope::SelfInfo => true,
            Scope::ManageProject | Scope::DashboardRead => self == Owner,
            Scope::Resources => matches!(self, Owner | Server),
            Scope::Ingest => matches!(self, Server | Browser),
            Scope::Alias => self == Server,
            Scope::ReleaseMarkers => self == Cicd,
            Scope::Upstream { key_types, .. } => key_types.contains(self),
        }
    }
}

/// A new secret key `gh_<type letter>_<40 base62>` from 40 random bytes.
pub fn generate(key_type: KeyType, random: &[u8; SECRET_LEN]) -> String {
    let mut key = String::with_capacity(5 + SECRET_LEN);
    key.push_str("gh_");
    key.push(key_type.tag());
    key.push('_');
    // 256 is not a multiple of 62: rejecting bytes ≥ 248 would avoid the tiny bias, but the
    // secret's strength (≈ 238 bits) does not need it, and a fixed-length key is simpler.
    key.extend(random.iter().map(|b| BASE62[(*b % 62) as usize] as char));
    key
}

pub const fn random_len() -> usize {
    SECRET_LEN
}

/// Whether `s` has the shape of one of our keys; anything else is rejected without a lookup.
pub fn is_well_formed(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 5 + SECRET_LEN
        && b.starts_with(b"gh_")
        && matches!(b[3], b'o' | b's' | b'b' | b'c')
        && b[4] == b'_'
        && b[5..].iter().all(u8::is_ascii_alphanumeric)
}

/// The part of a key that may be shown anywhere (dashboard, log, `/me`).
pub fn prefix(key: &str) -> &str {
    &key[..PREFIX_LEN.min(key.len())]
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive, RFC 9110 §11.1).
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    let token = token.trim_start();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A key's hash under the pepper an isolate holds current, and that pepper's id
/// ([`crate::sealing::key_id`]): told to the key's guard, which re-hashes a record hashed
/// otherwise (SPEC §26: a rotation reaches every key that is used).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentHash {
    pub key_hash: String,
    pub pepper: String,
    /// The id of the isolate's `KEY_PEPPER_PREVIOUS`, if it has one: only a record under it (or
    /// under no recorded pepper) is re-hashed, so an isolate still on an older configuration
    /// never moves a key back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

impl KeyRecord {
    /// Whether the record should become as `current` says: its pepper recorded under the same
    /// hash, or re-hashed from the isolate's previous pepper (or from none recorded) — never from
    /// a pepper the isolate does not name, so two configurations side by side (a deploy rolling
    /// out) cannot move a key back and forth.
    pub fn needs_rehash(&self, current: &CurrentHash) -> bool {
        if self.key_hash == current.key_hash {
            return self.pepper.as_deref() != Some(current.pepper.as_str());
        }
        match self.pepper.as_deref() {
            None => true,
            Some(pepper) => current.previous.as_deref() == Some(pepper),
        }
    }
}

/// HMAC-SHA256(pepper, key) in lowercase hex: the only form of a key that is stored.
pub fn hash(pepper: &[u8], key: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(pepper).expect("HMAC accepts any key length");
    mac.update(key.as_bytes());
    super::encoding::hex(&mac.finalize().into_bytes())
}

/// Compares two secrets in time that does not depend on where they first differ (`subtle`; only
/// the length, which is not secret, may end the comparison early).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(revoked_at: Option<i64>, plan: &str) -> KeyRecord {
        KeyRecord {
            revoked_at,
            ..KeyRecord::fresh("key_1", "prj_1", KeyType::Server, plan, "ab".into(), "gh_s_abcdefg".into(), 1)
        }
    }

    /// SPEC §26: a record moves to an isolate's current pepper only from its previous one (or
    /// from none recorded); an isolate on an older configuration never moves it back.
    #[test]
    fn a_record_is_rehashed_only_from_the_isolates_previous_pepper() {
        let record = |hash: &str, pepper: Option<&str>| KeyRecord {
            pepper: pepper.map(str::to_owned),
            ..KeyRecord::fresh("key_1", "prj_1", KeyType::Server, "trial", hash.into(), "gh_s_x".into(), 1)
        };
        let new =
            CurrentHash { key_hash: "h_new".into(), pepper: "new".into(), previous: Some("old".into()) };
        let old = CurrentHash { key_hash: "h_old".into(), pepper: "old".into(), previous: None };
        assert!(record("h_old", Some("old")).needs_rehash(&new), "from the previous pepper");
        assert!(record("h_old", None).needs_rehash(&new), "from none recorded");
        assert!(!record("h_new", Some("new")).needs_rehash(&new), "done");
        assert!(record("h_new", None).needs_rehash(&new), "the pepper recorded");
        assert!(!record("h_new", Some("new")).needs_rehash(&old), "never back");
        assert!(!record("h_other", Some("other")).needs_rehash(&new), "not from a pepper it does not name");
    }

    #[test]
    fn a_key_is_refused_from_the_instant_its_expiry_or_grace_ends() {
        let key = record(None, "trial");
        assert_eq!(key.refusal(i64::MAX), None);
        assert_eq!(key.status(5), "active");
        let expiring = KeyRecord { expires_at: Some(1_000), ..key.clone() };
        assert_eq!(expiring.refusal(999), None);
        assert_eq!(expiring.status(999), "expiring");
        assert_eq!(expiring.refusal(1_000), Some(RefusalReason::Expired));
        assert_eq!(expiring.status(1_000), "expired");
        // A roll at 500 with 300 ms of grace: refused as `rolled` at 800, not a millisecond later.
        let rolled = key.rolled("key_2", 500, 300);
        assert_eq!((rolled.expires_at, rolled.rolled_to.as_deref()), (Some(800), Some("key_2")));
        assert_eq!(rolled.refusal(799), None);
        assert_eq!(rolled.refusal(800), Some(RefusalReason::Rolled));
        assert_eq!(rolled.status(800), "expired");
        // A roll never lengthens a key's life.
        assert_eq!(expiring.rolled("key_2", 500, 10_000).expires_at, Some(1_000));
        // Revocation wins over everything.
        let revoked = KeyRecord { revoked_at: Some(2), ..rolled.clone() };
        assert_eq!(revoked.refusal(0), Some(RefusalReason::Revoked));
        assert_eq!(revoked.status(0), "revoked");
        assert_eq!(serde_json::to_value(RefusalReason::Rolled).unwrap(), "rolled");
    }

    #[test]
    fn only_a_key_without_expiry_roll_or_revocation_is_lasting() {
        let key = record(None, "trial");
        assert!(key.is_lasting());
        assert!(!KeyRecord { expires_at: Some(i64::MAX), ..key.clone() }.is_lasting());
        assert!(!key.rolled("key_2", 500, 86_400_000).is_lasting());
        assert!(!record(Some(1), "trial").is_lasting());
        let owner = KeyRecord { key_type: KeyType::Owner, ..key.clone() };
        assert!(owner.is_other_lasting_owner("prj_1", "key_9"));
        assert!(!owner.is_other_lasting_owner("prj_1", "key_1"), "not itself");
        assert!(!owner.is_other_lasting_owner("prj_2", "key_9"), "not another project's");
        assert!(!key.is_other_lasting_owner("prj_1", "key_9"), "not a server key");
    }

    #[test]
    fn a_roll_is_one_way_unless_that_roll_is_undone() {
        let key = record(None, "trial");
        let rolled = key.rolled("key_2", 500, 300);
        let told = |held: Option<&KeyRecord>, key, undo| KeyRecord::told(held, key, undo);
        // A rename read before the roll keeps the roll and its grace's end.
        let renamed = KeyRecord { name: Some("n".into()), ..key.clone() };
        let held = told(Some(&rolled), renamed.clone(), None);
        assert_eq!(
            (held.rolled_at, held.expires_at, held.name.as_deref()),
            (Some(500), Some(800), Some("n"))
        );
        // An expiry set later than the grace does not lengthen it; an earlier one shortens it.
        let later = KeyRecord { expires_at: Some(5_000), ..key.clone() };
        assert_eq!(told(Some(&rolled), later, None).expires_at, Some(800));
        let earlier = KeyRecord { expires_at: Some(600), ..key.clone() };
        assert_eq!(told(Some(&rolled), earlier, None).expires_at, Some(600));
        // The roll D1 refused is taken back.
        assert_eq!(told(Some(&rolled), key.clone(), Some(500)), key);
    }

    #[test]
    fn a_revocation_is_one_way_unless_that_revocation_is_undone() {
        let revoked = record(Some(7), "trial");
        let told = |held: Option<&KeyRecord>, key, undo| KeyRecord::told(held, key, undo);
        // A concurrent change read before the revocation does not bring the key back.
        assert_eq!(told(Some(&revoked), record(None, "business"), None), record(Some(7), "business"));
        // D1 refused this revocation: the guard takes it back; undoing another one does not.
        assert_eq!(told(Some(&revoked), record(None, "trial"), Some(7)), record(None, "trial"));
        assert_eq!(told(Some(&revoked), record(None, "trial"), Some(8)), record(Some(7), "trial"));
        // Nothing held, or nothing revoked: the guard holds what it is told.
        assert_eq!(told(None, record(None, "trial"), None), record(None, "trial"));
        assert_eq!(told(Some(&record(None, "a")), record(Some(9), "b"), None), record(Some(9), "b"));
    }

    fn key(t: KeyType, fill: u8) -> String {
        generate(t, &[fill; SECRET_LEN])
    }

    #[test]
    fn generated_keys_are_well_formed_and_tell_their_type() {
        for t in KeyType::ALL {
            let k = key(t, 7);
            assert!(is_well_formed(&k), "{k}");
            assert_eq!(&k[..5], format!("gh_{}_", t.tag()));
        }
        let varied: [u8; SECRET_LEN] = std::array::from_fn(|i| (i * 37) as u8);
        let k = generate(KeyType::Server, &varied);
        assert!(is_well_formed(&k));
        assert_eq!(k.len(), 45);
    }

    #[test]
    fn prefix_is_first_twelve_characters() {
        let k = key(KeyType::Owner, 1);
        assert_eq!(prefix(&k), &k[..12]);
        assert_eq!(prefix(&k).len(), PREFIX_LEN);
        assert_eq!(prefix("short"), "short");
    }

    #[test]
    fn rejects_malformed_keys_without_lookup() {
        let good = key(KeyType::Browser, 9);
        assert!(!is_well_formed(""));
        assert!(!is_well_formed(&good[..44]));
        assert!(!is_well_formed(&format!("{good}x")));
        assert!(!is_well_formed(&good.replace("gh_b_", "gh_x_")));
        assert!(!is_well_formed(&good.replace("gh_b_", "xx_b_")));
        let mut bad = good.clone();
        bad.replace_range(10..11, "-");
        assert!(!is_well_formed(&bad));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_token_required() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("abc"), None);
    }

    #[test]
    fn hash_is_hmac_sha256_hex_and_depends_on_pepper() {
        // RFC 4231 test case 2.
        assert_eq!(
            hash(b"Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_ne!(hash(b"a", "k"), hash(b"b", "k"));
    }

    #[test]
    fn scopes_follow_spec_section_2() {
        use KeyType::*;
        assert!(Owner.allows(Scope::ManageProject));
        assert!(!Server.allows(Scope::ManageProject));
        assert!(Server.allows(Scope::Resources) && Owner.allows(Scope::Resources));
        assert!(!Browser.allows(Scope::Resources) && !Cicd.allows(Scope::Resources));
        assert!(Browser.allows(Scope::Ingest) && Server.allows(Scope::Ingest));
        assert!(!Browser.allows(Scope::Alias) && Server.allows(Scope::Alias));
        assert!(Cicd.allows(Scope::ReleaseMarkers) && !Owner.allows(Scope::ReleaseMarkers));
        assert!(KeyType::ALL.iter().all(|t| t.allows(Scope::SelfInfo)));
        assert!(KeyType::ALL.iter().all(|&t| t.allows(Scope::DashboardRead) == (t == Owner)));
        let upstream = Scope::Upstream { key_types: KeyTypes::of(&[Server, Cicd]), cost: 3 };
        assert!(Server.allows(upstream) && Cicd.allows(upstream));
        assert!(!Owner.allows(upstream) && !Browser.allows(upstream));
        assert_eq!((upstream.cost(), Scope::Resources.cost()), (3, 1));
    }

    #[test]
    fn constant_time_eq_compares_contents_and_length() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}

/// A key as stored in D1: everything but the secret itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub id: String,
    pub project_id: String,
    #[serde(rename = "type")]
    pub key_type: KeyType,
    pub name: Option<String>,
    pub plan: String,
    pub rate_limit_per_minute: Option<u32>,
    pub key_hash: String,
    pub prefix: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// From this instant on the key is refused (SPEC §17): set by its owner, or the end of the
    /// grace of a roll.
    #[serde(default)]
    pub expires_at: Option<i64>,
    /// The key this one replaced (`POST /public/v1/keys/{id}/roll`).
    #[serde(default)]
    pub rolled_from: Option<String>,
    /// When this key was rolled (its replacement made); it is then refused from `expires_at` on.
    #[serde(default)]
    pub rolled_at: Option<i64>,
    /// The key that replaced this one.
    #[serde(default)]
    pub rolled_to: Option<String>,
    /// The identity the key belongs to, with that identity's limits as the key's guard was last
    /// told them (SPEC §20): its keys share them.
    #[serde(default)]
    pub identity: Option<IdentityLimits>,
    /// The key's own windows (SPEC §20), each at most its plan's; `rate_limit_per_minute` is its
    /// `per_minute` written the older way. A key has no quota of its own: that is its project's.
    #[serde(default)]
    pub limits: Option<crate::rate_limit::LimitSpec>,
    /// How many objects hold the key's idempotency claims (SPEC §20), fixed when the key is made
    /// (`CLAIM_SHARDS`): its guard and `claim_shards - 1` claim objects, chosen by the
    /// `Idempotency-Key` ([`KeyRecord::claim_object`]). A key made before claims were spread
    /// keeps them all in its guard.
    #[serde(default = "one_claim_object")]
    pub claim_shards: u32,
    /// A browser key's `allowed_origins` (SPEC §24): a page of another origin is refused (403).
    /// Empty: any origin. Each in [`crate::browser::parse_origin`]'s spelling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// The name of the key's guard when it is not `key_hash` (SPEC §26): a key re-hashed under a
    /// new pepper keeps the guard (its windows, claims and leases) it had under the old one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_hash: Option<String>,
    /// The id ([`crate::sealing::key_id`]) of the pepper `key_hash` is under; `None` for a key
    /// made before it was recorded (SPEC §26: `GET /admin/v1/keys/previous-pepper`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pepper: Option<String>,
}

fn one_claim_object() -> u32 {
    1
}

/// An identity as its keys' guards see it: its id and the limits its keys share (SPEC §20).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityLimits {
    pub id: String,
    pub limits: crate::rate_limit::LimitSpec,
}

/// Why a known key is refused (SPEC §17, the 401's `details.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefusalReason {
    Expired,
    Rolled,
    Revoked,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Rolled => "rolled",
            Self::Revoked => "revoked",
        }
    }
}

/// The longest grace of a key roll (SPEC §17): one day.
pub const MAX_ROLL_GRACE_SECONDS: u64 = 86_400;
/// The grace of a roll when the owner names none: one hour.
pub const DEFAULT_ROLL_GRACE_SECONDS: u64 = 3_600;

impl KeyRecord {
    /// A key as it is made: no name, limits or identity of its own, never revoked, rolled or
    /// expiring, its claims in its guard alone.
    pub fn fresh(
        id: &str,
        project_id: &str,
        key_type: KeyType,
        plan: &str,
        key_hash: String,
        prefix: String,
        created_at: i64,
    ) -> KeyRecord {
        KeyRecord {
            id: id.to_owned(),
            project_id: project_id.to_owned(),
            key_type,
            name: None,
            plan: plan.to_owned(),
            rate_limit_per_minute: None,
            key_hash,
            prefix,
            created_at,
            revoked_at: None,
            expires_at: None,
            rolled_from: None,
            rolled_at: None,
            rolled_to: None,
            identity: None,
            limits: None,
            claim_shards: 1,
            allowed_origins: Vec::new(),
            guard_hash: None,
            pepper: None,
        }
    }

    /// Whether a request with this `Origin` header may use the key (its `allowed_origins`).
    pub fn admits_origin(&self, origin: Option<&str>) -> bool {
        crate::browser::admits_origin(&self.allowed_origins, origin)
    }

    /// The object that holds this key's claim of `idempotency_key`: its guard or one of its claim
    /// objects ([`crate::idempotency::claim_object`]).
    pub fn claim_object(&self, idempotency_key: &str) -> String {
        crate::idempotency::claim_object(self.guard(), self.claim_shards, idempotency_key)
    }

    /// The name of the key's guard: the hash it was made under, whatever pepper it is hashed
    /// under now (SPEC §26).
    pub fn guard(&self) -> &str {
        self.guard_hash.as_deref().unwrap_or(&self.key_hash)
    }

    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// Whether the key stays usable indefinitely: not revoked, no expiry, not rolled (a roll
    /// gives it the grace's end as its expiry). A project always keeps a lasting owner key (SPEC
    /// §19): no sequence of expiries, rolls and revocations may leave it none.
    pub fn is_lasting(&self) -> bool {
        !self.is_revoked() && self.expires_at.is_none() && self.rolled_at.is_none()
    }

    /// Whether `self`, a key of the project, is one more lasting owner key besides `key_id`.
    pub fn is_other_lasting_owner(&self, project_id: &str, key_id: &str) -> bool {
        self.project_id == project_id
            && self.id != key_id
            && self.key_type == KeyType::Owner
            && self.is_lasting()
    }

    /// Whether the key is refused at `now_ms`, and why: revoked, or past its `expires_at` (a
    /// rolled key's grace ended: `rolled`; else `expired`). The key's guard decides this on every
    /// request with its own clock, from the record it holds, so a key is refused from the very
    /// millisecond its grace or lifetime ends.
    pub fn refusal(&self, now_ms: i64) -> Option<RefusalReason> {
        if self.is_revoked() {
            return Some(RefusalReason::Revoked);
        }
        match self.expires_at {
            Some(at) if at <= now_ms && self.rolled_at.is_some() => Some(RefusalReason::Rolled),
            Some(at) if at <= now_ms => Some(RefusalReason::Expired),
            _ => None,
        }
    }

    /// `active` | `expiring` (an `expires_at` ahead, a roll's grace included) | `expired` (a
    /// rolled key past its grace too) | `revoked`.
    pub fn status(&self, now_ms: i64) -> KeyStatus {
        match (self.refusal(now_ms), self.expires_at) {
            (Some(RefusalReason::Revoked), _) => KeyStatus::Revoked,
            (Some(_), _) => KeyStatus::Expired,
            (None, Some(_)) => KeyStatus::Expiring,
            (None, None) => KeyStatus::Active,
        }
    }

    /// This key after a roll at `now_ms` with `grace_ms`: refused from the grace's end (or its own
    /// earlier expiry), and pointing to its replacement.
    pub fn rolled(&self, replacement_id: &str, now_ms: i64, grace_ms: i64) -> KeyRecord {
        let grace_end = now_ms + grace_ms;
        KeyRecord {
            rolled_at: Some(now_ms),
            rolled_to: Some(replacement_id.to_owned()),
            expires_at: Some(self.expires_at.map_or(grace_end, |at| at.min(grace_end))),
            ..self.clone()
        }
    }

    /// What a key's guard holds after it is told `told` while it holds `held`: a revocation is
    /// one-way, so a change made from a record read before the revocation (a concurrent PATCH,
    /// or D1 read back before the revocation's write landed) keeps the key revoked. Only the
    /// revocation that is being undone (`undo`: its `revoked_at`, because D1 refused it or the
    /// guard's answer was lost) is taken back; another one stays.
    ///
    /// A roll is one-way in the same way: once the guard holds a roll (`rolled_at`), a record
    /// without it keeps the roll and the grace's end, unless `undo` names that roll's `rolled_at`.
    pub fn told(held: Option<&KeyRecord>, mut told: KeyRecord, undo: Option<i64>) -> KeyRecord {
        let Some(held) = held else { return told };
        if let Some(revoked_at) = held.revoked_at.filter(|at| Some(*at) != undo) {
            told.revoked_at.get_or_insert(revoked_at);
        }
        if let Some(rolled_at) = held.rolled_at.filter(|at| Some(*at) != undo) {
            if told.rolled_at.is_none() {
                told.rolled_at = Some(rolled_at);
                told.rolled_to.clone_from(&held.rolled_to);
            }
            told.expires_at = match (told.expires_at, held.expires_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        told
    }

    /// The key as the API shows it at `now_ms` (never the hash; the secret is added only at
    /// creation).
    pub fn view(&self, now_ms: i64) -> serde_json::Value {
        use super::time::rfc3339;
        let key = gatehouse_wire::keys::Key {
            id: self.id.clone(),
            prefix: self.prefix.clone(),
            key_type: self.key_type.into(),
            name: self.name.clone(),
            plan: self.plan.clone(),
            rate_limit_per_minute: self.rate_limit_per_minute.map(u64::from),
            status: self.status(now_ms),
            created_at: rfc3339(self.created_at),
            expires_at: self.expires_at.map(rfc3339),
            revoked_at: self.revoked_at.map(rfc3339),
            rolled_from: self.rolled_from.clone(),
            rolled_to: self.rolled_to.clone(),
            identity_id: self.identity.as_ref().map(|i| i.id.clone()),
            limits: self.limits.as_ref().map(crate::identity::wire_limits),
            allowed_origins: (self.key_type == KeyType::Browser).then(|| self.allowed_origins.clone()),
        };
        gatehouse_wire::to_json(&key)
    }
}
