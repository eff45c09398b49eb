//! A DNS server on loopback for tests: it answers every `A` question with the address it
//! is set to at the time (TTL 0), every other question with no record. It lets a test
//! change what a name resolves to between two lookups (DNS rebinding).

use parking_lot::Mutex;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;

/// The server; it stops with the test process.
#[derive(Debug, Clone)]
pub struct DnsServer {
    pub addr: SocketAddr,
    answer: Arc<Mutex<Ipv4Addr>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl DnsServer {
    /// A server on a free loopback UDP port, answering `first`.
    pub fn start(first: Ipv4Addr) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback UDP port");
        let addr = socket.local_addr().expect("its address");
        let answer = Arc::new(Mutex::new(first));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (a, q) = (answer.clone(), asked.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                if let Some((name, reply)) = reply(&buf[..n], *a.lock()) {
                    q.lock().push(name);
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        Self { addr, answer, asked }
    }

    /// Answers `ip` from now on.
    pub fn set(&self, ip: Ipv4Addr) {
        *self.answer.lock() = ip;
    }

    /// The names asked for so far (every question, `A` or not).
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().clone()
    }
}

/// The answer to one query: its name, and the reply (one question, one `A` record when it
/// asked for one). `None` for what is not a query of one question.
fn reply(query: &[u8], ip: Ipv4Addr) -> Option<(String, Vec<u8>)> {
    if query.len() < 12 || u16::from_be_bytes([query[4], query[5]]) != 1 {
        return None;
    }
    // The question: labels up to the empty one, then type and class.
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + len)?).into_owned());
        at += len;
    }
    let question = query.get(12..at + 4)?;
    let is_a = query.get(at..at + 2)? == [0, 1];
    let mut out = Vec::with_capacity(question.len() + 28);
    out.extend_from_slice(&query[..2]);
    // A response, recursion desired as asked, recursion available, no error.
    out.extend_from_slice(&[0x80 | (query[2] & 0x01), 0x80]);
    out.extend_from_slice(&[0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
    out.extend_from_slice(question);
    if is_a {
        // The question's name (a pointer to offset 12), A, IN, TTL 0, four bytes.
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some((labels.join("."), out))
}
