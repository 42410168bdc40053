//! What the configuration answers about plans and limits (SPEC §4, §20, §22, §23): which requests
//! bill, which route classes a plan exempts and what they cost, the windows of a key and of the
//! levels above it, the dashboard's budget and a browser key's visitors.

use super::{Config, Plan, DEFAULT_PLAN};
use crate::api_key::{KeyRecord, Scope};
use crate::rate_limit::{LimitSpec, Limits};
use crate::usage::Billable;

impl Config {
    /// Whether an authenticated request of a key on `plan` that was answered `status` bills
    /// (SPEC §22); a plan `PLANS` no longer has bills as trial does.
    pub fn bills(&self, plan: &str, status: u16) -> bool {
        self.billable
            .get(self.plan_name(plan))
            .map_or_else(|| Billable::default().bills(status), |b| b.bills(status))
    }

    /// Whether a request of `scope` by a key on `plan` is exempt from the windows, the quota and
    /// billing (its route class is in the plan's `exempt`); a plan `PLANS` no longer has is trial.
    pub fn exempts(&self, plan: &str, scope: Scope) -> bool {
        self.exempt
            .get(self.plan_name(plan))
            .is_some_and(|classes| classes.iter().any(|c| c == scope.class()))
    }

    /// Units of the windows and the quota a request of `scope` takes for a key on `plan`: none
    /// when its class is exempt.
    pub fn cost(&self, plan: &str, scope: Scope) -> u32 {
        if self.exempts(plan, scope) {
            0
        } else {
            scope.cost()
        }
    }

    /// The usage period in milliseconds.
    pub fn usage_period_ms(&self) -> i64 {
        i64::from(self.usage_period_seconds) * 1000
    }

    pub fn plan(&self, name: &str) -> Option<&Plan> {
        self.plans.get(name)
    }

    /// The plan named, or the trial plan when `PLANS` no longer has it (rather than no limit).
    /// `plan`, or the trial plan's name when `PLANS` no longer has it.
    fn plan_name<'a>(&self, plan: &'a str) -> &'a str {
        if self.plans.contains_key(plan) {
            plan
        } else {
            DEFAULT_PLAN
        }
    }

    pub fn plan_or_trial(&self, name: &str) -> &Plan {
        self.plans.get(self.plan_name(name)).expect("PLANS has trial")
    }

    /// The one window of an owner key's dashboard budget ([`crate::budget`]).
    pub fn dashboard_limits(&self) -> Limits {
        Limits::per_minute(self.dashboard_reads_per_minute)
    }

    /// The key's own limits: its plan's windows, each lowered by the key's (`limits`, and
    /// `rate_limit_per_minute` for the minute). An override is never above the plan (SPEC §13),
    /// also after the project moved to a smaller plan. No quota: the quota is the project's.
    pub fn limits(&self, key: &KeyRecord) -> Limits {
        let plan = self.plan_or_trial(&key.plan);
        let per_minute = LimitSpec { per_minute: key.rate_limit_per_minute, ..Default::default() };
        let own = key.limits.unwrap_or_default().lowered_by(&per_minute);
        let mut per = plan.windows();
        for (limit, mine) in per.iter_mut().zip(own.windows()) {
            // A window the plan does not limit stays unlimited: a key lowers, never adds.
            *limit = limit.map(|l| mine.map_or(l, |m| m.min(l)));
        }
        Limits { per, monthly_quota: None }
    }

    /// The levels above `key` that limit it, each by its authority's name (SPEC §20): its
    /// identity's limits, when it has any, and its project's quota (shared by all its keys),
    /// when its plan has one.
    pub fn levels(&self, key: &KeyRecord) -> Vec<(String, LimitSpec)> {
        use crate::guard::protocol::{identity_authority, project_authority};
        let identity = key.identity.as_ref().filter(|i| !i.limits.is_empty());
        let identity = identity.map(|i| (identity_authority(&i.id), i.limits));
        let project = self.project_limits(&key.plan);
        let project = project.monthly_quota.map(|_| (project_authority(&key.project_id), project));
        identity.into_iter().chain(project).collect()
    }

    /// A browser key's window per visitor (SPEC §24): its plan's
    /// `browser_per_address_per_minute`, else a tenth of the key's own minute as its limits make
    /// it (its plan's, lowered by its own; a key limiting only other windows: their rate in a
    /// minute), at least [`MIN_PER_ADDRESS_PER_MINUTE`].
    ///
    /// [`MIN_PER_ADDRESS_PER_MINUTE`]: crate::browser::MIN_PER_ADDRESS_PER_MINUTE
    pub fn browser_per_address_per_minute(&self, key: &KeyRecord) -> u32 {
        use crate::rate_limit::Window;
        if let Some(n) = self.browser_per_address.get(self.plan_name(&key.plan)) {
            return *n;
        }
        let limits = self.limits(key);
        let minute = limits
            .window(Window::Minute)
            .map(u64::from)
            .or(limits.window(Window::Second).map(|n| u64::from(n) * 60))
            .or(limits.window(Window::Hour).map(|n| u64::from(n) / 60))
            .or(limits.window(Window::Day).map(|n| u64::from(n) / 1_440))
            .unwrap_or(0);
        (minute / 10).clamp(u64::from(crate::browser::MIN_PER_ADDRESS_PER_MINUTE), u64::from(u32::MAX)) as u32
    }

    /// What a project on `plan` limits at its level (its authority's limits): the monthly quota.
    pub fn project_limits(&self, plan: &str) -> LimitSpec {
        LimitSpec { monthly_quota: self.plan_or_trial(plan).monthly_quota, ..Default::default() }
    }
}
