//! Identities (SPEC §20): an integrator's customer, user or tenant, to which keys of its project
//! belong; its keys share its limits and quota. Here: the identity as stored and shown, and the
//! rules of its fields and of the limits an owner may write on an identity or on a key.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::rate_limit::LimitSpec;
use crate::time::rfc3339;

/// The most characters of an `external_id`.
pub const MAX_EXTERNAL_ID_CHARS: usize = 255;
/// The most bytes of `meta`, serialised as compact JSON.
pub const MAX_META_BYTES: usize = 4096;
/// The largest monthly quota (2^53 − 1: every JSON reader holds it exactly).
pub const MAX_MONTHLY_QUOTA: u64 = (1 << 53) - 1;

/// An identity as stored (times in Unix ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub id: String,
    pub project_id: String,
    pub external_id: String,
    pub meta: Option<Map<String, Value>>,
    pub limits: Option<LimitSpec>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Identity {
    /// The identity as the API shows it.
    pub fn view(&self) -> Value {
        gatehouse_wire::to_json(&gatehouse_wire::identities::Identity {
            id: self.id.clone(),
            external_id: self.external_id.clone(),
            meta: self.meta.clone(),
            limits: self.limits.as_ref().map(wire_limits),
            created_at: rfc3339(self.created_at),
            updated_at: rfc3339(self.updated_at),
        })
    }
}

/// What `DELETE /public/v1/identities/{id}` answers: the identity gone, and how many keys it had.
pub fn deleted_view(id: &str, keys_detached: u64) -> Value {
    gatehouse_wire::to_json(&gatehouse_wire::identities::DeletedIdentity {
        id: id.to_owned(),
        status: "deleted".to_owned(),
        keys_detached,
    })
}

/// What `PATCH /public/v1/identities/{id}` changes; `None` leaves a field as it is, `Some(None)`
/// clears it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdentityChanges {
    pub meta: Option<Option<Map<String, Value>>>,
    pub limits: Option<Option<LimitSpec>>,
}

impl IdentityChanges {
    /// The identity as it is after the change at `now_ms`.
    pub fn applied_to(&self, mut identity: Identity, now_ms: i64) -> Identity {
        if let Some(meta) = &self.meta {
            identity.meta = meta.clone();
        }
        if let Some(limits) = self.limits {
            identity.limits = limits;
        }
        identity.updated_at = now_ms;
        identity
    }
}

/// Limits in their wire form.
pub fn wire_limits(limits: &LimitSpec) -> gatehouse_wire::identities::Limits {
    gatehouse_wire::identities::Limits {
        per_second: limits.per_second.map(u64::from),
        per_minute: limits.per_minute.map(u64::from),
        per_hour: limits.per_hour.map(u64::from),
        per_day: limits.per_day.map(u64::from),
        monthly_quota: limits.monthly_quota,
    }
}

/// 1 to 255 characters, kept exactly as sent (it is the integrator's id).
pub fn check_external_id(external_id: &str) -> Result<(), ApiError> {
    let n = external_id.chars().count();
    if n == 0 || n > MAX_EXTERNAL_ID_CHARS {
        return Err(ApiError::bad_request(format!(
            "external_id must be 1 to {MAX_EXTERNAL_ID_CHARS} characters"
        ))
        .with_detail("field", "external_id"));
    }
    Ok(())
}

/// `meta`: a JSON object (400 otherwise) of at most [`MAX_META_BYTES`] as compact JSON (422).
pub fn check_meta(meta: Value) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(meta) = meta else {
        return Err(ApiError::bad_request("meta must be a JSON object, or null").with_detail("field", "meta"));
    };
    let size = serde_json::to_string(&meta).map_or(usize::MAX, |s| s.len());
    if size > MAX_META_BYTES {
        return Err(ApiError::unprocessable(format!(
            "meta must be at most {MAX_META_BYTES} bytes as JSON; it is {size}"
        ))
        .with_detail("field", "meta")
        .with_detail("limit_bytes", MAX_META_BYTES));
    }
    Ok(meta)
}

