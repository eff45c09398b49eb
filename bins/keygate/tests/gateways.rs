//! A real nginx and a real Caddy (Debian packages; `.ci/run` installs them), each started
//! with the configuration printed in docs/gateways.md, in front of a small upstream, with
//! keygate's forward auth deciding every request.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_gateway_test_0123456789abcd";
const DOC: &str = include_str!("../../../docs/gateways.md");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SIGTERM first: nginx's master then stops its workers (a SIGKILLed master leaves
        // them running, holding their ports); SIGKILL if it has not gone within 5 s.
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One HTTP/1.1 exchange: (status, headers lower-cased, body).
fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The upstream: answers 200 naming the key id the gateway passed on.
fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut key_id = String::from("none");
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    if let Some((k, v)) = line.split_once(':')
                        && k.eq_ignore_ascii_case("x-keygate-key-id")
                    {
                        key_id = v.trim().to_string();
                    }
                    line.clear();
                }
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
    port
}

/// The fenced block of `lang` in docs/gateways.md, pointed at these ports, with limit 3.
fn config(lang: &str, keygate: u16, upstream: u16, listen: u16) -> String {
    let fence = format!("```{lang}\n");
    let start =
        DOC.find(&fence).unwrap_or_else(|| panic!("no {lang} block in docs/gateways.md")) + fence.len();
    let block = &DOC[start..start + DOC[start..].find("```").unwrap()];
    let replaced = block
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{keygate}"))
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{upstream}"))
        .replace("listen 8000;", &format!("listen 127.0.0.1:{listen};"))
        .replace(":8000 {", &format!("http://:{listen} {{\n    bind 127.0.0.1"))
        .replace("kg_root_replace_with_the_gateways_root_key", ROOT_KEY)
        .replace("limit=100", "limit=3");
    assert_ne!(replaced, block, "the {lang} block has the placeholders the test replaces");
    replaced
}

/// keygate (embedded default) with the gateway's root key; its port.
fn keygate(dir: &std::path::Path) -> (Killed, u16) {
    let port = free_port();
    let child = Command::new(BIN)
        .env("DATABASE_URL", format!("sqlite://{}", dir.join("k.db").display()))
        .env("KEYGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("KEYGATE_WORKERS", "2")
        .env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let k = Killed(child);
    wait_for_port(port, "keygate");
    (k, port)
}

fn api(port: u16, path: &str, body: &str) -> String {
    let auth = format!("Bearer {ROOT_KEY}");
    request(port, "POST", path, &[("authorization", &auth), ("content-type", "application/json")], body).2
}

fn create_key(port: u16, permissions: &str) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(&api(
        port,
        "/v1/keys.createKey",
        &format!(r#"{{"permissions": {permissions}}}"#),
    ))
    .unwrap();
    (v["keyId"].as_str().unwrap().to_string(), v["key"].as_str().unwrap().to_string())
}

/// What both gateways must do with keygate in front of the upstream on `gw`.
fn exercise(gw: u16, kg: u16, rate_limit_headers_to_client: bool) {
    let (reader_id, reader) = create_key(kg, r#"["documents.read"]"#);
    let (other_id, other) = create_key(kg, r#"["documents.write"]"#);
    let bearer = |k: &str| format!("Bearer {k}");

    let (status, headers, body) = request(gw, "GET", "/docs/1", &[("authorization", &bearer(&reader))], "");
    assert_eq!((status, body.as_str()), (200, format!("upstream saw {reader_id}").as_str()), "{headers:?}");
    if rate_limit_headers_to_client {
        assert_eq!(header(&headers, "ratelimit-remaining"), Some("2"), "{headers:?}");
    }
    let (status, headers, _) = request(gw, "GET", "/docs/1", &[], "");
    assert_eq!(status, 401, "no key: {headers:?}");
    let (status, _, _) = request(gw, "GET", "/docs/1", &[("authorization", "Bearer sk_not_a_key_0000")], "");
    assert_eq!(status, 401, "a wrong key");
    let (status, _, _) = request(gw, "GET", "/docs/1", &[("authorization", &bearer(&other))], "");
    assert_eq!(status, 403, "a key without the permission");
    let probe =
        format!(r#"{{"namespace":"api","identifier":"{other_id}","limit":3,"duration":60000,"cost":0}}"#);
    assert!(api(kg, "/v1/ratelimits.limit", &probe).contains(r#""remaining":3"#), "its budget is untouched");

    for _ in 0..2 {
        assert_eq!(request(gw, "GET", "/docs/2", &[("authorization", &bearer(&reader))], "").0, 200);
    }
    let (status, headers, _) = request(gw, "GET", "/docs/3", &[("authorization", &bearer(&reader))], "");
    assert_eq!(status, 429, "the 4th request in the window: {headers:?}");
    assert!(
        header(&headers, "retry-after")
            .is_some_and(|s| s.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s))),
        "{headers:?}"
    );
    assert_eq!(header(&headers, "ratelimit-limit"), Some("3"), "{headers:?}");
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("0"), "{headers:?}");
    assert!(header(&headers, "ratelimit-reset").is_some(), "{headers:?}");

    api(kg, "/v1/keys.deleteKey", &format!(r#"{{"keyId":"{reader_id}"}}"#));
    assert_eq!(
        request(gw, "GET", "/docs/1", &[("authorization", &bearer(&reader))], "").0,
        401,
        "deleted: refused at once"
    );
}

#[test]
#[ignore = "needs nginx (Debian package nginx-light; .ci/run installs it) and runs with --include-ignored"]
fn nginx_with_the_documented_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (_kg, kg) = keygate(dir.path());
    let up = upstream();
    let gw = free_port();
    let d = dir.path().display();
    let conf = format!(
        "daemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{}\n}}\n",
        config("nginx", kg, up, gw)
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let nginx = Command::new("nginx")
        .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx is not installed: apt-get install nginx-light");
    let _nginx = Killed(nginx);
    wait_for_port(gw, "nginx");
    exercise(gw, kg, true);
}

#[test]
#[ignore = "needs caddy (Debian package caddy; .ci/run installs it) and runs with --include-ignored"]
fn caddy_with_the_documented_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (_kg, kg) = keygate(dir.path());
    let up = upstream();
    let gw = free_port();
    let file = dir.path().join("Caddyfile");
    std::fs::write(
        &file,
        format!("{{\n  admin off\n  auto_https off\n}}\n{}", config("caddyfile", kg, up, gw)),
    )
    .unwrap();
    let caddy = Command::new("caddy")
        .args(["run", "--config", &file.display().to_string(), "--adapter", "caddyfile"])
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("caddy is not installed: apt-get install caddy");
    let _caddy = Killed(caddy);
    wait_for_port(gw, "caddy");
    exercise(gw, kg, false);
}
