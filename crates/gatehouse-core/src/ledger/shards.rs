//! How a namespace's ids are spread over ledger objects, and how that spread grows with the
//! namespace's rate (SPEC §20 "Big projects").
//!
//! A namespace starts on [`ROOT_SHARDS`] objects (level 0), each id on the one its hash picks. An
//! object that serves more than `LEDGER_SPLIT_ABOVE_PER_SECOND` reserve calls a second **splits**:
//! from then on it takes no new reservation (it answers `moved`), and each of its ids belongs to
//! one of its two children a level down, as in linear hashing: at level `L` there are
//! `ROOT_SHARDS · 2^L` shards and an id is on shard `hash mod (ROOT_SHARDS · 2^L)`, so a shard's
//! ids go to the child of the same index or to the one `ROOT_SHARDS · 2^L` further.
//!
//! Nothing is copied when a shard splits. It keeps answering for what it holds (confirmations and
//! releases of its reservations, and **checks**): a child that does not hold an id asks its
//! parent, and the parent its own, while the ancestor's reservations can still matter (until its
//! split plus the de-duplication window). The check and the child's decision are one step for the
//! id (the parent takes no new reservation, and the child decides after the answer without
//! yielding), so an id accepted anywhere in the tree within the window is a duplicate everywhere.
//!
//! An isolate learns a split from the `moved` answer and remembers it ([`LedgerLayout`]), so it
//! pays one extra round trip per split shard, once.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::encoding::fnv1a;
use crate::events::{reserve, Reservation, Reserved, RESERVATION_LEASE_MS};

/// Shards of a namespace at level 0.
pub const ROOT_SHARDS: u64 = 4;
/// The deepest level: `ROOT_SHARDS · 2^11` = 8,192 shards. Calls split a namespace to about 512
/// shards at 100,000 events/s (each at most 500 calls/s); storage splits it further, until 48 h
/// of each shard's ids fit in [`SPLIT_ABOVE_BYTES`] (SPEC §23: at 100,000 events/s, 12 ids a
/// second per shard at the deepest level, 450 MB). A batch touches at most as many shards as it
/// has ids.
pub const MAX_LEVEL: u8 = 11;
/// Stored bytes above which a shard splits, whatever its rate (SPEC §23: no object above 1 GB).
/// Its rows leave with the window; its children start empty.
pub const SPLIT_ABOVE_BYTES: u64 = 512 * 1024 * 1024;
/// Reserve calls a second above which a shard splits, unless `LEDGER_SPLIT_ABOVE_PER_SECOND`
/// says otherwise: half of what one object should serve (~500 calls/s, SPEC §20), so a split
/// happens before the object is the bottleneck.
pub const SPLIT_ABOVE_PER_SECOND: u32 = 250;

/// One shard of a namespace: its level and its index at that level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    pub level: u8,
    pub index: u64,
}

/// The hash that places an id (FNV-1a of its bytes).
pub fn id_hash(event_id: &str) -> u64 {
    fnv1a(event_id.as_bytes())
}

pub(super) fn width(level: u8) -> u64 {
    ROOT_SHARDS << level
}

impl Shard {
    /// The level-0 shard of an id.
    pub fn root(hash: u64) -> Self {
        Shard { level: 0, index: hash % ROOT_SHARDS }
    }

    /// The child of this shard that holds an id of this hash (`None` at [`MAX_LEVEL`]).
    pub fn child(self, hash: u64) -> Option<Self> {
        (self.level < MAX_LEVEL).then(|| Shard { level: self.level + 1, index: hash % width(self.level + 1) })
    }

    /// The shard this one split from (`None` at level 0).
    pub fn parent(self) -> Option<Self> {
        (self.level > 0).then(|| Shard { level: self.level - 1, index: self.index % width(self.level - 1) })
    }

    /// Its object's name in `namespace`: level 0 as the first version named them
    /// (`{namespace}:{index}`), deeper ones `{namespace}:L{level}:{index}`.
    pub fn name(self, namespace: &str) -> String {
        match self.level {
            0 => format!("{namespace}:{}", self.index),
            level => format!("{namespace}:L{level}:{}", self.index),
        }
    }

    /// The names of the shards this one split from, nearest first: whom it asks about an id it
    /// does not hold.
    pub fn ancestors(self, namespace: &str) -> Vec<String> {
        std::iter::successors(self.parent(), |s| s.parent()).map(|s| s.name(namespace)).collect()
    }
}

/// What an isolate knows of its namespaces' splits: the names of the shards it saw split. A
/// shard splits once and for good, so what it learnt never turns false.
#[derive(Debug, Default)]
pub struct LedgerLayout {
    split: HashSet<String>,
}

