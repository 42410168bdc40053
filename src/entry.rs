//! The worker's only entry points. Each builds the adapters from `Env` and delegates.

use std::rc::Rc;

use serde::Deserialize;
use worker::{
    console_error, console_log, event, Context, Date, Env, MessageBatch, MessageExt, Request, Response,
    Result, ScheduleContext, ScheduledEvent,
};

use crate::adapters::archive::{self, R2Archive};
use crate::adapters::audit::{self as audit_queue, AuditQueue};
use crate::adapters::d1::D1Store;
use crate::adapters::env::config;
use crate::adapters::events::{self, LedgerClient, QueueSink};
use crate::adapters::guard::GuardClient;
use crate::adapters::kv::{self, KvResponses};
use crate::adapters::webhooks::{self as webhook_queue, FetchClient, WebhookQueue};
use crate::app::{self, Gateway};
use crate::config::Config;
use crate::core::audit::AuditMessage;
use crate::core::error::ApiError;
use crate::core::events::EventBatch;
use crate::core::webhook::DeliveryMessage;
use crate::ports::{AuditSink, DeliveryQueue, EventStore, Meter, Ports};
use crate::{guard, http, ledger};

/// The ports over Cloudflare's bindings.
struct Cloudflare;

impl Ports for Cloudflare {
    type Guard = GuardClient;
    type Store = D1Store;
    type Responses = KvResponses;
    type Ledger = LedgerClient;
    type Events = QueueSink;
    type Archive = R2Archive;
    type Deliveries = WebhookQueue;
}

fn gateway(env: &Env, config: &'static Config, meter: &Rc<Meter>) -> Result<Gateway<'static, Cloudflare>> {
    Ok(Gateway {
        config,
        guard: GuardClient::new(env.durable_object(guard::protocol::BINDING)?, meter.clone()),
        store: D1Store::new(env.d1("DB")?, meter.clone()),
        responses: KvResponses::new(env.kv(kv::BINDING)?, config.idempotency_ttl_seconds, meter.clone()),
        ledger: LedgerClient::new(env.durable_object(ledger::protocol::BINDING)?, meter.clone()),
        events: QueueSink::new(env.queue(events::QUEUE_BINDING)?),
        archive: R2Archive::new(env.bucket(archive::BINDING)?),
        deliveries: WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING)?),
    })
}

fn now_ms() -> i64 {
    Date::now().as_millis() as i64
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let started = now_ms();
    let meter = Rc::new(Meter::default());
    let (method, path) = (req.inner().method(), req.path());
    let mut api = match config(&env) {
        Ok(config) => gateway(&env, config, &meter)?.handle(http::api_request(req, started)?).await,
        Err(e) => app::failure(ApiError::internal(e.to_string()), &method, &path, started),
    };
    api.audit.response_time_ms = now_ms() - started;
    if let Some(note) = &api.internal_error {
        console_error!("request {}: {note}", api.request_id);
    }
    // One line per request: what it cost in I/O before the response (SPEC §12 budget).
    console_log!(
        r#"{{"request_id":"{}","method":"{method}","path":{:?},"status":{},"ms":{},"durable_object_calls":{},"d1_queries":{},"kv_operations":{}}}"#,
        api.request_id,
        path,
        api.status,
        api.audit.response_time_ms,
        meter.durable_object_calls.get(),
        meter.d1_queries.get(),
        meter.kv_operations.get(),
    );
    // After the response: the audit row, webhook deliveries, and the idempotency claim's settlement.
    let audit = AuditQueue::new(env.queue(audit_queue::QUEUE_BINDING)?);
    let row = api.audit.clone();
    ctx.wait_until(async move {
        if let Err(e) = audit.record(&[row]).await {
            console_error!("audit row lost: {e}");
        }
    });
    if !api.webhook_deliveries.is_empty() {
        let queue = WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING)?);
        let ids = std::mem::take(&mut api.webhook_deliveries);
        ctx.wait_until(async move {
            // A lost send is not a lost delivery: the minute sweep finds it due in D1.
            if let Err(e) = queue.enqueue(&ids, 0).await {
                console_error!("webhook deliveries {ids:?} not queued (the sweep will): {e}");
            }
        });
    }
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

