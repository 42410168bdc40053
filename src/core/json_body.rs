//! Request bodies: JSON into typed input with the 400 of SPEC §3 for anything malformed.

use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Parses a JSON request body. Malformed JSON, a wrong type, a missing or unknown field: 400
/// `VALIDATION_ERROR` whose message says what and where (serde's text names the field).
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("The request body must be a JSON object."));
    }
    serde_json::from_slice(body).map_err(|e| {
        let kind = if e.is_syntax() || e.is_eof() { "Malformed JSON" } else { "Invalid request body" };
        ApiError::bad_request(format!("{kind}: {e}"))
    })
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
}