impl LedgerLayout {
    /// Splits an isolate remembers at most (a namespace has at most 8,188); past that it forgets
    /// them all and learns again (one forwarded answer each).
    const CAPACITY: usize = 20_000;

    /// The shard that takes new reservations of `event_id`, as far as this isolate knows.
    pub fn shard_for(&self, namespace: &str, event_id: &str) -> Shard {
        let hash = id_hash(event_id);
        let mut shard = Shard::root(hash);
        while self.split.contains(&shard.name(namespace)) {
            match shard.child(hash) {
                Some(child) => shard = child,
                None => break,
            }
        }
        shard
    }

    /// The shard named `name` answered `moved`: it has split.
    pub fn learn_split(&mut self, name: &str) {
        if self.split.len() >= Self::CAPACITY {
            self.split.clear();
        }
        self.split.insert(name.to_owned());
    }
}

/// Whether a shard serving `calls_per_second` reserve calls and storing `stored_bytes` should
/// split now.
pub fn should_split(shard_level: u8, calls_per_second: u32, split_above: u32, stored_bytes: u64) -> bool {
    shard_level < MAX_LEVEL && (calls_per_second > split_above || stored_bytes > SPLIT_ABOVE_BYTES)
}

/// What one reservation takes in a shard's storage, as the fakes and the models count it: its row
/// (an id, its owner — a request id —, confirmed, its time, and the index on the time) and the
/// id's index entry.
pub fn reservation_bytes() -> u64 {
    crate::retention::row_bytes(&[36, 36, 1, 8]) + crate::retention::row_bytes(&[36])
}

/// Whether a shard must still ask its parent about ids it does not hold: until the parent's split
/// (`None`: not known yet, so ask) plus the de-duplication window, plus the lease of a reservation
/// made just before the split (confirmed after it: a shard confirms only reservations younger
/// than [`RESERVATION_LEASE_MS`]), after which nothing the parent holds can make an id a duplicate.
pub fn asks_parent(parent_split_at_ms: Option<i64>, now_ms: i64, window_ms: i64) -> bool {
    parent_split_at_ms.is_none_or(|at| now_ms < at + window_ms + RESERVATION_LEASE_MS)
}

/// What one shard keeps, as its object stores it (SQLite in the Durable Object, maps in the fake
/// and the model): the decisions are [`reserve_here`]'s and [`check_here`]'s, the same for all.
pub trait ShardMemory {
    /// What this shard holds for these ids, reserved or accepted within the window.
    fn held(&self, ids: &[String], now_ms: i64, window_ms: i64) -> HashMap<String, Reservation>;
    /// Reserves these ids for `owner` now.
    fn insert(&self, owner: &str, now_ms: i64, ids: &[&String]);
    /// When this shard split (`None`: it takes reservations).
    fn split_at(&self) -> Option<i64>;
    fn set_split_at(&self, at_ms: i64);
    /// When its parent split, once a check told it.
    fn parent_split_at(&self) -> Option<i64>;
    fn set_parent_split_at(&self, at_ms: i64);
    /// Counts a reserve call now; answers the shard's calls a second (see
    /// [`crate::lease::RequestRate::per_second`]).
    fn count_call(&self, now_ms: i64) -> u32;
    /// The bytes the shard stores (the object's database size).
    fn stored_bytes(&self) -> u64;
}

/// A shard's answer to a reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardAnswer {
    /// One decision per id, in order.
    Decided(Vec<Reserved>),
    /// The shard has split: ask its child ([`LedgerLayout::learn_split`]).
    Moved,
    /// The shard has split and its children decided (`ledger::forward`).
    Forwarded(super::forward::Forwarded),
}

/// What a shard's ancestors hold for ids it does not, and when its parent split.
pub type Checked = (Vec<Option<Reservation>>, Option<i64>);

/// The limits a shard decides by.
#[derive(Debug, Clone, Copy)]
pub struct ShardRules {
    pub level: u8,
    pub now_ms: i64,
    pub window_ms: i64,
    pub split_above: u32,
}

