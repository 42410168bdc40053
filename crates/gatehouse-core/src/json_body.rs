//! Request bodies: JSON into typed input with the 400 of SPEC §3 for anything malformed.

use serde::de::DeserializeOwned;

use super::canonical_json::{self, Problem, Refusal};
use super::error::ApiError;

/// Parses a JSON request body. Malformed JSON, a key named twice in one object, a wrong type, a
/// missing or unknown field: 400 `VALIDATION_ERROR` whose message says what and where (serde's
/// text names the field). The body is read in the form the request fingerprint compares
/// ([`canonical_json`]): what one refuses, the other never takes.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("The request body must be a JSON object."));
    }
    let checked = canonical_json::check(body);
    if let Err(Refusal { problem: Problem::DuplicateKey(key), .. }) = &checked {
        let e = checked.as_ref().unwrap_err();
        return Err(ApiError::bad_request(format!(
            "Malformed JSON: {e}; each key may appear once in an object."
        ))
        .with_detail("field", key.as_str()));
    }
    let input = serde_json::from_slice(body).map_err(|e| {
        let kind = if e.is_syntax() || e.is_eof() { "Malformed JSON" } else { "Invalid request body" };
        ApiError::bad_request(format!("{kind}: {e}"))
    })?;
    match checked {
        Ok(_) => Ok(input),
        Err(e) => Err(ApiError::bad_request(format!("Malformed JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Input {
        #[allow(dead_code)]
        name: String,
    }

    #[test]
    fn malformed_wrong_type_unknown_and_empty_are_400() {
        for body in [&b"{"[..], b"{\"name\":1}", b"{\"name\":\"a\",\"x\":1}", b"", b"  ", b"[]"] {
            let e = parse::<Input>(body).unwrap_err();
            assert_eq!(e.status(), 400, "{}", String::from_utf8_lossy(body));
            assert_eq!(e.code.as_str(), "VALIDATION_ERROR");
        }
        assert!(parse::<Input>(b"{").unwrap_err().message.starts_with("Malformed JSON"));
        assert!(parse::<Input>(br#"{"name":"ok"}"#).is_ok());
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct WithData {
        #[allow(dead_code)]
        data: serde_json::Value,
    }

    /// serde_json merges a key named twice inside a `Value` (the last wins) and refuses it only on a
    /// struct's own fields; every level is refused here (fails on main before this commit).
    #[test]
    fn a_key_named_twice_is_400_at_any_depth() {
        for body in [&br#"{"data":{"a":1,"a":2}}"#[..], br#"{"data":[{"x":{"k":1,"\u006b":1}}]}"#] {
            let e = parse::<WithData>(body).unwrap_err();
            assert_eq!((e.status(), e.code.as_str()), (400, "VALIDATION_ERROR"), "{e:?}");
            assert!(e.message.starts_with("Malformed JSON: duplicate key"), "{}", e.message);
            assert!(e.details["field"].is_string());
        }
        let e = parse::<Input>(br#"{"name":"a","name":"b"}"#).unwrap_err();
        assert_eq!((e.status(), e.details["field"].as_str()), (400, Some("name")));
        assert!(parse::<WithData>(br#"{"data":{"a":1,"b":[{"a":1},{"a":2}]}}"#).is_ok());
    }
}
