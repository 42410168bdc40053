//! `gatehouse-model`: a deterministic discrete-event model of the platform that drives Gatehouse's
//! real code (`gatehouse_core::lease`, `rate_limit`, `ledger::shards`, `audit`) at rates one
//! machine cannot serve (SPEC §20). docs/internals/model.md explains the model and its assumptions.
//!
//! ```text
//! gatehouse-model hot-key [--quick] [--seed N] [--broken-rule]
//! gatehouse-model big-project [--quick] [--seed N] [--broken-rule]
//! ```
//!
//! Prints one JSON object as its last line; exits 1 when a target is missed.

mod audit_spread;
mod big_project;
mod hot_key;
mod platform;

use big_project::{big_project, BigProject};
use hot_key::{hot_key, HotKey};

const USAGE: &str = "usage: gatehouse-model hot-key|big-project [--quick] [--seed N] [--broken-rule]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let seed = args
        .iter()
        .position(|a| a == "--seed")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
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
            let report = big_project(&params);
            (report.json(&params), report.missed(&params))
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
