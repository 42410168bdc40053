//! `gatehouse listen --forward-to URL`: the deliveries of a `cli` subscription, pulled from the
//! gateway, posted unchanged to a URL of the user's (typically on localhost, which the gateway
//! never sees), and each outcome reported back. A state file keeps the subscription, its secret
//! and how far the last run got, so a run started again with the same gateway and events resumes:
//! deliveries already reported are not sent again, and those that failed while no listener ran
//! are queued again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use gatehouse_client::{Client, DeliveryReport, Error, PulledDelivery, ReportedDelivery};
use reqwest::header::TRANSFER_ENCODING;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Failure;
use hex::encode as hex;

/// How long one forward may take, its answer included.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of the receiver's answer is reported.
const EXCERPT_BYTES: usize = 1024;
/// The first wait after a lost connection; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What `gatehouse listen` was asked.
pub struct Options {
    /// The gateway's URL, as the client was built with.
    pub gateway: String,
    /// The API key in use (only its hash names the default state file: one per project's key).
    pub key: String,
    pub forward_to: String,
    /// Event types as given (`*` for all).
    pub events: Vec<String>,
    /// `--state`: the state file instead of the default one.
    pub state: Option<PathBuf>,
    /// Seconds each pull waits for a delivery.
    pub wait: u64,
}

/// What a run keeps for the next one (the state file, JSON, mode 0600).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub gateway: String,
    pub subscription_id: String,
    /// The subscription's signing secret, shown by the gateway only when it was made.
    pub secret: String,
    pub events: Vec<String>,
    /// The gateway's time (RFC 3339) of the last pull whose deliveries were all forwarded and
    /// reported: failed deliveries made since then are queued again when a run starts.
    pub cursor: Option<String>,
}

pub async fn run(client: &Client, options: Options) -> Result<(), Failure> {
    let forward_to = reqwest::Url::parse(&options.forward_to)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| {
            Failure::Usage(format!("--forward-to is not an http or https URL: {}", options.forward_to))
        })?;
    let events = normalise_events(&options.events)
        .ok_or_else(|| Failure::Usage("--events names no event type".into()))?;
    let gateway = options.gateway.trim_end_matches('/').to_owned();
    let path = match options.state {
        Some(path) => path,
        None => default_state_path(
            &gateway,
            &options.key,
            &events,
            std::env::var("XDG_STATE_HOME").ok().as_deref(),
            std::env::var("HOME").ok().as_deref(),
        )
        .ok_or_else(|| Failure::Usage("no place for the state file: set HOME or pass --state".into()))?,
    };

    let mut state = start(client, &gateway, &events, load(&path)?).await?;
    save(&path, &state)?;
    eprintln!(
        "Ready. Forwarding {} to {forward_to} (subscription {}, signing secret {}). Ctrl-C to stop.",
        describe_events(&events),
        state.subscription_id,
        state.secret
    );

    let forwarder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(FORWARD_TIMEOUT)
        .build()
        .map_err(|e| Failure::Usage(format!("cannot build the HTTP client: {e}")))?;
    let listener = Listener { client, forwarder, forward_to, path, wait: options.wait };
    let mut resume = true;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match listener.round(&mut state, resume, &mut std::io::stdout()).await {
            Ok(()) => {
                resume = false;
                backoff = FIRST_BACKOFF;
            }
            Err(Stop::Lost(error)) => {
                eprintln!("connection lost ({error}); reconnecting in {}s", backoff.as_secs());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                resume = true;
            }
            Err(Stop::Failed(failure)) => return Err(failure),
        }
    }
}

/// The subscription of the state when it still listens for these events on this gateway, else
/// a new one.
async fn start(
    client: &Client,
    gateway: &str,
    events: &[String],
    previous: Option<State>,
) -> Result<State, Failure> {
    if let Some(previous) = previous.filter(|s| s.gateway == gateway && s.events == events) {
        let hooks = client.list_webhooks().collect_all().await?;
        let usable =
            hooks.iter().any(|h| h.id == previous.subscription_id && h.status == "active" && h.kind == "cli");
        if usable {
            return Ok(previous);
        }
        eprintln!(
            "subscription {} is gone, disabled or not a cli subscription: making a new one",
            previous.subscription_id
        );
    }
    let names: Vec<&str> = events.iter().map(String::as_str).collect();
    let created = client.create_cli_webhook(&names).await?;
    Ok(State {
        gateway: gateway.to_owned(),
        subscription_id: created.info.id,
        secret: created.secret.or(created.info.public_key).unwrap_or_default(),
        events: events.to_vec(),
        cursor: None,
    })
}

