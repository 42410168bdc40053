//! The test kit from Rust (feature `testing`, SPEC §21): a real Gatehouse for `cargo test`.
//!
//! [`TestKit::start`] runs the npm package `@gatehouse/testing` (its `serve.mjs`) under Node: the
//! gateway itself on Miniflare, with a test clock and a webhook sink, driven over JSON lines on the
//! child's stdin and stdout. Node (≥ 20) must be installed, and the package resolvable from the
//! test's working directory (`npm install --save-dev @gatehouse/testing` in your project), or its
//! directory named by `GATEHOUSE_TESTING_DIR`. The kit stops when the [`TestKit`] is dropped.
//!
//! ```no_run
//! use gatehouse_client::testing::TestKit;
//!
//! let kit = TestKit::start().unwrap();
//! let client = gatehouse_client::Client::new(kit.url(), kit.key("server")).unwrap();
//! kit.advance(60).unwrap(); // Gatehouse's time moves a minute: the rate window rolls
//! ```

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

/// A running Gatehouse for tests: see the [module](self).
pub struct TestKit {
    child: Child,
    /// The child's stdin and stdout; `None` once dropped (closing stdin stops the kit).
    io: Mutex<Option<(ChildStdin, BufReader<ChildStdout>)>>,
    url: String,
    admin_token: String,
    project: Mutex<Value>,
    sink: String,
}

/// What went wrong with the kit itself (not with a request to the gateway).
#[derive(Debug)]
pub struct KitError(pub String);

impl std::fmt::Display for KitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gatehouse test kit: {}", self.0)
    }
}

impl std::error::Error for KitError {}

impl TestKit {
    /// Starts a kit with the deployed defaults.
    pub fn start() -> Result<TestKit, KitError> {
        Self::start_with(&json!({}))
    }

    /// Starts a kit with options as `Gatehouse.start` takes them, e.g.
    /// `{"plans": {"trial": {"per_minute": 5, "monthly_quota": 100}}, "vars": {…}}`.
    pub fn start_with(options: &Value) -> Result<TestKit, KitError> {
        let script = match std::env::var("GATEHOUSE_TESTING_DIR") {
            Ok(dir) => format!("{}/serve.mjs", dir.trim_end_matches('/')),
            Err(_) => resolve_serve()?,
        };
        // Run as a file: under `node -e`, the kit's workerd child exits at once.
        let mut child = Command::new("node")
            .arg(&script)
            .env("GATEHOUSE_KIT_OPTIONS", options.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| KitError(format!("cannot run node: {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let first = read_answer(&mut stdout)?;
        let text = |name: &str| {
            first[name].as_str().map(str::to_owned).ok_or_else(|| KitError(format!("no {name} in {first}")))
        };
        Ok(TestKit {
            url: text("url")?,
            admin_token: text("adminToken")?,
            sink: text("sink")?,
            project: Mutex::new(first["project"].clone()),
            io: Mutex::new(Some((stdin, stdout))),
            child,
        })
    }

    /// The gateway's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The project's id (a new one after [`TestKit::reset`]).
    pub fn project_id(&self) -> String {
        self.project.lock().expect("kit")["id"].as_str().unwrap_or_default().to_owned()
    }

    /// The project's key of `key_type` (`owner`, `server`, `browser`, `cicd`).
    pub fn key(&self, key_type: &str) -> String {
        self.project.lock().expect("kit")["keys"][key_type].as_str().unwrap_or_default().to_owned()
    }

    /// The webhook sink's URL.
    pub fn sink(&self) -> &str {
        &self.sink
    }

    /// Moves Gatehouse's time forward, runs the minute cron and waits for the webhook deliveries
    /// that became due.
    pub fn advance(&self, seconds: u64) -> Result<(), KitError> {
        self.ask(json!({"op": "advance", "seconds": seconds})).map(drop)
    }

    /// Gatehouse's time (RFC 3339).
    pub fn now(&self) -> Result<String, KitError> {
        Ok(self.ask(json!({"op": "now"}))?["now"].as_str().unwrap_or_default().to_owned())
    }

    /// An empty state with a fresh project.
    pub fn reset(&self) -> Result<(), KitError> {
        let answer = self.ask(json!({"op": "reset"}))?;
        *self.project.lock().expect("kit") = answer["project"].clone();
        Ok(())
    }

    /// Subscribes the project to `events` at the sink; answers the subscription (with its secret).
    pub fn subscribe(&self, events: &[&str]) -> Result<Value, KitError> {
        Ok(self.ask(json!({"op": "subscribe", "events": events}))?["subscription"].clone())
    }

    /// The next delivery the sink answered 2xx (of `event_type`), waiting up to `timeout`.
    pub fn next_webhook(&self, event_type: Option<&str>, timeout: Duration) -> Result<Value, KitError> {
        let command = json!({"op": "next", "type": event_type, "timeout": timeout.as_millis() as u64});
        Ok(self.ask(command)?["delivery"].clone())
    }

    /// The sink answers 500 to the next `n` deliveries.
    pub fn fail_webhooks(&self, n: u32) -> Result<(), KitError> {
        self.ask(json!({"op": "fail", "n": n})).map(drop)
    }

    fn ask(&self, command: Value) -> Result<Value, KitError> {
        let mut io = self.io.lock().map_err(|_| KitError("a previous command panicked".into()))?;
        let (stdin, stdout) = io.as_mut().ok_or_else(|| KitError("stopped".into()))?;
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|e| KitError(format!("the kit stopped: {e}")))?;
        read_answer(stdout)
    }
}

/// Where `@gatehouse/testing/serve` is, as Node resolves it from the working directory.
fn resolve_serve() -> Result<String, KitError> {
    let out = Command::new("node")
        .args(["-p", "require.resolve('@gatehouse/testing/serve')"])
        .output()
        .map_err(|e| KitError(format!("cannot run node: {e}")))?;
    if !out.status.success() {
        return Err(KitError(format!(
            "@gatehouse/testing is not installed here (npm install --save-dev @gatehouse/testing, or set GATEHOUSE_TESTING_DIR): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn read_answer(stdout: &mut BufReader<ChildStdout>) -> Result<Value, KitError> {
    let mut line = String::new();
    if stdout.read_line(&mut line).map_err(|e| KitError(e.to_string()))? == 0 {
        return Err(KitError("the kit stopped (see its output above)".into()));
    }
    let answer: Value = serde_json::from_str(&line).map_err(|e| KitError(format!("{e}: {line}")))?;
    match answer["ok"].as_bool() {
        Some(true) => Ok(answer),
        _ => Err(KitError(answer["error"].as_str().unwrap_or(&line).to_owned())),
    }
}

impl Drop for TestKit {
    fn drop(&mut self) {
        // Closing stdin stops the kit; give it a few seconds, then make sure.
        if let Ok(mut io) = self.io.lock() {
            io.take();
        }
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
