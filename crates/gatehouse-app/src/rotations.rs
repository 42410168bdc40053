//! Rotations that finish (SPEC §26): what a rotation of `KEY_PEPPER` or `WEBHOOK_SECRETS_KEY` has
//! not reached yet, for the operator deciding when the `_PREVIOUS` secret may go.
//!
//! * `GET /admin/v1/keys/previous-pepper`: the active keys not known to be hashed under the
//!   current pepper. A key moves to it on its first use after the rotation (its guard re-hashes
//!   it: `authentication`), so these are the keys not used since; each with the last day it was
//!   used (the last 31 days, from its project's daily aggregates).
//! * `GET /admin/v1/webhooks/previous-secret-key`: the subscriptions whose secret is not sealed
//!   under the current `WEBHOOK_SECRETS_KEY` (the minute cron re-seals 100 a run), and whether a
//!   configured key opens each (one that none opens signs nothing: its subscription needs a
//!   rotation of its secret).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::audit::first_day;
use super::webhooks::secrets_key;
use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{AuditStore, Ports, Rotations};
use gatehouse_core::sealing::key_id;
use gatehouse_core::time::rfc3339;

/// A page's keys each need their project's last-use days: one query per project of the page.
const KEYS_PAGE: (usize, usize) = (20, 40);

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn keys_on_previous_pepper(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, KEYS_PAGE.0, KEYS_PAGE.1)?;
        let pepper = &self.config.key_pepper_id;
        let (count, keys) =
            self.store.keys_off_pepper(pepper, call.now_ms, &page).await.map_err(unavailable)?;
        let since = first_day(call.now_ms, 31);
        let mut last_used: BTreeMap<String, String> = BTreeMap::new();
        let projects: std::collections::BTreeSet<&str> =
            keys.iter().take(page.limit).map(|k| k.project_id.as_str()).collect();
        for project_id in projects {
            let used = self.store.keys_last_used(project_id, since).await.map_err(unavailable)?;
            last_used.extend(used);
        }
        let mut body = page.respond(
            keys,
            |k| Cursor { ts: k.created_at, id: k.id.clone() },
            |k| {
                json!({
                    "id": k.id,
                    "prefix": k.prefix,
                    "project_id": k.project_id,
                    "type": k.key_type.as_str(),
                    "name": k.name,
                    "created_at": rfc3339(k.created_at),
                    "pepper": k.pepper,
                    "last_used": last_used.get(&k.id),
                })
            },
        );
        let previous = self.config.key_pepper_previous_id.clone();
        Ok(Reply::ok(rotation(&mut body, "keys", count, pepper, previous)))
    }

    pub(super) async fn secrets_on_previous_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let key = secrets_key(self.config);
        let (count, secrets) =
            self.store.secrets_off_key(&key.current_prefix(), &page).await.map_err(unavailable)?;
        let mut body = page.respond(
            secrets,
            |w| Cursor { ts: w.created_at, id: w.id.clone() },
            |w| {
                json!({
                    "id": w.id,
                    "project_id": w.project_id,
                    "url": w.url,
                    "status": w.status,
                    "created_at": rfc3339(w.created_at),
                    "opens": w.secret.open(&key, &w.id).is_some(),
                })
            },
        );
        let current = key_id(self.config.webhook_secrets_key.as_bytes());
        let previous = self.config.webhook_secrets_key_previous.as_deref().map(|p| key_id(p.as_bytes()));
        Ok(Reply::ok(rotation(&mut body, "webhooks", count, &current, previous)))
    }
}

