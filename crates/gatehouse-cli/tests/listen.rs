//! `gatehouse listen` as a user runs it, against a scripted gateway and a receiver on 127.0.0.1:
//! a first run makes a cli subscription, forwards a delivery unchanged and reports it; a second
//! run with the same state reuses the subscription, queues failed deliveries since the cursor
//! again and pulls with `resume=true`, and does both again after a lost connection.

#[path = "../../gatehouse-client/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Answer, FakeServer, Received};

const BODY: &str = r#"{"id":"evt_1","type":"contact.created","created_at":"2026-12-02T11:40:00.000Z","data":{"id":"con_1"}}"#;
const NOW: &str = "2026-12-02T11:40:01.250Z";

fn subscription() -> serde_json::Value {
    json!({"id": "wh_cli", "kind": "cli", "url": null, "events": ["*"], "status": "active",
           "disabled_reason": null, "created_at": "2026-12-02T11:39:00.000Z"})
}

fn created() -> Answer {
    let mut answer = subscription();
    answer["secret"] = json!("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX");
    Answer::json(201, answer)
}

fn pulled(deliveries: serde_json::Value) -> Answer {
    Answer::json(200, json!({"data": deliveries, "now": NOW, "hold_seconds": 60}))
}

fn one_delivery() -> Answer {
    pulled(json!([{
        "delivery_id": "dlv_1", "attempt": 1, "event": "contact.created",
        "headers": {"webhook-id": "msg_1", "webhook-timestamp": "1764675601",
                    "webhook-signature": "v1,c2lnbmF0dXJl", "x-gatehouse-event": "contact.created"},
        "body": BODY
    }]))
}

/// Lines a child writes on one of its streams, as they come.
fn lines(stream: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// The next line that contains `needle`, within 10 s.
fn line_with(lines: &Receiver<String>, needle: &str) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::task::block_in_place(|| lines.recv_timeout(left)) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                panic!("no line with {needle:?} within 10 s")
            }
        }
    }
}

fn listen(gateway: &FakeServer, receiver: &FakeServer, state: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["--url", &gateway.url(), "--key", "gh_o_test", "listen", "--wait", "0"])
        .args(["--forward-to", &format!("{}/hooks/gatehouse", receiver.url())])
        .arg("--state")
        .arg(state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gatehouse binary runs")
}

