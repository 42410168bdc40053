//! One call as a value ([`Call`]), its answer ([`Reply`]), and lists followed page by page
//! ([`Pages`]).

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::client::{Client, Request};
use crate::error::Error;

/// One API call, ready to send: `.await` it for the value, or call [`Call::reply`] for the value
/// with its request id and replay flag. A mutating call already holds its `Idempotency-Key`
/// (a UUIDv4), which every retry of this call reuses; [`Call::idempotency_key`] sets your own.
///
/// ```no_run
/// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
/// use gatehouse_client::NewContact;
/// let ada = NewContact { name: Some("Ada".into()), ..Default::default() };
/// let contact = client.create_contact(&ada).idempotency_key("signup-4711").await?;
/// # Ok(()) }
/// ```
#[must_use = "a call does nothing until it is awaited"]
pub struct Call<T> {
    pub(crate) client: Client,
    pub(crate) request: Request,
    pub(crate) decode: fn(&[u8]) -> serde_json::Result<T>,
    pub(crate) output: PhantomData<fn() -> T>,
}

impl<T> Call<T> {
    /// Uses `key` as the `Idempotency-Key` of this call (and of all its retries) instead of the
    /// automatic one: the same key for the same operation, e.g. the id of a CI job or of a chunk.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.request.idempotency_key = Some(key.into());
        self
    }

    /// How long each attempt of this call may take, connecting included, instead of the client's
    /// timeout ([`ClientBuilder::timeout`](crate::ClientBuilder::timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.request.timeout = Some(timeout);
        self
    }

    /// Attempts for this call, the first included (at least 1), instead of the client's
    /// ([`ClientBuilder::max_attempts`](crate::ClientBuilder::max_attempts)): e.g. 1 for a caller
    /// that handles a lost connection itself.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.request.max_attempts = Some(attempts.max(1));
        self
    }

    /// The longest this call may take, every attempt and wait included. A retry or a pacing wait
    /// that would end after it is not made: the call answers the last error at once. Each
    /// attempt's timeout is cut to what is left.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.request.deadline = Some(deadline);
        self
    }

    /// Whether this call waits while the last answer for its key said the window is used up
    /// (default: the client's, [`ClientBuilder::pacing`](crate::ClientBuilder::pacing)). A call
    /// allowed one attempt ([`Call::max_attempts`]) or whose [`Call::deadline`] ends before the
    /// window does never waits: it is sent, and a 429 comes back as the error, with its
    /// [`ApiError::retry_after`](crate::ApiError::retry_after) and rate-limit state.
    pub fn pacing(mut self, pacing: bool) -> Self {
        self.request.pacing = Some(pacing);
        self
    }

    /// The `Idempotency-Key` this call will send, if any.
    pub fn current_idempotency_key(&self) -> Option<&str> {
        self.request.idempotency_key.as_deref()
    }

    /// Sends the call (with its retries) and answers the value with what came with it.
    pub async fn reply(self) -> Result<Reply<T>, Error> {
        let answer = self.client.execute(&self.request).await?;
        let request_id = answer.header("x-request-id").map(str::to_owned);
        let replayed = answer.header("idempotency-replayed") == Some("true");
        let rate_limit = answer.rate_limit();
        let value = (self.decode)(&answer.body).map_err(|e| Error::Decode {
            status: answer.status,
            request_id: request_id.clone(),
            message: e.to_string(),
        })?;
        Ok(Reply {
            value,
            status: answer.status,
            request_id,
            replayed,
            idempotency_key: self.request.idempotency_key,
            rate_limit,
        })
    }
}

impl<T: Send + 'static> IntoFuture for Call<T> {
    type Output = Result<T, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.reply().await.map(|reply| reply.value) })
    }
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub value: T,
    pub status: u16,
    /// `X-Request-Id`: find the request in the audit log with it.
    pub request_id: Option<String>,
    /// The server answered from its idempotency store (`Idempotency-Replayed: true`): the work
    /// was done by an earlier call with the same key, not by this one.
    pub replayed: bool,
    pub idempotency_key: Option<String>,
    /// The key's rate window after this call, from the `X-RateLimit-*` headers.
    pub rate_limit: Option<crate::error::RateLimitState>,
}

/// One page of a list: `{"data":[…], "next_cursor": …}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

/// A list followed across pages by cursor: [`Pages::try_next`] yields item after item and fetches
/// the next page when one is used up.
///
/// ```no_run
/// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
/// let mut contacts = client.list_contacts();
/// while let Some(contact) = contacts.try_next().await? {
///     println!("{} {:?}", contact.id, contact.name);
/// }
/// # Ok(()) }
/// ```
pub struct Pages<T> {
    client: Client,
    request: Request,
    items: VecDeque<T>,
    cursor: Option<String>,
    done: bool,
}

impl<T: DeserializeOwned + Send + 'static> Pages<T> {
    pub(crate) fn new(client: &Client, request: Request) -> Pages<T> {
        Pages { client: client.clone(), request, items: VecDeque::new(), cursor: None, done: false }
    }

    /// The next item, or `None` after the last page.
    pub async fn try_next(&mut self) -> Result<Option<T>, Error> {
        while self.items.is_empty() {
            match self.next_page().await? {
                Some(page) => self.items.extend(page.data),
                None => return Ok(None),
            }
        }
        Ok(self.items.pop_front())
    }

    /// The next whole page, or `None` after the last one.
    pub async fn next_page(&mut self) -> Result<Option<Page<T>>, Error> {
        if self.done {
            return Ok(None);
        }
        let mut request = self.request.clone();
        if let Some(cursor) = &self.cursor {
            request = request.query("cursor", cursor);
        }
        let page: Page<T> = self.client.call(request).await?;
        self.cursor = page.next_cursor.clone();
        self.done = self.cursor.is_none();
        Ok(Some(page))
    }

    /// Every remaining item.
    pub async fn collect_all(mut self) -> Result<Vec<T>, Error> {
        let mut all = Vec::new();
        while let Some(item) = self.try_next().await? {
            all.push(item);
        }
        Ok(all)
    }
}
