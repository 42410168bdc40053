//! The worker's only entry points. Each builds the adapters from `Env` and delegates.

use std::rc::Rc;

use worker::{
    console_error, console_log, event, Context, Date, Env, MessageBatch, MessageExt, Request, Response,
    Result,
};

use crate::adapters::d1::D1Store;
use crate::adapters::env::config;
use crate::adapters::events::{LedgerClient, QueueSink, QUEUE_BINDING};
use crate::adapters::guard::GuardClient;
use crate::adapters::kv::{self, KvResponses};
use crate::app::{self, Gateway};
use crate::config::Config;
use crate::core::error::ApiError;
use crate::core::events::EventMessage;
use crate::ports::{EventStore, Meter, Ports};
use crate::{guard, http, ledger};

/// The ports over Cloudflare's bindings.
struct Cloudflare;

impl Ports for Cloudflare {
    type Guard = GuardClient;
    type Store = D1Store;
    type Responses = KvResponses;
    type Ledger = LedgerClient;
    type Events = QueueSink;
}

fn gateway(env: &Env, config: &'static Config, meter: &Rc<Meter>) -> Result<Gateway<'static, Cloudflare>> {
    Ok(Gateway {
        config,
        guard: GuardClient::new(env.durable_object(guard::protocol::BINDING)?, meter.clone()),
        store: D1Store::new(env.d1("DB")?, meter.clone()),
        responses: KvResponses::new(env.kv(kv::BINDING)?, config.idempotency_ttl_seconds, meter.clone()),
        ledger: LedgerClient::new(env.durable_object(ledger::protocol::BINDING)?, meter.clone()),
        events: QueueSink::new(env.queue(QUEUE_BINDING)?),
    })
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let now_ms = Date::now().as_millis() as i64;
    let meter = Rc::new(Meter::default());
    let (method, path) = (req.inner().method(), req.path());
    let mut api = match config(&env) {
        Ok(config) => gateway(&env, config, &meter)?.handle(http::api_request(req, now_ms)?).await,
        Err(e) => app::failure(ApiError::internal(e.to_string())),
    };
    if let Some(note) = &api.internal_error {
        console_error!("request {}: {note}", api.request_id);
    }
    // One line per request: what it cost in I/O before the response (SPEC §12 budget).
    console_log!(
        r#"{{"request_id":"{}","method":"{method}","path":{:?},"status":{},"ms":{},"durable_object_calls":{},"d1_queries":{},"kv_operations":{}}}"#,
        api.request_id,
        path,
        api.status,
        Date::now().as_millis() as i64 - now_ms,
        meter.durable_object_calls.get(),
        meter.d1_queries.get(),
        meter.kv_operations.get(),
    );
    if let (Some(settlement), Ok(config)) = (api.settlement.take(), config(&env)) {
        let request_id = api.request_id.clone();
        let after = gateway(&env, config, &Rc::new(Meter::default()))?;
        ctx.wait_until(async move {
            if let Err(e) = after.settle(settlement).await {
                console_error!("request {request_id}: settling its idempotency claim failed: {e}");
            }
        });
    }
    http::response(api)
}

/// Queue consumers. Messages carry their kind, so one handler serves every queue whatever its
/// name in this environment.
#[event(queue)]
async fn queue(batch: MessageBatch<String>, env: Env, _ctx: Context) -> Result<()> {
    let store = D1Store::new(env.d1("DB")?, Rc::default());
    let mut events = Vec::new();
    for message in batch.messages()? {
        match serde_json::from_str::<EventMessage>(message.body()) {
            Ok(event) => events.push(event),
            // A message no version of this worker can read would be retried forever: log and drop it.
            Err(e) => console_error!("queue {}: unreadable message {}: {e}", batch.queue(), message.id()),
        }
    }
    match store.store_events(&events).await {
        Ok(()) => batch.ack_all(),
        Err(e) => {
            console_error!(
                "queue {}: storing {} events failed, retrying the batch: {e}",
                batch.queue(),
                events.len()
            );
            batch.retry_all();
        }
    }
    Ok(())
}
