//! API keys: their four types and scopes, the secret's format, its 12-character display prefix,
//! and the peppered hash that is the only form we store (SPEC §2).

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
            Scope::ManageProject => self == Owner,
            Scope::Resources => matches!(self, Owner | Server),
            Scope::Ingest => matches!(self, Server | Browser),
            Scope::Alias => self == Server,
            Scope::ReleaseMarkers => self == Cicd,
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
            id: "key_1".into(),
            project_id: "prj_1".into(),
            key_type: KeyType::Server,
            name: None,
            plan: plan.into(),
            rate_limit_per_minute: None,
            key_hash: "ab".into(),
            prefix: "gh_s_abcdefg".into(),
            created_at: 1,
            revoked_at,
        }
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
}

impl KeyRecord {
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// What a key's guard holds after it is told `told` while it holds `held`: a revocation is
    /// one-way, so a change made from a record read before the revocation (a concurrent PATCH,
    /// or D1 read back before the revocation's write landed) keeps the key revoked. Only the
    /// revocation that is being undone (`undo`: its `revoked_at`, because D1 refused it or the
    /// guard's answer was lost) is taken back; another one stays.
    pub fn told(held: Option<&KeyRecord>, mut told: KeyRecord, undo: Option<i64>) -> KeyRecord {
        if let Some(revoked_at) = held.and_then(|h| h.revoked_at).filter(|at| Some(*at) != undo) {
            told.revoked_at.get_or_insert(revoked_at);
        }
        told
    }

    /// The key as the API shows it (never the hash; the secret is added only at creation).
    pub fn view(&self) -> serde_json::Value {
        use super::time::rfc3339;
        serde_json::json!({
            "id": self.id,
            "prefix": self.prefix,
            "type": self.key_type,
            "name": self.name,
            "plan": self.plan,
            "rate_limit_per_minute": self.rate_limit_per_minute,
            "status": if self.is_revoked() { "revoked" } else { "active" },
            "created_at": rfc3339(self.created_at),
            "revoked_at": self.revoked_at.map(rfc3339),
        })
    }
}
