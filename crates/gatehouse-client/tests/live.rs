//! The SDK end to end against a running gateway. Ignored by a plain `cargo test`; scripts/test
//! runs them against `wrangler dev` through `tests/e2e/client.test.mjs`:
//!
//! ```sh
//! GATEHOUSE_URL=http://127.0.0.1:8787 GATEHOUSE_ADMIN_TOKEN=… cargo test -p gatehouse-client --test live -- --ignored
//! ```
//!
//! The gateway must allow webhooks to 127.0.0.1 (`ALLOW_PRIVATE_WEBHOOK_URLS=true`, as scripts/test
//! sets it): the receiver of the webhook test listens there.

mod support;

use std::time::{Duration, SystemTime};

use gatehouse_client::{
    Actor, Client, DeliveryStatus, Error, Event, KeyType, LogFilter, NewContact, NewKey, NewMessage,
    NewReleaseMarker, VerifyError, WebhookVerifier,
};
use serde_json::{json, Value};
use support::{Answer, FakeServer};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run through scripts/test"))
}

/// A new project on the business plan: its owner client and id.
async fn project() -> (Client, String) {
    let url = env("GATEHOUSE_URL");
    let admin = Client::new(&url, env("GATEHOUSE_ADMIN_TOKEN")).unwrap();
    let body = serde_json::to_vec(&json!({ "name": "sdk live test", "plan": "business" })).unwrap();
    let created: Value = serde_json::from_slice(
        &admin.request("POST", "/admin/v1/projects", Some(body)).unwrap().await.unwrap(),
    )
    .unwrap();
    let owner = Client::new(&url, created["owner_key"]["key"].as_str().unwrap()).unwrap();
    (owner, created["project_id"].as_str().unwrap().to_owned())
}

/// A new key of `key_type`: a client acting with it, and the key.
async fn key(owner: &Client, key_type: &str) -> (Client, String) {
    let kind = key_type.parse::<KeyType>().unwrap();
    let created = owner.create_key(&NewKey::new(kind).name(format!("live {key_type}"))).await.unwrap();
    (owner.with_key(&created.key), created.key)
}

fn named(name: &str) -> NewContact {
    NewContact { name: Some(name.into()), ..Default::default() }
}

