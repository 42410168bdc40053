//! What the user gives the command line, read into the API's inputs: a webhook to verify, limits
//! and key changes from flags, `--data` as JSON text or `@file`.

use std::io::Read;
use std::path::PathBuf;

use gatehouse_client::{KeyChanges, Limits, WebhookVerifier};

use super::Failure;

pub fn verify(
    secret: &str,
    id: &str,
    timestamp: &str,
    signature: &str,
    body_file: Option<&PathBuf>,
) -> Result<(), Failure> {
    let body = match body_file {
        Some(path) => {
            std::fs::read(path).map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))?
        }
        None => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .map_err(|e| Failure::Usage(format!("cannot read stdin: {e}")))?;
            body
        }
    };
    let outcome = WebhookVerifier::new(secret).and_then(|v| v.verify(id, timestamp, signature, &body));
    match outcome {
        Ok(()) => {
            println!("valid");
            Ok(())
        }
        Err(reason) => {
            eprintln!("invalid: {reason}");
            Err(Failure::Reported)
        }
    }
}

/// `--data`: JSON as given, or `@FILE`; it must parse as JSON.
/// `--limits` as the API takes them.
pub fn parse_limits(json: &str) -> Result<Limits, Failure> {
    serde_json::from_str(json).map_err(|e| {
        Failure::Usage(format!(
            "--limits is not a JSON object of per_second, per_minute, per_hour, per_day, monthly_quota: {e}"
        ))
    })
}

/// `keys update`'s options as the changes to send; a field both set and cleared is refused.
pub fn key_changes(
    name: Option<String>,
    rate_limit_per_minute: Option<u64>,
    expires_at: Option<String>,
    identity_id: Option<String>,
    limits: Option<String>,
    clear: &[String],
) -> Result<KeyChanges, Failure> {
    let mut changes = KeyChanges::new();
    let set = [
        ("name", name.is_some()),
        ("rate_limit_per_minute", rate_limit_per_minute.is_some()),
        ("expires_at", expires_at.is_some()),
        ("identity_id", identity_id.is_some()),
        ("limits", limits.is_some()),
    ];
    for field in clear {
        changes = match field.as_str() {
            "name" => changes.clear_name(),
            "rate_limit_per_minute" => changes.clear_rate_limit_per_minute(),
            "expires_at" => changes.clear_expires_at(),
            "identity_id" => changes.clear_identity_id(),
            "limits" => changes.clear_limits(),
            other => {
                return Err(Failure::Usage(format!(
                "--clear {other}: not a field (name, rate_limit_per_minute, expires_at, identity_id, limits)"
            )))
            }
        };
        if set.iter().any(|(f, given)| f == field && *given) {
            return Err(Failure::Usage(format!("--{} is both set and cleared", field.replace('_', "-"))));
        }
    }
    if let Some(name) = name {
        changes = changes.name(name);
    }
    if let Some(limit) = rate_limit_per_minute {
        changes = changes.rate_limit_per_minute(limit);
    }
    if let Some(at) = expires_at {
        changes = changes.expires_at(at);
    }
    if let Some(id) = identity_id {
        changes = changes.identity_id(id);
    }
    if let Some(limits) = limits {
        changes = changes.limits(parse_limits(&limits)?);
    }
    if clear.is_empty() && set.iter().all(|(_, given)| !given) {
        return Err(Failure::Usage("nothing to change: give a field, or --clear one".into()));
    }
    Ok(changes)
}

pub fn read_data(data: String) -> Result<Vec<u8>, Failure> {
    let bytes = match data.strip_prefix('@') {
        Some(path) => std::fs::read(path).map_err(|e| Failure::Usage(format!("cannot read {path}: {e}")))?,
        None => data.into_bytes(),
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| Failure::Usage(format!("--data is not JSON: {e}")))?;
    Ok(bytes)
}