/// What this shard and, while they may matter, its ancestors hold for `ids` (`ask_parent` checks
/// the parent, which asks its own): one entry per id, in order.
pub async fn check_here<M, F, Fut, E>(
    memory: &M,
    rules: ShardRules,
    ids: &[String],
    ask_parent: Option<F>,
) -> Result<Vec<Option<Reservation>>, E>
where
    M: ShardMemory,
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<Checked, E>>,
{
    let mut held = memory.held(ids, rules.now_ms, rules.window_ms);
    let misses: Vec<String> = ids.iter().filter(|id| !held.contains_key(*id)).cloned().collect();
    if let Some(ask) = ask_parent.filter(|_| {
        !misses.is_empty() && asks_parent(memory.parent_split_at(), rules.now_ms, rules.window_ms)
    }) {
        let (answers, parent_split_at) = ask(misses.clone()).await?;
        if let Some(at) = parent_split_at.filter(|_| memory.parent_split_at().is_none()) {
            memory.set_parent_split_at(at);
        }
        held.extend(misses.into_iter().zip(answers).filter_map(|(id, r)| Some((id, r?))));
    }
    Ok(ids.iter().map(|id| held.remove(id)).collect())
}

/// One reserve call on a shard: `Moved` once it has split (it splits now when its calls a second
/// are above `split_above`); else each id is decided against what this shard holds or, when it
/// holds nothing of it, its ancestors (see the module's comment), and the fresh ones reserved.
pub async fn reserve_here<M, F, Fut, E>(
    memory: &M,
    rules: ShardRules,
    owner: &str,
    ids: &[String],
    ask_parent: Option<F>,
) -> Result<ShardAnswer, E>
where
    M: ShardMemory,
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<Checked, E>>,
{
    if memory.split_at().is_some() {
        return Ok(ShardAnswer::Moved);
    }
    if should_split(rules.level, memory.count_call(rules.now_ms), rules.split_above, memory.stored_bytes()) {
        memory.set_split_at(rules.now_ms);
        return Ok(ShardAnswer::Moved);
    }
    let upstream = check_here(memory, rules, ids, ask_parent).await?;
    // From here to the insert nothing yields: the shard may have split, or another call reserved
    // some of these ids, while the parent answered.
    if memory.split_at().is_some() {
        return Ok(ShardAnswer::Moved);
    }
    let here = memory.held(ids, rules.now_ms, rules.window_ms);
    let decisions: Vec<Reserved> = ids
        .iter()
        .zip(&upstream)
        .map(|(id, above)| reserve(here.get(id).or(above.as_ref()), owner, rules.now_ms, rules.window_ms))
        .collect();
    let fresh: Vec<&String> =
        ids.iter().zip(&decisions).filter(|(_, d)| **d == Reserved::Fresh).map(|(id, _)| id).collect();
    if !fresh.is_empty() {
        memory.insert(owner, rules.now_ms, &fresh);
    }
    Ok(ShardAnswer::Decided(decisions))
}

/// How often a shard sends its parent a check while another is out (ms): the misses of the calls
/// in between wait and go together.
pub const PARENT_CHECK_EVERY_MS: i64 = 10;

/// A shard's checks of its parent, batched: a check goes at once when none is out or the last
/// went [`PARENT_CHECK_EVERY_MS`] ago; otherwise it waits, and goes with every other waiting one
/// in the next (sent by the next call that may send, or when the checks out have come back). A
/// parent then serves about a hundred checks a second from each of its two children, however many
/// calls they serve. Without it every reserve of a new id below a split shard is one check on
/// each of its ancestors for the whole window, so a root serves the checks of every shard under it
/// (the platform model, `scripts/simulate big-project`, offered each root ~2,000 calls/s at
/// 100,000 events/s and failed every request). Waiting makes no answer staler than the check's own
/// trip: a split parent takes no new reservation, so what it holds for an id can only be
/// confirmed, released or lapse meanwhile, and the child still decides after the answer without
/// yielding.
///
/// A waiter is woken by the task that sends for it or that hands it the turn to send, which is
/// fine inside a Durable Object (its requests share one I/O context), as for
/// [`crate::guard::single_flight`]. A sender dropped before its answer puts the calls it sent for
/// back first in line; a dropped waiter leaves the line.
pub struct ParentChecks<E> {
    out: Cell<u32>,
    last_sent_ms: Cell<Option<i64>>,
    waiting: RefCell<Vec<Rc<Waiter<E>>>>,
}

impl<E> Default for ParentChecks<E> {
    fn default() -> Self {
        ParentChecks { out: Cell::new(0), last_sent_ms: Cell::new(None), waiting: RefCell::new(Vec::new()) }
    }
}

struct Waiter<E> {
    ids: Vec<String>,
    turn: RefCell<Turn<E>>,
    waker: RefCell<Option<Waker>>,
}

enum Turn<E> {
    Wait,
    /// This call sends the next check, for everyone waiting.
    Send,
    Answered(Result<Checked, E>),
}

