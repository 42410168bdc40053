//! The retry contract every Gatehouse SDK keeps (`clients/contract/retry.json`, which the
//! TypeScript package's tests read too): its classification and delay tables through
//! [`should_retry`] and [`retry_delay`], and its answer sequences through the send loop's own
//! decisions ([`next_wait`], [`pacing_wait`], the key's [`RateWindows`]) on a clock that moves
//! only by the waits. The loop's wiring to the network is tested against a real server in
//! `tests/retries.rs`.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::pacing::{key_id, RateWindows};
use crate::retry::{next_wait, pacing_wait, parse_retry_after, retry_delay, should_retry, Failure};

const CONTRACT: &str = include_str!("../../../clients/contract/retry.json");

fn contract() -> Value {
    serde_json::from_str(CONTRACT).expect("retry.json is JSON")
}

fn ms(d: Duration) -> u64 {
    (d.as_secs_f64() * 1000.0).round() as u64
}

fn failure(answer: &Value) -> Failure<'_> {
    if answer["timeout"] == true {
        return Failure::Timeout;
    }
    if answer["network"] == true {
        return Failure::Network;
    }
    Failure::Status {
        status: answer["status"].as_u64().expect("a status") as u16,
        code: answer["code"].as_str().unwrap_or(""),
        retryable: answer["retryable"] == true,
    }
}

fn header<'a>(answer: &'a Value, name: &str) -> Option<&'a str> {
    answer["headers"][name].as_str()
}

fn start(contract: &Value) -> SystemTime {
    humantime::parse_rfc3339(contract["now"].as_str().expect("now")).expect("an RFC 3339 time")
}

#[test]
fn the_classification_table() {
    let contract = contract();
    for row in contract["classification"].as_array().unwrap() {
        let idempotent = row["idempotent"] == true;
        assert_eq!(should_retry(failure(&row["failure"]), idempotent), row["retried"] == true, "{row}");
    }
}

#[test]
fn the_delay_table() {
    let contract = contract();
    let now = start(&contract);
    for row in contract["delays"].as_array().unwrap() {
        let retry_after = row["retry_after"].as_str().and_then(|v| parse_retry_after(v, now));
        let attempt = row["attempt"].as_u64().unwrap() as u32;
        let wait = retry_delay(attempt, retry_after, row["random"].as_f64().unwrap());
        assert_eq!(ms(wait), row["wait_ms"].as_u64().unwrap(), "{row}");
    }
}

#[test]
fn every_answer_sequence() {
    let contract = contract();
    let key = key_id("gh_s_contract");
    for case in contract["sequences"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let random = case["random"].as_f64().unwrap();
        let windows = RateWindows::default();
        let mut now = start(&contract);
        for (n, call) in case["calls"].as_array().unwrap().iter().enumerate() {
            let request = &call["request"];
            let max_attempts = request["max_attempts"].as_u64().unwrap_or(5) as u32;
            let deadline = request["deadline_ms"].as_u64().map(Duration::from_millis);
            let paced = request["pacing"] != false;
            let began = now;
            let time_left =
                |now: SystemTime| deadline.map(|d| d.saturating_sub(now.duration_since(began).unwrap()));
            // Every call of the SDK that reaches the network is safe to repeat: reads, and
            // writes with their Idempotency-Key (the classification table covers the others).
            let idempotent = true;
            let answers = call["answers"].as_array().unwrap();
            let (mut attempts, mut waits) = (0u32, Vec::new());
            let outcome = loop {
                attempts += 1;
                let window = windows.wait(&key, now).filter(|_| paced);
                if let Some(wait) = window.and_then(|w| pacing_wait(w, random, max_attempts, time_left(now)))
                {
                    waits.push(ms(wait));
                    now += wait;
                }
                let answer = &answers[(attempts as usize - 1).min(answers.len() - 1)];
                let failed = failure(answer);
                if let Failure::Status { status, .. } = failed {
                    windows.observe(
                        &key,
                        header(answer, "x-ratelimit-remaining"),
                        header(answer, "x-ratelimit-reset"),
                    );
                    if (200..300).contains(&status) {
                        break serde_json::json!({ "status": status });
                    }
                }
                let retry_after = header(answer, "retry-after").and_then(|v| parse_retry_after(v, now));
                match next_wait(
                    attempts,
                    max_attempts,
                    failed,
                    idempotent,
                    retry_after,
                    random,
                    time_left(now),
                ) {
                    Some(wait) => {
                        waits.push(ms(wait));
                        now += wait;
                    }
                    None => {
                        break match failed {
                            Failure::Status { status, code, retryable } => {
                                let mut e = serde_json::json!({ "status": status, "code": code, "retryable": retryable });
                                if let Some(after) = retry_after {
                                    e["retry_after_ms"] = ms(after).into();
                                }
                                serde_json::json!({ "error": e })
                            }
                            _ => serde_json::json!({ "error": "network" }),
                        }
                    }
                }
            };
            let expect = &call["expect"];
            let at = format!("{name}, call {}", n + 1);
            assert_eq!(attempts, expect["attempts"].as_u64().unwrap() as u32, "attempts: {at}");
            let expected_waits: Vec<u64> =
                expect["waits_ms"].as_array().unwrap().iter().map(|w| w.as_u64().unwrap()).collect();
            assert_eq!(waits, expected_waits, "waits: {at}");
            assert_eq!(outcome, expect["outcome"], "outcome: {at}");
        }
    }
}
