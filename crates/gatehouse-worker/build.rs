//! The owner dashboard's files and the API description (`public/`, with Chart.js from
//! `node_modules`) become a table the worker serves itself (`src/static_files.rs`): no static
//! assets binding, so no API request passes the platform's asset router first
//! (docs/performance.md). Each file's ETag is its FNV-1a 64 hash, computed here once.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    // Natively the worker crate is empty: nothing to serve.
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("wasm32") {
        return;
    }
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../..");
    let public = root.join("public");
    println!("cargo:rerun-if-changed={}", public.display());
    let mut files = Vec::new();
    walk(&public, &public, &mut files);
    let chart = root.join("node_modules/chart.js/dist/chart.umd.min.js");
    assert!(chart.exists(), "{} is missing: run scripts/setup (npm ci)", chart.display());
    files.push(("/vendor/chart.umd.min.js".to_owned(), chart));
    files.sort();

    let mut table = String::from("pub static FILES: &[StaticFile] = &[\n");
    for (path, file) in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let bytes = std::fs::read(file).unwrap();
        let etag = bytes
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
        let extension = file.extension().and_then(|e| e.to_str()).unwrap_or_default();
        // An HTML page is served without its extension, as Workers Static Assets did.
        let served = path.strip_suffix(".html").unwrap_or(path);
        writeln!(
            table,
            "    StaticFile {{ path: {served:?}, content_type: {:?}, page: {}, etag: \"\\\"{etag:016x}\\\"\", bytes: include_bytes!({:?}) }},",
            content_type(extension),
            extension == "html",
            file.canonicalize().unwrap().display().to_string(),
        )
        .unwrap();
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("static_files.rs");
    std::fs::write(out, table).unwrap();
}

/// Every file under `dir` but `vendor/` (an older build's copy of Chart.js) and names starting with `_`
/// or `.`.
fn walk(public: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.strip_prefix(public).unwrap().to_string_lossy().replace('\\', "/");
        if path.is_dir() {
            if name != "vendor" {
                walk(public, &path, files);
            }
        } else if !name.starts_with('_') && !name.starts_with('.') {
            files.push((format!("/{name}"), path));
        }
    }
}

fn content_type(extension: &str) -> &'static str {
    match extension {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        other => panic!("public/: no content type for .{other} files (add it in build.rs)"),
    }
}
