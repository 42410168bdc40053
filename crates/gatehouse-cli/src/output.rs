//! What the command line prints: answers as JSON (pretty, or one line each when they stream) and
//! the log tail's lines.

use gatehouse_client::LogEntry;
use serde::Serialize;

pub fn print_json(value: &impl Serialize) {
    println!("{}", serde_json::to_string_pretty(value).expect("answers serialise"));
}

pub fn print_line(value: &impl Serialize) {
    println!("{}", serde_json::to_string(value).expect("answers serialise"));
}

/// A page's rows as JSON lines, and its next cursor on stderr.
pub fn print_page<T: Serialize>(page: gatehouse_client::Page<T>) {
    for row in &page.data {
        print_line(row);
    }
    if let Some(next) = page.next_cursor {
        eprintln!("next cursor: {next}");
    }
}

/// One tail line: time, status, method, path, duration, key, request id, and what stands out.
pub fn log_line(row: &LogEntry) -> String {
    let mut line = format!(
        "{}  {} {} {}  {} ms  {}  {}",
        row.ts,
        row.status,
        row.method,
        row.path,
        row.response_time_ms,
        row.key_prefix.as_deref().unwrap_or("-"),
        row.request_id
    );
    if let Some(code) = &row.error_code {
        line.push_str(&format!("  {code}"));
    }
    if row.replayed {
        line.push_str("  replayed");
    }
    line
}
