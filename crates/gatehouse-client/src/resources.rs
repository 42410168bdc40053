//! Typed calls of the resource and key APIs (SPEC §2, §4, §6, §8): who am I, API keys,
//! contacts, messages, scenarios, release markers. Answers are plain structs; fields the server
//! may add later are ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use gatehouse_wire::identities::Limits;
pub use gatehouse_wire::keys::{CreatedKey, Key, KeyStatus, KeyType};
pub use gatehouse_wire::resources::{Contact, Message, ReleaseMarker, Scenario};

use crate::call::{Call, Pages};
use crate::client::{Client, Request};

/// `GET /public/v1/me`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Me {
    pub key_id: String,
    pub prefix: String,
    #[serde(rename = "type")]
    pub key_type: KeyType,
    pub project_id: String,
    pub plan: String,
    /// When this key stops working (RFC 3339), if it expires.
    #[serde(default)]
    pub expires_at: Option<String>,
    pub rate_limit: RateLimit,
    pub quota: Quota,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RateLimit {
    pub limit: u64,
    pub remaining: u64,
    /// When the window ends (RFC 3339).
    pub reset: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Quota {
    pub used: u64,
    pub limit: u64,
    pub resets_at: String,
}

/// `POST /public/v1/keys`.
#[derive(Debug, Clone, Serialize)]
pub struct NewKey {
    #[serde(rename = "type")]
    pub key_type: KeyType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A per-minute limit below the project plan's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_minute: Option<u64>,
    /// RFC 3339, in the future: the key is refused from then on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The identity whose limits and quota the key shares (SPEC §20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_id: Option<String>,
    /// The key's own windows, each at most its plan's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

impl NewKey {
    pub fn new(key_type: KeyType) -> NewKey {
        NewKey {
            key_type,
            name: None,
            rate_limit_per_minute: None,
            expires_at: None,
            identity_id: None,
            limits: None,
        }
    }

    pub fn rate_limit_per_minute(mut self, limit: u64) -> NewKey {
        self.rate_limit_per_minute = Some(limit);
        self
    }

    pub fn identity_id(mut self, id: impl Into<String>) -> NewKey {
        self.identity_id = Some(id.into());
        self
    }

    pub fn limits(mut self, limits: Limits) -> NewKey {
        self.limits = Some(limits);
        self
    }

    pub fn expires_at(mut self, rfc3339: impl Into<String>) -> NewKey {
        self.expires_at = Some(rfc3339.into());
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> NewKey {
        self.name = Some(name.into());
        self
    }
}

/// `PATCH /public/v1/keys/{id}`: what to change. A field left unset stays as it is; `clear_…`
/// removes it.
///
/// ```
/// use gatehouse_client::KeyChanges;
/// let changes = KeyChanges::new().name("billing").rate_limit_per_minute(60).clear_expires_at();
/// assert_eq!(
///     serde_json::to_value(&changes).unwrap(),
///     serde_json::json!({"name": "billing", "rate_limit_per_minute": 60, "expires_at": null})
/// );
/// ```
#[derive(Debug, Clone, Default, Serialize)]
pub struct KeyChanges {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limit_per_minute: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    identity_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<Option<Limits>>,
}

impl KeyChanges {
    pub fn new() -> KeyChanges {
        KeyChanges::default()
    }

    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(Some(name.into()));
        self
    }

    pub fn clear_name(mut self) -> Self {
        self.name = Some(None);
        self
    }

    pub fn rate_limit_per_minute(mut self, limit: u64) -> Self {
        self.rate_limit_per_minute = Some(Some(limit));
        self
    }

    pub fn clear_rate_limit_per_minute(mut self) -> Self {
        self.rate_limit_per_minute = Some(None);
        self
    }

    /// RFC 3339, in the future.
    pub fn expires_at(mut self, rfc3339: impl Into<String>) -> Self {
        self.expires_at = Some(Some(rfc3339.into()));
        self
    }

    pub fn clear_expires_at(mut self) -> Self {
        self.expires_at = Some(None);
        self
    }

    pub fn identity_id(mut self, id: impl Into<String>) -> Self {
        self.identity_id = Some(Some(id.into()));
        self
    }

    pub fn clear_identity_id(mut self) -> Self {
        self.identity_id = Some(None);
        self
    }

    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(Some(limits));
        self
    }

    pub fn clear_limits(mut self) -> Self {
        self.limits = Some(None);
        self
    }
}

/// A contact to create; at least one field is needed. Built like every request of the SDK:
/// `NewContact::new().name("Ada").email("ada@example.com")` (the fields are public too).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewContact {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Your own reference (not unique).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

impl NewContact {
    pub fn new() -> NewContact {
        NewContact::default()
    }

    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn phone(mut self, phone: impl Into<String>) -> Self {
        self.phone = Some(phone.into());
        self
    }

    pub fn email(mut self, email: impl Into<String>) -> Self {
        self.email = Some(email.into());
        self
    }

    pub fn external_id(mut self, id: impl Into<String>) -> Self {
        self.external_id = Some(id.into());
        self
    }
}

/// A message to create: `NewMessage::new(contact_id, text)`.
#[derive(Debug, Clone, Serialize)]
pub struct NewMessage {
    pub contact_id: String,
    pub text: String,
}

impl NewMessage {
    pub fn new(contact_id: impl Into<String>, text: impl Into<String>) -> NewMessage {
        NewMessage { contact_id: contact_id.into(), text: text.into() }
    }
}

/// The answer of a bulk call: each item succeeded or failed on its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkOutcome {
    pub created: u64,
    pub failed: u64,
    pub results: Vec<BulkItem>,
}