impl<E> Waiter<E> {
    fn give(&self, turn: Turn<E>) {
        *self.turn.borrow_mut() = turn;
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

impl<E> ParentChecks<E> {
    /// When no check is out any more, the first call waiting sends the next.
    fn hand_over(&self, waiting: &[Rc<Waiter<E>>]) {
        if self.out.get() == 0 {
            if let Some(next) = waiting.first() {
                next.give(Turn::Send);
            }
        }
    }
}

impl<E: Clone> ParentChecks<E> {
    /// What the parent holds for `ids` (as `ask_parent` answers it), asked with `send` now or with
    /// a later check (see [`ParentChecks`]).
    pub async fn check<F, Fut>(&self, ids: Vec<String>, now_ms: i64, send: F) -> Result<Checked, E>
    where
        F: FnOnce(Vec<String>) -> Fut,
        Fut: Future<Output = Result<Checked, E>>,
    {
        let me = Rc::new(Waiter { ids, turn: RefCell::new(Turn::Wait), waker: RefCell::new(None) });
        self.waiting.borrow_mut().push(me.clone());
        let due = self.out.get() == 0
            || self.last_sent_ms.get().is_none_or(|at| now_ms >= at + PARENT_CHECK_EVERY_MS);
        if !due {
            if let Some(answer) = (Waiting { checks: self, me: &me, done: false }).await {
                return answer;
            }
        }
        // This call sends, for itself and every call waiting (none of which sends any more).
        let batch = std::mem::take(&mut *self.waiting.borrow_mut());
        for waiter in &batch {
            if matches!(*waiter.turn.borrow(), Turn::Send) {
                *waiter.turn.borrow_mut() = Turn::Wait;
            }
        }
        self.out.set(self.out.get() + 1);
        self.last_sent_ms.set(Some(self.last_sent_ms.get().map_or(now_ms, |at| at.max(now_ms))));
        let mut sender = Sender { checks: self, own: &me, batch };
        if let [only] = &sender.batch[..] {
            let ids = only.ids.clone();
            sender.batch.clear();
            return send(ids).await;
        }
        let mut seen = HashSet::new();
        let asked: Vec<String> =
            sender.batch.iter().flat_map(|w| &w.ids).filter(|id| seen.insert(id.as_str())).cloned().collect();
        let answer = send(asked.clone()).await.map(|(held, split_at)| {
            let by_id: HashMap<String, Option<Reservation>> = asked.into_iter().zip(held).collect();
            (by_id, split_at)
        });
        let part = |ids: &[String]| match &answer {
            Ok((by_id, split_at)) => {
                Ok((ids.iter().map(|id| by_id.get(id).cloned().flatten()).collect(), *split_at))
            }
            Err(e) => Err(e.clone()),
        };
        let mut mine = None;
        for waiter in std::mem::take(&mut sender.batch) {
            match Rc::ptr_eq(&waiter, &me) {
                true => mine = Some(part(&waiter.ids)),
                false => waiter.give(Turn::Answered(part(&waiter.ids))),
            }
        }
        mine.expect("a sender's own ids are in its check")
    }
}

/// A check out: when it is done or dropped, one fewer is out (and the first call waiting sends
/// when none is); the calls a dropped sender sent for wait again, first.
struct Sender<'a, E> {
    checks: &'a ParentChecks<E>,
    own: &'a Rc<Waiter<E>>,
    batch: Vec<Rc<Waiter<E>>>,
}

impl<E> Drop for Sender<'_, E> {
    fn drop(&mut self) {
        let checks = self.checks;
        checks.out.set(checks.out.get() - 1);
        let mut waiting = checks.waiting.borrow_mut();
        let unanswered = std::mem::take(&mut self.batch);
        let again = unanswered.into_iter().filter(|w| !Rc::ptr_eq(w, self.own));
        waiting.splice(0..0, again);
        checks.hand_over(&waiting);
    }
}

/// Resolves to the answer of the check this call went with, or to `None` when it is its turn to
/// send. A waiter dropped before either leaves the line (passing the turn on when it had it).
struct Waiting<'a, E> {
    checks: &'a ParentChecks<E>,
    me: &'a Rc<Waiter<E>>,
    done: bool,
}

impl<E> Future for Waiting<'_, E> {
    type Output = Option<Result<Checked, E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let turn = std::mem::replace(&mut *self.me.turn.borrow_mut(), Turn::Wait);
        match turn {
            Turn::Wait => {
                *self.me.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
            Turn::Send => {
                self.done = true;
                Poll::Ready(None)
            }
            Turn::Answered(answer) => {
                self.done = true;
                Poll::Ready(Some(answer))
            }
        }
    }
}

impl<E> Drop for Waiting<'_, E> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut waiting = self.checks.waiting.borrow_mut();
        waiting.retain(|w| !Rc::ptr_eq(w, self.me));
        if matches!(*self.me.turn.borrow(), Turn::Send) {
            self.checks.hand_over(&waiting);
        }
    }
}

