//! A small service that keeps its sign-ups as Gatehouse contacts: the code under test of this
//! example (`tests/signups.rs` runs it against the real gateway with `gatehouse-client`'s
//! `testing` feature). The SDK does the retrying: each sign-up is one `Idempotency-Key`, so a
//! retried or repeated sign-up never makes a second contact.

use gatehouse_client::{Client, Contact, Error, NewContact, VerifyError, WebhookVerifier};
use serde_json::Value;

pub struct Signups {
    client: Client,
}

impl Signups {
    /// The service over a gateway and a server key; `attempts` per call (the SDK retries 429s and
    /// 5xx as its rules say).
    pub fn new(base_url: &str, api_key: &str, attempts: u32) -> Result<Signups, Error> {
        let client = Client::builder(base_url).api_key(api_key).max_attempts(attempts).build()?;
        Ok(Signups { client })
    }

    /// A sign-up becomes one contact however often it is sent: its id is the `Idempotency-Key`.
    pub async fn sign_up(&self, signup_id: &str, name: &str) -> Result<Contact, Error> {
        let contact = NewContact { name: Some(name.to_owned()), ..Default::default() };
        self.client.create_contact(&contact).idempotency_key(format!("signup-{signup_id}")).await
    }

    pub async fn contacts(&self) -> Result<Vec<Contact>, Error> {
        self.client.list_contacts().collect_all().await
    }
}

/// The webhook receiver's check: the payload of a delivery whose Standard Webhooks signature
/// `secret` verifies, else why not.
pub fn verified_payload(
    secret: &str,
    id: &str,
    timestamp: &str,
    signature: &str,
    body: &str,
) -> Result<Value, VerifyError> {
    WebhookVerifier::new(secret)?.verify(id, timestamp, signature, body.as_bytes())?;
    Ok(serde_json::from_str(body).unwrap_or(Value::Null))
}
