//! The client: configuration, the send loop (idempotency key, pacing, retries) and what it
//! reports on the way ([`Notice`]). One call as a value is [`crate::Call`].

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::call::Call;
use crate::error::{ApiError, Error, RateLimitState};
use crate::events::EventBuffer;
use crate::pacing::{key_id, RateWindows};
use crate::retry::{
    next_wait, pacing_wait, parse_retry_after, Clock, Failure, OsRandom, RandomSource, SystemClock,
    DEFAULT_MAX_ATTEMPTS,
};

/// Where `gatehouse` and the builder point when told nothing else: `wrangler dev`'s address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8787";

type Observer = Arc<dyn Fn(&Notice) + Send + Sync>;

/// Builds a [`Client`].
///
/// ```
/// use std::time::Duration;
/// let client = gatehouse_client::Client::builder("http://127.0.0.1:8787")
///     .api_key("gh_s_…")
///     .max_attempts(3)
///     .timeout(Duration::from_secs(10))
///     .on_notice(|notice| eprintln!("{notice}"))
///     .build()?;
/// # Ok::<(), gatehouse_client::Error>(())
/// ```
pub struct ClientBuilder {
    base_url: String,
    api_key: Option<String>,
    max_attempts: u32,
    timeout: Duration,
    observer: Observer,
    event_buffer: Option<PathBuf>,
    random: Arc<dyn RandomSource>,
    clock: Arc<dyn Clock>,
    pacing: bool,
}

impl ClientBuilder {
    /// The API key sent as `Authorization: Bearer …` (a client without one can only verify
    /// webhooks).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Attempts per call, the first included (default 5; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How long one attempt may take, connecting included (default 30 s). A timeout is retried
    /// like a network error.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Receives every [`Notice`]: attempts, answers, waits, buffered and dropped events. The
    /// default prints only the warnings ([`Notice::is_warning`]) to stderr.
    pub fn on_notice(mut self, observer: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        self.observer = Arc::new(observer);
        self
    }

    /// An NDJSON file that keeps events [`Client::track`] could not deliver, for
    /// [`Client::flush_events`] to send again with the same `event_id`s.
    pub fn event_buffer(mut self, path: impl Into<PathBuf>) -> Self {
        self.event_buffer = Some(path.into());
        self
    }

    /// Whether calls wait while the last answer for their key said its window is used up (default
    /// true): see [`Call::pacing`](crate::Call::pacing). Off, a call is sent at once and a 429 is
    /// handled as any other answer.
    pub fn pacing(mut self, pacing: bool) -> Self {
        self.pacing = pacing;
        self
    }

    /// The clock the client reads (default: the system's): when a window resets, what a
    /// `Retry-After` date means. Waits still take real time.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The random source of the jitter (default: the operating system's).
    pub fn random_source(mut self, random: impl RandomSource + 'static) -> Self {
        self.random = Arc::new(random);
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = Url::parse(self.base_url.trim_end_matches('/'))
            .map_err(|e| Error::Invalid(format!("invalid base URL {:?}: {e}", self.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(Error::Invalid(format!("the base URL must be http or https: {base}")));
        }
        let http = reqwest::Client::builder()
            .timeout(self.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            shared: Arc::new(Shared {
                http,
                base,
                max_attempts: self.max_attempts,
                timeout: self.timeout,
                pacing: self.pacing,
                clock: self.clock,
                windows: RateWindows::default(),
                observer: self.observer,
                random: self.random,
                buffer: self.event_buffer.map(EventBuffer::new),
            }),
            api_key: self.api_key.map(Arc::from),
        })
    }
}

/// A Gatehouse API client. Cheap to clone; clones share the connection pool and what the client
/// knows about each key's rate window, so every task that uses a clone slows down together.
///
/// ```no_run
/// # async fn run() -> Result<(), gatehouse_client::Error> {
/// let client = gatehouse_client::Client::new("http://127.0.0.1:8787", "gh_s_…")?;
/// let me = client.me().await?;
/// println!("{} requests left this minute", me.rate_limit.remaining);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    api_key: Option<Arc<str>>,
}