/// Reads `limits` as sent: an object whose fields are the four windows and `monthly_quota`, each
/// a whole number of at least 1 (a window at most 4,294,967,295, a quota at most 2^53 − 1). Any
/// other field, type or value is a 400 naming it (`details.field`, e.g. `limits.per_minute`).
/// An empty object limits nothing: `None`, as null.
pub fn parse_limits(value: &Value) -> Result<Option<LimitSpec>, ApiError> {
    let bad = |field: String, why: String| ApiError::bad_request(why).with_detail("field", field);
    let Value::Object(fields) = value else {
        return Err(bad("limits".into(), "limits must be a JSON object, or null".into()));
    };
    let mut spec = LimitSpec::default();
    for (name, v) in fields {
        let field = format!("limits.{name}");
        let max = if name == "monthly_quota" { MAX_MONTHLY_QUOTA } else { u64::from(u32::MAX) };
        let slot = match name.as_str() {
            "per_second" => &mut spec.per_second,
            "per_minute" => &mut spec.per_minute,
            "per_hour" => &mut spec.per_hour,
            "per_day" => &mut spec.per_day,
            "monthly_quota" => {
                let n = whole(v, max).ok_or_else(|| bad(field.clone(), range(&field, max)))?;
                spec.monthly_quota = Some(n);
                continue;
            }
            _ => {
                return Err(bad(
                    field,
                    format!(
                        "limits has no field `{name}`: expected `per_second`, `per_minute`, `per_hour`, \
                         `per_day` or `monthly_quota`"
                    ),
                ))
            }
        };
        let n = whole(v, max).ok_or_else(|| bad(field.clone(), range(&field, max)))?;
        *slot = Some(n as u32);
    }
    Ok((!spec.is_empty()).then_some(spec))
}

fn whole(v: &Value, max: u64) -> Option<u64> {
    v.as_u64().filter(|n| (1..=max).contains(n))
}

fn range(field: &str, max: u64) -> String {
    format!("{field} must be a whole number from 1 to {max}")
}

