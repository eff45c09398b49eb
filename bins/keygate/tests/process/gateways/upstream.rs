//! The upstream the gateways protect: answers 200 naming the key id it was passed, and
//! records every header of every request it gets (what the gateway let through).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One request's headers, names lower-cased, in order.
pub type Seen = Vec<(String, String)>;

pub struct Upstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let record = record.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut headers = Seen::new();
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line); // the request line
                    line.clear();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                        if let Some((k, v)) = line.split_once(':') {
                            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                        }
                        line.clear();
                    }
                    let key_id = headers
                        .iter()
                        .find(|(k, _)| k == "x-keygate-key-id")
                        .map_or("none".to_string(), |(_, v)| v.clone());
                    record.lock().unwrap().push(headers);
                    let body = format!("upstream saw {key_id}");
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self { port, seen }
    }

    /// Every request's headers so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}
