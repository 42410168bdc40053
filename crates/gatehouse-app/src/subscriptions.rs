//! The owner's subscriptions API (SPEC §10, §17, §21, §25): create, list, delete, re-enable or
//! switch the signing scheme, rotate the secret, the public key of a `v1a` subscription, recover
//! failed deliveries, and trigger a sample event. Delivering is `webhooks`.

use serde::Deserialize;
use serde_json::json;

use super::keys::clean_name;
use super::webhooks::secrets_key;
use super::{random, unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::json_body;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{Ports, Recovery, SecretRotation, WebhookStore};
use gatehouse_core::time;
use gatehouse_core::webhook::{self, check_events, check_url, Scheme, StoredSecret, Webhook};
use gatehouse_wire::webhooks as wire;

/// Reads of a subscription whose secret another rotation changed in between, before a 503.
const ROTATION_ATTEMPTS: usize = 3;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateWebhook {
    /// `url` (the default) or `cli` (no URL: `gatehouse listen` pulls the deliveries, SPEC §21).
    kind: Option<String>,
    url: Option<String>,
    events: Vec<String>,
    /// `v1` (the default) or `v1a` (SPEC §25).
    signature: Option<String>,
    /// What its owner calls the endpoint (SPEC §26), as a key's name.
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Trigger {
    #[serde(rename = "type")]
    event_type: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RotateSecret {
    grace_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateWebhook {
    status: Option<String>,
    signature: Option<String>,
    /// A new name, or `null` for none.
    #[serde(default, deserialize_with = "super::keys::patch_field")]
    name: Option<Option<String>>,
}

/// The scheme a body names (`signature`), 422 naming the field for any other value.
fn scheme(name: &str) -> Result<Scheme, ApiError> {
    Scheme::parse(name).ok_or_else(|| {
        ApiError::unprocessable(format!(r#"signature {name:?} is not "v1" (HMAC) nor "v1a" (Ed25519)"#))
            .with_detail("field", "signature")
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Recover {
    since: String,
}

impl<P: Ports> Gateway<'_, P> {
    /// The project's subscription `id`, its public key the one its sealed secret makes
    /// ([`Webhook::bound_to_secret`]), or 404.
    async fn subscription(&self, call: &Call<'_>, id: &str) -> Result<Webhook, ApiError> {
        match self.store.webhook(call.project_id(), id).await.map_err(unavailable)? {
            Some(hook) => Ok(hook.bound_to_secret(&secrets_key(self.config))),
            None => Err(ApiError::not_found("webhook").with_detail("id", id)),
        }
    }

    pub(super) async fn create_webhook(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateWebhook = json_body::parse(&call.body)?;
        let url = match (input.kind.as_deref().unwrap_or("url"), input.url) {
            ("url", Some(url)) => {
                check_url(
                    &url,
                    self.config.allow_private_webhook_urls,
                    &self.config.private_webhook_origins,
                )?;
                url
            }
            ("url", None) => {
                return Err(ApiError::unprocessable(
                    r#"url is required (or "kind":"cli" for a subscription `gatehouse listen` pulls)"#,
                )
                .with_detail("field", "url"))
            }
            ("cli", None) => webhook::CLI_URL.to_owned(),
            ("cli", Some(_)) => {
                return Err(ApiError::unprocessable("a cli subscription has no url: its listener pulls")
                    .with_detail("field", "url"))
            }
            (kind, _) => {
                return Err(ApiError::unprocessable(format!(r#"kind {kind:?} is not "url" nor "cli""#))
                    .with_detail("field", "kind"))
            }
        };
        check_events(&input.events)?;
        let name = clean_name(input.name)?;
        let scheme = scheme(input.signature.as_deref().unwrap_or("v1"))?;
        let id = call.ids.next("wh");
        let key = secrets_key(self.config);
        let secret = scheme.new_secret(&random());
        let public_key = webhook::public_key_of(&secret);
        let secret = StoredSecret::seal(&key, &id, &secret, random());
        let hook = Webhook {
            id,
            project_id: call.project_id().to_owned(),
            name,
            url,
            events: input.events,
            secret,
            public_key,
            previous_secret: None,
            status: "active".into(),
            disabled_reason: None,
            created_at: call.now_ms,
        };
        // A second execution of the same operation finds the first subscription and its secret.
        let stored = self.store.create_webhook(&hook).await.map_err(unavailable)?.bound_to_secret(&key);
        let secret = stored
            .secret
            .open(&key, &stored.id)
            .ok_or_else(|| ApiError::internal("the stored subscription's secret does not open"))?;
        Ok(Reply::created(stored.view(Some(&secret), call.now_ms)))
    }

    /// A project's subscriptions, newest first, a page at a time (SPEC §3: every list takes
    /// `limit` and `cursor`). A project has few, so the page is cut from all of them.
    pub(super) async fn list_webhooks(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let key = secrets_key(self.config);
        let hooks = self.store.webhooks(call.project_id()).await.map_err(unavailable)?;
        let mut hooks: Vec<Webhook> = hooks.into_iter().map(|h| h.bound_to_secret(&key)).collect();
        let position = |h: &Webhook| Cursor { ts: h.created_at, id: h.id.clone() };
        hooks.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        if let Some(after) = &page.after {
            hooks.retain(|h| (h.created_at, h.id.as_str()) < (after.ts, after.id.as_str()));
        }
        hooks.truncate(page.fetch_len());
        Ok(Reply::ok(page.respond(hooks, position, |h| h.view(None, call.now_ms))))
    }

    pub(super) async fn delete_webhook(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        if !self.store.delete_webhook(call.project_id(), id, call.now_ms).await.map_err(unavailable)? {
            return Err(ApiError::not_found("webhook").with_detail("id", id));
        }
        Ok(Reply::ok(json!({ "id": id, "status": "deleted" })))
    }

    /// `POST /public/v1/webhooks/{id}/rotate-secret` `{grace_seconds?}` (SPEC §17): a new secret of
    /// the subscription's scheme (see [`Self::rotate`]).
    pub(super) async fn rotate_webhook_secret(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: RotateSecret = json_body::parse(&call.body)?;
        let grace = input.grace_seconds.unwrap_or(webhook::DEFAULT_ROTATION_GRACE_SECONDS);
        if grace > webhook::MAX_ROTATION_GRACE_SECONDS {
            return Err(ApiError::unprocessable(format!(
                "grace_seconds must be from 0 to {}",
                webhook::MAX_ROTATION_GRACE_SECONDS
            ))
            .with_detail("field", "grace_seconds"));
        }
        self.rotate(call, None, grace, self.rotation_seed(call)).await
    }

    /// The seed of this operation's new secret ([`webhook::rotation_seed`]): taken once per request.
    fn rotation_seed(&self, call: &Call<'_>) -> [u8; 32] {
        webhook::rotation_seed(&self.config.webhook_secrets_key, &call.ids.secret("whsec"))
    }

    /// Rotates the signing secret (SPEC §17, §25) to a new one of `to` (or of the subscription's
    /// own scheme): a `v1` secret is answered once, a `v1a` key pair by its public key only; every
    /// attempt signs with both, new first, until the grace ends, then with the new one only.
    ///
    /// The new secret derives from the request's operation (SPEC §19): when this operation rotated
    /// the secret already (a write that landed but was never answered), the same secret is
    /// answered again and nothing changes, so the secret from before the rotation stays the
    /// previous one. The write replaces only the secret it read, so a rotation never drops one
    /// it did not see.
    async fn rotate(
        &self,
        call: &Call<'_>,
        to: Option<Scheme>,
        grace_seconds: u64,
        seed: [u8; 32],
    ) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let key = secrets_key(self.config);
        let until = call.now_ms + grace_seconds as i64 * 1000;
        for _ in 0..ROTATION_ATTEMPTS {
            let hook = self.subscription(call, id).await?;
            let secret = to.unwrap_or(hook.scheme()).new_secret(&seed);
            if hook.secret.open(&key, id).as_deref() == Some(secret.as_str()) {
                return Ok(Reply::ok(hook.view(Some(&secret), call.now_ms)));
            }
            let public_key = webhook::public_key_of(&secret);
            let rotation = SecretRotation {
                project_id: call.project_id(),
                id,
                secret: &StoredSecret::seal(&key, id, &secret, random()),
                public_key: public_key.as_deref(),
                previous_until_ms: until,
                replaces: &hook.secret,
            };
            let rotated = self.store.rotate_secret(&rotation).await.map_err(unavailable)?;
            if let Some(hook) = rotated {
                return Ok(Reply::ok(hook.bound_to_secret(&key).view(Some(&secret), call.now_ms)));
            }
            // Deleted, or rotated by another request since it was read: read it again.
        }
        Err(ApiError::unavailable("the subscription's secret kept changing during the rotation"))
    }

    /// `PATCH /public/v1/webhooks/{id}` `{status?, signature?, name?}`: `name` renames it (`null`:
    /// none); `"status":"active"` re-enables a
    /// subscription disabled by a 410 (its failed deliveries stay failed; `recover` re-queues
    /// them); `"signature":"v1a"` (or `"v1"`) switches the signing scheme (SPEC §25) as a rotation
    /// with the default grace does, so receivers verifying the old scheme keep working for 24 h.
    pub(super) async fn update_webhook(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let input: UpdateWebhook = json_body::parse(&call.body)?;
        if input.status.as_deref().is_some_and(|s| s != "active") {
            return Err(ApiError::unprocessable(r#"status can only be set to "active" (re-enable)"#)
                .with_detail("field", "status"));
        }
        let to = input.signature.as_deref().map(scheme).transpose()?;
        let name = input.name.map(clean_name).transpose()?;
        if input.status.is_none() && to.is_none() && name.is_none() {
            return Err(ApiError::unprocessable(
                r#"nothing to change: send "status", "signature" or "name""#,
            )
            .with_detail("field", "status"));
        }
        if let Some(name) = &name {
            let renamed = self.store.rename_webhook(call.project_id(), id, name.as_deref()).await;
            renamed
                .map_err(unavailable)?
                .ok_or_else(|| ApiError::not_found("webhook").with_detail("id", id))?;
        }
        let mut answer = None;
        if let Some(to) = to {
            let hook = self.subscription(call, id).await?;
            // A switch this operation made already (its answer lost) is answered again, new
            // secret included; a subscription on `to` from before is left as it is (review M2).
            let seed = self.rotation_seed(call);
            let ours = hook.secret.open(&secrets_key(self.config), id).as_deref()
                == Some(to.new_secret(&seed).as_str());
            if hook.scheme() != to || ours {
                answer =
                    Some(self.rotate(call, Some(to), webhook::DEFAULT_ROTATION_GRACE_SECONDS, seed).await?);
            }
        }
        if input.status.is_some() {
            let hook = self.store.enable_webhook(call.project_id(), id).await.map_err(unavailable)?;
            let hook = hook.ok_or_else(|| ApiError::not_found("webhook").with_detail("id", id))?;
            let hook = hook.bound_to_secret(&secrets_key(self.config));
            if answer.is_none() {
                answer = Some(Reply::ok(hook.view(None, call.now_ms)));
            }
        }
        match answer {
            Some(answer) => Ok(answer),
            None => Ok(Reply::ok(self.subscription(call, id).await?.view(None, call.now_ms))),
        }
    }

    /// `GET /public/v1/webhooks/{id}/public-key` (SPEC §25): the key a `v1a` subscription's
    /// receivers verify with; a `v1` subscription has none (404, `details.signature`).
    pub(super) async fn webhook_public_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let hook = self.subscription(call, id).await?;
        match hook.public_key {
            Some(public_key) => Ok(Reply::ok(gatehouse_wire::to_json(&wire::WebhookPublicKey { public_key }))),
            None => Err(ApiError::new(
                gatehouse_core::error::ErrorCode::NotFound,
                r#"This subscription signs with "v1" (HMAC): it has no public key. PATCH "signature":"v1a" to switch."#,
            )
            .with_detail("signature", "v1")),
        }
    }

    /// Recovery (SPEC §17): every failed delivery of the subscription created at or after `since`
    /// gets one more attempt, then follows the schedule again. The deliveries are queued now; a
    /// send that fails is made up by the minute sweep (they are due).
    pub(super) async fn recover_deliveries(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let input: Recover = json_body::parse(&call.body)?;
        let since = time::parse_rfc3339_checked(&input.since).map_err(|_| {
            ApiError::unprocessable(
                "since must be an RFC 3339 date and time that exists, e.g. 2026-11-30T12:00:00Z",
            )
            .with_detail("field", "since")
        })?;
        let hook = self.subscription(call, id).await?;
        if hook.status != "active" {
            return Err(ApiError::unprocessable(format!(
                "The subscription is {}; re-enable it (PATCH status \"active\") before recovering.",
                hook.status
            ))
            .with_detail("status", hook.status.as_str()));
        }
        let recovery =
            Recovery { project_id: call.project_id(), webhook_id: id, since_ms: since, now_ms: call.now_ms };
        let ids = self.store.recover_deliveries(&recovery).await.map_err(unavailable)?;
        let mut reply = Reply::accepted(json!({ "requeued": ids.len() }));
        reply.deliveries = ids;
        Ok(reply)
    }

    /// `POST /public/v1/webhooks/trigger` `{type}` (SPEC §21): a sample event of a built-in type or
    /// an origin's, delivered to the project's matching subscriptions like any other.
    pub(super) async fn trigger_event(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: Trigger = json_body::parse(&call.body)?;
        if !webhook::is_event_type(&input.event_type) {
            return Err(ApiError::unprocessable("type must be 1–64 characters of a-z, 0-9, _ and .")
                .with_detail("field", "type"));
        }
        let event_id = gatehouse_core::encoding::object_id("evt", &random());
        let data = webhook::sample_data(&input.event_type, &time::rfc3339(call.now_ms));
        let deliveries =
            self.record_event(call, call.project_id(), &event_id, &input.event_type, data, None).await?;
        let answer = wire::TriggeredEvent {
            event_id,
            event_type: input.event_type,
            deliveries: deliveries.len() as u32,
        };
        let mut reply = Reply::accepted(gatehouse_wire::to_json(&answer));
        reply.deliveries = deliveries;
        Ok(reply)
    }
}
