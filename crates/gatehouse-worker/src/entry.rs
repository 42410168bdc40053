//! The worker's only entry points. Each builds the adapters from `Env` and delegates.

use std::cell::{OnceCell, RefCell};
use std::rc::Rc;

use wasm_bindgen::{JsCast, JsValue};
use worker::{
    console_error, console_log, event, Bucket, Context, D1Database, Env, KvStore, MessageBatch, MessageExt,
    ObjectNamespace, Queue, QueueRetryOptionsBuilder, Result, ScheduleContext, ScheduledEvent,
};

use crate::adapters::archive::{self, R2Archive};
use crate::adapters::audit::{self as audit_queue, AuditQueue};
use crate::adapters::clock::{self, now_ms};
use crate::adapters::d1::D1Store;
use crate::adapters::env::config;
use crate::adapters::events::{self, LedgerClient, QueueSink};
use crate::adapters::guard::GuardClient;
use crate::adapters::kv::{self, KvResponses};
use crate::adapters::origin::OriginClient;
use crate::adapters::redrive::QueueRedrive;
use crate::adapters::webhooks::{self as webhook_queue, FetchClient, WebhookQueue};
use crate::http;
use crate::static_files;
use gatehouse_app::outbox::{Coalesced, Outbox, Pause};
use gatehouse_app::queues::{Disposition, Incoming};
use gatehouse_app::{self as app, Gateway};
use gatehouse_core::abuse::AbuseMemory;
use gatehouse_core::audit::{clipped_len, PATH_MAX};
use gatehouse_core::config::Config;
use gatehouse_core::error::ApiError;
use gatehouse_core::lease::LeaseBook;
use gatehouse_core::ledger::shards::LedgerLayout;
use gatehouse_core::ports::{Meter, Ports};
use gatehouse_core::route::path_and_query;
use gatehouse_core::upstream::match_upstream;
use gatehouse_core::{guard, ledger};

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
    type Audit = Coalesced<AuditQueue, Timer>;
    type DeadLetters = D1Store;
    type Redrive = QueueRedrive;
    type Timer = Timer;
    type Origin = OriginClient;
}

thread_local! {
    /// The isolate's memory of abusive traffic, shared by every request it serves.
    static MEMORY: Rc<RefCell<AbuseMemory>> = Rc::default();
    /// The leases of hot keys the isolate holds (SPEC §20).
    static LEASES: Rc<RefCell<LeaseBook>> = Rc::default();
    /// The event-ledger shards the isolate saw split (SPEC §20).
    static LEDGER_LAYOUT: Rc<RefCell<LedgerLayout>> = Rc::default();
    /// The isolate's audit rows waiting for a send: concurrent requests share one.
    static OUTBOX: Rc<Outbox> = Rc::default();
    /// The bindings, looked up by the isolate's first request.
    static BINDINGS: OnceCell<Bindings> = const { OnceCell::new() };
}

/// The request's own timer (`setTimeout`).
struct Timer;

impl Pause for Timer {
    fn pause(&self, ms: u64) -> impl std::future::Future<Output = ()> {
        pause(ms)
    }
}

/// The bindings a request uses, looked up once per isolate like the configuration: each lookup
/// is several calls into JavaScript (the property, its constructor's name), thirteen per request
/// before. Bindings are not tied to a request, so every request of the isolate shares them.
#[derive(Clone)]
struct Bindings {
    guard: ObjectNamespace,
    ledger: ObjectNamespace,
    db: JsValue,
    /// `AUDIT_DB`, `AUDIT_DB_1`, … as many as `AUDIT_DATABASES` names.
    audit_dbs: Vec<JsValue>,
    kv: KvStore,
    events: Queue,
    deliveries: Queue,
    audit: Queue,
    archive: Bucket,
}

fn bindings(env: &Env, config: &Config) -> Result<Bindings> {
    if let Some(b) = BINDINGS.with(|cell| cell.get().cloned()) {
        return Ok(b);
    }
    let found = Bindings {
        guard: env.durable_object(guard::protocol::BINDING)?,
        ledger: env.durable_object(ledger::protocol::BINDING)?,
        db: env.d1("DB")?.into(),
        audit_dbs: audit_dbs(env, config).into_iter().map(Into::into).collect(),
        kv: env.kv(kv::BINDING)?,
        events: env.queue(events::QUEUE_BINDING)?,
        deliveries: env.queue(webhook_queue::QUEUE_BINDING)?,
        audit: env.queue(audit_queue::QUEUE_BINDING)?,
        archive: env.bucket(archive::BINDING)?,
    };
    Ok(BINDINGS.with(|cell| cell.get_or_init(|| found).clone()))
}

