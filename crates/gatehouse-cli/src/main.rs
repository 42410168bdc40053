//! `gatehouse`, the command line of the Gatehouse API (SPEC §14), built on `gatehouse-client`:
//! every command gets the SDK's idempotency keys, retries and pacing. Exit status: 0 success,
//! 1 API or network error (the error as JSON on stderr) or a partial failure (an import with
//! refused rows, a verification that found a break), 2 usage error.

mod audit_verify;
mod import;
mod input;
mod listen;
mod output;

use input::{key_changes, parse_limits, read_data, verify};
use output::{log_line, print_json, print_line, print_page};

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use gatehouse_client::{
    Actor, Client, Error, Event, LogFilter, NewKey, Notice, StoredEventFilter, DEFAULT_URL,
};

#[derive(Parser)]
#[command(name = "gatehouse", version, about = "Command line of the Gatehouse API", max_term_width = 100)]
struct Cli {
    /// Base URL of the gateway.
    #[arg(long, env = "GATEHOUSE_URL", default_value = DEFAULT_URL, global = true)]
    url: String,
    /// API key (Authorization: Bearer …).
    #[arg(long, env = "GATEHOUSE_KEY", hide_env_values = true, global = true)]
    key: Option<String>,
    /// Attempts per call, the first included.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..), global = true)]
    max_attempts: u32,
    /// Print each attempt, its status and every wait on stderr.
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The key in use: project, plan, rate window, quota.
    Me,
    /// Any API request; the answer body on stdout.
    Request {
        /// GET, POST, PATCH, DELETE, …
        method: String,
        /// Path with optional query, e.g. /public/v1/contacts?limit=5
        path: String,
        /// JSON body, or @FILE to read it from a file.
        #[arg(long)]
        data: Option<String>,
        /// Your own Idempotency-Key (mutating requests get a UUIDv4 otherwise).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// API keys (owner key).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Contacts.
    #[command(subcommand)]
    Contacts(ContactsCommand),
    /// The audit log (owner key).
    #[command(subcommand)]
    Logs(LogsCommand),
    /// The events your keys sent, as the gateway stored them (owner key).
    #[command(subcommand)]
    Events(EventsCommand),
    /// Webhooks.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Forward webhook deliveries to a URL of yours (e.g. on localhost) until interrupted (owner key).
    ///
    /// One line per delivery on stdout. The deliveries come through a cli subscription, kept in a
    /// state file with how far the run got: a later run with the same gateway and events resumes
    /// where this one stopped, and deliveries that failed in between are sent again.
    Listen {
        /// Where each delivery is posted, body and signature headers unchanged, e.g.
        /// http://localhost:3000/webhooks.
        #[arg(long, value_name = "URL")]
        forward_to: String,
        /// Event types, comma-separated (default: all).
        #[arg(long, value_delimiter = ',', value_name = "T1,T2")]
        events: Vec<String>,
        /// The state file (default: $XDG_STATE_HOME/gatehouse/listen-<hash>.json, else under
        /// ~/.local/state).
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// Seconds each pull waits for a delivery (0–25).
        #[arg(long, hide = true, default_value_t = 25, value_parser = clap::value_parser!(u64).range(0..=25))]
        wait: u64,
    },
    /// Send a sample event of a type (e.g. contact.created) to the project's subscriptions that
    /// take it (owner key).
    Trigger {
        /// A built-in type or any type your origins send, e.g. contact.created.
        #[arg(value_name = "TYPE")]
        event_type: String,
    },
    /// Send one event (server or browser key).
    Track {
        /// The event name, e.g. "Order Completed".
        event: String,
        /// Properties as a JSON object.
        #[arg(long)]
        properties: Option<String>,
        #[arg(long, required_unless_present = "anonymous_id", conflicts_with = "anonymous_id")]
        user_id: Option<String>,
        #[arg(long)]
        anonymous_id: Option<String>,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key; its secret is printed this once.
    Create {
        /// owner, server, browser or cicd.
        #[arg(long = "type")]
        key_type: String,
        #[arg(long)]
        name: Option<String>,
        /// RFC 3339, in the future: the key is refused from then on.
        #[arg(long)]
        expires_at: Option<String>,
        /// A per-minute limit below the plan's.
        #[arg(long)]
        rate_limit_per_minute: Option<u64>,
        /// The identity whose limits and quota the key shares.
        #[arg(long)]
        identity_id: Option<String>,
        /// The key's own windows as JSON, e.g. '{"per_second":5,"per_minute":100}'.
        #[arg(long)]
        limits: Option<String>,
    },
    /// Change a key: the fields given; --clear FIELD removes one (name, rate_limit_per_minute,
    /// expires_at, identity_id, limits).
    Update {
        id: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        rate_limit_per_minute: Option<u64>,
        /// RFC 3339, in the future.
        #[arg(long)]
        expires_at: Option<String>,
        #[arg(long)]
        identity_id: Option<String>,
        /// JSON, e.g. '{"per_minute":100}'.
        #[arg(long)]
        limits: Option<String>,
        #[arg(long, value_name = "FIELD")]
        clear: Vec<String>,
    },
    /// Every key of the project, one JSON line each.
    List,
    /// Revoke a key at once.
    Revoke { id: String },
    /// Roll a key: a new key (printed this once) with the same type, name and limit; the old one
    /// keeps working for the grace, then is refused.
    Roll {
        id: String,
        /// Seconds the old key keeps working (0–86400; default 3600).
        #[arg(long)]
        grace: Option<u64>,
    },
}

#[derive(Subcommand)]
enum ContactsCommand {
    /// Import a CSV (header row: name, phone, email, external_id) or NDJSON file in bulk calls of
    /// 100; re-running the same file creates nothing twice.
    Import { file: PathBuf },
    /// Every contact, one JSON line each, newest first.
    List,
    /// One contact.
    Get { id: String },
}

#[derive(Subcommand)]
enum EventsCommand {
    /// One page of stored events, newest first, one JSON line each (the next cursor on stderr).
    List {
        #[command(flatten)]
        filters: EventFilters,
        #[command(flatten)]
        span: Span,
    },
    /// Follows new events, one JSON line each, oldest first, until interrupted.
    Tail {
        #[command(flatten)]
        filters: EventFilters,
        /// Seconds between polls (at least 1; longer while the key's window runs low).
        #[arg(long, default_value_t = 3)]
        interval: u64,
    },
}

/// Which stored events `events list` and `events tail` show.
#[derive(Args)]
struct EventFilters {
    /// The event's name, e.g. signup.
    #[arg(long)]
    event: Option<String>,
    #[arg(long)]
    user_id: Option<String>,
    #[arg(long)]
    anonymous_id: Option<String>,
}

impl EventFilters {
    fn filter(self) -> StoredEventFilter {
        let EventFilters { event, user_id, anonymous_id } = self;
        StoredEventFilter { event, user_id, anonymous_id, ..Default::default() }
    }
}

/// The time range and page of a list.
#[derive(clap::Args)]
struct Span {
    /// RFC 3339, YYYY-MM-DD or Unix milliseconds: the first moment.
    #[arg(long)]
    from: Option<String>,
    /// The last moment.
    #[arg(long)]
    to: Option<String>,
    /// Rows per page (at most 200).
    #[arg(long)]
    limit: Option<u32>,
    /// The next cursor a previous page printed.
    #[arg(long)]
    cursor: Option<String>,
}

#[derive(Subcommand)]
enum LogsCommand {
    /// Follow new rows, one line each, until interrupted.
    Tail {
        #[command(flatten)]
        filters: TailFilters,
        /// Seconds between polls.
        #[arg(long, default_value_t = 3)]
        interval: u64,
    },
    /// One page of rows as JSON lines, newest first (the next cursor on stderr).
    List {
        #[command(flatten)]
        filters: TailFilters,
        #[arg(long)]
        request_id: Option<String>,
        #[arg(long)]
        key_id: Option<String>,
        #[arg(long)]
        idempotency_key: Option<String>,
        #[command(flatten)]
        span: Span,
    },
    /// Check the archive against its signed, chained digests: exit 0 when intact, 1 naming the
    /// first break (a changed, missing or added object, a missing or re-signed digest, rows not as
    /// listed).
    Verify {
        /// RFC 3339: the first period to check.
        #[arg(long)]
        from: String,
        /// RFC 3339: objects whose first row is before this are accounted for.
        #[arg(long)]
        to: String,
        /// The Ed25519 public key (base64) to verify under; default: the one the gateway shows.
        #[arg(long)]
        public_key: Option<String>,
    },
}

#[derive(Args)]
struct TailFilters {
    /// 2xx, 4xx, 5xx or an exact status.
    #[arg(long)]
    status: Option<String>,
    /// Glob over path and query, * = anything.
    #[arg(long)]
    path: Option<String>,
    #[arg(long)]
    method: Option<String>,
    /// Show the owner dashboard's own reads too (left out by default).
    #[arg(long)]
    dashboard_reads: bool,
}

impl From<TailFilters> for LogFilter {
    fn from(f: TailFilters) -> LogFilter {
        let dashboard = (!f.dashboard_reads).then_some(false);
        LogFilter { status: f.status, path: f.path, method: f.method, dashboard, ..LogFilter::default() }
    }
}

#[derive(Subcommand)]
enum WebhooksCommand {
    /// Check a delivery's Standard Webhooks signature, v1 or v1a (body from --body-file or stdin);
    /// needs no --url or --key. Exit 0 valid, 1 invalid with the reason on stderr.
    Verify {
        /// The subscription's secret (whsec_…, v1) or its public key (whpk_…, v1a).
        #[arg(long)]
        secret: String,
        /// The webhook-id header.
        #[arg(long)]
        id: String,
        /// The webhook-timestamp header.
        #[arg(long)]
        timestamp: String,
        /// The webhook-signature header.
        #[arg(long)]
        signature: String,
        #[arg(long)]
        body_file: Option<PathBuf>,
    },
    /// Rotate a subscription's signing secret; the new one is printed this once. During the grace
    /// every delivery carries both signatures, new first.
    RotateSecret {
        id: String,
        /// Seconds the old secret keeps signing (0–604800; default 86400).
        #[arg(long)]
        grace: Option<u64>,
    },
    /// Queue every failed delivery created since a time again (one more attempt, then the schedule).
    Recover {
        id: String,
        /// RFC 3339, e.g. 2026-11-30T08:00:00Z.
        #[arg(long)]
        since: String,
    },
    /// Re-enable a subscription disabled by a 410 Gone.
    Enable { id: String },
    /// Subscribe a URL to event types; the signing secret is printed this once.
    Create {
        /// The receiver's URL (https; the gateway's own is --url).
        endpoint: String,
        /// Comma-separated event types, or * (every type but the usage events).
        #[arg(long, value_delimiter = ',', required = true)]
        events: Vec<String>,
        /// v1 (HMAC with a secret, the default) or v1a (Ed25519: receivers verify with its
        /// public key, no secret is shown).
        #[arg(long, default_value = "v1", value_parser = ["v1", "v1a"])]
        signature: String,
    },
    /// Every subscription, one JSON line each.
    List,
    /// A subscription's deliveries, one JSON line each, newest first.
    Deliveries {
        id: String,
        /// pending, delivered or failed.
        #[arg(long)]
        status: Option<String>,
    },
    /// Attempt a delivery again now: a failed one, or a delivered one sent once more (resend).
    #[command(alias = "resend")]
    Retry { delivery_id: String },
    /// Send a sample event of a type to the project's subscriptions.
    Test { event_type: String },
    /// Delete a subscription (its pending deliveries fail).
    Delete { id: String },
}

/// How a command failed.
enum Failure {
    /// Bad arguments or input: exit 2.
    Usage(String),
    /// The API or the network: exit 1, the error JSON on stderr.
    Api(Error),
    /// Exit 1 with a message already written.
    Reported,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        match error {
            Error::Invalid(message) => Failure::Usage(message),
            other => Failure::Api(other),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("gatehouse: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Api(error)) => {
            eprintln!("{}", error.to_json());
            ExitCode::from(1)
        }
        Err(Failure::Reported) => ExitCode::from(1),
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Webhooks(WebhooksCommand::Verify { secret, id, timestamp, signature, body_file }) =
        &cli.command
    {
        return verify(secret, id, timestamp, signature, body_file.as_ref());
    }
    let verbose = cli.verbose;
    let mut builder =
        Client::builder(&cli.url).max_attempts(cli.max_attempts).on_notice(move |notice: &Notice| {
            if verbose {
                eprintln!("{notice}");
            } else if notice.is_warning() {
                eprintln!("gatehouse: warning: {notice}");
            }
        });
    let key = cli.key.ok_or_else(|| Failure::Usage("no API key: pass --key or set GATEHOUSE_KEY".into()))?;
    builder = builder.api_key(key.clone());
    let client = builder.build()?;
    let gateway = cli.url;
    match cli.command {
        Command::Me => print_json(&client.me().await?),
        Command::Request { method, path, data, idempotency_key } => {
            let body = data.map(read_data).transpose()?;
            let mut call = client.request(&method, &path, body)?;
            if let Some(key) = idempotency_key {
                call = call.idempotency_key(key);
            }
            let reply = call.reply().await?;
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(&reply.value);
            if !reply.value.ends_with(b"\n") && !reply.value.is_empty() {
                let _ = stdout.write_all(b"\n");
            }
        }
        Command::Keys(KeysCommand::Create {
            key_type,
            name,
            expires_at,
            rate_limit_per_minute,
            identity_id,
            limits,
        }) => {
            let mut key = NewKey::new(key_type.parse().map_err(Failure::Usage)?);
            key.name = name;
            key.expires_at = expires_at;
            key.rate_limit_per_minute = rate_limit_per_minute;
            key.identity_id = identity_id;
            key.limits = limits.as_deref().map(parse_limits).transpose()?;
            print_json(&client.create_key(&key).await?);
        }
        Command::Keys(KeysCommand::Update {
            id,
            name,
            rate_limit_per_minute,
            expires_at,
            identity_id,
            limits,
            clear,
        }) => {
            let changes = key_changes(name, rate_limit_per_minute, expires_at, identity_id, limits, &clear)?;
            print_json(&client.update_key(&id, &changes).await?)
        }
        Command::Keys(KeysCommand::List) => {
            let mut keys = client.list_keys();
            while let Some(key) = keys.try_next().await? {
                print_line(&key);
            }
        }
        Command::Keys(KeysCommand::Revoke { id }) => print_json(&client.revoke_key(&id).await?),
        Command::Keys(KeysCommand::Roll { id, grace }) => print_json(&client.roll_key(&id, grace).await?),
        Command::Webhooks(WebhooksCommand::RotateSecret { id, grace }) => {
            print_json(&client.rotate_webhook_secret(&id, grace).await?)
        }
        Command::Webhooks(WebhooksCommand::Recover { id, since }) => {
            print_json(&client.recover_deliveries(&id, &since).await?)
        }
        Command::Webhooks(WebhooksCommand::Enable { id }) => print_json(&client.enable_webhook(&id).await?),
        Command::Contacts(ContactsCommand::Import { file }) => import::run(&client, &file).await?,
        Command::Contacts(ContactsCommand::List) => {
            let mut contacts = client.list_contacts();
            while let Some(contact) = contacts.try_next().await? {
                print_line(&contact);
            }
        }
        Command::Contacts(ContactsCommand::Get { id }) => print_json(&client.get_contact(&id).await?),
        Command::Webhooks(WebhooksCommand::Create { endpoint, events, signature }) => {
            let events: Vec<&str> = events.iter().map(String::as_str).collect();
            match signature.as_str() {
                "v1a" => print_json(&client.create_v1a_webhook(&endpoint, &events).await?),
                _ => print_json(&client.create_webhook(&endpoint, &events).await?),
            }
        }
        Command::Webhooks(WebhooksCommand::List) => {
            let mut hooks = client.list_webhooks();
            while let Some(hook) = hooks.try_next().await? {
                print_line(&hook);
            }
        }
        Command::Webhooks(WebhooksCommand::Deliveries { id, status }) => {
            let status = status.map(|s| s.parse()).transpose().map_err(Failure::Usage)?;
            let mut deliveries = client.list_deliveries(&id, status);
            while let Some(delivery) = deliveries.try_next().await? {
                print_line(&delivery);
            }
        }
        Command::Webhooks(WebhooksCommand::Retry { delivery_id }) => {
            print_json(&client.retry_delivery(&delivery_id).await?)
        }
        Command::Webhooks(WebhooksCommand::Test { event_type }) => {
            print_json(&client.trigger_event(&event_type).await?)
        }
        Command::Webhooks(WebhooksCommand::Delete { id }) => print_json(&client.delete_webhook(&id).await?),
        Command::Listen { forward_to, events, state, wait } => {
            listen::run(&client, listen::Options { gateway, key, forward_to, events, state, wait }).await?
        }
        Command::Trigger { event_type } => print_json(&client.trigger_event(&event_type).await?),
        Command::Logs(LogsCommand::Tail { filters, interval }) => {
            let mut tail = client.tail_logs(filters.into(), Duration::from_secs(interval.max(1)));
            loop {
                println!("{}", log_line(&tail.next().await?));
            }
        }
        Command::Logs(LogsCommand::Verify { from, to, public_key }) => {
            audit_verify::run(&client, &from, &to, public_key.as_deref()).await?
        }
        Command::Logs(LogsCommand::List { filters, request_id, key_id, idempotency_key, span }) => {
            let Span { from, to, limit, cursor } = span;
            let filter = LogFilter { request_id, key_id, idempotency_key, from, to, limit, ..filters.into() };
            print_page(client.log_page(&filter, cursor.as_deref()).await?);
        }
        Command::Events(EventsCommand::List { filters, span }) => {
            let Span { from, to, limit, cursor } = span;
            let filter = StoredEventFilter { from, to, limit, ..filters.filter() };
            print_page(client.event_page(&filter, cursor.as_deref()).await?);
        }
        Command::Events(EventsCommand::Tail { filters, interval }) => {
            let mut tail = client.tail_events(filters.filter(), Duration::from_secs(interval.max(1)));
            loop {
                print_line(&tail.next().await?);
            }
        }
        Command::Track { event, properties, user_id, anonymous_id } => {
            let actor = match (user_id, anonymous_id) {
                (Some(user), _) => Actor::User(user),
                (None, Some(anonymous)) => Actor::Anonymous(anonymous),
                (None, None) => unreachable!("clap requires one of them"),
            };
            let mut event = Event::new(event, actor);
            if let Some(properties) = properties {
                match serde_json::from_str(&properties) {
                    Ok(value @ serde_json::Value::Object(_)) => event = event.properties(value),
                    _ => return Err(Failure::Usage("--properties must be a JSON object".into())),
                }
            }
            let outcome = client.track(vec![event]).await?;
            print_json(&outcome);
            if !outcome.rejected.is_empty() {
                return Err(Failure::Reported);
            }
        }
        Command::Webhooks(WebhooksCommand::Verify { .. }) => unreachable!("handled before a client is built"),
    }
    Ok(())
}
