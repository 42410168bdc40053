//! The fake guard's levels above a key (SPEC §20, §23): each level's authority — its grants, what
//! comes back of them, the limits it was told — and the holders' alarms that give back grants that
//! ended.

use super::guard::{FakeGuard, Kept};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::lease::{
    accept_give_back, grant, parked, GiveBack, Grant, Held, Returned, RECALLS_PER_REFUSAL,
};
use gatehouse_core::rate_limit::LimitSpec;
use gatehouse_core::retention::grant_kept_until;

impl FakeGuard {
    /// The levels above `key` and their limits: the authority's own where it was told them (a
    /// holder learns them from its first grant; in this one world, at once).
    pub(super) fn levels(&self, key: &KeyRecord) -> Vec<(String, LimitSpec)> {
        let levels = self.config.levels(key).into_iter();
        levels
            .map(|(level, spec)| {
                let spec = self.told_limits(&level).unwrap_or(spec);
                (level, spec)
            })
            .collect()
    }
    /// The limits `level`'s authority was told, while they hold.
    fn told_limits(&self, level: &str) -> Option<LimitSpec> {
        let now = self.clock.get();
        self.level_limits
            .borrow()
            .get(level)
            .filter(|(_, _, until)| *until > now)
            .map(|(limits, _, _)| *limits)
    }
    /// A level's authority takes back what a holder did not use of a grant, once.
    pub(super) fn take_back_grant(&self, level: &str, back: &GiveBack) {
        let mut counters = self.counters.borrow().get(level).copied().unwrap_or_default();
        if let Some(Kept { row: (grant, returned), .. }) = self.grants.borrow_mut().get_mut(&back.grant_id) {
            accept_give_back(&mut counters, self.clock.get(), grant, returned, back);
        }
        self.counters.borrow_mut().insert(level.to_owned(), counters);
    }
    /// The keys' guards' alarms (the real guard sets one at each grant's end): grants that ended
    /// are given back to their levels.
    pub(super) fn run_alarms(&self) {
        let now = self.clock.get();
        let ended: Vec<((String, String), Held)> = self
            .held
            .borrow()
            .iter()
            .filter(|(_, h)| h.until_ms <= now)
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect();
        for ((holder, level), held) in ended {
            self.held.borrow_mut().remove(&(holder, level.clone()));
            if let Some(back) = held.give_back() {
                self.take_back_grant(&level, &back);
            }
        }
    }
    /// A level's authority: takes back what `last` did not use (once), then grants; about to
    /// refuse, it first asks back what other holders hold of it (SPEC §23: a level refuses only
    /// when no credit is left anywhere), as the real authority does.
    pub(super) fn exchange(
        &self,
        level: &str,
        holder: &str,
        spec: &LimitSpec,
        last: Option<&Held>,
        cost: u32,
    ) -> Grant {
        let now = self.clock.get();
        if let Some(back) = last.and_then(Held::give_back) {
            self.take_back_grant(level, &back);
        }
        let grant_id = self.next_id("grant");
        let want = Held::want(last, now, cost);
        let told = self.told_limits(level).unwrap_or(*spec);
        let counters = self.counters.borrow().get(level).copied().unwrap_or_default();
        let (mut grant, mut next) = grant(counters, now, &told, &grant_id, cost, want);
        if grant.credits == 0 && want > 0 && self.recall_parked(level, holder) {
            let counters = self.counters.borrow().get(level).copied().unwrap_or_default();
            (grant, next) = gatehouse_core::lease::grant(counters, now, &told, &grant_id, cost, want);
        }
        self.counters.borrow_mut().insert(level.to_owned(), next);
        // As the real authority: a grant of credits is kept until a give-back can still come.
        if let Some(keep_until) = grant_kept_until(&grant) {
            let row = (grant.clone(), Returned::default());
            self.grants.borrow_mut().insert(grant_id, Kept { row, object: level.to_owned(), keep_until });
        }
        grant
    }

    /// Asks the other holders of `level`'s running grants to give them back now (at most
    /// [`RECALLS_PER_REFUSAL`], the largest first); answers whether any credit came back.
    fn recall_parked(&self, level: &str, asker: &str) -> bool {
        let now = self.clock.get();
        let mut parked: Vec<((String, String), Held)> = self
            .held
            .borrow()
            .iter()
            .filter(|((holder, l), h)| {
                let kept = self.grants.borrow().get(&h.grant_id).map(|k| k.row.clone());
                l == level
                    && kept.is_some_and(|(grant, returned)| {
                        parked(&grant, &returned, Some(holder), Some(asker), now)
                    })
            })
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect();
        parked.sort_by_key(|(_, h)| std::cmp::Reverse(h.credits - h.used));
        let mut back = false;
        for (slot, held) in parked.into_iter().take(RECALLS_PER_REFUSAL) {
            self.held.borrow_mut().remove(&slot);
            if let Some(give_back) = held.give_back() {
                self.take_back_grant(level, &give_back);
                back = true;
            }
        }
        back
    }
}