fn gateway(env: &Env, config: &'static Config, meter: &Rc<Meter>) -> Result<Gateway<'static, Cloudflare>> {
    let b = bindings(env, config)?;
    Ok(Gateway {
        config,
        guard: GuardClient::new(b.guard, meter.clone()),
        store: D1Store::new(b.db.clone().unchecked_into(), meter.clone())
            .with_audit_logs(b.audit_dbs.into_iter().map(JsCast::unchecked_into).collect())
            .with_usage_period(config.usage_period_ms()),
        responses: KvResponses::new(b.kv, config.idempotency_ttl_seconds, meter.clone()),
        ledger: LedgerClient::new(b.ledger, meter.clone()),
        events: QueueSink::new(b.events.clone()),
        archive: R2Archive::new(b.archive),
        deliveries: WebhookQueue::new(b.deliveries.clone()),
        audit: Coalesced {
            outbox: OUTBOX.with(Rc::clone),
            inner: AuditQueue::new(b.audit.clone()),
            timer: Timer,
        },
        dead_letters: D1Store::new(b.db.unchecked_into(), meter.clone()),
        redrive: QueueRedrive { audit: b.audit, events: b.events, webhooks: b.deliveries },
        origin: OriginClient::new(env.clone(), meter.clone()),
        memory: MEMORY.with(Rc::clone),
        leases: LEASES.with(Rc::clone),
        ledger_layout: LEDGER_LAYOUT.with(Rc::clone),
        timer: Timer,
    })
}

/// The D1 store: keys and resources in `DB`, the audit log in `AUDIT_DB`, `AUDIT_DB_1`, …
fn store(env: &Env, config: &Config, meter: &Rc<Meter>) -> Result<D1Store> {
    Ok(D1Store::new(env.d1("DB")?, meter.clone())
        .with_audit_logs(audit_dbs(env, config))
        .with_usage_period(config.usage_period_ms()))
}

/// The audit log's databases (SPEC §20), in order, as far as they are bound: a project recorded
/// on one that is not makes its audit calls fail, naming the binding, and nothing else.
fn audit_dbs(env: &Env, config: &Config) -> Vec<D1Database> {
    (0..config.audit_databases).map_while(|i| env.d1(&gatehouse_core::audit::audit_binding(i)).ok()).collect()
}

/// Sleeps `ms` milliseconds (an audit row waiting for a send, the tries of a notice after the
/// response).
fn pause(ms: u64) -> worker::Delay {
    worker::Delay::from(std::time::Duration::from_millis(ms))
}

/// A request, from the runtime's `Request` to its `Response` (`fetch_export` calls it).
pub async fn fetch(req: web_sys::Request, env: Env, ctx: Context) -> Result<web_sys::Response> {
    clock::follow(&env).await.map_err(|e| worker::Error::RustError(e.0))?;
    let started = now_ms();
    let meter = Rc::new(Meter::default());
    let head = http::RequestHead::of(&req);
    let method = head.method.clone();
    let (path, query) = path_and_query(&head.url).map_err(|e| worker::Error::RustError(e.to_string()))?;
    let configured = config(&env);
    // The dashboard's files (no API request, no audit row).
    if let Some(answer) =
        static_files::answer(&method, &path, &req, configured.as_ref().map_or(true, |c| c.server_timing))
    {
        return answer;
    }
    // One gateway per request: it answers, then finishes the work after the response.
    let (mut api, finisher, log_every_request, timing) = match configured {
        Ok(config) => {
            let gateway = gateway(&env, config, &meter)?;
            let forwards = |path: &str| match_upstream(&config.upstreams, path).is_some();
            let request = http::api_request(&req, head, path.clone(), query, started, forwards);
            (gateway.handle(request).await, Some(gateway), config.log_every_request, config.server_timing)
        }
        Err(e) => {
            let refusal = ApiError::misconfigured(&e.0, path == "/health");
            (app::failure(refusal, &method, &path, started), None, true, true)
        }
    };
    api.audit.response_time_ms = now_ms() - started;
    if timing {
        // SPEC §16: the gateway's own time and its waits, on every answer.
        api.headers.push(("server-timing", meter.spent(api.audit.response_time_ms).header()));
    }
    #[cfg(feature = "profile")]
    api.headers.push(("server-timing", crate::profile::server_timing()));
    if let Some(note) = &api.internal_error {
        console_error!("request {}: {note}", api.request_id);
    }
    // A line per request (`REQUEST_LOG=all`) or per server error: what it cost in I/O before the
    // response (SPEC §12 budget), and the isolate's wasm memory after it (it only grows: a request
    // that needs more than the ones before shows here, SPEC §19).
    if log_every_request || api.status >= 500 {
        console_log!(
            r#"{{"request_id":"{}","trace_id":"{}","method":"{method}","path":{:?},"status":{},"ms":{},"durable_object_calls":{},"d1_queries":{},"kv_operations":{},"wasm_memory_bytes":{}}}"#,
            api.request_id,
            api.audit.trace_id.as_deref().unwrap_or_default(),
            &path[..clipped_len(&path, PATH_MAX)],
            api.status,
            api.audit.response_time_ms,
            meter.durable_object_calls.get(),
            meter.d1_queries.get(),
            meter.kv_operations.get(),
            core::arch::wasm32::memory_size::<0>() * 65_536,
        );
    }
    // After the response: the audit row, webhook deliveries, the claim's settlement, confirmations
    // (the meter's line is written: what they cost is not the request's budget).
    let after = api.after_response();
    match finisher {
        Some(gateway) => ctx.wait_until(async move {
            for line in gateway.finish(after, pause).await {
                console_error!("{line}");
            }
        }),
        None => {
            console_error!("request {}: nothing done after the response (no configuration)", after.request_id)
        }
    }
    http::response(api)
}

/// Every queue and dead-letter queue: `app::queues::consume` decides per message, this acks or
/// retries each as told (all at once when every message is acked).
#[event(queue)]
async fn queue(batch: MessageBatch<String>, env: Env, _ctx: Context) -> Result<()> {
    clock::follow(&env).await.map_err(|e| worker::Error::RustError(e.0))?;
    let config = config(&env).map_err(|e| worker::Error::RustError(e.to_string()))?;
    let store = store(&env, config, &Rc::default())?;
    let deliveries = WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING)?);
    let name = batch.queue();
    let messages: Vec<_> = batch.raw_iter().collect();
    let incoming: Vec<Incoming> = messages
        .iter()
        .map(|m| {
            // Our producers send strings; anything else is kept as its JSON text.
            let body = m.body();
            let body = body.as_string().unwrap_or_else(|| {
                js_sys::JSON::stringify(&body).map(String::from).unwrap_or_else(|_| format!("{body:?}"))
            });
            Incoming { id: m.id(), body, sent_ms: m.timestamp().as_millis() as i64 }
        })
        .collect();
    let dispatch = |id: String| {
        let (store, deliveries) = (&store, &deliveries);
        async move { app::dispatch(store, deliveries, &FetchClient, config, &id, now_ms, app::jitter()).await }
    };
    let dispositions =
        app::queues::consume(&store, &store, &name, &incoming, dispatch, config.queue_retry, now_ms()).await;
    // The usual case in one call instead of one per message.
    if dispositions.iter().all(|disposition| matches!(disposition, Disposition::Ack)) {
        batch.ack_all();
        return Ok(());
    }
    for ((message, incoming), disposition) in messages.iter().zip(&incoming).zip(dispositions) {
        match disposition {
            Disposition::Ack => message.ack(),
            Disposition::Retry { delay_seconds, error } => {
                console_error!(
                    "queue {name}: message {} failed, retried in {delay_seconds} s: {error}",
                    incoming.id
                );
                message.retry_with_options(
                    &QueueRetryOptionsBuilder::new().with_delay_seconds(delay_seconds).build(),
                );
            }
        }
    }
    Ok(())
}