/// What any of our queues carries: messages say their kind, so one consumer serves every queue
/// whatever its name in an environment.
#[derive(Deserialize)]
#[serde(untagged)]
enum QueueMessage {
    Events(EventBatch),
    Audit(AuditMessage),
    Delivery(DeliveryMessage),
}

/// A number in [-1, 1] for the retry schedule's jitter.
fn jitter() -> f64 {
    let [a, b] = app::random::<2>();
    f64::from(u16::from_be_bytes([a, b])) / f64::from(u16::MAX) * 2.0 - 1.0
}

#[event(queue)]
async fn queue(batch: MessageBatch<String>, env: Env, _ctx: Context) -> Result<()> {
    let store = D1Store::new(env.d1("DB")?, Rc::default());
    let (mut events, mut rows, mut deliveries) = (Vec::new(), Vec::new(), Vec::new());
    for message in batch.messages()? {
        match serde_json::from_str::<QueueMessage>(message.body()) {
            Ok(QueueMessage::Events(EventBatch::Events { items })) => events.extend(items),
            Ok(QueueMessage::Audit(AuditMessage::Audit(row))) => rows.push(row),
            Ok(QueueMessage::Delivery(DeliveryMessage::Delivery { delivery_id })) => {
                deliveries.push(delivery_id)
            }
            // A message no version of this worker can read would be retried forever: log and drop it.
            Err(e) => console_error!("queue {}: unreadable message {}: {e}", batch.queue(), message.id()),
        }
    }
    let stored = match store.store_events(&events).await {
        Ok(()) => app::store_audit_rows(&store, &rows).await,
        Err(e) => Err(e),
    };
    if !deliveries.is_empty() {
        let config = config(&env).map_err(|e| worker::Error::RustError(e.to_string()))?;
        let queue = WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING)?);
        // Attempts run side by side: one slow receiver does not hold up the others.
        let attempts = deliveries
            .iter()
            .map(|id| app::dispatch(&store, &queue, &FetchClient, config, id, now_ms, jitter()));
        for (id, outcome) in deliveries.iter().zip(futures_util::future::join_all(attempts).await) {
            // The delivery stays pending in D1; the sweep tries it again once it is overdue.
            if let Err(e) = outcome {
                console_error!("webhook delivery {id}: attempt not recorded: {e}");
            }
        }
    }
    match stored {
        Ok(()) => batch.ack_all(),
        Err(e) => {
            console_error!("queue {}: storing the batch failed, retrying it: {e}", batch.queue());
            batch.retry_all();
        }
    }
    Ok(())
}

/// Every minute: the webhook sweep. Daily: audit retention (rows older than
/// `AUDIT_RETENTION_DAYS` move to R2, then leave D1).
#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    let run = async {
        let config = config(&env).map_err(|e| worker::Error::RustError(e.to_string()))?;
        let store = D1Store::new(env.d1("DB")?, Rc::default());
        if event.cron() == "* * * * *" {
            let queue = WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING)?);
            let queued =
                app::sweep(&store, &queue, now_ms()).await.map_err(|e| worker::Error::RustError(e.0))?;
            if queued > 0 {
                console_log!(r#"{{"component":"webhook_sweep","requeued":{queued}}}"#);
            }
            return Ok(());
        }
        let archive = R2Archive::new(env.bucket(archive::BINDING)?);
        let report = app::enforce_retention(&store, &archive, now_ms(), config.audit_retention_days)
            .await
            .map_err(|e| worker::Error::RustError(e.0))?;
        console_log!(
            r#"{{"component":"retention","archived_rows":{},"objects":{}}}"#,
            report.archived,
            report.objects
        );
        Ok::<(), worker::Error>(())
    };
    if let Err(e) = run.await {
        console_error!("scheduled {}: {e}", event.cron());
    }
}