/// Why a round stopped.
enum Stop {
    /// The gateway could not be reached or answered 5xx (or "retry later"): reconnect.
    Lost(Error),
    /// Anything else ends the run.
    Failed(Failure),
}

impl From<Error> for Stop {
    fn from(error: Error) -> Stop {
        if is_lost(&error) {
            Stop::Lost(error)
        } else {
            Stop::Failed(error.into())
        }
    }
}

/// Whether the gateway was out of reach or said to come back later: no answer, a 5xx, a 408,
/// or an error it marks retryable (a 429 of the rate window).
fn is_lost(error: &Error) -> bool {
    match error {
        Error::Network { .. } => true,
        Error::Api(e) => e.status >= 500 || e.status == 408 || e.retryable,
        _ => false,
    }
}

struct Listener<'a> {
    client: &'a Client,
    forwarder: reqwest::Client,
    forward_to: reqwest::Url,
    path: PathBuf,
    wait: u64,
}

impl Listener<'_> {
    /// One pull: (when resuming) the failed deliveries since the cursor queued again, then what is
    /// due forwarded and reported one by one, a line each on `out`; then the cursor moves to the
    /// pull's time.
    async fn round(&self, state: &mut State, resume: bool, out: &mut impl Write) -> Result<(), Stop> {
        let id = state.subscription_id.clone();
        if resume {
            if let Some(cursor) = &state.cursor {
                // Once: after a lost connection the listener's own loop tries again.
                let recovered = self.client.recover_deliveries(&id, cursor).max_attempts(1).await?;
                if recovered.requeued > 0 {
                    eprintln!("{} failed delivery(ies) since {cursor} queued again", recovered.requeued);
                }
            }
        }
        let pulled = self.client.pull_deliveries(&id, self.wait, resume).max_attempts(1).await?;
        for delivery in &pulled.data {
            let forwarded = forward(&self.forwarder, &self.forward_to, delivery).await;
            let reported = self
                .client
                .report_delivery(&id, &delivery.delivery_id, &forwarded.report(delivery.attempt))
                .await;
            let line = delivery_line(SystemTime::now(), delivery, &forwarded, reported.as_ref().ok());
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            match reported {
                Ok(_) => {}
                Err(error) if is_lost(&error) => return Err(Stop::Lost(error)),
                // Not for this delivery alone to end the run: a gone subscription or key ends it
                // at the next pull.
                Err(error) => {
                    eprintln!("gatehouse: the report of {} was refused: {error}", delivery.delivery_id)
                }
            }
        }
        if state.cursor.as_deref() != Some(pulled.now.as_str()) {
            state.cursor = Some(pulled.now);
            save(&self.path, state).map_err(Stop::Failed)?;
        }
        Ok(())
    }
}

/// What became of one forward.
#[derive(Debug, Clone, PartialEq)]
pub enum Forwarded {
    /// The receiver answered `status`; `excerpt` is the start of its body.
    Answered { status: u16, excerpt: String, duration_ms: u64 },
    /// No HTTP answer: why.
    NoAnswer { error: String, duration_ms: u64 },
}

impl Forwarded {
    fn report(&self, attempt: u32) -> DeliveryReport {
        match self {
            Forwarded::Answered { status, excerpt, duration_ms } => DeliveryReport {
                attempt,
                status_code: Some(*status),
                response_excerpt: Some(excerpt.clone()),
                duration_ms: *duration_ms,
                ..Default::default()
            },
            Forwarded::NoAnswer { error, duration_ms } => DeliveryReport {
                attempt,
                error: Some(error.clone()),
                duration_ms: *duration_ms,
                ..Default::default()
            },
        }
    }
}