/// A shard in memory: the fake ledger's and the platform model's.
#[derive(Debug, Default)]
pub struct MemoryShard {
    pub reservations: std::cell::RefCell<HashMap<String, Reservation>>,
    split_at: std::cell::Cell<Option<i64>>,
    parent_split_at: std::cell::Cell<Option<i64>>,
    rate: std::cell::RefCell<crate::lease::RequestRate>,
}

impl ShardMemory for MemoryShard {
    fn held(&self, ids: &[String], now_ms: i64, window_ms: i64) -> HashMap<String, Reservation> {
        let reservations = self.reservations.borrow();
        ids.iter()
            .filter_map(|id| {
                Some((id.clone(), reservations.get(id).filter(|r| r.at_ms > now_ms - window_ms)?.clone()))
            })
            .collect()
    }

    fn insert(&self, owner: &str, now_ms: i64, ids: &[&String]) {
        let mut reservations = self.reservations.borrow_mut();
        for &id in ids {
            reservations
                .insert(id.clone(), Reservation { owner: owner.to_owned(), confirmed: false, at_ms: now_ms });
        }
    }

    fn split_at(&self) -> Option<i64> {
        self.split_at.get()
    }

    fn set_split_at(&self, at_ms: i64) {
        self.split_at.set(Some(at_ms));
    }

    fn parent_split_at(&self) -> Option<i64> {
        self.parent_split_at.get()
    }

    fn set_parent_split_at(&self, at_ms: i64) {
        self.parent_split_at.set(Some(at_ms));
    }

    fn count_call(&self, now_ms: i64) -> u32 {
        let mut rate = self.rate.borrow_mut();
        rate.count(now_ms);
        rate.per_second(now_ms)
    }

    fn stored_bytes(&self) -> u64 {
        self.reservations.borrow().len() as u64 * reservation_bytes()
    }
}

impl MemoryShard {
    /// The owner's reservations of these ids are accepted ids now, those still within their lease
    /// (see [`asks_parent`]).
    pub fn confirm(&self, owner: &str, ids: &[String], now_ms: i64) {
        let mine = |r: &&mut Reservation| {
            r.owner == owner && !r.confirmed && r.at_ms > now_ms - RESERVATION_LEASE_MS
        };
        for id in ids {
            if let Some(r) = self.reservations.borrow_mut().get_mut(id).filter(mine) {
                r.confirmed = true;
                r.at_ms = now_ms;
            }
        }
    }