#[tokio::test]
#[ignore = "needs a running gateway (scripts/test)"]
async fn creates_lists_and_replays_resources() {
    let (owner, project_id) = project().await;
    let (server, _) = key(&owner, "server").await;
    let me = server.me().await.unwrap();
    assert_eq!(
        (me.key_type.as_str(), me.project_id.as_str(), me.plan.as_str()),
        ("server", project_id.as_str(), "business")
    );

    let signup = format!("live-signup-{}", uuid::Uuid::new_v4());
    let first = server.create_contact(&named("Ada")).idempotency_key(&signup).reply().await.unwrap();
    assert_eq!((first.status, first.replayed), (201, false));
    let again = server.create_contact(&named("Ada")).idempotency_key(&signup).reply().await.unwrap();
    assert!(again.replayed, "the same key and body replay the first answer");
    assert_eq!(again.value.id, first.value.id);
    assert_ne!(again.request_id, first.request_id);
    let reused = server.create_contact(&named("Grace")).idempotency_key(&signup).await.unwrap_err();
    assert_eq!(
        (reused.status(), reused.code(), reused.retryable()),
        (Some(409), "IDEMPOTENCY_KEY_REUSED", false)
    );

    assert_eq!(server.get_contact(&first.value.id).await.unwrap().name.as_deref(), Some("Ada"));
    let bulk = server
        .create_contacts_bulk(&[
            named("Bulk 1"),
            named("Bulk 2"),
            NewContact { phone: Some("12".into()), ..Default::default() },
        ])
        .await
        .unwrap();
    assert_eq!((bulk.created, bulk.failed), (2, 1));
    assert_eq!(bulk.results[2].error.as_ref().unwrap()["code"], "VALIDATION_ERROR");
    let all = server.list_contacts().collect_all().await.unwrap();
    assert_eq!(all.len(), 3, "one Ada (the replay created nothing) and two from the bulk call");

    let message = server
        .create_message(&NewMessage { contact_id: first.value.id.clone(), text: "Welcome".into() })
        .await
        .unwrap();
    assert_eq!(message.status, "queued");
    let unknown = server
        .create_message(&NewMessage { contact_id: "con_nope".into(), text: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(unknown.status(), Some(422));
    let messages = server
        .create_messages_bulk(&[NewMessage { contact_id: first.value.id.clone(), text: "One".into() }])
        .await
        .unwrap();
    assert_eq!(messages.created, 1);
    let scenario = server.create_scenario("welcome series").await.unwrap();
    let run =
        server.run_scenario(&scenario.id, &first.value.id, Some(json!({ "coupon": "W10" }))).await.unwrap();
    assert_eq!(run.status, "started");

    let (cicd, _) = key(&owner, "cicd").await;
    let marker = NewReleaseMarker {
        version: "1.4.2".into(),
        ts: json!(1_795_942_860),
        environment: None,
        commit: None,
    };
    let job = format!("deploy-job-{}", uuid::Uuid::new_v4());
    let created =
        cicd.create_release_marker(&project_id, &marker).idempotency_key(&job).reply().await.unwrap();
    let repeated =
        cicd.create_release_marker(&project_id, &marker).idempotency_key(&job).reply().await.unwrap();
    assert_eq!((created.status, repeated.status, repeated.replayed), (201, 200, true));
    assert_eq!(created.value.id, repeated.value.id);

    let browser = owner.create_key(&NewKey::new(KeyType::Browser)).await.unwrap();
    let keys = owner.list_keys().collect_all().await.unwrap();
    assert!(keys.iter().any(|k| k.id == browser.info.id && k.status == "active"));
    assert_eq!(owner.revoke_key(&browser.info.id).await.unwrap().status, "revoked");
    let refused = owner.with_key(browser.key).me().await.unwrap_err();
    let Error::Api(refused) = refused else { panic!("{refused:?}") };
    assert_eq!((refused.status, refused.code.as_str(), refused.retryable), (401, "INVALID_API_KEY", false));
    assert!(refused.request_id.is_some());
}

#[tokio::test]
#[ignore = "needs a running gateway (scripts/test)"]
async fn events_keep_their_id_across_sends_and_the_buffer() {
    let (owner, _) = project().await;
    let (server, server_key) = key(&owner, "server").await;
    let events = vec![
        Event::new("Signed Up", Actor::Anonymous("anon-live".into())).property("plan", "trial"),
        Event::new("Order Completed", Actor::User("user-live".into())).property("total", 99.5),
    ];
    let ids: Vec<String> = events.iter().map(|e| e.event_id.clone()).collect();
    let first = server.track(events.clone()).await.unwrap();
    assert_eq!(first.accepted, ids);
    let again = server.track(events.clone()).await.unwrap();
    assert_eq!(
        (again.accepted.len(), again.duplicates.clone()),
        (0, ids.clone()),
        "a re-send is a duplicate"
    );

    // An event kept in the buffer by an earlier process is sent with its own id by a flush.
    let dir = std::env::temp_dir().join(format!("gatehouse-live-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let buffer = dir.join("events.ndjson");
    let kept = Event::new("Checkout Started", Actor::User("user-live".into()));
    std::fs::write(&buffer, format!("{}\n", serde_json::to_string(&kept).unwrap())).unwrap();
    let flushing =
        Client::builder(env("GATEHOUSE_URL")).api_key(server_key).event_buffer(&buffer).build().unwrap();
    let flushed = flushing.flush_events().await.unwrap();
    assert_eq!((flushed.accepted.clone(), flushed.buffered), (vec![kept.event_id.clone()], 0));
    assert_eq!(std::fs::read_to_string(&buffer).unwrap(), "");
    assert_eq!(flushing.track(vec![kept.clone()]).await.unwrap().duplicates, vec![kept.event_id]);
    std::fs::remove_dir_all(dir).unwrap();

    let identified = server.identify("anon-live", "user-live", Some(json!({ "plan": "pro" }))).await.unwrap();
    assert!(uuid::Uuid::parse_str(&identified.event_id).is_ok());
    let linked = server.alias("anon-live", "user-live").await.unwrap();
    assert_eq!(linked.user_id, "user-live");
    assert!(!server.send_replay_chunk("session-live", 0, json!([{ "t": 0 }])).await.unwrap().duplicate);
    assert!(server.send_replay_chunk("session-live", 0, json!([{ "t": 0 }])).await.unwrap().duplicate);
}

#[tokio::test]
#[ignore = "needs a running gateway (scripts/test)"]
async fn the_log_is_listed_by_cursor_and_tailed() {
    let (owner, _) = project().await;
    let (server, _) = key(&owner, "server").await;
    let filter = LogFilter { path: Some("/public/v1/contacts*".into()), ..Default::default() };
    let mut tail = owner.tail_logs(filter.clone(), Duration::from_secs(1));
    let created = server.create_contact(&named("Tailed")).reply().await.unwrap();
    let request_id = created.request_id.clone().unwrap();
    let row =
        tokio::time::timeout(Duration::from_secs(30), tail.next()).await.expect("a row within 30 s").unwrap();
    assert_eq!(
        (row.request_id.as_str(), row.status, row.method.as_str()),
        (request_id.as_str(), 201, "POST")
    );
    assert_eq!(row.idempotency_key, created.idempotency_key);

    for _ in 0..4 {
        server.get_contact(&created.value.id).await.unwrap();
    }
    let paged = LogFilter { limit: Some(2), ..filter.clone() };
    let rows = wait_for_rows(&owner, &paged, 5).await;
    assert_eq!(rows.len(), 5, "five rows over three pages of two");
    let mut times: Vec<&String> = rows.iter().map(|r| &r.ts).collect();
    let newest_first = times.clone();
    times.sort_by(|a, b| b.cmp(a));
    assert_eq!(times, newest_first);
    let first_page = owner.log_page(&paged, None).await.unwrap();
    assert_eq!(first_page.data.len(), 2);
    assert!(first_page.next_cursor.is_some());
    assert_eq!(owner.get_log(&request_id).await.unwrap().status, 201);
}

/// Every row of `filter` once at least `n` are there (audit rows arrive through a queue).
async fn wait_for_rows(owner: &Client, filter: &LogFilter, n: usize) -> Vec<gatehouse_client::LogEntry> {
    let end = SystemTime::now() + Duration::from_secs(30);
    loop {
        let rows = owner.logs(filter).collect_all().await.unwrap();
        if rows.len() >= n || SystemTime::now() > end {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore = "needs a running gateway (scripts/test)"]
async fn a_real_delivery_verifies_with_the_subscription_secret() {
    let receiver = FakeServer::start(vec![Answer::json(200, json!({ "ok": true }))]).await;
    let (owner, _) = project().await;
    let (server, _) = key(&owner, "server").await;
    let hook = owner.create_webhook(&format!("{}/hook", receiver.url()), &["contact.created"]).await.unwrap();
    let secret = hook.secret.clone().expect("a v1 subscription shows its secret");
    assert!(secret.starts_with("whsec_"));
    let contact = server.create_contact(&named("Hooked")).await.unwrap();

    let got = receiver.wait_for(1, 30).await;
    let delivery = got.first().expect("a delivery within 30 s");
    assert_eq!((delivery.method.as_str(), delivery.path.as_str()), ("POST", "/hook"));
    let (id, timestamp, signature) = (
        delivery.header("webhook-id").unwrap(),
        delivery.header("webhook-timestamp").unwrap(),
        delivery.header("webhook-signature").unwrap(),
    );
    let verifier = WebhookVerifier::new(&secret).unwrap();
    assert_eq!(verifier.verify(id, timestamp, signature, &delivery.body), Ok(()));
    let payload = delivery.json();
    assert_eq!(
        (payload["type"].as_str(), payload["data"]["id"].as_str()),
        (Some("contact.created"), Some(contact.id.as_str()))
    );
    let mut tampered = delivery.body.clone();
    tampered.extend_from_slice(b" ");
    assert_eq!(verifier.verify(id, timestamp, signature, &tampered), Err(VerifyError::SignatureMismatch));
    let other_hook = owner.create_webhook(&format!("{}/other", receiver.url()), &["*"]).await.unwrap();
    let other = WebhookVerifier::new(&other_hook.secret.unwrap_or_default()).unwrap();
    assert_eq!(other.verify(id, timestamp, signature, &delivery.body), Err(VerifyError::SignatureMismatch));

    let end = SystemTime::now() + Duration::from_secs(20);
    loop {
        let delivered = owner
            .list_deliveries(&hook.info.id, Some(DeliveryStatus::Delivered))
            .collect_all()
            .await
            .unwrap();
        if let Some(d) = delivered.first() {
            assert_eq!((d.id.as_str(), d.last_response_code), (id, Some(200)));
            break;
        }
        assert!(SystemTime::now() < end, "the delivery was not marked delivered");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(owner.list_webhooks().collect_all().await.unwrap().len(), 2);
    assert_eq!(owner.delete_webhook(&hook.info.id).await.unwrap().status, "deleted");
}