/// Posts the delivery's body, byte for byte, with its headers (and `content-type:
/// application/json`) to `url`; redirects are not followed.
async fn forward(http: &reqwest::Client, url: &reqwest::Url, delivery: &PulledDelivery) -> Forwarded {
    let mut headers = HeaderMap::new();
    for (name, value) in &delivery.headers {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
        else {
            continue;
        };
        // The connection's own headers are the HTTP client's to set.
        if [HOST, CONTENT_LENGTH, CONNECTION, TRANSFER_ENCODING].contains(&name) {
            continue;
        }
        headers.insert(name, value);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let started = Instant::now();
    let sent = http.post(url.clone()).headers(headers).body(delivery.body.clone().into_bytes()).send().await;
    let mut response = match sent {
        Ok(response) => response,
        Err(error) => {
            return Forwarded::NoAnswer { error: no_answer(&error), duration_ms: millis(started) };
        }
    };
    let status = response.status().as_u16();
    let mut head = Vec::new();
    // The start of the body is enough; an answer cut off midway still has its status.
    while head.len() < EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => head.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    Forwarded::Answered { status, excerpt: excerpt(&head), duration_ms: millis(started) }
}

fn millis(since: Instant) -> u64 {
    since.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
}

/// A forward that got no answer, in a few words: "connection refused", "timeout after 10 s", or
/// the innermost cause.
fn no_answer(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("timeout after {} s", FORWARD_TIMEOUT.as_secs());
    }
    let mut innermost: Option<&(dyn std::error::Error + 'static)> = None;
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused".into(),
                std::io::ErrorKind::ConnectionReset => return "connection reset".into(),
                std::io::ErrorKind::ConnectionAborted => return "connection aborted".into(),
                _ => {}
            }
        }
        innermost = Some(cause);
        source = cause.source();
    }
    innermost.map_or_else(|| error.to_string(), ToString::to_string)
}

/// The first 1 KiB of an answer as text, never ending in a cut character.
fn excerpt(body: &[u8]) -> String {
    let head = &body[..body.len().min(EXCERPT_BYTES)];
    match std::str::from_utf8(head) {
        Ok(text) => text.to_owned(),
        Err(e) if e.error_len().is_none() => String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned(),
        Err(_) => String::from_utf8_lossy(head).into_owned(),
    }
}

/// The line printed for one delivery:
/// `2026-12-02T11:40:01Z  contact.created  dlv_…  attempt 1  -> 200 (12 ms) delivered`, or
/// `… -> error: connection refused (3 ms) retry at 2026-12-02T11:41:01Z`.
pub fn delivery_line(
    at: SystemTime,
    delivery: &PulledDelivery,
    forwarded: &Forwarded,
    reported: Option<&ReportedDelivery>,
) -> String {
    let outcome = match forwarded {
        Forwarded::Answered { status, duration_ms, .. } => format!("{status} ({duration_ms} ms)"),
        Forwarded::NoAnswer { error, duration_ms } => format!("error: {error} ({duration_ms} ms)"),
    };
    let status = match reported {
        None => "not reported".to_owned(),
        Some(r) => match (r.status.as_str(), &r.next_attempt_at) {
            ("pending", Some(at)) => format!("retry at {at}"),
            (status, _) => status.to_owned(),
        },
    };
    format!(
        "{}  {}  {}  attempt {}  -> {outcome} {status}",
        humantime::format_rfc3339_seconds(at),
        delivery.event,
        delivery.delivery_id,
        delivery.attempt
    )
}

/// The event types trimmed, sorted, each once (`*` when none were given); `None` when the list
/// names none.
fn normalise_events(given: &[String]) -> Option<Vec<String>> {
    if given.is_empty() {
        return Some(vec!["*".into()]);
    }
    let mut events: Vec<String> =
        given.iter().map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect();
    events.sort();
    events.dedup();
    (!events.is_empty()).then_some(events)
}

fn describe_events(events: &[String]) -> String {
    if events == ["*"] {
        "all events".into()
    } else {
        events.join(", ")
    }
}