struct Shared {
    http: reqwest::Client,
    base: Url,
    max_attempts: u32,
    timeout: Duration,
    pacing: bool,
    clock: Arc<dyn Clock>,
    windows: RateWindows,
    observer: Observer,
    random: Arc<dyn RandomSource>,
    buffer: Option<EventBuffer>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.shared.base.as_str())
            .field("api_key", &self.api_key.as_ref().map(|k| format!("{}…", &k[..k.len().min(12)])))
            .field("max_attempts", &self.shared.max_attempts)
            .finish()
    }
}

impl Client {
    /// A builder with the defaults: 5 attempts, a 30 s timeout, warnings to stderr.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.into(),
            api_key: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: Duration::from_secs(30),
            observer: Arc::new(|notice: &Notice| {
                if notice.is_warning() {
                    eprintln!("gatehouse: warning: {notice}");
                }
            }),
            event_buffer: None,
            random: Arc::new(OsRandom),
            clock: Arc::new(SystemClock),
            pacing: true,
        }
    }

    /// A client with the defaults for `base_url` and `api_key`.
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Result<Client, Error> {
        Client::builder(base_url).api_key(api_key).build()
    }

    /// The same client acting with another API key (same connections, same pacing state).
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::{KeyType, NewKey};
    /// let server_key = owner.create_key(&NewKey::new(KeyType::Server)).await?;
    /// let server = owner.with_key(server_key.key);
    /// # Ok(()) }
    /// ```
    pub fn with_key(&self, api_key: impl Into<String>) -> Client {
        Client { shared: self.shared.clone(), api_key: Some(Arc::from(api_key.into())) }
    }

    /// Any request, for routes this SDK has no typed call for: `body` is sent as JSON; the answer
    /// body comes back as bytes. Mutating methods get an automatic `Idempotency-Key`, and the
    /// retry rules apply as for every call.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let reply = client.request("GET", "/public/v1/keys/key_123/stats?days=7", None)?.reply().await?;
    /// println!("{} {}", reply.status, String::from_utf8_lossy(&reply.value));
    /// # Ok(()) }
    /// ```
    pub fn request(&self, method: &str, path: &str, body: Option<Vec<u8>>) -> Result<Call<Vec<u8>>, Error> {
        let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| Error::Invalid(format!("not an HTTP method: {method}")))?;
        let (path, query) = match path.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path, None),
        };
        if !path.starts_with('/') {
            return Err(Error::Invalid(format!("a path starts with '/': {path}")));
        }
        let mut request = Request::new(method, path.to_owned());
        request.raw_query = query.map(str::to_owned);
        request.body = body;
        Ok(Call { client: self.clone(), request, decode: |bytes| Ok(bytes.to_vec()), output: PhantomData })
    }

    pub(crate) fn call<T: DeserializeOwned>(&self, request: Request) -> Call<T> {
        Call {
            client: self.clone(),
            request,
            decode: |bytes| serde_json::from_slice(bytes),
            output: PhantomData,
        }
    }

    pub(crate) fn notify(&self, notice: Notice) {
        (self.shared.observer)(&notice);
    }

    pub(crate) fn event_buffer(&self) -> Option<&EventBuffer> {
        self.shared.buffer.as_ref()
    }

    pub(crate) fn max_attempts(&self) -> u32 {
        self.shared.max_attempts
    }

    pub(crate) fn random(&self) -> f64 {
        self.shared.random.unit()
    }

    /// Sends `request` until it succeeds, fails for good, or runs out of attempts.
    pub(crate) async fn execute(&self, request: &Request) -> Result<Answer, Error> {
        let api_key = self.api_key.as_deref().ok_or_else(|| {
            Error::Invalid(
                "no API key: set one with ClientBuilder::api_key (or --key / GATEHOUSE_KEY)".into(),
            )
        })?;
        let key = key_id(api_key);
        let max_attempts = request.max_attempts.unwrap_or(self.shared.max_attempts);
        let deadline = request.deadline.map(|d| Instant::now() + d);
        let time_left = || deadline.map(|end| end.saturating_duration_since(Instant::now()));
        let url = self.url(request);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let paced = request.pacing.unwrap_or(self.shared.pacing);
            let window = self.shared.windows.wait(&key, self.shared.clock.now()).filter(|_| paced);
            if let Some(wait) = window.and_then(|w| pacing_wait(w, self.random(), max_attempts, time_left()))
            {
                self.notify(Notice::Paced { wait });
                tokio::time::sleep(wait).await;
            }
            self.notify(Notice::Attempt {
                method: request.method.to_string(),
                path: request.path.clone(),
                attempt,
                max_attempts,
                idempotency_key: request.idempotency_key.clone(),
            });
            let started = Instant::now();
            let timeout = deadline.map(|end| {
                let left = end.saturating_duration_since(Instant::now());
                left.min(request.timeout.unwrap_or(self.shared.timeout))
            });
            let sent = self.send_once(request, url.clone(), api_key, timeout.or(request.timeout)).await;
            let (error, retry_after) = match sent {
                Ok(answer) => {
                    self.shared.windows.observe(
                        &key,
                        answer.header("x-ratelimit-remaining"),
                        answer.header("x-ratelimit-reset"),
                    );
                    let success = (200..300).contains(&answer.status);
                    let error = (!success).then(|| {
                        ApiError::from_answer(
                            answer.status,
                            answer.header("x-request-id").map(str::to_owned),
                            &answer.body,
                        )
                    });
                    self.notify(Notice::Answered {
                        method: request.method.to_string(),
                        path: request.path.clone(),
                        status: answer.status,
                        code: error.as_ref().map(|e| e.code.clone()),
                        request_id: answer.header("x-request-id").map(str::to_owned),
                        elapsed: started.elapsed(),
                    });
                    match error {
                        None => return Ok(answer),
                        Some(mut error) => {
                            error.retry_after = answer
                                .header("retry-after")
                                .and_then(|v| parse_retry_after(v, self.shared.clock.now()));
                            error.rate_limit = answer.rate_limit();
                            let retry_after = error.retry_after;
                            (Error::Api(Box::new(error)), retry_after)
                        }
                    }
                }
                Err(error) => {
                    self.notify(Notice::NoAnswer {
                        method: request.method.to_string(),
                        path: request.path.clone(),
                        error: error.to_string(),
                        elapsed: started.elapsed(),
                    });
                    (error, None)
                }
            };
            let failure = match &error {
                Error::Api(e) => Failure::Status { status: e.status, code: &e.code, retryable: e.retryable },
                Error::Network { timeout: true, .. } => Failure::Timeout,
                _ => Failure::Network,
            };
            let next = next_wait(
                attempt,
                max_attempts,
                failure,
                request.idempotent(),
                retry_after,
                self.random(),
                time_left(),
            );
            let Some(wait) = next else { return Err(error) };
            self.notify(Notice::Retry { wait, retry_after });
            tokio::time::sleep(wait).await;
        }
    }

    fn url(&self, request: &Request) -> Url {
        let mut url = self.shared.base.clone();
        let base_path = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base_path}{}", request.path));
        url.set_query(request.raw_query.as_deref());
        if !request.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&request.query);
        }
        url
    }

    async fn send_once(
        &self,
        request: &Request,
        url: Url,
        api_key: &str,
        timeout: Option<Duration>,
    ) -> Result<Answer, Error> {
        let mut builder = self
            .shared
            .http
            .request(request.method.clone(), url)
            .header(AUTHORIZATION, format!("Bearer {api_key}"))
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, concat!("gatehouse-client/", env!("CARGO_PKG_VERSION")));
        if let Some(key) = &request.idempotency_key {
            builder = builder.header("Idempotency-Key", key);
        }
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        if let Some(body) = &request.body {
            builder = builder.header(CONTENT_TYPE, "application/json").body(body.clone());
        }
        let network = |e: reqwest::Error| Error::Network { message: describe(&e), timeout: e.is_timeout() };
        let response = builder.send().await.map_err(network)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(network)?.to_vec();
        Ok(Answer { status, headers, body })
    }
}

