//! The limits of the platform the product ships to (SPEC §19), written once, each with its source.
//! `wrangler dev` enforces few of them (local D1 is SQLite, which takes a 1 GB string); the code
//! sizes every write against this table — it chunks, or answers the caller a clear 4xx — and the
//! fakes refuse what the platform refuses, so the simulations fail where production would.
//!
//! Sources (read 2026-12): developers.cloudflare.com/d1/platform/limits/,
//! /queues/platform/limits/, /kv/platform/limits/, /r2/platform/limits/,
//! /durable-objects/platform/limits/, /workers/platform/limits/.

/// D1: the largest string, BLOB or row, in bytes.
pub const D1_MAX_VALUE_BYTES: usize = 2_000_000;
/// D1: the longest SQL statement, in bytes.
pub const D1_MAX_STATEMENT_BYTES: usize = 100_000;
/// D1: bound parameters per statement.
pub const D1_MAX_BOUND_PARAMETERS: usize = 100;
/// D1: the longest LIKE or GLOB pattern, in bytes.
pub const D1_MAX_PATTERN_BYTES: usize = 50;
/// D1: queries per Worker invocation (Workers Paid; 50 on Free).
pub const D1_MAX_QUERIES_PER_INVOCATION: usize = 1_000;

/// Queues: the largest message, in bytes (128 KB).
pub const QUEUE_MAX_MESSAGE_BYTES: usize = 128_000;
/// Queues: messages per `sendBatch`.
pub const QUEUE_MAX_BATCH_MESSAGES: usize = 100;
/// Queues: the total size of one `sendBatch`, in bytes (256 KB).
pub const QUEUE_MAX_BATCH_BYTES: usize = 256_000;
/// Queues: the longest `delaySeconds` (12 hours).
pub const QUEUE_MAX_DELAY_SECONDS: u32 = 43_200;

/// KV: the longest key, in bytes.
pub const KV_MAX_KEY_BYTES: usize = 512;
/// KV: the largest value, in bytes (25 MiB).
pub const KV_MAX_VALUE_BYTES: usize = 25 * 1024 * 1024;
/// KV: writes to one key per second.
pub const KV_WRITES_PER_KEY_PER_SECOND: u32 = 1;

/// R2: the longest object key, in bytes.
pub const R2_MAX_KEY_BYTES: usize = 1_024;
/// R2: writes to one object key per second (concurrent writes to one key are refused with 429).
pub const R2_WRITES_PER_KEY_PER_SECOND: u32 = 1;

/// Durable Objects: the largest value of the SQLite storage (a string, BLOB or row), in bytes.
pub const DO_MAX_VALUE_BYTES: usize = 2_000_000;
/// Durable Objects: the soft limit of requests per second one object serves.
pub const DO_REQUESTS_PER_SECOND: u32 = 1_000;
/// Durable Objects: the storage of one object (SQLite backend), in bytes (10 GB). Past it every
/// write fails, so each kind of object states its own budget far below it (SPEC §23,
/// `retention::ObjectKind::budget_bytes`).
pub const DO_MAX_OBJECT_BYTES: u64 = 10_000_000_000;

/// Workers: memory of one isolate, in bytes (128 MB).
pub const WORKER_MEMORY_BYTES: usize = 128 * 1024 * 1024;
/// Workers: simultaneous open outbound connections per invocation.
pub const WORKER_MAX_OPEN_CONNECTIONS: usize = 6;
/// Workers: subrequests per invocation (D1 queries, R2, KV, Queues and Durable Object calls, and
/// `fetch`). Workers Paid allows 10,000 by default (2026; set with `[limits] subrequests` in
/// wrangler.toml, which states this number; Free: 50). D1 counts its queries on its own as well:
/// [`D1_MAX_QUERIES_PER_INVOCATION`].
pub const WORKER_MAX_SUBREQUESTS: usize = 10_000;

/// How long the code waits for one call to a binding before it treats it as failed (SPEC §19:
/// every wait has a deadline; a call that never settles must not hold anything). A write that
/// lands after its deadline is one the caller already treats as "may have landed".
pub mod deadline {
    /// A D1 query or batch.
    pub const D1_MS: u64 = 10_000;
    /// A Durable Object call (the guard waits up to 2 s for a running claim inside it).
    pub const DURABLE_OBJECT_MS: u64 = 10_000;
    /// A ledger shard's check of the shard it split from (SPEC §20): well inside the worker's own
    /// deadline on the reserve that makes it.
    pub const LEDGER_CHECK_MS: u64 = 3_000;
    /// A split ledger shard's reserve forwarded to a child (SPEC §20): inside the worker's own
    /// deadline on the reserve it forwards.
    pub const LEDGER_FORWARD_MS: u64 = 6_000;
    /// A KV read or write.
    pub const KV_MS: u64 = 5_000;
    /// A queue send.
    pub const QUEUE_MS: u64 = 5_000;
    /// An R2 call (a put of a roll-up object is at most a few MB).
    pub const R2_MS: u64 = 15_000;
}

/// Whether `text` fits in one D1 string or BLOB.
pub fn fits_d1_value(text: &str) -> bool {
    text.len() <= D1_MAX_VALUE_BYTES
}

/// Splits `items` (in order) into runs whose encoded sizes, plus `overhead` per run and `separator`
/// between items, stay within `budget` bytes. An item larger than the budget on its own is a run of
/// its own (its caller refuses it or stores it apart).
pub fn runs_within<T>(
    items: &[T],
    budget: usize,
    overhead: usize,
    separator: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut used) = (0, overhead);
    for (i, item) in items.iter().enumerate() {
        let add = size(item) + if i > start { separator } else { 0 };
        if i > start && used + add > budget {
            runs.push(start..i);
            start = i;
            used = overhead + size(item);
        } else {
            used += add;
        }
    }
    if start < items.len() {
        runs.push(start..items.len());
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_stay_within_the_budget_and_keep_every_item_once_in_order() {
        let sizes = [10, 30, 50, 5, 90, 200, 1];
        let runs = runs_within(&sizes, 100, 4, 1, |s| *s);
        assert_eq!(runs, vec![0..3, 3..5, 5..6, 6..7]);
        for run in &runs {
            let total: usize = 4 + sizes[run.clone()].iter().sum::<usize>() + run.len() - 1;
            assert!(total <= 100 || run.len() == 1, "{run:?} is {total} bytes");
        }
        assert_eq!(
            runs.iter().flat_map(|r| r.clone()).collect::<Vec<_>>(),
            (0..sizes.len()).collect::<Vec<_>>()
        );
        assert!(runs_within::<usize>(&[], 100, 0, 0, |s| *s).is_empty());
    }
}