/// The state file when `--state` is not given: `$XDG_STATE_HOME/gatehouse/listen-<hash>.json`
/// (when set to an absolute path), else `$HOME/.local/state/gatehouse/listen-<hash>.json`;
/// `<hash>` is the first 16 hex digits of the SHA-256 of the gateway's URL, the API key and the
/// events joined by commas (one per line), so each gateway, key (project) and set of events has its
/// own subscription.
pub fn default_state_path(
    gateway: &str,
    key: &str,
    events: &[String],
    xdg_state_home: Option<&str>,
    home: Option<&str>,
) -> Option<PathBuf> {
    let base = match (xdg_state_home.filter(|dir| Path::new(dir).is_absolute()), home) {
        (Some(state_home), _) => PathBuf::from(state_home),
        (None, Some(home)) if !home.is_empty() => Path::new(home).join(".local/state"),
        _ => return None,
    };
    let digest = hex(Sha256::digest(format!("{gateway}\n{key}\n{}", events.join(","))));
    Some(base.join("gatehouse").join(format!("listen-{}.json", &digest[..16])))
}

fn load(path: &Path) -> Result<Option<State>, Failure> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::Usage(format!("cannot read the state file {}: {e}", path.display()))),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Failure::Usage(format!(
            "{} is not a listen state file ({e}): remove it or pass another --state",
            path.display()
        ))
    })
}

