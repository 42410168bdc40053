//! The platform as every scenario sees it: the clock, chance, the event queue, objects as
//! single-threaded servers, isolates' round trips and bursty arrivals.

use std::collections::{BTreeMap, BinaryHeap};

/// 2026-11-29T09:00:00Z, a minute boundary: the model's clock starts here (ms).
pub const T0_MS: i64 = 1_795_942_800_000;

/// SplitMix64: the model's only source of chance, so a seed replays a run exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `N` random bytes.
    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_be_bytes()[..chunk.len()]);
        }
        out
    }

    /// Exponentially distributed with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// The size of a burst of arrivals: 1 to 2 × `mean` at once.
    pub fn burst(&mut self, mean: f64) -> usize {
        1 + (self.unit() * 2.0 * mean) as usize
    }

    /// The gap (µs) before a burst of `size`, so that bursts average `per_second` arrivals.
    pub fn burst_gap_us(&mut self, size: usize, per_second: f64) -> i64 {
        self.exp(size as f64 / per_second * 1e6) as i64
    }
}

/// The round trip (µs) from isolate `isolate` to the objects: isolates are spread over the
/// locations in turn.
pub fn round_trip_us(round_trips_ms: &[f64], isolate: usize) -> i64 {
    (round_trips_ms[isolate % round_trips_ms.len()] * 1000.0) as i64
}

/// The model's events in time order (µs since the start; ties in the order they were made).
pub struct Scheduler<E> {
    queue: BinaryHeap<Queued<E>>,
    made: u64,
}

/// An event in the queue: the earliest first, then the first made.
struct Queued<E> {
    at_us: i64,
    made: u64,
    event: E,
}

impl<E> PartialEq for Queued<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.made) == (other.at_us, other.made)
    }
}

impl<E> Eq for Queued<E> {}

impl<E> PartialOrd for Queued<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Queued<E> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at_us, other.made).cmp(&(self.at_us, self.made))
    }
}

impl<E> Default for Scheduler<E> {
    fn default() -> Self {
        Scheduler { queue: BinaryHeap::new(), made: 0 }
    }
}

impl<E> Scheduler<E> {
    pub fn push(&mut self, at_us: i64, event: E) {
        self.made += 1;
        self.queue.push(Queued { at_us, made: self.made, event });
    }

    pub fn pop(&mut self) -> Option<(i64, E)> {
        self.queue.pop().map(|q| (q.at_us, q.event))
    }
}

/// A Durable Object as the model runs it: one single-threaded server. A turn waits for the ones
/// before it; the calls are counted by the second they are counted in.
#[derive(Default)]
pub struct Server {
    busy_until_us: i64,
    calls: BTreeMap<i64, u64>,
}

impl Server {
    /// Queues a turn of `cost_us` arriving now: answers when it ends.
    pub fn queue(&mut self, now_us: i64, cost_us: i64) -> i64 {
        self.busy_until_us = self.busy_until_us.max(now_us) + cost_us;
        self.busy_until_us
    }

    /// The work (µs) queued before a turn arriving now.
    pub fn backlog_us(&self, now_us: i64) -> i64 {
        (self.busy_until_us - now_us).max(0)
    }

    pub fn count_call(&mut self, now_us: i64) {
        *self.calls.entry(now_us / 1_000_000).or_default() += 1;
    }

    /// Calls by second.
    pub fn calls(&self) -> &BTreeMap<i64, u64> {
        &self.calls
    }

    /// The most calls of one second of `seconds`.
    pub fn max_calls_per_second(&self, seconds: impl std::ops::RangeBounds<i64>) -> u64 {
        self.calls.range(seconds).map(|(_, &n)| n).max().unwrap_or(0)
    }
}

/// The `q` quantile of `values` (nearest rank; 0 when there are none).
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0)
}
