//! The SDK's retry, pacing and buffering behaviour against a scripted HTTP server on 127.0.0.1:
//! real connections, real waits.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gatehouse_client::retry::RandomSource;
use gatehouse_client::{Actor, Client, Error, Event, NewContact, Notice};
use serde_json::json;
use support::{Answer, FakeServer};

fn contact() -> Answer {
    Answer::json(
        201,
        json!({"id": "con_1", "name": "Ada", "phone": null, "email": null, "external_id": null,
               "created_at": "2026-11-30T16:00:00.000Z"}),
    )
}

fn me(remaining: u64, reset: u64) -> Answer {
    Answer::json(
        200,
        json!({"key_id": "key_1", "prefix": "gh_s_abcdefg", "type": "server", "project_id": "prj_1", "plan": "trial",
               "rate_limit": {"limit": 30, "remaining": remaining, "reset": "2026-11-30T16:01:00.000Z"},
               "quota": {"used": 1, "limit": 10000, "resets_at": "2026-12-01T00:00:00.000Z"}}),
    )
    .header("x-ratelimit-remaining", remaining)
    .header("x-ratelimit-reset", reset)
}

/// The same draw every time: the jitter becomes exact.
struct Fixed(f64);

impl RandomSource for Fixed {
    fn unit(&self) -> f64 {
        self.0
    }
}

/// A client for `url` that keeps every notice.
fn client(url: &str) -> (Client, Arc<Mutex<Vec<Notice>>>) {
    client_drawing(url, 0.5)
}

/// A client for `url` whose every random draw is `random`.
fn client_drawing(url: &str, random: f64) -> (Client, Arc<Mutex<Vec<Notice>>>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let kept = notices.clone();
    let client = Client::builder(url)
        .api_key("gh_s_test")
        .random_source(Fixed(random))
        .on_notice(move |notice| kept.lock().unwrap().push(notice.clone()))
        .build()
        .unwrap();
    (client, notices)
}

fn ada() -> NewContact {
    NewContact { name: Some("Ada".into()), ..Default::default() }
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_retried_with_the_same_key() {
    let server = FakeServer::start(vec![
        Answer::error(429, "RATE_LIMIT_EXCEEDED", true).header("retry-after", 2),
        contact(),
    ])
    .await;
    // The largest draw: Retry-After plus the full 10 %.
    let (client, notices) = client_drawing(&server.url(), 1.0);
    let created = client.create_contact(&ada()).await.unwrap();
    assert_eq!(created.id, "con_1");
    let got = server.received();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("POST", "/public/v1/contacts"));
    let waited = got[1].at - got[0].at;
    assert!(waited >= Duration::from_millis(2_200), "waited only {waited:?}, not Retry-After + 10 %");
    assert!(waited <= Duration::from_millis(2_700), "waited {waited:?}");
    let key = got[0].header("idempotency-key").expect("an Idempotency-Key");
    assert!(uuid::Uuid::parse_str(key).is_ok_and(|id| id.get_version_num() == 4), "{key}");
    assert_eq!(got[1].header("idempotency-key"), Some(key), "the retry reuses the key");
    assert_eq!(got[0].body, got[1].body);
    assert_eq!(got[0].header("authorization"), Some("Bearer gh_s_test"));
    let retry =
        Notice::Retry { wait: Duration::from_millis(2_200), retry_after: Some(Duration::from_secs(2)) };
    assert!(notices.lock().unwrap().contains(&retry), "{:?}", notices.lock().unwrap());
}

#[tokio::test]
async fn each_call_gets_its_own_key_and_a_given_key_is_sent_as_is() {
    let server = FakeServer::start(vec![contact()]).await;
    let (client, _) = client(&server.url());
    client.create_contact(&ada()).await.unwrap();
    client.create_contact(&ada()).await.unwrap();
    client.create_contact(&ada()).idempotency_key("signup-4711").await.unwrap();
    let keys: Vec<String> =
        server.received().iter().map(|r| r.header("idempotency-key").unwrap().to_owned()).collect();
    assert_ne!(keys[0], keys[1]);
    assert_eq!(keys[2], "signup-4711");
}

#[tokio::test]
async fn a_503_on_a_post_with_a_key_is_retried_after_a_backoff() {
    let server = FakeServer::start(vec![Answer::error(503, "SERVICE_UNAVAILABLE", true), contact()]).await;
    // The smallest draw: the first backoff, 1 s, halved.
    let (client, _) = client_drawing(&server.url(), 0.0);
    let reply = client.create_contact(&ada()).reply().await.unwrap();
    assert_eq!(reply.status, 201);
    let got = server.received();
    assert_eq!(got.len(), 2);
    let waited = got[1].at - got[0].at;
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_millis(900), "{waited:?}");
    assert_eq!(got[0].header("idempotency-key"), got[1].header("idempotency-key"));
}