/// One item of a bulk answer, by its index in the request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkItem {
    pub index: usize,
    /// `created` or `failed`.
    pub status: String,
    #[serde(default)]
    pub id: Option<String>,
    /// `{code, message, …}` of a failed item.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Serialize)]
struct Items<'a, T> {
    items: &'a [T],
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioRun {
    pub run_id: String,
    pub status: String,
}

/// `POST /api/v1/projects/{project_id}/release-markers/deploy` (`cicd` keys).
#[derive(Debug, Clone, Serialize)]
pub struct NewReleaseMarker {
    pub version: String,
    /// Unix seconds or RFC 3339, as the build recorded it: keep it the same on a repeat.
    pub ts: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// Percent-encodes one path segment (ids are plain, but a path must never be re-shaped by one).
pub(crate) fn segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Client {
    /// `GET /public/v1/me`: the key, its project, plan, rate window and quota.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let me = client.me().await?;
    /// println!("{} ({}) in {}: {}/{} this month", me.prefix, me.key_type, me.project_id, me.quota.used, me.quota.limit);
    /// # Ok(()) }
    /// ```
    pub fn me(&self) -> Call<Me> {
        self.call(Request::get("/public/v1/me"))
    }

    /// `POST /public/v1/keys` (owner key): a new key, its secret shown only in this answer.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::NewKey;
    /// use gatehouse_client::KeyType;
    /// let created = owner.create_key(&NewKey::new(KeyType::Server).name("billing worker")).await?;
    /// println!("store this now: {}", created.key);
    /// # Ok(()) }
    /// ```
    pub fn create_key(&self, key: &NewKey) -> Call<CreatedKey> {
        self.call(Request::post("/public/v1/keys", key))
    }

    /// `GET /public/v1/keys` (owner key), every page.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// for key in owner.list_keys().collect_all().await? {
    ///     println!("{} {} {}", key.prefix, key.key_type, key.status);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list_keys(&self) -> Pages<Key> {
        Pages::new(self, Request::get("/public/v1/keys").query("limit", 100))
    }

    /// `PATCH /public/v1/keys/{id}` (owner key): changes what `changes` names; answers the key.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::KeyChanges;
    /// let key = owner.update_key("key_01jdx…", &KeyChanges::new().rate_limit_per_minute(60)).await?;
    /// # Ok(()) }
    /// ```
    pub fn update_key(&self, id: &str, changes: &KeyChanges) -> Call<Key> {
        self.call(Request::patch(format!("/public/v1/keys/{}", segment(id)), changes))
    }

    /// `DELETE /public/v1/keys/{id}` (owner key): revokes at once; answers the revoked key.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let revoked = owner.revoke_key("key_01jdx…").await?;
    /// assert_eq!(revoked.status, "revoked");
    /// # Ok(()) }
    /// ```
    pub fn revoke_key(&self, id: &str) -> Call<Key> {
        self.call(Request::delete(format!("/public/v1/keys/{}", segment(id))))
    }

    /// `POST /public/v1/keys/{id}/roll` (owner key): a new key with the same type, name and
    /// limit, its secret shown only in this answer; the old key keeps working for `grace_seconds`
    /// (default 3600, at most 86400), then is refused (401, `details.reason` `rolled`).
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let rolled = owner.roll_key("key_01jdx…", Some(3600)).await?;
    /// println!("deploy {} within the hour", rolled.key);
    /// # Ok(()) }
    /// ```
    pub fn roll_key(&self, id: &str, grace_seconds: Option<u64>) -> Call<CreatedKey> {
        let body = match grace_seconds {
            Some(grace) => serde_json::json!({ "grace_seconds": grace }),
            None => serde_json::json!({}),
        };
        self.call(Request::post(format!("/public/v1/keys/{}/roll", segment(id)), &body))
    }

