//! A real nginx and a real Caddy (Debian packages; `.ci/run` installs them), each started
//! with the configuration printed in docs/gateways.md, in front of a small upstream, with
//! keygate's forward auth deciding every request. Traefik and Envoy are in no package
//! registry this project can install from: for them, keygate gets the exact requests each
//! sends with docs/gateways.md's configuration, built from that configuration.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, free_port, keygate_command, request, start_keygate, wait_for_port};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_gateway_test_0123456789abcd";
const DOC: &str = include_str!("../../../docs/gateways.md");

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

/// Where the test's keygate listens.
enum Kg {
    Tcp(u16),
    Unix(std::path::PathBuf),
}

impl Kg {
    /// keygate's address in a gateway's configuration (the docs' `127.0.0.1:8080`): a Unix
    /// socket is `unix:/path` to nginx, `unix//path` to Caddy.
    fn in_config(&self, lang: &str) -> String {
        match (self, lang) {
            (Kg::Tcp(port), _) => format!("127.0.0.1:{port}"),
            (Kg::Unix(path), "caddyfile") => format!("unix/{}", path.display()),
            (Kg::Unix(path), _) => format!("unix:{}", path.display()),
        }
    }

    /// The TCP port (the request-shape tests send raw requests over TCP).
    fn port(&self) -> u16 {
        match self {
            Kg::Tcp(port) => *port,
            Kg::Unix(_) => panic!("keygate listens on a Unix socket here"),
        }
    }
}

/// The fenced block of `lang` in docs/gateways.md, pointed at keygate and these ports, with
/// limit 3.
fn config(lang: &str, keygate: &Kg, upstream: u16, listen: u16) -> String {
    let fence = format!("```{lang}\n");
    let start =
        DOC.find(&fence).unwrap_or_else(|| panic!("no {lang} block in docs/gateways.md")) + fence.len();
    let block = &DOC[start..start + DOC[start..].find("```").unwrap()];
    let replaced = block
        .replace("127.0.0.1:8080", &keygate.in_config(lang))
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{upstream}"))
        .replace("listen 8000;", &format!("listen 127.0.0.1:{listen};"))
        .replace(":8000 {", &format!("http://:{listen} {{\n    bind 127.0.0.1"))
        .replace("kg_root_replace_with_the_gateways_root_key", ROOT_KEY)
        .replace("limit=100", "limit=3");
    assert_ne!(replaced, block, "the {lang} block has the placeholders the test replaces");
    replaced
}

/// keygate (embedded default) with the gateway's root key, on TCP or on a Unix socket in
/// `dir`.
fn keygate_on(dir: &std::path::Path, unix: bool) -> (Proc, Kg) {
    let port = free_port();
    let mut cmd = keygate_command(BIN, &format!("sqlite://{}", dir.join("k.db").display()), port);
    cmd.env("KEYGATE_WORKERS", "2")
        .env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("RUST_LOG", "info,keygate::access=off");
    let kg = if unix {
        let path = dir.join("keygate.sock");
        // nginx's workers run as another user (nobody or www-data here): docs/gateways.md.
        cmd.env("KEYGATE_LISTEN", format!("unix:{}", path.display())).env("KEYGATE_LISTEN_MODE", "0666");
        Kg::Unix(path)
    } else {
        Kg::Tcp(port)
    };
    (start_keygate(cmd), kg)
}

fn keygate(dir: &std::path::Path) -> (Proc, Kg) {
    keygate_on(dir, false)
}

/// A POST to keygate's API as the gateway's root key: the answer's body.
fn api(kg: &Kg, path: &str, body: &str) -> String {
    let auth = format!("Bearer {ROOT_KEY}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    match kg {
        Kg::Tcp(port) => request(*port, "POST", path, &headers, body).body,
        Kg::Unix(sock) => {
            let head: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
            let raw = format!(
                "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n{head}\r\n{body}",
                body.len()
            );
            keygate_test_support::Response::parse(&keygate_test_support::http_unix(sock, &raw)).body
        }
    }
}

