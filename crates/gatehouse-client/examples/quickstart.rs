//! The SDK example of docs/api/clients.md: `GATEHOUSE_KEY=gh_s_… cargo run -p gatehouse-client --example quickstart`
//! against a running gateway (`GATEHOUSE_URL`, default http://127.0.0.1:8787).

use gatehouse_client::{Actor, Client, Error, Event, NewContact, DEFAULT_URL};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("GATEHOUSE_URL").unwrap_or_else(|_| DEFAULT_URL.into());
    let key = std::env::var("GATEHOUSE_KEY").expect("set GATEHOUSE_KEY to a server key");
    let client = Client::new(url, key)?;

    // Each call makes its own Idempotency-Key (a UUIDv4), which its retries reuse.
    let ada = client.create_contact(&NewContact { name: Some("Ada".into()), ..Default::default() }).await?;

    // Your own key for an operation you may repeat: the repeat answers the first result.
    let grace = NewContact { email: Some("grace@example.com".into()), ..Default::default() };
    let reply = client.create_contact(&grace).idempotency_key(format!("signup-{}", ada.id)).reply().await?;
    println!("created {} (replayed: {}, request {:?})", reply.value.id, reply.replayed, reply.request_id);

    // Events get their event_id when they are made and keep it on every re-send.
    let signed_up = Event::new("Signed Up", Actor::User(ada.id.clone())).property("plan", "trial");
    let outcome = client.track(vec![signed_up]).await?;
    println!("accepted {:?}", outcome.accepted);

    // Lists follow their cursors.
    let mut contacts = client.list_contacts();
    while let Some(contact) = contacts.try_next().await? {
        println!("{} {:?} {:?}", contact.id, contact.name, contact.email);
    }

    // Errors carry what the API said, with the request id to quote.
    match client.get_contact("con_missing").await {
        Err(Error::Api(e)) => println!("{} {}: {} (request {:?})", e.status, e.code, e.message, e.request_id),
        other => println!("unexpected: {other:?}"),
    }
    Ok(())
}