/// Writes the state whole or not at all: a file beside it (mode 0600), then a rename over it.
fn save(path: &Path, state: &State) -> Result<(), Failure> {
    write_atomically(path, &serde_json::to_vec_pretty(state).expect("the state serialises")).map_err(|e| {
        eprintln!("gatehouse: cannot write the state file {}: {e}", path.display());
        Failure::Reported
    })
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = (|| {
        let mut file = options.open(&temporary)?;
        #[cfg(unix)]
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(list: &[&str]) -> Vec<String> {
        list.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn the_state_file_is_under_xdg_state_home_else_home_and_named_by_gateway_and_events() {
        let all = events(&["*"]);
        // SHA-256 of "http://127.0.0.1:8787\ngh_o_k\n*" starts with the name's digits.
        assert_eq!(
            default_state_path("http://127.0.0.1:8787", "gh_o_k", &all, Some("/xdg"), Some("/home/ada")),
            Some(PathBuf::from("/xdg/gatehouse/listen-fdf36922a35fade6.json"))
        );
        assert_eq!(
            default_state_path("http://127.0.0.1:8787", "gh_o_k", &all, None, Some("/home/ada")),
            Some(PathBuf::from("/home/ada/.local/state/gatehouse/listen-fdf36922a35fade6.json"))
        );
        // A relative XDG_STATE_HOME is ignored, as the XDG spec says.
        assert_eq!(
            default_state_path("http://127.0.0.1:8787", "gh_o_k", &all, Some("state"), Some("/home/ada")),
            Some(PathBuf::from("/home/ada/.local/state/gatehouse/listen-fdf36922a35fade6.json"))
        );
        assert_eq!(default_state_path("http://127.0.0.1:8787", "gh_o_k", &all, Some(""), None), None);
        let other_events = default_state_path(
            "http://127.0.0.1:8787",
            "gh_o_k",
            &events(&["contact.created"]),
            None,
            Some("/h"),
        );
        let other_gateway = default_state_path("https://api.example.com", "gh_o_k", &all, None, Some("/h"));
        let mine = default_state_path("http://127.0.0.1:8787", "gh_o_k", &all, None, Some("/h"));
        let other_key = default_state_path("http://127.0.0.1:8787", "gh_o_j", &all, None, Some("/h"));
        assert!(other_events != mine && other_gateway != mine && other_events != other_gateway);
        assert!(other_key != mine);
    }

    #[test]
    fn events_are_sorted_once_each_and_default_to_all() {
        assert_eq!(normalise_events(&[]), Some(events(&["*"])));
        assert_eq!(
            normalise_events(&events(&["message.created", " contact.created", "message.created"])),
            Some(events(&["contact.created", "message.created"]))
        );
        assert_eq!(normalise_events(&events(&["", " "])), None);
        assert_eq!(describe_events(&events(&["*"])), "all events");
        assert_eq!(describe_events(&events(&["a.b", "c.d"])), "a.b, c.d");
    }

    fn delivery() -> PulledDelivery {
        PulledDelivery {
            delivery_id: "dlv_1".into(),
            attempt: 1,
            event: "contact.created".into(),
            headers: Default::default(),
            body: "{}".into(),
        }
    }

    fn reported(status: &str, next: Option<&str>) -> ReportedDelivery {
        ReportedDelivery {
            delivery_id: "dlv_1".into(),
            attempt: 1,
            status: status.into(),
            next_attempt_at: next.map(str::to_owned),
        }
    }

    #[test]
    fn a_line_says_what_the_receiver_answered_and_what_the_gateway_made_of_it() {
        let at = humantime::parse_rfc3339("2026-12-02T11:40:01.734Z").unwrap();
        let answered = Forwarded::Answered { status: 200, excerpt: "ok".into(), duration_ms: 12 };
        assert_eq!(
            delivery_line(at, &delivery(), &answered, Some(&reported("delivered", None))),
            "2026-12-02T11:40:01Z  contact.created  dlv_1  attempt 1  -> 200 (12 ms) delivered"
        );
        let refused = Forwarded::NoAnswer { error: "connection refused".into(), duration_ms: 3 };
        assert_eq!(
            delivery_line(
                at,
                &delivery(),
                &refused,
                Some(&reported("pending", Some("2026-12-02T11:41:01Z")))
            ),
            "2026-12-02T11:40:01Z  contact.created  dlv_1  attempt 1  -> error: connection refused (3 ms) \
             retry at 2026-12-02T11:41:01Z"
        );
        let gone = Forwarded::Answered { status: 410, excerpt: String::new(), duration_ms: 5 };
        assert_eq!(
            delivery_line(at, &delivery(), &gone, Some(&reported("failed", None))),
            "2026-12-02T11:40:01Z  contact.created  dlv_1  attempt 1  -> 410 (5 ms) failed"
        );
        assert_eq!(
            delivery_line(at, &delivery(), &gone, None),
            "2026-12-02T11:40:01Z  contact.created  dlv_1  attempt 1  -> 410 (5 ms) not reported"
        );
    }

    #[tokio::test]
    async fn a_forward_without_an_answer_says_why_in_a_few_words() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let url = reqwest::Url::parse(&format!("http://{closed}/hook")).unwrap();
        match forward(&reqwest::Client::new(), &url, &delivery()).await {
            Forwarded::NoAnswer { error, .. } => assert_eq!(error, "connection refused"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_report_carries_the_answer_or_the_error() {
        let answered = Forwarded::Answered { status: 500, excerpt: "boom".into(), duration_ms: 7 };
        assert_eq!(
            serde_json::to_value(answered.report(2)).unwrap(),
            serde_json::json!({"attempt": 2, "status_code": 500, "response_excerpt": "boom", "duration_ms": 7})
        );
        let refused = Forwarded::NoAnswer { error: "connection refused".into(), duration_ms: 3 };
        assert_eq!(
            serde_json::to_value(refused.report(1)).unwrap(),
            serde_json::json!({"attempt": 1, "error": "connection refused", "duration_ms": 3})
        );
    }

    #[test]
    fn an_excerpt_is_at_most_1_kib_and_never_ends_in_a_cut_character() {
        assert_eq!(excerpt(b"ok"), "ok");
        assert_eq!(excerpt(&[b'a'; 2000]).len(), 1024);
        let mut body = vec![b'a'; 1023];
        body.extend_from_slice("é and more".as_bytes());
        assert_eq!(excerpt(&body), "a".repeat(1023));
    }

    #[test]
    fn the_state_is_written_whole_for_the_owner_only() {
        let dir = std::env::temp_dir().join(format!("gatehouse-listen-{}", std::process::id()));
        let path = dir.join("nested/listen.json");
        let state = State {
            gateway: "http://127.0.0.1:8787".into(),
            subscription_id: "wh_1".into(),
            secret: "whsec_AAEC".into(),
            events: events(&["*"]),
            cursor: None,
        };
        assert_eq!(load(&path).ok().unwrap(), None);
        save(&path, &state).ok().unwrap();
        let moved = State { cursor: Some("2026-12-02T11:40:01.250Z".into()), ..state };
        save(&path, &moved).ok().unwrap();
        assert_eq!(load(&path).ok().unwrap(), Some(moved));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        std::fs::write(&path, "not json").unwrap();
        assert!(matches!(load(&path), Err(Failure::Usage(m)) if m.contains("--state")));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