/// A key's own windows (SPEC §20): never a quota (422: the quota is the project's, or its
/// identity's), only windows its plan limits (422 for another), each at most the plan's (403: an
/// owner may lower a key's limits, never raise them, as `rate_limit_per_minute`).
pub fn check_key_limits(limits: &LimitSpec, plan_name: &str, plan: &LimitSpec) -> Result<(), ApiError> {
    if limits.monthly_quota.is_some() {
        return Err(ApiError::unprocessable(
            "A key has no quota of its own: its project's plan (or its identity) sets the quota.",
        )
        .with_detail("field", "limits.monthly_quota"));
    }
    let fields = LimitSpec::FIELDS.iter();
    for ((field, mine), theirs) in fields.zip(limits.windows()).zip(plan.windows()) {
        match (mine, theirs) {
            (Some(_), None) => {
                return Err(ApiError::unprocessable(format!(
                    "The {plan_name:?} plan does not limit this window, so a key cannot either."
                ))
                .with_detail("field", format!("limits.{field}"))
                .with_detail("plan", plan_name))
            }
            (Some(m), Some(c)) if m > c => {
                return Err(ApiError::forbidden(format!(
                    "A key's limit can be lowered, not raised: the {plan_name:?} plan allows {c} ({field})."
                ))
                .with_detail("field", format!("limits.{field}"))
                .with_detail("plan", plan_name)
                .with_detail("plan_limit", c))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(e: &ApiError) -> &str {
        e.details["field"].as_str().unwrap()
    }

    #[test]
    fn limits_are_read_field_by_field_and_every_refusal_names_its_field() {
        let spec = parse_limits(&json!({"per_second": 20, "per_day": 200000, "monthly_quota": 5})).unwrap();
        assert_eq!(
            spec,
            Some(LimitSpec {
                per_second: Some(20),
                per_day: Some(200_000),
                monthly_quota: Some(5),
                ..Default::default()
            })
        );
        assert_eq!(parse_limits(&json!({})).unwrap(), None);
        for (body, name) in [
            (json!({"per_minute": 0}), "limits.per_minute"),
            (json!({"per_minute": "10"}), "limits.per_minute"),
            (json!({"per_minute": 1.5}), "limits.per_minute"),
            (json!({"per_minute": -1}), "limits.per_minute"),
            (json!({"per_hour": 4_294_967_296u64}), "limits.per_hour"),
            (json!({"monthly_quota": MAX_MONTHLY_QUOTA + 1}), "limits.monthly_quota"),
            (json!({"per_week": 1}), "limits.per_week"),
            (json!([1]), "limits"),
            (json!("x"), "limits"),
        ] {
            let e = parse_limits(&body).unwrap_err();
            assert_eq!((e.status(), e.code.as_str(), field(&e)), (400, "VALIDATION_ERROR", name), "{body}");
        }
        assert!(parse_limits(&json!({"per_week": 1})).unwrap_err().message.contains("per_week"));
    }

    #[test]
    fn a_key_lowers_its_plans_windows_and_has_no_quota() {
        let plan = LimitSpec { per_second: Some(10), per_minute: Some(30), ..Default::default() };
        let ok = LimitSpec { per_second: Some(5), per_minute: Some(30), ..Default::default() };
        assert!(check_key_limits(&ok, "trial", &plan).is_ok());
        let quota = LimitSpec { monthly_quota: Some(1), ..Default::default() };
        let e = check_key_limits(&quota, "trial", &plan).unwrap_err();
        assert_eq!((e.status(), field(&e)), (422, "limits.monthly_quota"));
        let above = LimitSpec { per_minute: Some(31), ..Default::default() };
        let e = check_key_limits(&above, "trial", &plan).unwrap_err();
        assert_eq!((e.status(), e.code.as_str(), field(&e)), (403, "FORBIDDEN", "limits.per_minute"));
        assert_eq!(e.details["plan_limit"], 30);
        let unlimited = LimitSpec { per_day: Some(1), ..Default::default() };
        let e = check_key_limits(&unlimited, "trial", &plan).unwrap_err();
        assert_eq!((e.status(), field(&e)), (422, "limits.per_day"));
    }

    #[test]
    fn external_id_and_meta_have_bounds() {
        assert!(check_external_id("a").is_ok());
        assert!(check_external_id(&"é".repeat(255)).is_ok(), "characters, not bytes");
        for bad in [String::new(), "a".repeat(256)] {
            let e = check_external_id(&bad).unwrap_err();
            assert_eq!((e.status(), field(&e)), (400, "external_id"));
        }
        assert!(check_meta(json!({"plan": "pro"})).is_ok());
        assert_eq!(check_meta(json!([1])).unwrap_err().status(), 400);
        let big = json!({ "x": "a".repeat(MAX_META_BYTES) });
        let e = check_meta(big).unwrap_err();
        assert_eq!((e.status(), field(&e)), (422, "meta"));
    }

    #[test]
    fn the_view_shows_every_field_with_rfc3339_times() {
        let identity = Identity {
            id: "idt_1".into(),
            project_id: "prj_1".into(),
            external_id: "cust_42".into(),
            meta: None,
            limits: Some(LimitSpec { per_minute: Some(60), ..Default::default() }),
            created_at: 0,
            updated_at: 1_000,
        };
        assert_eq!(
            identity.view(),
            json!({"id": "idt_1", "external_id": "cust_42", "meta": null, "limits": {"per_minute": 60},
                   "created_at": "1970-01-01T00:00:00.000Z", "updated_at": "1970-01-01T00:00:01.000Z"})
        );
        let changed = IdentityChanges { limits: Some(None), ..Default::default() }.applied_to(identity, 5);
        assert_eq!((changed.limits, changed.updated_at), (None, 5));
    }
}