fn create_key(kg: &Kg, permissions: &str) -> (String, String) {
    let v: serde_json::Value =
        serde_json::from_str(&api(kg, "/v1/keys.createKey", &format!(r#"{{"permissions": {permissions}}}"#)))
            .unwrap();
    (v["keyId"].as_str().unwrap().to_string(), v["key"].as_str().unwrap().to_string())
}

/// What both gateways must do with keygate in front of the upstream on `gw`.
fn exercise(gw: u16, kg: &Kg, rate_limit_headers_to_client: bool) {
    let (reader_id, reader) = create_key(kg, r#"["documents.read"]"#);
    let (other_id, other) = create_key(kg, r#"["documents.write"]"#);
    let bearer = |k: &str| format!("Bearer {k}");

    let get = |path: &str, key: Option<&str>| {
        let auth = key.map(bearer);
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
        request(gw, "GET", path, &headers, "")
    };
    // The forward-auth limit (3 a minute) counts in the clock's minutes: the four requests
    // below fall in one of them, not across its end (a minute's last 10 s are let pass).
    let into =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 60_000;
    if into > 50_000 {
        std::thread::sleep(std::time::Duration::from_millis((60_000 - into) as u64 + 100));
    }
    let r = get("/docs/1", Some(&reader));
    assert_eq!((r.status, r.body.as_str()), (200, format!("upstream saw {reader_id}").as_str()), "{r:?}");
    if rate_limit_headers_to_client {
        assert_eq!(r.header("ratelimit-remaining"), Some("2"), "{r:?}");
    }
    assert_eq!(get("/docs/1", None).status, 401, "no key");
    assert_eq!(get("/docs/1", Some("sk_not_a_key_0000")).status, 401, "a wrong key");
    assert_eq!(get("/docs/1", Some(&other)).status, 403, "a key without the permission");
    let probe =
        format!(r#"{{"namespace":"api","identifier":"{other_id}","limit":3,"duration":60000,"cost":0}}"#);
    assert!(api(kg, "/v1/ratelimits.limit", &probe).contains(r#""remaining":3"#), "its budget is untouched");

    for _ in 0..2 {
        assert_eq!(get("/docs/2", Some(&reader)).status, 200);
    }
    let r = get("/docs/3", Some(&reader));
    assert_eq!(r.status, 429, "the 4th request in the window: {r:?}");
    assert!(
        r.header("retry-after").is_some_and(|s| s.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s))),
        "{r:?}"
    );
    assert_eq!(r.header("ratelimit-limit"), Some("3"), "{r:?}");
    assert_eq!(r.header("ratelimit-remaining"), Some("0"), "{r:?}");
    assert!(r.header("ratelimit-reset").is_some(), "{r:?}");

    api(kg, "/v1/keys.deleteKey", &format!(r#"{{"keyId":"{reader_id}"}}"#));
    assert_eq!(get("/docs/1", Some(&reader)).status, 401, "deleted: refused at once");
}

/// nginx started with docs/gateways.md's configuration in front of the upstream, keygate
/// on TCP or on a Unix socket.
fn nginx_in_front(unix: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (_kg, kg) = keygate_on(dir.path(), unix);
    let up = upstream();
    let gw = free_port();
    let d = dir.path().display();
    let conf = format!(
        "daemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{}\n}}\n",
        config("nginx", &kg, up, gw)
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let mut nginx = Command::new("nginx");
    nginx.args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")]);
    // SIGTERM: nginx's master then stops its workers (SIGKILLed, it would leave them
    // running, holding their ports and connections into later tests).
    let _nginx = Proc::spawn(nginx).terminate_on_drop();
    wait_for_port(gw, "nginx");
    exercise(gw, &kg, true);
}

#[test]
#[ignore = "needs nginx (Debian package nginx-light; .ci/run installs it) and runs with --include-ignored"]
fn nginx_with_the_documented_configuration() {
    nginx_in_front(false);
}

#[test]
#[ignore = "needs nginx (Debian package nginx-light; .ci/run installs it) and runs with --include-ignored"]
fn nginx_with_the_documented_configuration_over_a_unix_socket() {
    nginx_in_front(true);
}

/// Caddy started with docs/gateways.md's configuration in front of the upstream, keygate
/// on TCP or on a Unix socket.
fn caddy_in_front(unix: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (_kg, kg) = keygate_on(dir.path(), unix);
    let up = upstream();
    let gw = free_port();
    let file = dir.path().join("Caddyfile");
    std::fs::write(
        &file,
        format!("{{\n  admin off\n  auto_https off\n}}\n{}", config("caddyfile", &kg, up, gw)),
    )
    .unwrap();
    let mut caddy = Command::new("caddy");
    caddy
        .args(["run", "--config", &file.display().to_string(), "--adapter", "caddyfile"])
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path());
    let _caddy = Proc::spawn(caddy);
    wait_for_port(gw, "caddy");
    exercise(gw, &kg, false);
}

#[test]
#[ignore = "needs caddy (Debian package caddy; .ci/run installs it) and runs with --include-ignored"]
fn caddy_with_the_documented_configuration() {
    caddy_in_front(false);
}

#[test]
#[ignore = "needs caddy (Debian package caddy; .ci/run installs it) and runs with --include-ignored"]
fn caddy_with_the_documented_configuration_over_a_unix_socket() {
    caddy_in_front(true);
}

/// The first fenced `lang` block after the heading that starts with `heading`.
fn doc_block(heading: &str, lang: &str) -> &'static str {
    let at = DOC
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("no heading {heading:?} in docs/gateways.md"));
    let fence = format!("```{lang}\n");
    let start = at + DOC[at..].find(&fence).unwrap() + fence.len();
    &DOC[start..start + DOC[start..].find("```").unwrap()]
}

/// The `X-Keygate-*` headers a YAML block sets: `X-Keygate-Name: "value"` (Traefik's
/// `customRequestHeaders`) or `{ key: X-Keygate-Name, value: "value" }` (Envoy's
/// `headers_to_add`), the test's root key and limit put in.
fn set_headers(block: &str) -> Vec<(String, String)> {
    let unquote = |v: &str| v.trim().trim_matches('"').to_string();
    let put = |v: String| {
        v.replace("kg_root_replace_with_the_gateways_root_key", ROOT_KEY).replace("limit=100", "limit=3")
    };
    let headers: Vec<(String, String)> = block
        .lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches("- ");
            if let Some(rest) = l.strip_prefix("{ key: ") {
                let (name, value) = rest.trim_end_matches('}').split_once(", value: ")?;
                Some((name.trim().to_string(), put(unquote(value))))
            } else if l.starts_with("X-Keygate-") {
                let (name, value) = l.split_once(": ")?;
                Some((name.to_string(), put(unquote(value))))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(headers.len(), 3, "root key, permissions and rate limit in {block}");
    headers
}

/// Sends `head` (a request head without its final blank line) and parses the answer.
fn send(port: u16, head: &str) -> keygate_test_support::Response {
    keygate_test_support::Response::parse(&keygate_test_support::http(port, &format!("{head}\r\n")))
}

/// What both shapes must get from keygate: a pass with the key id, 401 without a key or
/// with a wrong one, 403 without the permission, 429 with `Retry-After` at the limit.
fn decide(kg: &Kg, call: impl Fn(Option<&str>) -> keygate_test_support::Response) {
    let (reader_id, reader) = create_key(kg, r#"["documents.read"]"#);
    let (_, other) = create_key(kg, r#"["documents.write"]"#);
    let r = call(Some(&reader));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-keygate-key-id"), Some(reader_id.as_str()), "{r:?}");
    assert_eq!(r.header("ratelimit-remaining"), Some("2"), "{r:?}");
    assert_eq!(call(None).status, 401);
    assert!(call(None).header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")));
    assert_eq!(call(Some("sk_not_a_key_0000")).status, 401);
    assert_eq!(call(Some(&other)).status, 403);
    for _ in 0..2 {
        assert_eq!(call(Some(&reader)).status, 200);
    }
    let r = call(Some(&reader));
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.header("retry-after").is_some_and(|s| s.parse::<u64>().is_ok()), "{r:?}");
}

#[test]
fn traefik_forward_auth_requests_as_the_documented_configuration_sends_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_kg, kg) = keygate(dir.path());
    let block = doc_block("## Traefik", "yaml");
    let address = "http://127.0.0.1:8080/v1/gateway.authorize";
    assert!(block.contains(&format!("address: \"{address}\"")), "{block}");
    let forwarded = ["Authorization", "X-Keygate-Root-Key", "X-Keygate-Permissions", "X-Keygate-Ratelimit"];
    assert!(forwarded.iter().all(|h| block.contains(&format!("\"{h}\""))), "authRequestHeaders: {block}");
    let policy = set_headers(block);
    // Traefik's forwardAuth (pkg/middlewares/auth/forward.go): a GET to the address from Go's
    // client, the original request's headers filtered to `authRequestHeaders` (canonical
    // case), then its own X-Forwarded-* headers; no body. (`Connection: close` is the
    // test's, so that one read takes the whole answer.)
    let port = kg.port();
    decide(&kg, |key| {
        let mut head = format!(
            "GET /v1/gateway.authorize HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: Go-http-client/1.1\r\n"
        );
        if let Some(k) = key {
            head += &format!("Authorization: Bearer {k}\r\n");
        }
        for (name, value) in &policy {
            head += &format!("{name}: {value}\r\n");
        }
        head += "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Host: api.example.com\r\nX-Forwarded-Method: POST\r\n\
                 X-Forwarded-Proto: https\r\nX-Forwarded-Uri: /documents/42?draft=1\r\n\
                 Accept-Encoding: gzip\r\nConnection: close\r\n";
        send(port, &head)
    });
}

#[test]
fn envoy_ext_authz_requests_as_the_documented_configuration_sends_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_kg, kg) = keygate(dir.path());
    let block = doc_block("## Envoy", "yaml");
    assert!(block.contains("path_prefix: /v1/gateway.authorize"), "{block}");
    let policy = set_headers(block);
    // Envoy's ext_authz HTTP service: the original method, `path_prefix` + the original
    // path and query, the original Host, the allowed headers (authorization), Envoy's own
    // headers and `headers_to_add` (lower case, as Envoy writes HTTP/1), an empty body.
    let methods = ["DELETE", "POST", "GET", "PATCH", "PUT", "DELETE", "OPTIONS"];
    let sent = std::cell::Cell::new(0);
    let port = kg.port();
    decide(&kg, |key| {
        let method = methods[sent.get() % methods.len()];
        sent.set(sent.get() + 1);
        let mut head = format!(
            "{method} /v1/gateway.authorize/documents/42?draft=1 HTTP/1.1\r\nhost: api.example.com\r\n"
        );
        if let Some(k) = key {
            head += &format!("authorization: Bearer {k}\r\n");
        }
        head += "content-length: 0\r\nx-envoy-internal: true\r\nx-forwarded-for: 203.0.113.7\r\n\
                 x-envoy-expected-rq-timeout-ms: 500\r\n";
        for (name, value) in &policy {
            head += &format!("{}: {value}\r\n", name.to_ascii_lowercase());
        }
        head += "connection: close\r\n";
        send(port, &head)
    });
}
