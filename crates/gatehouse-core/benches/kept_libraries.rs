//! What we kept of our own against the well-kept crates (issue 44): each pair on the same input,
//! the same answer asserted, then timed. `cargo bench -p gatehouse-core --bench kept_libraries`
//! (scripts/bench runs it). docs/performance.md ("Kept libraries") has the table, with the pairs
//! where the crate was faster and replaced ours (hex, base64, HTTP dates). Natively: the wasm's
//! ratios follow the same code, not the same numbers.

use std::hint::black_box;
use std::time::Instant;

use gatehouse_core::{encoding, time};
use time_crate::format_description::well_known::Rfc3339;
use time_crate::OffsetDateTime;

const ROUNDS: u32 = 400_000;

/// Nanoseconds per call of `f`, the best of three runs.
fn ns(mut f: impl FnMut()) -> f64 {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..ROUNDS {
                f();
            }
            started.elapsed().as_nanos() as f64 / f64::from(ROUNDS)
        })
        .fold(f64::INFINITY, f64::min)
}

fn row(what: &str, ours: f64, theirs: f64, crate_name: &str) {
    println!("{what:<40}{ours:>9.1}{theirs:>9.1}{:>12.2}  {crate_name}", theirs / ours);
}

fn main() {
    println!("{:<40}{:>9}{:>9}{:>12}  crate", "ns per call (native, release)", "ours", "crate", "crate÷ours");

    let at = 1_795_942_112_123i64;
    let text = time::rfc3339(at);
    let theirs = OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000).expect("in range");
    assert_eq!(theirs.format(&Rfc3339).expect("formats"), text);
    let ours = ns(|| {
        black_box(time::rfc3339(black_box(at)));
    });
    let crate_ = ns(|| {
        let _ = black_box(black_box(theirs).format(&Rfc3339));
    });
    row("RFC 3339 of a time (every answer)", ours, crate_, "time 0.3");
    assert_eq!(OffsetDateTime::parse(&text, &Rfc3339).expect("parses"), theirs);
    let ours = ns(|| {
        black_box(time::parse_rfc3339(black_box(&text)));
    });
    let crate_ = ns(|| {
        let _ = black_box(OffsetDateTime::parse(black_box(&text), &Rfc3339));
    });
    row("RFC 3339 parse (a query's since/until)", ours, crate_, "time 0.3");

    let id = "key_01jdz3q8m4x7v2c9t6r5w0y1b8";
    let fnv = |bytes: &[u8]| {
        use std::hash::Hasher;
        let mut h = fnv::FnvHasher::default();
        h.write(bytes);
        h.finish()
    };
    assert_eq!(encoding::fnv1a(id.as_bytes()), fnv(id.as_bytes()));
    let ours = ns(|| {
        black_box(encoding::fnv1a(black_box(id.as_bytes())));
    });
    let crate_ = ns(|| {
        black_box(fnv(black_box(id.as_bytes())));
    });
    row("FNV-1a of an id (shard choice)", ours, crate_, "fnv 1");
}