#[tokio::test]
async fn a_422_is_not_retried() {
    let server = FakeServer::start(vec![Answer::error(422, "VALIDATION_ERROR", false), contact()]).await;
    let (client, _) = client(&server.url());
    let error = client.create_contact(&ada()).await.unwrap_err();
    let Error::Api(api) = &error else { panic!("{error:?}") };
    assert_eq!((api.status, api.code.as_str(), api.retryable), (422, "VALIDATION_ERROR", false));
    assert_eq!(api.request_id.as_deref(), Some("req-422"));
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn a_quota_429_is_not_retried_and_attempts_are_limited() {
    let server = FakeServer::start(vec![Answer::error(429, "TRIAL_QUOTA_EXCEEDED", false)]).await;
    let (client, _) = client(&server.url());
    assert_eq!(client.me().await.unwrap_err().code(), "TRIAL_QUOTA_EXCEEDED");
    assert_eq!(server.received().len(), 1);

    let server = FakeServer::start(vec![Answer::error(500, "INTERNAL_ERROR", true)]).await;
    let client = Client::builder(server.url()).api_key("gh_s_test").max_attempts(2).build().unwrap();
    assert_eq!(client.me().await.unwrap_err().status(), Some(500));
    assert_eq!(server.received().len(), 2, "two attempts, then the last error");
}

#[tokio::test]
async fn a_get_whose_connection_is_refused_is_retried() {
    // A port nobody listens on yet; the server starts there while the client backs off.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let (client, notices) = client(&format!("http://{addr}"));
    let starter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        FakeServer::serve(listener, vec![me(29, 0)])
    });
    let answer = client.me().await.unwrap();
    assert_eq!(answer.rate_limit.remaining, 29);
    let server = starter.await.unwrap();
    assert_eq!(server.received().len(), 1);
    let notices = notices.lock().unwrap();
    assert!(
        notices.iter().any(|n| matches!(n, Notice::NoAnswer { error, .. } if error.contains("onnect"))),
        "{notices:?}"
    );
}

#[tokio::test]
async fn no_remaining_requests_hold_every_task_until_the_reset() {
    let reset = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 2;
    let server = FakeServer::start(vec![me(0, reset), me(29, reset + 60)]).await;
    let (client, notices) = client(&server.url());
    client.me().await.unwrap();
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let clone = client.clone();
            tokio::spawn(async move { clone.me().await.map(|_| ()) })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let got = server.received();
    assert_eq!(got.len(), 4);
    let reset_at = UNIX_EPOCH + Duration::from_secs(reset);
    for later in &got[1..] {
        assert!(
            later.wall >= reset_at,
            "a request came {:?} before the reset",
            reset_at.duration_since(later.wall)
        );
    }
    assert_eq!(notices.lock().unwrap().iter().filter(|n| matches!(n, Notice::Paced { .. })).count(), 3);
}

/// A 429 of a used-up window, as the gateway answers it.
fn limited(reset: u64) -> Answer {
    Answer::error(429, "RATE_LIMIT_EXCEEDED", true)
        .header("retry-after", 30)
        .header("x-ratelimit-limit", 30)
        .header("x-ratelimit-remaining", 0)
        .header("x-ratelimit-reset", reset)
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn a_call_allowed_one_attempt_is_not_held_by_pacing_and_its_429_says_when_to_come_back() {
    let reset = unix_now() + 30;
    let server = FakeServer::start(vec![me(0, reset), limited(reset)]).await;
    let (client, notices) = client(&server.url());
    client.me().await.unwrap();
    let started = std::time::Instant::now();
    let Err(Error::Api(e)) = client.me().max_attempts(1).await else { panic!("a 429 was expected") };
    assert!(started.elapsed() < Duration::from_secs(2), "held {:?}", started.elapsed());
    assert_eq!((e.status, e.code.as_str()), (429, "RATE_LIMIT_EXCEEDED"));
    assert_eq!(e.retry_after, Some(Duration::from_secs(30)));
    let state = e.rate_limit.expect("the rate-limit headers");
    assert_eq!((state.limit, state.remaining, state.reset), (30, 0, reset));
    assert_eq!(server.received().len(), 2);
    assert!(!notices.lock().unwrap().iter().any(|n| matches!(n, Notice::Paced { .. })));
}

#[tokio::test]
async fn a_deadline_shorter_than_the_window_fails_fast_and_bounds_the_retries() {
    let reset = unix_now() + 30;
    let server = FakeServer::start(vec![me(0, reset), limited(reset), limited(reset)]).await;
    let (client, _) = client(&server.url());
    client.me().await.unwrap();
    let started = std::time::Instant::now();
    let answer = client.me().deadline(Duration::from_secs(2)).await;
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(answer.unwrap_err().status(), Some(429), "not waited out: Retry-After is past the deadline");
    assert_eq!(server.received().len(), 2, "no retry that could not end in time");
}

#[tokio::test]
async fn pacing_can_be_switched_off_and_reads_the_injected_clock() {
    struct Later(SystemTime);
    impl gatehouse_client::retry::Clock for Later {
        fn now(&self) -> SystemTime {
            self.0
        }
    }
    let reset = unix_now() + 30;
    let server = FakeServer::start(vec![me(0, reset), me(0, reset), me(0, reset), me(29, reset + 60)]).await;
    let (client, notices) = client(&server.url());
    client.me().await.unwrap();
    let started = std::time::Instant::now();
    client.me().pacing(false).await.unwrap();
    let off = Client::builder(server.url()).api_key("gh_s_test").pacing(false).build().unwrap();
    off.me().await.unwrap();
    // A clock past the reset: the used-up window is over, nothing to wait for.
    let later = Client::builder(server.url())
        .api_key("gh_s_test")
        .clock(Later(UNIX_EPOCH + Duration::from_secs(reset + 1)))
        .build()
        .unwrap();
    later.me().await.unwrap();
    later.me().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "held {:?}", started.elapsed());
    assert!(!notices.lock().unwrap().iter().any(|n| matches!(n, Notice::Paced { .. })));
}