/// A page of `{data, next_cursor}` as a rotation's answer: `{count, <list>, next_cursor, current,
/// previous}` (the ids of the current and previous secrets, never the secrets).
fn rotation(page: &mut Value, list: &str, count: u64, current: &str, previous: Option<String>) -> Value {
    json!({
        "count": count,
        list: page["data"].take(),
        "next_cursor": page["next_cursor"].take(),
        "current": current,
        "previous": previous,
    })
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use serde_json::Value;

    use super::super::testing::{api_request, fake_gateway, FakePorts, WholeBody};
    use super::*;
    use crate::sim::{complete, Faults};
    use gatehouse_core::api_key::{hash, KeyType};
    use gatehouse_core::config::Config;

    const T0: i64 = 1_796_000_000_000;
    const ADMIN: &str = "rotation-admin-token";
    const OLD: &str = "rotation-pepper-old-0";
    const NEW: &str = "rotation-pepper-new-1";
    const NEXT: &str = "rotation-pepper-next-2";

    fn config(pepper: &str, previous: Option<&str>) -> &'static Config {
        let config = Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some(pepper.into()),
            "KEY_PEPPER_PREVIOUS" => previous.map(str::to_owned),
            "WEBHOOK_SECRETS_KEY" => Some("rotation-webhook-secrets".into()),
            "ADMIN_TOKEN" => Some(ADMIN.into()),
            "PLANS" => Some(r#"{"trial":{"per_minute":30,"monthly_quota":10000}}"#.into()),
            _ => None,
        });
        Box::leak(Box::new(config.expect("valid")))
    }

    /// The same fakes (D1, the guards) with another configuration and a fresh isolate: a deploy.
    fn deployed(
        gateway: Gateway<'static, FakePorts>,
        config: &'static Config,
    ) -> Gateway<'static, FakePorts> {
        Gateway { config, memory: Rc::default(), leases: Rc::default(), ..gateway }
    }

    fn get(gateway: &Gateway<'static, FakePorts>, path: &str, token: &str) -> (u16, Option<String>, Value) {
        complete(async {
            let mut response =
                gateway.handle(api_request("GET", path, token, None, WholeBody(None), T0)).await;
            gateway.finish(response.after_response(), |_| async {}).await;
            let remaining =
                response.headers.iter().find(|(n, _)| *n == "x-ratelimit-remaining").map(|(_, v)| v.clone());
            (response.status, remaining, serde_json::from_slice(&response.body).unwrap_or(Value::Null))
        })
    }

    /// SPEC §26: keys issued before a rotation are counted until used; a use re-hashes the key
    /// under the new pepper and keeps its guard (the window goes on), so it works once
    /// `KEY_PEPPER_PREVIOUS` is gone, while a key never used since stops working.
    #[test]
    fn a_rotation_rehashes_a_key_on_use_keeps_its_guard_and_counts_the_rest() {
        let faults = Rc::new(Faults::new(1, 0.0));
        let (gateway, _, secrets) =
            fake_gateway(config(OLD, None), &faults, T0, "prj_rot", &[KeyType::Server, KeyType::Server], 0.0);
        let (status, remaining, _) = get(&gateway, "/public/v1/me", &secrets[0]);
        assert_eq!((status, remaining.as_deref()), (200, Some("29")));
        let (_, _, none) = get(&gateway, "/admin/v1/keys/previous-pepper", ADMIN);
        assert_eq!(none["count"], 0, "{none}");

        let gateway = deployed(gateway, config(NEW, Some(OLD)));
        let (_, _, before) = get(&gateway, "/admin/v1/keys/previous-pepper", ADMIN);
        assert_eq!((before["count"].as_u64(), before["keys"].as_array().map(Vec::len)), (Some(2), Some(2)));
        assert_eq!(before["previous"], key_id(OLD.as_bytes()));
        let (status, remaining, _) = get(&gateway, "/public/v1/me", &secrets[0]);
        assert_eq!((status, remaining.as_deref()), (200, Some("28")), "the same guard, its window kept");
        let key = gateway.store.directory.keys.borrow()[0].clone();
        assert_eq!(key.key_hash, hash(NEW.as_bytes(), &secrets[0]));
        assert_eq!(key.guard(), hash(OLD.as_bytes(), &secrets[0]));
        assert_eq!(key.pepper.as_deref(), Some(key_id(NEW.as_bytes()).as_str()));
        let (_, _, after) = get(&gateway, "/admin/v1/keys/previous-pepper", ADMIN);
        assert_eq!(after["count"], 1);
        assert_eq!(after["keys"][0]["id"], gateway.store.directory.keys.borrow()[1].id.as_str());

        let gateway = deployed(gateway, config(NEW, None));
        let (status, remaining, _) = get(&gateway, "/public/v1/me", &secrets[0]);
        assert_eq!((status, remaining.as_deref()), (200, Some("27")), "found through its new hash");
        let (status, _, _) = get(&gateway, "/public/v1/me", &secrets[1]);
        assert_eq!(status, 401, "a key not used during the rotation is not found any more");
    }

    /// A key re-hashed in one rotation is found in the next: the previous pepper's hash is then
    /// the object that points to its guard (followed once), and it is re-hashed again, same guard.
    #[test]
    fn a_key_rehashed_in_one_rotation_is_rehashed_in_the_next() {
        let faults = Rc::new(Faults::new(1, 0.0));
        let (gateway, _, secrets) =
            fake_gateway(config(OLD, None), &faults, T0, "prj_rot", &[KeyType::Server], 0.0);
        assert_eq!(get(&gateway, "/public/v1/me", &secrets[0]).1.as_deref(), Some("29"));
        let gateway = deployed(gateway, config(NEW, Some(OLD)));
        assert_eq!(get(&gateway, "/public/v1/me", &secrets[0]).1.as_deref(), Some("28"));
        let gateway = deployed(gateway, config(NEXT, Some(NEW)));
        let (status, remaining, _) = get(&gateway, "/public/v1/me", &secrets[0]);
        assert_eq!((status, remaining.as_deref()), (200, Some("27")), "a fresh isolate, the first request");
        let key = gateway.store.directory.keys.borrow()[0].clone();
        assert_eq!(key.key_hash, hash(NEXT.as_bytes(), &secrets[0]));
        assert_eq!(key.guard(), hash(OLD.as_bytes(), &secrets[0]), "the guard it was made with");
        let gateway = deployed(gateway, config(NEXT, None));
        assert_eq!(get(&gateway, "/public/v1/me", &secrets[0]).1.as_deref(), Some("26"));
    }

    /// A deploy rolling out: isolates on the old configuration and on the new one side by side.
    /// The old one never moves a key back (its record stays under the new pepper, written once).
    #[test]
    fn isolates_on_two_configurations_do_not_move_a_key_back_and_forth() {
        let faults = Rc::new(Faults::new(1, 0.0));
        let (gateway, _, secrets) =
            fake_gateway(config(OLD, None), &faults, T0, "prj_rot", &[KeyType::Server], 0.0);
        let gateway = deployed(gateway, config(NEW, Some(OLD)));
        assert_eq!(get(&gateway, "/public/v1/me", &secrets[0]).0, 200);
        let rehashed = gateway.store.directory.keys.borrow()[0].clone();
        let old = deployed(gateway, config(OLD, None));
        for _ in 0..3 {
            assert_eq!(
                get(&old, "/public/v1/me", &secrets[0]).0,
                200,
                "the old configuration still admits it"
            );
        }
        assert_eq!(old.store.directory.keys.borrow()[0], rehashed, "not moved back");
        let new = deployed(old, config(NEW, Some(OLD)));
        assert_eq!(get(&new, "/public/v1/me", &secrets[0]).0, 200);
        assert_eq!(new.store.directory.keys.borrow()[0], rehashed);
    }
}
