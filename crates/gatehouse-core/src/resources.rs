//! The resource API's objects (SPEC §6, §8): their validation and how the API shows them. Inputs
//! that parse but break a rule are 422 `VALIDATION_ERROR` with `details.field`.

use gatehouse_wire::resources as wire;
use gatehouse_wire::to_json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::time::rfc3339;

/// Items in one bulk call (SPEC §6).
pub const BULK_MAX: usize = 100;

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::unprocessable(message).with_detail("field", field)
}

/// Trims an optional text field; empty is absent; longer than `max` characters is refused.
fn text_field(field: &str, value: Option<String>, max: usize) -> Result<Option<String>, ApiError> {
    let value = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    match value {
        Some(v) if v.chars().count() > max => {
            Err(invalid(field, format!("{field} must be at most {max} characters")))
        }
        v => Ok(v),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContactInput {
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub external_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contact {
    pub id: String,
    pub project_id: String,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub external_id: Option<String>,
    pub created_at: i64,
}

impl ContactInput {
    /// The contact this input describes, or why it cannot be one.
    pub fn validate(self, id: String, project_id: &str, now_ms: i64) -> Result<Contact, ApiError> {
        let name = text_field("name", self.name, 200)?;
        let phone = text_field("phone", self.phone, 32)?;
        let email = text_field("email", self.email, 254)?;
        let external_id = text_field("external_id", self.external_id, 255)?;
        if let Some(p) = &phone {
            let digits = p.chars().filter(char::is_ascii_digit).count();
            let allowed = p.chars().enumerate().all(|(i, c)| {
                c.is_ascii_digit() || matches!(c, ' ' | '-' | '(' | ')' | '.') || (i == 0 && c == '+')
            });
            if !allowed || !(3..=15).contains(&digits) {
                return Err(invalid(
                    "phone",
                    "phone must be 3 to 15 digits, optionally with +, spaces, dashes, dots or parentheses",
                ));
            }
        }
        if let Some(e) = &email {
            let ok = e.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty()
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
            }) && !e.chars().any(char::is_whitespace);
            if !ok {
                return Err(invalid("email", "email is not an email address"));
            }
        }
        if name.is_none() && phone.is_none() && email.is_none() && external_id.is_none() {
            return Err(invalid("name", "a contact needs at least one of name, phone, email, external_id"));
        }
        Ok(Contact {
            id,
            project_id: project_id.to_owned(),
            name,
            phone,
            email,
            external_id,
            created_at: now_ms,
        })
    }
}

impl Contact {
    pub fn view(&self) -> Value {
        to_json(&wire::Contact {
            id: self.id.clone(),
            name: self.name.clone(),
            phone: self.phone.clone(),
            email: self.email.clone(),
            external_id: self.external_id.clone(),
            created_at: rfc3339(self.created_at),
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageInput {
    pub contact_id: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: String,
    pub project_id: String,
    pub contact_id: String,
    pub text: String,
    pub created_at: i64,
}

impl MessageInput {
    pub fn validate(self, id: String, project_id: &str, now_ms: i64) -> Result<Message, ApiError> {
        if self.text.trim().is_empty() || self.text.chars().count() > 4096 {
            return Err(invalid("text", "text must be 1 to 4096 characters"));
        }
        Ok(Message {
            id,
            project_id: project_id.to_owned(),
            contact_id: self.contact_id,
            text: self.text,
            created_at: now_ms,
        })
    }
}

impl Message {
    /// A message is `queued` when created; delivery is outside the gateway.
    pub fn view(&self) -> Value {
        to_json(&wire::Message {
            id: self.id.clone(),
            contact_id: self.contact_id.clone(),
            text: self.text.clone(),
            status: "queued".into(),
            created_at: rfc3339(self.created_at),
        })
    }
}

pub fn unknown_contact(contact_id: &str) -> ApiError {
    invalid("contact_id", format!("No contact {contact_id:?} in this project."))
        .with_detail("contact_id", contact_id)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioInput {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub created_at: i64,
}

impl ScenarioInput {
    pub fn validate(self, id: String, project_id: &str, now_ms: i64) -> Result<Scenario, ApiError> {
        let name = text_field("name", Some(self.name), 200)?
            .ok_or_else(|| invalid("name", "name must not be empty"))?;
        Ok(Scenario { id, project_id: project_id.to_owned(), name, created_at: now_ms })
    }
}

impl Scenario {
    pub fn view(&self) -> Value {
        to_json(&wire::Scenario {
            id: self.id.clone(),
            name: self.name.clone(),
            created_at: rfc3339(self.created_at),
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInput {
    pub contact_id: String,
    #[serde(default)]
    pub variables: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRun {
    pub id: String,
    pub project_id: String,
    pub scenario_id: String,
    pub contact_id: String,
    pub variables: Map<String, Value>,
    pub created_at: i64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseMarkerInput {
    pub version: String,
    /// When the deploy happened, as the pipeline tells it: Unix seconds or an RFC 3339 string.
    pub ts: Value,
    pub environment: Option<String>,
    pub commit: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseMarker {
    pub id: String,
    pub project_id: String,
    pub version: String,
    pub ts: Value,
    pub environment: Option<String>,
    pub commit: Option<String>,
    pub created_at: i64,
}

impl ReleaseMarkerInput {
    pub fn validate(self, id: String, project_id: &str, now_ms: i64) -> Result<ReleaseMarker, ApiError> {
        let version = text_field("version", Some(self.version), 128)?
            .ok_or_else(|| invalid("version", "version must not be empty"))?;
        let ts_ok = match &self.ts {
            Value::Number(n) => n.as_u64().is_some(),
            Value::String(s) => (10..=64).contains(&s.len()),
            _ => false,
        };
        if !ts_ok {
            return Err(invalid("ts", "ts must be Unix seconds (a whole number) or an RFC 3339 string"));
        }
        Ok(ReleaseMarker {
            id,
            project_id: project_id.to_owned(),
            version,
            ts: self.ts,
            environment: text_field("environment", self.environment, 64)?,
            commit: text_field("commit", self.commit, 64)?,
            created_at: now_ms,
        })
    }
}

impl ReleaseMarker {
    pub fn view(&self) -> Value {
        to_json(&wire::ReleaseMarker {
            id: self.id.clone(),
            project_id: self.project_id.clone(),
            version: self.version.clone(),
            ts: self.ts.clone(),
            environment: self.environment.clone(),
            commit: self.commit.clone(),
            created_at: rfc3339(self.created_at),
        })
    }
}

/// `{items:[…]}` of a bulk call, each item still raw so that one bad item fails alone.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkInput {
    pub items: Vec<Value>,
}

impl BulkInput {
    pub fn check_size(&self) -> Result<(), ApiError> {
        if (1..=BULK_MAX).contains(&self.items.len()) {
            Ok(())
        } else {
            Err(ApiError::unprocessable(format!("items must hold 1 to {BULK_MAX} entries"))
                .with_detail("field", "items")
                .with_detail("count", self.items.len()))
        }
    }
}

/// The outcome of one bulk item, as `results[i]` shows it.
pub enum ItemOutcome {
    Created(String),
    Failed(ApiError),
}

/// `{created, failed, results:[{index, status, id?, error?}]}`.
pub fn bulk_view(outcomes: &[ItemOutcome]) -> Value {
    let created = outcomes.iter().filter(|o| matches!(o, ItemOutcome::Created(_))).count();
    let results: Vec<Value> = outcomes
        .iter()
        .enumerate()
        .map(|(index, o)| match o {
            ItemOutcome::Created(id) => json!({ "index": index, "status": "created", "id": id }),
            ItemOutcome::Failed(e) => json!({
                "index": index,
                "status": "failed",
                "error": { "code": e.code.as_str(), "message": e.message, "details": e.details },
            }),
        })
        .collect();
    json!({ "created": created, "failed": outcomes.len() - created, "results": results })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contact(v: Value) -> Result<Contact, ApiError> {
        let input: ContactInput = serde_json::from_value(v).unwrap();
        input.validate("c_1".into(), "p", 0)
    }

    #[test]
    fn contacts_need_one_field_and_valid_phone_and_email() {
        assert!(contact(json!({"name": " Ada "})).is_ok_and(|c| c.name.as_deref() == Some("Ada")));
        assert!(contact(json!({"phone": "+1 (555) 010-9999"})).is_ok());
        assert!(contact(json!({"email": "ada@example.com"})).is_ok());
        for (bad, field) in [
            (json!({}), "name"),
            (json!({"name": "  "}), "name"),
            (json!({"phone": "12"}), "phone"),
            (json!({"phone": "555+1"}), "phone"),
            (json!({"email": "not-an-email"}), "email"),
            (json!({"email": "a@b"}), "email"),
            (json!({"name": "x".repeat(201)}), "name"),
        ] {
            let e = contact(bad.clone()).unwrap_err();
            assert_eq!((e.status(), e.details["field"].as_str()), (422, Some(field)), "{bad}");
        }
    }

    #[test]
    fn messages_need_text_within_limits() {
        let m = |text: &str| {
            MessageInput { contact_id: "c".into(), text: text.into() }.validate("m".into(), "p", 0)
        };
        assert!(m("hello").is_ok());
        assert_eq!(m(" ").unwrap_err().status(), 422);
        assert_eq!(m(&"x".repeat(4097)).unwrap_err().status(), 422);
    }

    #[test]
    fn release_marker_ts_is_unix_seconds_or_a_timestamp_string() {
        let r = |ts: Value| {
            ReleaseMarkerInput { version: "1.2.3".into(), ts, environment: None, commit: None }.validate(
                "r".into(),
                "p",
                0,
            )
        };
        assert!(r(json!(1_795_942_112)).is_ok());
        assert!(r(json!("2026-11-29T08:48:32Z")).is_ok());
        for bad in [json!(-1), json!(1.5), json!(""), json!(null), json!({})] {
            assert_eq!(r(bad).unwrap_err().details["field"], "ts");
        }
    }

    #[test]
    fn bulk_holds_1_to_100_items_and_reports_each() {
        assert!(BulkInput { items: vec![Value::Null; 100] }.check_size().is_ok());
        assert_eq!(BulkInput { items: vec![] }.check_size().unwrap_err().status(), 422);
        assert_eq!(BulkInput { items: vec![Value::Null; 101] }.check_size().unwrap_err().status(), 422);
        let v = bulk_view(&[ItemOutcome::Created("a".into()), ItemOutcome::Failed(unknown_contact("x"))]);
        assert_eq!((v["created"].as_u64(), v["failed"].as_u64()), (Some(1), Some(1)));
        assert_eq!(v["results"][0], json!({"index": 0, "status": "created", "id": "a"}));
        assert_eq!(v["results"][1]["error"]["code"], "VALIDATION_ERROR");
        assert_eq!(v["results"][1]["index"], 1);
    }
}
