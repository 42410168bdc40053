//! `gatehouse-model`: a deterministic discrete-event model of the platform that drives Gatehouse's
//! real code (`gatehouse_core::lease`, `rate_limit`, `ledger::shards`, `audit`) at rates one
//! machine cannot serve (SPEC §20). docs/internals/model.md explains the model and its assumptions.
//!
//! ```text
//! gatehouse-model hot-key [--quick] [--seed N] [--broken-rule]
//! gatehouse-model big-project [--quick] [--seed N] [--broken-rule] [--split-storm] [--no-forward]
//! gatehouse-model soak [--quick] [--days N] [--no-purge]
//! ```
//!
//! Prints one JSON object as its last line; exits 1 when a target is missed.

mod audit_spread;
mod big_project;
mod hot_key;
mod platform;
mod soak;

use big_project::{big_project, BigProject};
use hot_key::{hot_key, HotKey};
use soak::{soak, Soak};

const USAGE: &str = "usage: gatehouse-model hot-key|big-project [--quick] [--seed N] [--broken-rule]\n       gatehouse-model big-project [--split-storm] [--no-forward]\n       gatehouse-model soak [--quick] [--days N] [--no-purge]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok());
    let seed = value("--seed").map_or(1, |s: i64| s as u64);
    let (json, missed) = match args.first().map(String::as_str) {
        Some("hot-key") => {
            let mut params = if flag("--quick") { HotKey::quick() } else { HotKey::full() };
            params.seed = seed;
            params.broken_rule = flag("--broken-rule");
            let report = hot_key(&params);
            (report.json(&params), report.missed(&params))
        }
        Some("big-project") => {
            let mut params = if flag("--quick") { BigProject::quick() } else { BigProject::full() };
            params.seed = seed;
            params.broken_rule = flag("--broken-rule");
            params.forwarding = !flag("--no-forward");
            if flag("--split-storm") {
                params.split_storm();
            }
            let report = big_project(&params);
            (report.json(&params), report.missed(&params))
        }
        Some("soak") => {
            let mut params = if flag("--quick") { Soak::quick() } else { Soak::full() };
            if let Some(days) = value("--days") {
                params.days = days;
            }
            params.no_purge = flag("--no-purge");
            let report = soak(&params);
            (report.json(&params), report.missed())
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    for line in &missed {
        eprintln!("target missed: {line}");
    }
    println!("{json}");
    std::process::exit(i32::from(!missed.is_empty()));
}