fn route(request: &Received) -> String {
    format!("{} {}", request.method, request.path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_forwards_reports_and_resumes_from_its_state() {
    let receiver =
        FakeServer::start(vec![Answer { status: 200, headers: Vec::new(), body: "ok".into() }]).await;
    let gateway = FakeServer::start(vec![
        created(),
        one_delivery(),
        Answer::json(
            200,
            json!({"delivery_id": "dlv_1", "attempt": 1, "status": "delivered", "next_attempt_at": null}),
        ),
        pulled(json!([])),
    ])
    .await;
    let dir = std::env::temp_dir().join(format!("gatehouse-listen-test-{}", std::process::id()));
    let state = dir.join("listen.json");

    // First run: no state yet.
    let mut child = listen(&gateway, &receiver, &state);
    let (stdout, stderr) = (lines(child.stdout.take().unwrap()), lines(child.stderr.take().unwrap()));
    let ready = line_with(&stderr, "Ready.");
    assert!(ready.starts_with(&format!(
        "Ready. Forwarding all events to {}/hooks/gatehouse (subscription wh_cli, signing secret whsec_AAEC",
        receiver.url()
    )));
    let line = line_with(&stdout, "dlv_1");
    assert!(line.contains("  contact.created  dlv_1  attempt 1  -> 200 ("), "{line}");
    assert!(line.ends_with(" ms) delivered"), "{line}");
    let seen = gateway.wait_for(4, 10).await;
    child.kill().unwrap();
    child.wait().unwrap();

    let routes: Vec<String> = seen.iter().take(4).map(route).collect();
    assert_eq!(
        routes,
        [
            "POST /public/v1/webhooks",
            "GET /public/v1/webhooks/wh_cli/pull?wait=0&resume=true",
            "POST /public/v1/webhooks/wh_cli/deliveries/dlv_1/report",
            "GET /public/v1/webhooks/wh_cli/pull?wait=0&resume=false",
        ]
    );
    assert_eq!(seen[0].json(), json!({"kind": "cli", "events": ["*"]}));
    let report = seen[2].json();
    assert_eq!(
        (&report["attempt"], &report["status_code"], &report["response_excerpt"]),
        (&json!(1), &json!(200), &json!("ok"))
    );
    assert!(report.get("error").is_none() && report["duration_ms"].is_u64(), "{report}");
    assert!(seen[2].header("idempotency-key").is_some());

    let forwarded = receiver.received();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(route(&forwarded[0]), "POST /hooks/gatehouse");
    assert_eq!(forwarded[0].body, BODY.as_bytes(), "the body is forwarded byte for byte");
    assert_eq!(forwarded[0].header("content-type"), Some("application/json"));
    assert_eq!(forwarded[0].header("webhook-id"), Some("msg_1"));
    assert_eq!(forwarded[0].header("webhook-timestamp"), Some("1764675601"));
    assert_eq!(forwarded[0].header("webhook-signature"), Some("v1,c2lnbmF0dXJl"));
    assert_eq!(forwarded[0].header("x-gatehouse-event"), Some("contact.created"));
    assert_eq!(forwarded[0].header("authorization"), None, "the API key never reaches the receiver");

    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(
        kept,
        json!({"gateway": gateway.url(), "subscription_id": "wh_cli",
               "secret": "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX", "events": ["*"], "cursor": NOW})
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&state).unwrap().permissions().mode() & 0o777, 0o600);
    }

    // Second run, same state: the subscription is reused, failed deliveries since the cursor are
    // queued again before a resuming pull; a 503 is a lost connection, after which both happen again.
    let before = gateway.received().len();
    gateway.script(vec![
        Answer::json(200, json!({"data": [subscription()], "next_cursor": null})),
        Answer::json(200, json!({"requeued": 2})),
        Answer::error(503, "UNAVAILABLE", true),
        Answer::json(200, json!({"requeued": 0})),
        pulled(json!([])),
    ]);
    let mut child = listen(&gateway, &receiver, &state);
    let stderr = lines(child.stderr.take().unwrap());
    line_with(&stderr, "Ready.");
    line_with(&stderr, &format!("2 failed delivery(ies) since {NOW} queued again"));
    let lost = line_with(&stderr, "connection lost");
    assert!(lost.starts_with("connection lost (503 UNAVAILABLE: scripted UNAVAILABLE"), "{lost}");
    assert!(lost.ends_with("); reconnecting in 1s"), "{lost}");
    let seen = gateway.wait_for(before + 6, 10).await;
    child.kill().unwrap();
    child.wait().unwrap();

    let routes: Vec<String> = seen[before..before + 6].iter().map(route).collect();
    assert_eq!(
        routes,
        [
            "GET /public/v1/webhooks",
            "POST /public/v1/webhooks/wh_cli/recover",
            "GET /public/v1/webhooks/wh_cli/pull?wait=0&resume=true",
            "POST /public/v1/webhooks/wh_cli/recover",
            "GET /public/v1/webhooks/wh_cli/pull?wait=0&resume=true",
            "GET /public/v1/webhooks/wh_cli/pull?wait=0&resume=false",
        ]
    );
    assert_eq!(seen[before + 1].json(), json!({"since": NOW}));
    let waited = seen[before + 3].at - seen[before + 2].at;
    assert!(waited >= Duration::from_millis(950), "reconnected after {waited:?}, not 1 s");
    std::fs::remove_dir_all(dir).unwrap();
}