/// A reqwest error with its causes ("error sending request: … : Connection refused").
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// One HTTP request as the send loop repeats it: the idempotency key is fixed when the call is
/// made, so every retry carries the same one.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    method: Method,
    path: String,
    raw_query: Option<String>,
    query: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    pub(crate) idempotency_key: Option<String>,
    /// Safe to repeat for another reason than a key (every item carries an `event_id`).
    repeatable: bool,
    /// This call's timeout per attempt, when not the client's.
    pub(crate) timeout: Option<Duration>,
    /// This call's attempts, when not the client's.
    pub(crate) max_attempts: Option<u32>,
    /// How long the whole call may take, waits and every attempt included.
    pub(crate) deadline: Option<Duration>,
    /// Whether this call waits out a used-up window, when not the client's choice.
    pub(crate) pacing: Option<bool>,
}

impl Request {
    /// A request; mutating methods get a fresh UUIDv4 `Idempotency-Key`.
    fn new(method: Method, path: String) -> Request {
        let mutating = !matches!(method, Method::GET | Method::HEAD);
        Request {
            method,
            path,
            raw_query: None,
            query: Vec::new(),
            body: None,
            idempotency_key: mutating.then(|| uuid::Uuid::new_v4().to_string()),
            repeatable: false,
            timeout: None,
            max_attempts: None,
            deadline: None,
            pacing: None,
        }
    }

