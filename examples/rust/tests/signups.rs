//! The service against a real Gatehouse, one kit per test (they run in parallel).

use std::time::Duration;

use gatehouse_client::testing::TestKit;
use gatehouse_client::Error;
use gatehouse_example::{verified_payload, Signups};

#[tokio::test]
async fn a_repeated_sign_up_makes_one_contact() {
    let kit = TestKit::start().unwrap();
    let signups = Signups::new(kit.url(), &kit.key("server"), 5).unwrap();
    let first = signups.sign_up("ada-1", "Ada").await.unwrap();
    let again = signups.sign_up("ada-1", "Ada").await.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(signups.contacts().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_429_ends_when_the_clock_moves_past_the_window() {
    let kit = TestKit::start().unwrap();
    let signups = Signups::new(kit.url(), &kit.key("server"), 1).unwrap();
    // The window is the clock's minute: begin the 30 at the start of the next one (read off the
    // kit's clock in the first contact's `created_at`), so the 31st cannot fall into a new window.
    let first = signups.sign_up("s0", "Someone").await.unwrap();
    let second: u64 = first.created_at[17..19].parse().unwrap();
    kit.advance(60 - second).unwrap();
    for i in 1..=30 {
        signups.sign_up(&format!("s{i}"), "Someone").await.unwrap();
    }
    // A fresh client (the first one would wait for the window's reset by itself), one attempt.
    let refused = Signups::new(kit.url(), &kit.key("server"), 1).unwrap().sign_up("s31", "Late").await;
    match refused {
        Err(Error::Api(e)) => assert_eq!((e.status, e.code.as_str()), (429, "RATE_LIMIT_EXCEEDED")),
        other => panic!("expected a 429, got {other:?}"),
    }
    kit.advance(60).unwrap();
    let late = Signups::new(kit.url(), &kit.key("server"), 1).unwrap().sign_up("s31", "Late").await.unwrap();
    assert_eq!(late.name.as_deref(), Some("Late"));
}

#[tokio::test]
async fn the_contact_created_webhook_verifies_with_the_sdk() {
    let kit = TestKit::start().unwrap();
    let subscription = kit.subscribe(&["contact.created"]).unwrap();
    let secret = subscription["secret"].as_str().unwrap();
    let signups = Signups::new(kit.url(), &kit.key("server"), 5).unwrap();
    let made = signups.sign_up("grace", "Grace").await.unwrap();
    let delivery = kit.next_webhook(Some("contact.created"), Duration::from_secs(5)).unwrap();
    let header = |name: &str| delivery["headers"][name].as_str().unwrap().to_owned();
    let payload = verified_payload(
        secret,
        &header("webhook-id"),
        &header("webhook-timestamp"),
        &header("webhook-signature"),
        delivery["body"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(payload["data"]["id"], made.id.as_str());
    // One byte changed: refused.
    let tampered = delivery["body"].as_str().unwrap().replace("Grace", "Grave");
    assert!(verified_payload(
        secret,
        &header("webhook-id"),
        &header("webhook-timestamp"),
        &header("webhook-signature"),
        &tampered
    )
    .is_err());
}

#[tokio::test]
async fn a_failed_delivery_is_attempted_again_when_the_clock_reaches_its_retry() {
    let kit = TestKit::start().unwrap();
    kit.subscribe(&["contact.created"]).unwrap();
    kit.fail_webhooks(1).unwrap();
    let signups = Signups::new(kit.url(), &kit.key("server"), 5).unwrap();
    let made = signups.sign_up("linus", "Linus").await.unwrap();
    assert!(
        kit.next_webhook(Some("contact.created"), Duration::from_secs(2)).is_err(),
        "the first attempt was answered 500"
    );
    kit.advance(40).unwrap(); // the first retry is 30 s (± 10 %) later
    let retried = kit.next_webhook(Some("contact.created"), Duration::from_secs(1)).unwrap();
    assert_eq!(retried["data"]["id"], made.id.as_str());
    assert_eq!(retried["attempt"], 2);
}
