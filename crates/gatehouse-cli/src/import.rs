//! `gatehouse contacts import FILE`: a CSV (header row) or NDJSON file sent in bulk calls of 100
//! with a progress bar. Each chunk's `Idempotency-Key` is made from the file's SHA-256 and the
//! chunk's index, so re-running an interrupted (or finished) import sends the same keys: chunks
//! the server already did are replayed from its idempotency store (24 h) and create nothing.

use hex::encode as hex;
use std::path::Path;

use gatehouse_client::Client;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::Failure;

/// Contacts per bulk call (the API's maximum).
const CHUNK: usize = 100;
const COLUMNS: [&str; 4] = ["name", "phone", "email", "external_id"];

/// A contact to send, with the line of the file it came from.
struct Row {
    line: u64,
    contact: Value,
}

pub async fn run(client: &Client, file: &Path) -> Result<(), Failure> {
    let bytes =
        std::fs::read(file).map_err(|e| Failure::Usage(format!("cannot read {}: {e}", file.display())))?;
    let digest = hex(Sha256::digest(&bytes));
    let rows = if is_ndjson(file, &bytes) { ndjson(&bytes)? } else { csv(&bytes)? };
    if rows.is_empty() {
        return Err(Failure::Usage(format!("{} holds no contacts", file.display())));
    }
    let chunks = rows.len().div_ceil(CHUNK);
    eprintln!(
        "importing {} contacts from {} in {chunks} bulk call(s) of up to {CHUNK}",
        rows.len(),
        file.display()
    );

    let bar = ProgressBar::new(rows.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40.cyan/blue} {pos}/{len} contacts  {elapsed_precise}  {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let (mut created, mut earlier, mut replayed_chunks) = (0u64, 0u64, 0usize);
    let mut failures: Vec<(u64, String)> = Vec::new();
    for (index, chunk) in rows.chunks(CHUNK).enumerate() {
        bar.set_message(format!("chunk {}/{chunks}", index + 1));
        let items: Vec<&Value> = chunk.iter().map(|row| &row.contact).collect();
        let key = format!("contacts-import-{digest}-{index}");
        let reply = match client.create_contacts_bulk(&items).idempotency_key(key).reply().await {
            Ok(reply) => reply,
            Err(error) => {
                bar.abandon();
                eprintln!(
                    "chunk {} of {chunks} (lines {}–{}) failed after its retries; {created} created so far. \
                     Run the same command again to resume: chunks already done are replayed, not created twice.",
                    index + 1,
                    chunk[0].line,
                    chunk[chunk.len() - 1].line
                );
                return Err(Failure::Api(error));
            }
        };
        if reply.replayed {
            replayed_chunks += 1;
            earlier += reply.value.created;
        } else {
            created += reply.value.created;
        }
        for item in reply.value.results.iter().filter(|item| item.status != "created") {
            let line = chunk.get(item.index).map_or(0, |row| row.line);
            failures.push((line, describe(item.error.as_ref())));
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_with_message("done");

    println!("created {created}, failed {}", failures.len());
    if replayed_chunks > 0 {
        println!(
            "{replayed_chunks} of {chunks} chunk(s) were already imported by an earlier run of this file: \
             {earlier} contact(s) not created again"
        );
    }
    for (line, reason) in &failures {
        println!("line {line}: {reason}");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::Reported)
    }
}

fn describe(error: Option<&Value>) -> String {
    let Some(error) = error else { return "failed".into() };
    let code = error["code"].as_str().unwrap_or("FAILED");
    match error["message"].as_str() {
        Some(message) => format!("{code}: {message}"),
        None => code.to_owned(),
    }
}

fn is_ndjson(file: &Path, bytes: &[u8]) -> bool {
    match file.extension().and_then(|e| e.to_str()) {
        Some("ndjson" | "jsonl") => true,
        Some("csv") => false,
        _ => bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'),
    }
}

fn ndjson(bytes: &[u8]) -> Result<Vec<Row>, Failure> {
    let text = std::str::from_utf8(bytes).map_err(|_| Failure::Usage("the file is not UTF-8".into()))?;
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(contact @ Value::Object(_)) => rows.push(Row { line: number as u64 + 1, contact }),
            _ => return Err(Failure::Usage(format!("line {}: not a JSON object", number + 1))),
        }
    }
    Ok(rows)
}

