//! The owner dashboard's files and the API description (`public/`), built into the worker by
//! `build.rs` and answered before the pipeline: a `GET` or `HEAD` of one of their paths, nothing
//! else. The worker has no static assets binding, so API requests do not pass the platform's asset
//! router first (docs/performance.md: it was most of the gap at the floor). What the assets
//! binding did, this does too: pages without their `.html`, an ETag and `304` for a matching
//! `If-None-Match`, revalidation on every load, and the dashboard's Content-Security-Policy
//! (SPEC §13). No audit row, as before: these are not API requests.

use worker::Result;

/// A file of `public/`, as `build.rs` found it.
pub struct StaticFile {
    /// Where it is served: `/dashboard` for `public/dashboard.html`.
    pub path: &'static str,
    pub content_type: &'static str,
    /// An HTML page: it gets the dashboard's Content-Security-Policy.
    pub page: bool,
    /// Quoted, as the header carries it.
    pub etag: &'static str,
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/static_files.rs"));

/// SPEC §13: only the gateway's own scripts, styles and API; never framed.
const PAGE_POLICY: &str = "default-src 'self'; frame-ancestors 'none'";

/// The file at `path`, or where a page's other spellings (`/dashboard.html`, `/dashboard/`)
/// redirect to.
enum Found {
    File(&'static StaticFile),
    Moved(&'static str),
}

fn find(path: &str) -> Option<Found> {
    if let Some(file) = FILES.iter().find(|f| f.path == path) {
        return Some(Found::File(file));
    }
    let page = path.strip_suffix(".html").or_else(|| path.strip_suffix('/'))?;
    FILES.iter().find(|f| f.page && f.path == page).map(|f| Found::Moved(f.path))
}

/// The answer to `method` `path` when it asks for one of the files; `None` for every other request.
pub fn answer(
    method: &str,
    path: &str,
    req: &web_sys::Request,
    timing: bool,
) -> Option<Result<web_sys::Response>> {
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return None,
    };
    let timing = timing.then_some(("server-timing", "gateway;dur=0"));
    let file = match find(path)? {
        Found::File(file) => file,
        Found::Moved(to) => {
            let headers = [("location", to), ("cache-control", "no-store")].into_iter().chain(timing);
            return Some(crate::http::built(307, headers, &[], true));
        }
    };
    let unchanged = req.headers().get("if-none-match").ok().flatten().is_some_and(|tags| {
        tags.split(',').any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == file.etag
        })
    });
    let headers = [
        ("content-type", file.content_type),
        ("etag", file.etag),
        ("cache-control", "public, max-age=0, must-revalidate"),
        ("x-content-type-options", "nosniff"),
    ]
    .into_iter()
    .chain(
        file.page
            .then_some([("content-security-policy", PAGE_POLICY), ("referrer-policy", "no-referrer")])
            .into_iter()
            .flatten(),
    )
    .chain(timing);
    let (status, body) = if unchanged { (304, &[][..]) } else { (200, file.bytes) };
    Some(crate::http::built(status, headers, body, head_only || unchanged))
}
