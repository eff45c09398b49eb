//! A webhook receiver on loopback for the tests: records every request it gets (headers
//! and body) and answers each with the next of the answers it was told to give (200 once
//! they run out). One request per connection (`connection: close`).

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: String,
    /// When it arrived.
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// How to answer one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// Extra header lines (`location: …`).
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// How long to wait before answering (a receiver that hangs).
    pub after: Duration,
}

impl Answer {
    pub fn status(status: u16) -> Self {
        Self { status, headers: Vec::new(), body: String::new(), after: Duration::ZERO }
    }

    /// `status`, after `after`.
    pub fn hanging(after: Duration, status: u16) -> Self {
        Self { after, ..Self::status(status) }
    }
}

#[derive(Default)]
struct Shared {
    got: Mutex<Vec<Received>>,
    arrived: Condvar,
    answers: Mutex<VecDeque<Answer>>,
}

/// The receiver; it stops with the test process.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Receiver {
    pub fn start() -> Self {
        Self::start_on(0)
    }

    /// A receiver on loopback port `port` (0: any free one).
    pub fn start_on(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("a loopback port");
        let url = format!("http://{}/hook", listener.local_addr().expect("its address"));
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(stream, &s));
            }
        });
        Self { url, shared }
    }

    /// Answers the next requests so, in order.
    pub fn answer(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.answers.lock().extend(answers);
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.got.lock().clone()
    }

    /// Waits (up to 10 s) until `n` requests have arrived; what arrived.
    pub fn wait_for(&self, n: usize) -> Vec<Received> {
        self.wait_for_within(n, Duration::from_secs(10))
    }

    /// Waits (up to `limit`) until `n` requests have arrived; what arrived.
    pub fn wait_for_within(&self, n: usize, limit: Duration) -> Vec<Received> {
        let deadline = Instant::now() + limit;
        let mut got = self.shared.got.lock();
        while got.len() < n {
            if self.shared.arrived.wait_until(&mut got, deadline).timed_out() {
                break;
            }
        }
        got.clone()
    }
}

fn serve(stream: TcpStream, s: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(r) => r,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let answer = s.answers.lock().pop_front().unwrap_or(Answer::status(200));
    let body = String::from_utf8_lossy(&body).into_owned();
    s.got.lock().push(Received { path, headers, body, at: Instant::now() });
    s.arrived.notify_all();
    std::thread::sleep(answer.after);
    let mut out = format!(
        "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        answer.status,
        answer.body.len()
    );
    for (k, v) in &answer.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&answer.body);
    let mut stream = stream;
    let _ = stream.write_all(out.as_bytes());
}