    /// The owner's unconfirmed reservations of these ids are dropped.
    pub fn release(&self, owner: &str, ids: &[String]) {
        self.reservations
            .borrow_mut()
            .retain(|id, r| !(ids.contains(id) && r.owner == owner && !r.confirmed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[test]
    fn a_shards_ids_go_to_its_two_children_and_each_child_knows_its_parent() {
        for n in 0..2_000 {
            let id = format!("evt_{n}");
            let hash = id_hash(&id);
            let mut shard = Shard::root(hash);
            assert_eq!(shard.index, hash % 4);
            while let Some(child) = shard.child(hash) {
                assert_eq!(child.parent(), Some(shard));
                assert!(child.index == shard.index || child.index == shard.index + width(shard.level));
                assert_eq!(child.index, hash % width(child.level));
                shard = child;
            }
            assert_eq!(shard.level, MAX_LEVEL);
        }
        assert_eq!(Shard::root(7).parent(), None);
    }

    #[test]
    fn ids_spread_over_every_root_shard() {
        let roots: HashSet<u64> =
            (0..400).map(|i| Shard::root(id_hash(&format!("{i:032x}"))).index).collect();
        assert_eq!(roots.len() as u64, ROOT_SHARDS);
    }

    #[test]
    fn names_keep_the_first_versions_and_list_the_ancestors_nearest_first() {
        let ns = "events:prj_1:server";
        let hash = id_hash("e1");
        assert_eq!(Shard::root(hash).name(ns), format!("{ns}:{}", hash % 4));
        let deep = Shard { level: 3, index: hash % 32 };
        assert_eq!(deep.name(ns), format!("{ns}:L3:{}", hash % 32));
        assert_eq!(
            deep.ancestors(ns),
            [format!("{ns}:L2:{}", hash % 16), format!("{ns}:L1:{}", hash % 8), format!("{ns}:{}", hash % 4)]
        );
        assert!(Shard::root(hash).ancestors(ns).is_empty());
    }

    #[test]
    fn an_isolate_follows_the_splits_it_learnt_and_only_those() {
        let ns = "events:p:server";
        let mut layout = LedgerLayout::default();
        let hash = id_hash("e1");
        assert_eq!(layout.shard_for(ns, "e1"), Shard::root(hash));
        layout.learn_split(&Shard::root(hash).name(ns));
        let child = Shard::root(hash).child(hash).unwrap();
        assert_eq!(layout.shard_for(ns, "e1"), child);
        // Another id on another root shard is where it was.
        let other = (0..).map(|n| format!("x{n}")).find(|id| id_hash(id) % 4 != hash % 4).unwrap();
        assert_eq!(layout.shard_for(ns, &other).level, 0);
        // Every level split: the deepest shard, never beyond.
        let mut shard = child;
        while let Some(next) = shard.child(hash) {
            layout.learn_split(&shard.name(ns));
            shard = next;
        }
        layout.learn_split(&shard.name(ns));
        assert_eq!(layout.shard_for(ns, "e1"), shard);
        assert_eq!(shard.level, MAX_LEVEL);
    }

    /// A namespace's shards in memory, and a reserve as an isolate makes it: from the root down
    /// past every shard that answers `moved`, each asking its ancestors (synchronously here).
    #[derive(Default)]
    struct Tree {
        shards: std::cell::RefCell<HashMap<String, std::rc::Rc<MemoryShard>>>,
    }

    const NS: &str = "events:p:server";
    const WINDOW: i64 = 1_000_000;

    impl Tree {
        fn shard(&self, name: &str) -> std::rc::Rc<MemoryShard> {
            self.shards.borrow_mut().entry(name.to_owned()).or_default().clone()
        }

        fn check(&self, shard: Shard, ids: Vec<String>, now_ms: i64) -> Checked {
            let memory = self.shard(&shard.name(NS));
            let rules = ShardRules { level: shard.level, now_ms, window_ms: WINDOW, split_above: u32::MAX };
            let parent =
                shard.parent().map(|p| move |ids| async move { Ok::<_, ()>(self.check(p, ids, now_ms)) });
            let held =
                check_here(&*memory, rules, &ids, parent).now_or_never().expect("never waits").unwrap();
            (held, memory.split_at())
        }

        fn reserve(
            &self,
            layout: &mut LedgerLayout,
            id: &str,
            owner: &str,
            now_ms: i64,
            split_above: u32,
        ) -> Reserved {
            loop {
                let shard = layout.shard_for(NS, id);
                let memory = self.shard(&shard.name(NS));
                let rules = ShardRules { level: shard.level, now_ms, window_ms: WINDOW, split_above };
                let parent =
                    shard.parent().map(|p| move |ids| async move { Ok::<_, ()>(self.check(p, ids, now_ms)) });
                let ids = [id.to_owned()];
                match reserve_here(&*memory, rules, owner, &ids, parent)
                    .now_or_never()
                    .expect("never waits")
                    .unwrap()
                {
                    ShardAnswer::Moved | ShardAnswer::Forwarded(_) => layout.learn_split(&shard.name(NS)),
                    ShardAnswer::Decided(d) => {
                        memory.confirm(owner, &ids, now_ms);
                        return d[0];
                    }
                }
            }
        }
    }

    #[test]
    fn an_id_accepted_before_any_split_is_a_duplicate_after_every_split_and_only_once_new() {
        let tree = Tree::default();
        let mut old_isolate = LedgerLayout::default();
        let ids: Vec<String> = (0..200).map(|n| format!("evt_{n}")).collect();
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(tree.reserve(&mut old_isolate, id, &format!("r{n}"), 1, u32::MAX), Reserved::Fresh);
        }
        // Every call splits now (as LEDGER_SPLIT_ABOVE_PER_SECOND=0 makes it): a fresh isolate
        // goes down to the deepest level, and still finds every id accepted above.
        let mut new_isolate = LedgerLayout::default();
        for id in &ids {
            assert_eq!(tree.reserve(&mut new_isolate, id, "late", 2, 0), Reserved::Duplicate, "{id}");
        }
        assert!(new_isolate.shard_for(NS, "evt_0").level == MAX_LEVEL);
        // The isolate that knew no split learns them from `moved`, and finds the same.
        for id in &ids {
            assert_eq!(tree.reserve(&mut old_isolate, id, "late", 3, 0), Reserved::Duplicate);
        }
        // A new id is fresh once, wherever it is asked.
        assert_eq!(tree.reserve(&mut new_isolate, "evt_new", "a", 4, 0), Reserved::Fresh);
        assert_eq!(tree.reserve(&mut old_isolate, "evt_new", "b", 5, 0), Reserved::Duplicate);
        // After the window, ancestors are not asked and hold nothing that counts.
        assert_eq!(tree.reserve(&mut new_isolate, "evt_1", "c", 2 + WINDOW + 10, 0), Reserved::Fresh);
    }

    #[test]
    fn a_shard_splits_above_the_rate_and_asks_its_parent_within_the_window() {
        assert!(should_split(0, 251, 250, 0));
        assert!(!should_split(0, 250, 250, 0));
        assert!(!should_split(MAX_LEVEL, 10_000, 250, u64::MAX), "the deepest level does not split");
        assert!(should_split(3, 1, 0, 0), "0 splits on every call (tests)");
        assert!(should_split(7, 1, 250, SPLIT_ABOVE_BYTES + 1), "a full shard splits however quiet");
        assert!(!should_split(7, 1, 250, SPLIT_ABOVE_BYTES));
        // 48 h of a deepest-level shard's share of 100,000 events/s fits below the split.
        let per_shard = 100_000.0 / (ROOT_SHARDS << MAX_LEVEL) as f64;
        assert!(per_shard * 172_800.0 * reservation_bytes() as f64 <= SPLIT_ABOVE_BYTES as f64);
        assert!(asks_parent(None, 5, 10));
        assert!(asks_parent(Some(0), 9 + RESERVATION_LEASE_MS, 10));
        assert!(!asks_parent(Some(0), 10 + RESERVATION_LEASE_MS, 10));
    }
}

#[cfg(test)]
mod parent_check_tests {
    use super::*;
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that remembers it was woken.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    impl Flag {
        fn woken(&self) -> bool {
            self.0.swap(false, Ordering::SeqCst)
        }
    }

    /// A parent the test answers when it likes: what each check asked, and how many are answered.
    /// It holds `held` (confirmed) and split at 7.
    #[derive(Default)]
    struct Parent {
        asked: RefCell<Vec<Vec<String>>>,
        answered: Cell<usize>,
        fail: Cell<bool>,
    }

    impl Parent {
        fn send<'a>(&'a self) -> impl FnOnce(Vec<String>) -> Pin<Box<dyn Future<Output = Answer> + 'a>> + 'a {
            move |ids| {
                let index = self.asked.borrow().len();
                self.asked.borrow_mut().push(ids.clone());
                Box::pin(std::future::poll_fn(move |_| {
                    if self.answered.get() <= index {
                        return Poll::Pending;
                    }
                    if self.fail.get() {
                        return Poll::Ready(Err("parent failed"));
                    }
                    let hold = |id: &String| {
                        (id == "held").then(|| Reservation { owner: "r0".into(), confirmed: true, at_ms: 1 })
                    };
                    Poll::Ready(Ok((ids.iter().map(hold).collect(), Some(7))))
                }))
            }
        }
    }

    type Answer = Result<Checked, &'static str>;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn poll<F: Future>(f: Pin<&mut F>, flag: &Arc<Flag>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(&Waker::from(flag.clone())))
    }