#[tokio::test]
async fn events_that_cannot_be_delivered_are_buffered_and_flushed_with_the_same_id() {
    let dir = std::env::temp_dir().join(format!("gatehouse-events-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let buffer = dir.join("buffer.ndjson");
    let server = FakeServer::start(vec![Answer::error(503, "SERVICE_UNAVAILABLE", true)]).await;
    let notices = Arc::new(Mutex::new(Vec::new()));
    let kept = notices.clone();
    let client = Client::builder(server.url())
        .api_key("gh_s_test")
        .max_attempts(2)
        .event_buffer(&buffer)
        .on_notice(move |n| kept.lock().unwrap().push(n.clone()))
        .build()
        .unwrap();

    let event = Event::new("Signed Up", Actor::User("u1".into()));
    let outcome = client.track(vec![event.clone()]).await.unwrap();
    assert_eq!((outcome.buffered, outcome.accepted.len()), (1, 0));
    assert_eq!(server.received().len(), 2, "retried once (a track batch is safe to repeat), then buffered");
    assert!(std::fs::read_to_string(&buffer).unwrap().contains(&event.event_id));

    let stale =
        Event::at("Old", Actor::User("u1".into()), SystemTime::now() - Duration::from_secs(48 * 3600));
    std::fs::write(
        &buffer,
        format!(
            "{}\n{}\n",
            serde_json::to_string(&stale).unwrap(),
            std::fs::read_to_string(&buffer).unwrap()
        ),
    )
    .unwrap();
    server.script(vec![Answer::json(
        202,
        json!({"accepted": [{"index": 0, "event_id": event.event_id}],
                                                 "duplicates": [], "rejected": []}),
    )]);
    let flushed = client.flush_events().await.unwrap();
    assert_eq!(flushed.accepted, vec![event.event_id.clone()]);
    assert_eq!((flushed.dropped, flushed.buffered), (1, 0));
    let resent = server.received().pop().unwrap().json();
    assert_eq!(resent["batch"].as_array().unwrap().len(), 1, "the stale event is not sent");
    assert_eq!(resent["batch"][0]["event_id"], event.event_id.as_str());
    assert_eq!(resent["batch"][0]["timestamp"], event.timestamp.as_str());
    assert_eq!(std::fs::read_to_string(&buffer).unwrap(), "");
    assert!(notices
        .lock()
        .unwrap()
        .iter()
        .any(|n| matches!(n, Notice::EventsDropped { count: 1, .. }) && n.is_warning()));
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn events_another_request_is_sending_are_sent_again() {
    let server = FakeServer::start(vec![
        Answer::json(202, json!({"accepted": [{"index": 0, "event_id": "a"}], "duplicates": [],
                                 "rejected": [{"index": 1, "code": "EVENT_IN_FLIGHT", "message": "retry shortly"}]})),
        Answer::json(202, json!({"accepted": [], "duplicates": [{"index": 0, "event_id": "b"}], "rejected": []})),
    ])
    .await;
    let (client, _) = client(&server.url());
    let events: Vec<Event> =
        ["a", "b"].iter().map(|name| Event::new(*name, Actor::User("u".into()))).collect();
    let outcome = client.track(events.clone()).await.unwrap();
    assert_eq!(outcome.accepted, vec![events[0].event_id.clone()]);
    assert_eq!(outcome.duplicates, vec![events[1].event_id.clone()]);
    let second = server.received()[1].json();
    assert_eq!(second["batch"][0]["event_id"], events[1].event_id.as_str());
}