    /// `POST /public/v1/contacts`.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::NewContact;
    /// let contact = client
    ///     .create_contact(&NewContact { email: Some("ada@example.com".into()), ..Default::default() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn create_contact(&self, contact: &NewContact) -> Call<Contact> {
        self.call(Request::post("/public/v1/contacts", contact))
    }

    /// `GET /public/v1/contacts/{id}`.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let contact = client.get_contact("con_01jdx…").await?;
    /// # Ok(()) }
    /// ```
    pub fn get_contact(&self, id: &str) -> Call<Contact> {
        self.call(Request::get(format!("/public/v1/contacts/{}", segment(id))))
    }

    /// `GET /public/v1/contacts`, every page (see [`Pages`]).
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let all = client.list_contacts().collect_all().await?;
    /// # Ok(()) }
    /// ```
    pub fn list_contacts(&self) -> Pages<Contact> {
        Pages::new(self, Request::get("/public/v1/contacts").query("limit", 100))
    }

    /// `POST /public/v1/contacts/bulk`: 1–100 contacts, each created or failed on its own; one
    /// `Idempotency-Key` covers the whole call.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::NewContact;
    /// let items = vec![NewContact { name: Some("Ada".into()), ..Default::default() }];
    /// let outcome = client.create_contacts_bulk(&items).await?;
    /// println!("{} created, {} failed", outcome.created, outcome.failed);
    /// # Ok(()) }
    /// ```
    pub fn create_contacts_bulk<T: Serialize>(&self, items: &[T]) -> Call<BulkOutcome> {
        self.call(Request::post("/public/v1/contacts/bulk", &Items { items }))
    }

    /// `POST /public/v1/messages`: a message to a contact of the project (422 for another).
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::NewMessage;
    /// let message = client.create_message(&NewMessage { contact_id: "con_01jdx…".into(), text: "Hi".into() }).await?;
    /// assert_eq!(message.status, "queued");
    /// # Ok(()) }
    /// ```
    pub fn create_message(&self, message: &NewMessage) -> Call<Message> {
        self.call(Request::post("/public/v1/messages", message))
    }

    /// `POST /public/v1/messages/bulk`: 1–100 messages, each on its own.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::NewMessage;
    /// let batch = [NewMessage { contact_id: "con_01jdx…".into(), text: "Hi".into() }];
    /// let outcome = client.create_messages_bulk(&batch).await?;
    /// # Ok(()) }
    /// ```
    pub fn create_messages_bulk(&self, items: &[NewMessage]) -> Call<BulkOutcome> {
        self.call(Request::post("/public/v1/messages/bulk", &Items { items }))
    }

    /// `POST /public/v1/scenarios`.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let scenario = client.create_scenario("welcome series").await?;
    /// # Ok(()) }
    /// ```
    pub fn create_scenario(&self, name: &str) -> Call<Scenario> {
        self.call(Request::post("/public/v1/scenarios", &serde_json::json!({ "name": name })))
    }

    /// `POST /public/v1/scenarios/{id}/run` for one contact: 202 `{run_id, status:"started"}`.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let run = client.run_scenario("scn_01jdx…", "con_01jdx…", Some(serde_json::json!({"coupon": "W10"}))).await?;
    /// # Ok(()) }
    /// ```
    pub fn run_scenario(
        &self,
        scenario_id: &str,
        contact_id: &str,
        variables: Option<Value>,
    ) -> Call<ScenarioRun> {
        let mut body = serde_json::json!({ "contact_id": contact_id });
        if let Some(variables) = variables {
            body["variables"] = variables;
        }
        self.call(Request::post(format!("/public/v1/scenarios/{}/run", segment(scenario_id)), &body))
    }

    /// `POST /api/v1/projects/{project_id}/release-markers/deploy` (`cicd` key). Pass the CI job's
    /// stable id as the key, so a re-run step answers the same marker (200) instead of a second one.
    ///
    /// ```no_run
    /// # async fn run(cicd: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::NewReleaseMarker;
    /// let marker = NewReleaseMarker { version: "1.4.2".into(), ts: 1_795_942_860.into(), environment: Some("production".into()), commit: None };
    /// let reply = cicd.create_release_marker("prj_01jdx…", &marker).idempotency_key("deploy-job-8812").reply().await?;
    /// println!("marker {} (replayed: {})", reply.value.id, reply.replayed);
    /// # Ok(()) }
    /// ```
    pub fn create_release_marker(&self, project_id: &str, marker: &NewReleaseMarker) -> Call<ReleaseMarker> {
        let path = format!("/api/v1/projects/{}/release-markers/deploy", segment(project_id));
        self.call(Request::post(path, marker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("con_01JDX"), "con_01JDX");
        assert_eq!(segment("../keys?x=1"), "..%2Fkeys%3Fx%3D1");
    }

    #[test]
    fn new_contact_leaves_out_missing_fields() {
        let contact = NewContact { email: Some("ada@example.com".into()), ..Default::default() };
        assert_eq!(serde_json::to_string(&contact).unwrap(), r#"{"email":"ada@example.com"}"#);
    }
}