    #[test]
    fn checks_asked_while_one_is_out_wait_and_go_together_in_the_next() {
        let checks = ParentChecks::default();
        let parent = Parent::default();
        let (w1, w2, w3) = (Arc::new(Flag::default()), Arc::new(Flag::default()), Arc::new(Flag::default()));
        let mut c1 = pin!(checks.check(ids(&["held", "b"]), 0, parent.send()));
        let mut c2 = pin!(checks.check(ids(&["b", "c"]), 1, parent.send()));
        let mut c3 = pin!(checks.check(ids(&["held"]), 2, parent.send()));
        assert!(poll(c1.as_mut(), &w1).is_pending());
        assert!(poll(c2.as_mut(), &w2).is_pending());
        assert!(poll(c3.as_mut(), &w3).is_pending());
        assert_eq!(*parent.asked.borrow(), [ids(&["held", "b"])], "one check out at a time");
        parent.answered.set(1);
        let held = Some(Reservation { owner: "r0".into(), confirmed: true, at_ms: 1 });
        assert_eq!(poll(c1.as_mut(), &w1), Poll::Ready(Ok((vec![held.clone(), None], Some(7)))));
        // The first waiting call sends for both, once: each id once.
        assert!(w2.woken() && !w3.woken());
        assert!(poll(c2.as_mut(), &w2).is_pending());
        assert_eq!(parent.asked.borrow()[1], ids(&["b", "c", "held"]));
        assert!(poll(c3.as_mut(), &w3).is_pending());
        parent.answered.set(2);
        assert_eq!(poll(c2.as_mut(), &w2), Poll::Ready(Ok((vec![None, None], Some(7)))));
        assert!(w3.woken());
        assert_eq!(poll(c3.as_mut(), &w3), Poll::Ready(Ok((vec![held], Some(7)))));
        assert_eq!(parent.asked.borrow().len(), 2);
        // None out: the next check goes at once; and one goes while another is out when the last
        // went long enough ago.
        let mut c4 = pin!(checks.check(ids(&["d"]), 3, parent.send()));
        assert!(poll(c4.as_mut(), &w1).is_pending());
        let mut c5 = pin!(checks.check(ids(&["e"]), 3 + PARENT_CHECK_EVERY_MS - 1, parent.send()));
        assert!(poll(c5.as_mut(), &w2).is_pending());
        assert_eq!(parent.asked.borrow().len(), 3, "c5 waits");
        let mut c6 = pin!(checks.check(ids(&["f"]), 3 + PARENT_CHECK_EVERY_MS, parent.send()));
        assert!(poll(c6.as_mut(), &w3).is_pending());
        assert_eq!(parent.asked.borrow()[3], ids(&["e", "f"]), "c6 sends for c5 and itself");
        parent.answered.set(4);
        assert_eq!(poll(c6.as_mut(), &w3), Poll::Ready(Ok((vec![None], Some(7)))));
        assert!(w2.woken());
        assert_eq!(poll(c5.as_mut(), &w2), Poll::Ready(Ok((vec![None], Some(7)))));
        assert_eq!(poll(c4.as_mut(), &w1), Poll::Ready(Ok((vec![None], Some(7)))));
        assert_eq!(parent.asked.borrow().len(), 4);
    }

