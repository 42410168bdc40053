//! The wake of objects an earlier version wrote (SPEC §23, `ports::wake`): the minute cron's job
//! that calls, once, every object the directory names — each key's guard and claim objects, each
//! project's and identity's authority — so that one nobody calls any more purges what is past its
//! keeping and sets its alarm by this version's rules. It walks the keys, then the projects, then
//! the identities made before this version's migration, a page at a time, as far as the run's
//! budget goes, and keeps where it stands; once through, it only reads that it is done (objects
//! made since follow this version's rules).

use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::cron::RunBudget;
#[cfg(test)]
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::guard::protocol::{identity_authority, project_authority};
use gatehouse_core::platform::WORKER_MAX_OPEN_CONNECTIONS;
use gatehouse_core::ports::{KeyGuard, PortError, WakeEntry, WakeList, WakeState, WakeStore};

/// Entries one page reads.
const PAGE: usize = 100;

/// What one run did: the objects it called, and whether the wake is through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeReport {
    pub woken: usize,
    pub done: bool,
}

/// The objects an entry of `list` names.
fn objects(list: WakeList, entry: &WakeEntry) -> Vec<String> {
    match list {
        WakeList::Keys => std::iter::once(entry.id.clone())
            .chain((1..entry.claim_shards).map(|shard| format!("{}:claims:{shard}", entry.id)))
            .collect(),
        WakeList::Projects => vec![project_authority(&entry.id)],
        WakeList::Identities => vec![identity_authority(&entry.id)],
    }
}

fn next(list: WakeList) -> Option<WakeList> {
    match list {
        WakeList::Keys => Some(WakeList::Projects),
        WakeList::Projects => Some(WakeList::Identities),
        WakeList::Identities => None,
    }
}

/// One run of the wake: pages of entries, their objects called six at a time, as far as `budget`
/// goes; where it stands is kept after each page whose objects all answered (a failed call ends
/// the run; the page is called again by the next).
pub async fn wake_objects<S: WakeStore, G: KeyGuard>(
    store: &S,
    guard: &G,
    budget: &RunBudget,
    now_ms: impl Fn() -> i64,
) -> Result<WakeReport, PortError> {
    let mut report = WakeReport::default();
    if !budget.take(now_ms(), 1, 0) {
        return Ok(report);
    }
    let mut state = store.wake_state().await?;
    while let Some(list) = state.list {
        if !budget.take(now_ms(), 2, 0) {
            break;
        }
        let page = store.wake_next(&state, PAGE).await?;
        let Some(last) = page.last() else {
            state = WakeState { list: next(list), after: None, ..state };
            store.save_wake(&state).await?;
            continue;
        };
        let names: Vec<String> = page.iter().flat_map(|e| objects(list, e)).collect();
        if !budget.take(now_ms(), 0, names.len() as u32) {
            break;
        }
        let calls = stream::iter(names.iter().map(|name| guard.wake(name)));
        calls.buffer_unordered(WORKER_MAX_OPEN_CONNECTIONS).try_collect::<Vec<()>>().await?;
        report.woken += names.len();
        state.after = Some(last.id.clone());
        store.save_wake(&state).await?;
    }
    report.done = state.list.is_none();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;
    use std::sync::OnceLock;

    use super::*;
    use crate::fakes::gateway::FakeProject;
    use crate::sim::{complete, Faults};
    use crate::testing::fake_gateway;
    use gatehouse_core::api_key::KeyType;
    use gatehouse_core::config::Config;

    fn config() -> &'static Config {
        static CONFIG: OnceLock<Config> = OnceLock::new();
        CONFIG.get_or_init(|| {
            Config::from_lookup(|name| match name {
                "KEY_PEPPER" => Some("wake-pepper-wake-pepper".into()),
                "WEBHOOK_SECRETS_KEY" => Some("wake-webhook-secrets-key".into()),
                "ADMIN_TOKEN" => Some("wake-admin-token-admin".into()),
                _ => None,
            })
            .expect("a valid configuration")
        })
    }

    /// SPEC §23: every object the directory names is called once — 300 keys (half spread over
    /// eight claim objects, as keys made before `CLAIM_SHARDS` 32 were), 150 projects — in runs
    /// each inside its budget, and then the job only reads that it is done.
    #[test]
    fn every_object_of_an_earlier_version_is_called_once_in_bounded_runs() {
        let faults = Rc::new(Faults::new(0, 0.0));
        let (gateway, _, _) = fake_gateway(config(), &faults, 0, "prj_a", &[KeyType::Server], 0.0);
        let (store, guard) = (&gateway.store, &gateway.guard);
        // The migration of this version, at 1,000: what was made before it is woken.
        *store.wake.borrow_mut() = Some(WakeState { list: Some(WakeList::Keys), after: None, before: 1_000 });
        let template = store.directory.keys.borrow()[0].clone();
        for n in 0..300u32 {
            let key_hash = format!("hash{n:04}");
            let claim_shards = if n % 2 == 0 { 8 } else { 1 };
            store.directory.keys.borrow_mut().push(KeyRecord { key_hash, claim_shards, ..template.clone() });
        }
        let project = |id: String, created_at: i64| FakeProject {
            id,
            name: "p".into(),
            plan: "trial".into(),
            created_at,
        };
        for n in 0..150 {
            store.directory.projects.borrow_mut().push(project(format!("prj_{n:04}"), 0));
        }
        // Made since the migration: this version's rules from the start, not woken.
        store.directory.projects.borrow_mut().push(project("prj_new".into(), 1_000));
        let new_key = KeyRecord { key_hash: "hash_new".into(), created_at: 1_000, ..template.clone() };
        store.directory.keys.borrow_mut().push(new_key);
        let mut expected: Vec<String> = Vec::new();
        for key in store.directory.keys.borrow().iter().filter(|k| k.created_at < 1_000) {
            expected.push(key.key_hash.clone());
            expected.extend((1..key.claim_shards).map(|n| format!("{}:claims:{n}", key.key_hash)));
        }
        let projects = store.directory.projects.borrow();
        expected
            .extend(projects.iter().filter(|p| p.created_at < 1_000).map(|p| format!("project:{}", p.id)));
        expected.sort();
        guard.asked.borrow_mut().clear();
        let mut runs = 0;
        loop {
            runs += 1;
            assert!(runs <= 10, "the wake does not finish");
            let budget = RunBudget::new(1_000, 900, i64::MAX);
            let report = complete(wake_objects(store, guard, &budget, || 0)).unwrap();
            if report.done {
                break;
            }
        }
        let mut called: BTreeMap<String, u32> = BTreeMap::new();
        for name in guard.asked.borrow().iter() {
            *called.entry(name.clone()).or_default() += 1;
        }
        assert_eq!(called.keys().cloned().collect::<Vec<_>>(), expected);
        assert!(called.values().all(|&n| n == 1), "an object called twice");
        assert_eq!(runs, 2, "about 1,500 calls in budgets of 1,000 calls");
        // Through: one query, nothing called.
        guard.asked.borrow_mut().clear();
        let budget = RunBudget::new(1_000, 900, i64::MAX);
        let report = complete(wake_objects(store, guard, &budget, || 0)).unwrap();
        assert_eq!(report, WakeReport { woken: 0, done: true });
        assert!(guard.asked.borrow().is_empty());
        assert_eq!(budget.left(), (999, 899), "one query (a subrequest too)");
    }
}
