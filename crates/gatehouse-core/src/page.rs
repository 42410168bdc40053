//! List pagination (SPEC §3): every list takes `limit` and `cursor` and answers
//! `{"data": […], "next_cursor": …}`. Cursors are opaque keyset positions `(ts, id)`: a page
//! continues strictly after the last row it returned, so rows are never skipped or repeated.

use serde_json::{json, Value};

use super::encoding::{base64url, from_base64url};
use super::error::ApiError;

/// The position after which the next page starts, in the list's order (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub ts: i64,
    pub id: String,
}

impl Cursor {
    pub fn encode(&self) -> String {
        base64url(format!("{}:{}", self.ts, self.id).as_bytes())
    }

    pub fn decode(s: &str) -> Option<Self> {
        let text = String::from_utf8(from_base64url(s)?).ok()?;
        let (ts, id) = text.split_once(':')?;
        Some(Cursor { ts: ts.parse().ok()?, id: id.to_owned() })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: usize,
    pub after: Option<Cursor>,
}

impl PageRequest {
    /// Reads `limit` (1..=max, default `default`) and `cursor` from the query.
    pub fn from_query(query: &[(String, String)], default: usize, max: usize) -> Result<Self, ApiError> {
        let mut page = PageRequest { limit: default, after: None };
        for (name, value) in query {
            match name.as_str() {
                "limit" => {
                    page.limit = value.parse().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                        ApiError::bad_request(format!("limit must be a whole number from 1 to {max}"))
                            .with_detail("field", "limit")
                    })?;
                }
                "cursor" if !value.is_empty() => {
                    page.after = Some(Cursor::decode(value).ok_or_else(|| {
                        ApiError::bad_request("cursor is not one this API returned")
                            .with_detail("field", "cursor")
                    })?);
                }
                _ => {}
            }
        }
        Ok(page)
    }

    /// How many rows to fetch: one more than the page, to know whether another page follows.
    pub fn fetch_len(&self) -> usize {
        self.limit + 1
    }

    /// The list body for rows fetched with [`fetch_len`](Self::fetch_len).
    pub fn respond<T>(
        &self,
        mut rows: Vec<T>,
        position: impl Fn(&T) -> Cursor,
        view: impl Fn(&T) -> Value,
    ) -> Value {
        let more = rows.len() > self.limit;
        rows.truncate(self.limit);
        let next = if more { rows.last().map(|r| position(r).encode()) } else { None };
        json!({ "data": rows.iter().map(view).collect::<Vec<_>>(), "next_cursor": next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let c = Cursor { ts: 1_700_000_000_123, id: "key_abc".into() };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        assert_eq!(Cursor::decode("!!"), None);
        assert_eq!(Cursor::decode(&base64url(b"nocolon")), None);
    }

    #[test]
    fn limit_defaults_and_is_bounded() {
        assert_eq!(PageRequest::from_query(&[], 50, 200).unwrap().limit, 50);
        assert_eq!(PageRequest::from_query(&q(&[("limit", "200")]), 50, 200).unwrap().limit, 200);
        for bad in ["0", "201", "-1", "ten"] {
            let e = PageRequest::from_query(&q(&[("limit", bad)]), 50, 200).unwrap_err();
            assert_eq!(e.status(), 400);
        }
        assert_eq!(PageRequest::from_query(&q(&[("cursor", "%%%")]), 50, 200).unwrap_err().status(), 400);
    }

    #[test]
    fn next_cursor_only_when_more_rows_exist() {
        let page = PageRequest { limit: 2, after: None };
        let pos = |n: &i64| Cursor { ts: *n, id: n.to_string() };
        let body = page.respond(vec![3, 2, 1], pos, |n| json!(n));
        assert_eq!(body["data"], json!([3, 2]));
        assert_eq!(Cursor::decode(body["next_cursor"].as_str().unwrap()).unwrap().ts, 2);
        let body = page.respond(vec![3, 2], pos, |n| json!(n));
        assert_eq!(body["next_cursor"], Value::Null);
    }
}