    #[test]
    fn a_failed_check_fails_every_call_it_went_for() {
        let checks = ParentChecks::default();
        let parent = Parent::default();
        let flag = Arc::new(Flag::default());
        let mut c1 = pin!(checks.check(ids(&["a"]), 0, parent.send()));
        let mut c2 = pin!(checks.check(ids(&["b"]), 1, parent.send()));
        let mut c3 = pin!(checks.check(ids(&["c"]), 2, parent.send()));
        for c in [c1.as_mut(), c2.as_mut(), c3.as_mut()] {
            assert!(poll(c, &flag).is_pending());
        }
        parent.answered.set(1);
        assert_eq!(poll(c1.as_mut(), &flag), Poll::Ready(Ok((vec![None], Some(7)))));
        assert!(poll(c2.as_mut(), &flag).is_pending(), "c2 sends for c2 and c3");
        parent.fail.set(true);
        parent.answered.set(2);
        assert_eq!(poll(c2.as_mut(), &flag), Poll::Ready(Err("parent failed")));
        assert_eq!(poll(c3.as_mut(), &flag), Poll::Ready(Err("parent failed")));
    }

    #[test]
    fn a_dropped_sender_or_waiter_leaves_the_others_to_check() {
        let checks = ParentChecks::default();
        let parent = Parent::default();
        let flag = Arc::new(Flag::default());
        let mut c2 = Box::pin(checks.check(ids(&["b"]), 1, parent.send()));
        let mut c3 = Box::pin(checks.check(ids(&["c"]), 2, parent.send()));
        {
            let mut c1 = pin!(checks.check(ids(&["a"]), 0, parent.send()));
            assert!(poll(c1.as_mut(), &flag).is_pending());
            assert!(poll(c2.as_mut(), &flag).is_pending() && poll(c3.as_mut(), &flag).is_pending());
        }
        // c1 was dropped with its check out: c2 sends for c2 and c3.
        assert!(flag.woken());
        assert!(poll(c2.as_mut(), &flag).is_pending());
        assert_eq!(parent.asked.borrow()[1], ids(&["b", "c"]));
        // A dropped waiter is no longer asked for; a dropped sender that was answered is harmless.
        let mut c5 = Box::pin(checks.check(ids(&["e"]), 3, parent.send()));
        let c4 = Box::pin(checks.check(ids(&["d"]), 4, parent.send()));
        assert!(poll(c5.as_mut(), &flag).is_pending());
        drop(c4);
        parent.answered.set(2);
        assert_eq!(poll(c2.as_mut(), &flag), Poll::Ready(Ok((vec![None], Some(7)))));
        assert_eq!(poll(c3.as_mut(), &flag), Poll::Ready(Ok((vec![None], Some(7)))));
        assert!(poll(c5.as_mut(), &flag).is_pending());
        assert_eq!(parent.asked.borrow()[2], ids(&["e"]));
        parent.answered.set(3);
        assert_eq!(poll(c5.as_mut(), &flag), Poll::Ready(Ok((vec![None], Some(7)))));
        assert!(checks.out.get() == 0 && checks.waiting.borrow().is_empty());
    }
}