fn csv(bytes: &[u8]) -> Result<Vec<Row>, Failure> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(false).from_reader(bytes);
    let usage = |e: csv::Error| Failure::Usage(format!("CSV: {e}"));
    let header: Vec<String> = reader
        .headers()
        .map_err(usage)?
        .iter()
        .map(|h| h.trim_start_matches('\u{feff}').to_ascii_lowercase())
        .collect();
    if let Some(unknown) = header.iter().find(|h| !COLUMNS.contains(&h.as_str())) {
        return Err(Failure::Usage(format!(
            "CSV column {unknown:?} is not a contact field (use {})",
            COLUMNS.join(", ")
        )));
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(usage)?;
        // The line the record starts on, from its byte offset: the csv crate's own line count is
        // one short for CRLF files (Excel's and Python's default).
        let line = record.position().map_or(0, |p| line_at(bytes, p.byte()));
        let contact: Map<String, Value> = header
            .iter()
            .zip(record.iter())
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| (name.clone(), Value::String(value.to_owned())))
            .collect();
        rows.push(Row { line, contact: Value::Object(contact) });
    }
    Ok(rows)
}

/// The 1-based line of the record at byte offset `at`: one more than the line feeds before its
/// first character (with CRLF the offset the reader gives is the `\n` that ends the line before).
fn line_at(bytes: &[u8], at: u64) -> u64 {
    let mut start = usize::try_from(at).map_or(bytes.len(), |at| at.min(bytes.len()));
    while bytes.get(start).is_some_and(|b| matches!(b, b'\r' | b'\n')) {
        start += 1;
    }
    bytes[..start].iter().filter(|&&b| b == b'\n').count() as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_keep_their_line_and_leave_out_empty_cells() {
        let rows = csv(b"Name,email,phone\nAda,ada@example.com,\n\"Lovelace, A.\",,+44 20 7946 0000\n")
            .ok()
            .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].line, rows[1].line), (2, 3));
        assert_eq!(rows[0].contact, serde_json::json!({"name": "Ada", "email": "ada@example.com"}));
        assert_eq!(rows[1].contact, serde_json::json!({"name": "Lovelace, A.", "phone": "+44 20 7946 0000"}));
    }

    #[test]
    fn crlf_files_report_the_same_lines_as_lf_files() {
        let lf = b"name,email\nAda,ada@example.com\n\"Grace\nHopper\",g@example.com\nLin,\n";
        let crlf = b"name,email\r\nAda,ada@example.com\r\n\"Grace\r\nHopper\",g@example.com\r\nLin,\r\n";
        for bytes in [&lf[..], &crlf[..]] {
            let rows = csv(bytes).ok().unwrap();
            let lines: Vec<u64> = rows.iter().map(|r| r.line).collect();
            assert_eq!(lines, [2, 3, 5], "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn csv_refuses_columns_that_are_not_contact_fields() {
        assert!(matches!(csv(b"name,age\nAda,36\n"), Err(Failure::Usage(m)) if m.contains("\"age\"")));
    }

    #[test]
    fn ndjson_is_told_by_extension_or_first_character() {
        assert!(is_ndjson(Path::new("a.ndjson"), b"name\n"));
        assert!(!is_ndjson(Path::new("a.csv"), b"{}"));
        assert!(is_ndjson(Path::new("contacts"), b"  {\"name\":\"Ada\"}\n"));
        let rows = ndjson(b"{\"name\":\"Ada\"}\n\n{\"email\":\"b@example.com\"}\n").ok().unwrap();
        assert_eq!((rows[0].line, rows[1].line), (1, 3));
        assert!(matches!(ndjson(b"[1]\n"), Err(Failure::Usage(_))));
    }
}
