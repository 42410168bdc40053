//! The gateway over the fakes of every port, for the app tests and the fault simulations: one
//! `Ports` type, the outbox's pause, and a world of one project with a key of each type.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::keys::NewKey;
use super::outbox::{Coalesced, Pause};
use super::{ApiRequest, Gateway};
use crate::fakes::audit::FakeArchive;
use crate::fakes::gateway::{Clock, FakeAuditQueue, FakeGuard, FakeProject, FakeResponses, KvEntries};
use crate::fakes::ingest::{FakeEventQueue, FakeLedger};
use crate::fakes::origin::FakeOrigin;
use crate::fakes::queue::{FakeDeadLetters, FakeRedrive};
use crate::fakes::webhooks::FakeDeliveryQueue;
use crate::fakes::FakeStore;
use crate::sim::{later, Faults};
use gatehouse_core::api_key::KeyType;
use gatehouse_core::config::{Config, DEFAULT_PLAN};
use gatehouse_core::ports::Ports;

/// Every port over its fake.
pub struct FakePorts;

/// A pause of the audit outbox is one yield, where a simulation may stop the isolate.
pub struct Yield;

impl Pause for Yield {
    fn pause(&self, _ms: u64) -> impl std::future::Future<Output = ()> {
        later(1)
    }
}

impl Ports for FakePorts {
    type Guard = FakeGuard;
    type Store = FakeStore;
    type Responses = FakeResponses;
    type Ledger = FakeLedger;
    type Events = FakeEventQueue;
    type Archive = FakeArchive;
    type Deliveries = FakeDeliveryQueue;
    type Audit = Coalesced<FakeAuditQueue, Yield>;
    type DeadLetters = FakeDeadLetters;
    type Redrive = FakeRedrive;
    type Origin = FakeOrigin;
    type Timer = Yield;
}

/// A gateway over fresh fakes sharing `faults` and a clock at `now_ms`, with the project
/// `project_id` holding one key of each `types` (their secrets answered in order); the response
/// store misses a read with `miss_rate`.
pub fn fake_gateway(
    config: &'static Config,
    faults: &Rc<Faults>,
    now_ms: i64,
    project_id: &str,
    types: &[KeyType],
    miss_rate: f64,
) -> (Gateway<'static, FakePorts>, Clock, Vec<String>) {
    let clock: Clock = Rc::new(Cell::new(now_ms));
    let store = FakeStore::new(faults.clone());
    let project = FakeProject {
        id: project_id.into(),
        name: project_id.into(),
        plan: DEFAULT_PLAN.into(),
        created_at: now_ms,
    };
    store.directory.projects.borrow_mut().push(project);
    let mut secrets = Vec::new();
    for &key_type in types {
        let key = NewKey::generate(config, project_id, key_type, None, DEFAULT_PLAN, None, now_ms);
        store.directory.keys.borrow_mut().push(key.record);
        secrets.push(key.secret);
    }
    let kv = Rc::new(KvEntries::default());
    let gateway = Gateway {
        config,
        guard: FakeGuard::new(
            faults.clone(),
            clock.clone(),
            config,
            store.directory.keys.clone(),
            kv.clone(),
        ),
        responses: FakeResponses { faults: faults.clone(), clock: clock.clone(), entries: kv, miss_rate },
        ledger: FakeLedger {
            faults: faults.clone(),
            clock: clock.clone(),
            window_ms: config.event_dedup_window_seconds as i64 * 1000,
            split_above: config.ledger_split_above_per_second,
            shards: RefCell::default(),
            reserve_calls: Default::default(),
        },
        events: FakeEventQueue { faults: faults.clone(), sent: RefCell::default() },
        archive: FakeArchive::new(faults.clone()),
        deliveries: FakeDeliveryQueue::new(faults.clone(), clock.clone()),
        audit: Coalesced {
            outbox: Rc::default(),
            inner: FakeAuditQueue { faults: faults.clone(), sent: RefCell::default() },
            timer: Yield,
        },
        dead_letters: FakeDeadLetters::new(faults.clone()),
        redrive: FakeRedrive::new(faults.clone()),
        origin: FakeOrigin::new(faults.clone(), Box::new(|_, n| (201, format!("order {n}").into_bytes()))),
        store,
        memory: Rc::default(),
        leases: Rc::default(),
        ledger_layout: Rc::default(),
        timer: Yield,
    };
    (gateway, clock, secrets)
}

/// A body sent whole in one chunk (`None`: no body).
pub struct WholeBody(pub Option<Vec<u8>>);

impl gatehouse_core::ports::RequestBody for WholeBody {
    fn declared_len(&self) -> Option<u64> {
        self.0.as_ref().map(|b| b.len() as u64)
    }
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, gatehouse_core::ports::PortError> {
        Ok(self.0.take())
    }
}

/// A request as a client sends it with the API key (or token) `token`, from one documentation
/// address, at `now_ms`.
pub fn api_request<B>(
    method: &str,
    path: &str,
    token: &str,
    idempotency_key: Option<&str>,
    body: B,
    now_ms: i64,
) -> ApiRequest<B> {
    ApiRequest {
        method: method.into(),
        origin: "https://gateway.test".into(),
        accept: None,
        traceparent: None,
        tracestate: None,
        page_origin: None,
        path: path.into(),
        query: Vec::new(),
        raw_query: None,
        user_agent: None,
        authorization: Some(format!("Bearer {token}")),
        idempotency_key: idempotency_key.map(str::to_owned),
        client_ip: Some("192.0.2.1".into()),
        budget: None,
        headers: Vec::new(),
        body,
        now_ms,
    }
}
