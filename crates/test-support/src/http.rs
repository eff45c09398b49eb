//! One raw HTTP/1.1 exchange per call, on a new connection (`Connection: close`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a test waits for an answer before it takes what came.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// Sends `raw` (a whole request, head and body) to `127.0.0.1:port` and returns everything
/// the server sent until it closed the connection (or the read timed out). Panics when
/// nothing listens.
pub fn http(port: u16, raw: &str) -> String {
    try_http(port, raw).unwrap_or_else(|e| panic!("127.0.0.1:{port}: {e}"))
}

/// [`http`], with a failure to connect or send as an error (a server not up yet).
pub fn try_http(port: u16, raw: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    s.write_all(raw.as_bytes())?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    Ok(out)
}

/// [`http`] over a Unix domain socket at `path`.
pub fn http_unix(path: &std::path::Path, raw: &str) -> String {
    let mut s =
        std::os::unix::net::UnixStream::connect(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A parsed answer: status, headers (names lower-cased, in order) and body.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// Parses what [`http`] returned.
    pub fn parse(raw: &str) -> Self {
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Self { status, headers, body: body.to_string() }
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

/// `method path` with `headers` and `body` to `127.0.0.1:port`, parsed.
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    Response::parse(&http(port, &req))
}

/// `POST /v2/<op>` with the JSON `body` as `root_key` to `127.0.0.1:port`: the status and
/// the answer's JSON.
pub fn v2_post(port: u16, root_key: &str, op: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let auth = format!("Bearer {root_key}");
    let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
    let r = request(port, "POST", &format!("/v2/{op}"), &headers, &body.to_string());
    (r.status, r.json())
}