    pub(crate) fn get(path: impl Into<String>) -> Request {
        Request::new(Method::GET, path.into())
    }

    pub(crate) fn delete(path: impl Into<String>) -> Request {
        Request::new(Method::DELETE, path.into())
    }

    pub(crate) fn post(path: impl Into<String>, body: &impl Serialize) -> Request {
        let mut request = Request::new(Method::POST, path.into());
        request.body = Some(serde_json::to_vec(body).expect("request bodies serialise"));
        request
    }

    pub(crate) fn patch(path: impl Into<String>, body: &impl Serialize) -> Request {
        let mut request = Request::new(Method::PATCH, path.into());
        request.body = Some(serde_json::to_vec(body).expect("request bodies serialise"));
        request
    }

    pub(crate) fn query(mut self, name: &str, value: impl ToString) -> Request {
        self.query.push((name.to_owned(), value.to_string()));
        self
    }

    /// Marks a request whose repeat cannot do the work twice without a key (`/v1/track`).
    pub(crate) fn repeatable(mut self) -> Request {
        self.repeatable = true;
        self
    }

    /// Gives one attempt `timeout` instead of the client's (a long poll waits longer than that).
    pub(crate) fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = Some(timeout);
        self
    }

    #[cfg(test)]
    pub(crate) fn query_pairs(&self) -> &[(String, String)] {
        &self.query
    }

    fn idempotent(&self) -> bool {
        matches!(self.method, Method::GET | Method::HEAD) || self.idempotency_key.is_some() || self.repeatable
    }
}

/// An answer as it came.
pub(crate) struct Answer {
    pub(crate) status: u16,
    headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The key's window as the `X-RateLimit-*` headers give it (`None` unless all three are there).
    pub(crate) fn rate_limit(&self) -> Option<RateLimitState> {
        RateLimitState::from_headers(
            self.header("x-ratelimit-limit"),
            self.header("x-ratelimit-remaining"),
            self.header("x-ratelimit-reset"),
        )
    }
}

pub use crate::notice::Notice;