/// Every minute, seven jobs, each under its own lease and each on its own (SPEC §19), sharing one
/// budget of the invocation's subrequests, D1 queries and time (SPEC §23): one that fails, or
/// whose lease another run holds, never skips the others. The webhook sweep; re-sealing of webhook
/// secrets (plaintext, `v1` or under a previous key); rows an older version kept in `DB` move to
/// `AUDIT_DB`; the audit log's roll-up (rows older than `AUDIT_HOT_SECONDS` move to R2 hour objects
/// bound to their projects' chain heads, then leave D1); the signed audit digests; the usage
/// export of closed periods (SPEC §22); the wake of objects an earlier version wrote (SPEC §23).
#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    if let Err(e) = clock::follow(&env).await {
        return console_error!("scheduled {}: {e}", event.cron());
    }
    let config = match config(&env) {
        Ok(config) => config,
        Err(e) => return console_error!("scheduled {}: {e}", event.cron()),
    };
    let (store, legacy) = match (store(&env, config, &Rc::default()), env.d1("DB")) {
        (Ok(store), Ok(db)) => (store, D1Store::new(db, Rc::default())),
        (Err(e), _) | (_, Err(e)) => return console_error!("scheduled {}: {e}", event.cron()),
    };
    let holder = gatehouse_core::encoding::hex(&app::random::<16>());
    // One budget for every job of this invocation (SPEC §23).
    let budget = app::cron::RunBudget::minute(now_ms());
    // The projects' chain heads (SPEC §23): the roll-up binds objects there, the digests sign from there.
    let heads = match env.durable_object(gatehouse_core::guard::protocol::BINDING) {
        Ok(namespace) => GuardClient::new(namespace, Rc::default()),
        Err(e) => return console_error!("scheduled {}: {e}", event.cron()),
    };

    let sweep = async {
        // Its overdue deliveries and their queue message.
        if !budget.take(now_ms(), 1, 1) {
            return Ok(r#""skipped":"budget""#.to_owned());
        }
        let queue = WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING).map_err(port_error)?);
        let queued = app::sweep(&store, &queue, config.webhook_sweep_grace_ms, now_ms()).await?;
        Ok(if queued > 0 { format!(r#""requeued":{queued}"#) } else { String::new() })
    };
    let reseal = async {
        // Its batch of secrets, each written on its own.
        if !budget.take(now_ms(), 1 + app::SEAL_BATCH as u32, 0) {
            return Ok(r#""skipped":"budget""#.to_owned());
        }
        let (resealed, unopened) = app::reseal_secrets(&store, config).await?;
        Ok(match (resealed, unopened) {
            (0, 0) => String::new(),
            _ => format!(r#""resealed":{resealed},"unopened":{unopened}"#),
        })
    };
    let limits = app::RollUpLimits::PER_MINUTE;
    let legacy_rows = async {
        let moved = app::move_legacy_audit_rows(&legacy, &store, limits, &budget, now_ms).await?;
        Ok(if moved > 0 { format!(r#""moved_rows":{moved}"#) } else { String::new() })
    };
    let roll_up = async {
        let archive = R2Archive::new(env.bucket(archive::BINDING).map_err(port_error)?);
        let started = now_ms();
        let cutoff = gatehouse_core::archive::hot_cutoff(started, config.audit_hot_seconds);
        // Each audit database on its own (SPEC §20).
        let stores: Vec<D1Store> =
            audit_dbs(&env, config).into_iter().map(|db| D1Store::new(db, Rc::default())).collect();
        let run = app::RollUpRun { archive: &archive, heads: &heads, cutoff, limits, budget: &budget };
        let r = app::roll_up_each(&stores, &run, now_ms).await;
        for key in &r.refused {
            let alert =
                "the chain head refused to let the roll-up write this object again (storage changed or \
                         removed the object it bound, or a digest listed it already); its rows stay in D1";
            console_error!(
                "{}",
                serde_json::json!({ "component": "audit_roll_up", "alert": alert, "object": key })
            );
        }
        Ok(match r.objects > 0 || r.copies > 0 || r.rewritten > 0 || !r.failed.is_empty() {
            true => format!(
                r#""rolled_rows":{},"copies":{},"objects":{},"rewritten":{},"done":{},"failed":{},"elapsed_ms":{}"#,
                r.rolled,
                r.copies,
                r.objects,
                r.rewritten,
                r.done,
                serde_json::to_string(&r.failed).unwrap_or_default(),
                now_ms() - started
            ),
            false => String::new(),
        })
    };
    let digests = async {
        let Some(secret) = config.audit_signing_key.as_deref() else { return Ok(String::new()) };
        let archive = R2Archive::new(env.bucket(archive::BINDING).map_err(port_error)?);
        let signer = gatehouse_core::digest::AuditSigner::from_secret(secret);
        let job = app::DigestJob {
            store: &store,
            archive: &archive,
            heads: &heads,
            signer: &signer,
            period_ms: i64::from(config.audit_digest_seconds) * 1000,
            cutoff_ms: gatehouse_core::archive::hot_cutoff(now_ms(), config.audit_hot_seconds),
            chain_since_ms: config.audit_chain_since_ms,
        };
        let r = job.run(&budget, now_ms).await?;
        for (project, alert) in &r.alerts {
            let line =
                serde_json::json!({ "component": "audit_digests", "alert": alert, "project_id": project });
            console_error!("{line}");
        }
        Ok(match r.digests > 0 || r.waiting > 0 || !r.failed.is_empty() || !r.alerts.is_empty() {
            true => format!(
                r#""digests":{},"objects":{},"waiting":{},"failed":{},"alerts":{}"#,
                r.digests,
                r.objects,
                r.waiting,
                serde_json::to_string(&r.failed).unwrap_or_default(),
                r.alerts.len()
            ),
            false => String::new(),
        })
    };
    let usage = async {
        let archive = R2Archive::new(env.bucket(archive::BINDING).map_err(port_error)?);
        let queue = WebhookQueue::new(env.queue(webhook_queue::QUEUE_BINDING).map_err(port_error)?);
        let run_id = || gatehouse_core::encoding::hex(&app::random::<16>());
        let periods = app::UsagePeriods {
            period_ms: config.usage_period_ms(),
            keep_ms: i64::from(config.audit_retention_days) * 86_400_000,
        };
        let r = app::export_usage(&store, &archive, &queue, periods, &budget, now_ms, run_id).await?;
        Ok(match r.runs > 0 || r.pruned > 0 || !r.failed.is_empty() {
            true => format!(
                r#""usage_runs":{},"records":{},"pruned":{},"failed":{}"#,
                r.runs,
                r.records,
                r.pruned,
                serde_json::to_string(&r.failed).unwrap_or_default()
            ),
            false => String::new(),
        })
    };
    // Events past EVENT_RETENTION_DAYS (SPEC §24), a bounded batch a run.
    let events = async {
        let purged = app::purge_events(&store, config.event_retention_days, &budget, now_ms).await?;
        Ok(match purged {
            None => r#""skipped":"budget""#.to_owned(),
            Some(0) => String::new(),
            Some(n) => format!(r#""purged":{n}"#),
        })
    };
    // Last, with what the others left: objects an earlier version wrote, each called once (SPEC §23).
    let wake = async {
        let r = app::wake_objects(&store, &heads, &budget, now_ms).await?;
        Ok(if r.woken > 0 { format!(r#""woken":{},"done":{}"#, r.woken, r.done) } else { String::new() })
    };
    let jobs: Vec<app::cron::Job<'_>> = vec![
        ("webhook_sweep", Box::pin(sweep)),
        ("webhook_secrets", Box::pin(reseal)),
        ("audit_legacy", Box::pin(legacy_rows)),
        ("audit_roll_up", Box::pin(roll_up)),
        ("audit_digests", Box::pin(digests)),
        ("usage_export", Box::pin(usage)),
        ("event_purge", Box::pin(events)),
        ("object_wake", Box::pin(wake)),
    ];
    for (job, outcome) in app::cron::run_jobs(&store, &holder, now_ms, jobs).await {
        match outcome {
            Ok(app::cron::JobRun::Ran(done)) if !done.is_empty() => {
                console_log!(r#"{{"component":"{job}",{done}}}"#)
            }
            Ok(app::cron::JobRun::Skipped) => {
                console_log!(r#"{{"component":"{job}","skipped":"lease held"}}"#)
            }
            Ok(_) => {}
            Err(e) => console_error!("scheduled {job}: {}", e.0),
        }
    }
}

fn port_error(e: worker::Error) -> gatehouse_core::ports::PortError {
    gatehouse_core::ports::PortError(e.to_string())
}
