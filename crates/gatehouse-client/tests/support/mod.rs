//! A small HTTP/1.1 server on 127.0.0.1 for the client's tests: it answers scripted responses in
//! order (repeating the last) and records every request it got, with the time it came in. The
//! live tests use it as the webhook receiver.
// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: Instant,
    pub wall: SystemTime,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn json(status: u16, body: serde_json::Value) -> Answer {
        Answer { status, headers: Vec::new(), body: body.to_string() }
    }

    /// An error answer in the API's shape.
    pub fn error(status: u16, code: &str, retryable: bool) -> Answer {
        Answer::json(
            status,
            serde_json::json!({ "error": {
                "code": code, "message": format!("scripted {code}"), "request_id": format!("req-{status}"),
                "retryable": retryable, "details": {}
            }}),
        )
    }

    pub fn header(mut self, name: &str, value: impl ToString) -> Answer {
        self.headers.push((name.to_owned(), value.to_string()));
        self
    }
}

pub struct FakeServer {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
}

impl FakeServer {
    /// A server on a free port of 127.0.0.1.
    pub async fn start(answers: Vec<Answer>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        FakeServer::serve(listener, answers)
    }

    /// A server on the listener given (to start on a port chosen earlier).
    pub fn serve(listener: TcpListener, answers: Vec<Answer>) -> FakeServer {
        let addr = listener.local_addr().expect("bound");
        let received = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(answers));
        let (log, script) = (received.clone(), answers.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, script) = (log.clone(), script.clone());
                tokio::spawn(async move {
                    let _ = handle(stream, log, script).await;
                });
            }
        });
        FakeServer { addr, received, answers }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Replaces the answers still to come.
    pub fn script(&self, answers: Vec<Answer>) {
        *self.answers.lock().unwrap() = answers;
    }

    /// Waits until `n` requests came in, or `seconds` pass; answers what came.
    pub async fn wait_for(&self, n: usize, seconds: u64) -> Vec<Received> {
        let end = Instant::now() + std::time::Duration::from_secs(seconds);
        while self.received.lock().unwrap().len() < n && Instant::now() < end {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        self.received()
    }
}

async fn handle(
    mut stream: TcpStream,
    log: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Vec<Answer>>>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let header_end = loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = buffer[header_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = vec![0u8; length - body.len()];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let answer = {
        let mut script = script.lock().unwrap();
        if script.len() > 1 {
            script.remove(0)
        } else {
            script.first().cloned().unwrap_or_else(|| Answer::json(200, serde_json::json!({})))
        }
    };
    log.lock().unwrap().push(Received {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
        wall: SystemTime::now(),
    });
    let mut response = format!(
        "HTTP/1.1 {} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        answer.status,
        answer.body.len()
    );
    for (name, value) in &answer.headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&answer.body);
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
