//! The binary under hostile conditions (issue 15): secrets never reach its output, a body
//! that stalls is answered 408 and closed while others are served, and remote input cannot
//! drive the log's volume.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, http, keygate_command};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");

/// A port nothing listens on.
fn closed_port() -> u16 {
    free_port()
}

fn server(db: &str, port: u16) -> Command {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("KEYGATE_REDIS_TIMEOUT_MS", "200").env("RUST_LOG", "debug");
    cmd
}

fn post(port: u16, path: &str, token: &str, body: &str) -> String {
    http(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

fn assert_clean(output: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!output.contains(s), "the secret {s:?} was printed:\n{output}");
    }
}

#[test]
fn no_secret_reaches_the_output_on_any_failure_path() {
    let temp = TestDb::sqlite();
    let sqlite = temp.url.clone();
    let pg_port = closed_port();
    let secrets = [
        "SECRETPW_1",
        "SECRETPW_2",
        "SECRETPW_3",
        "SECRETRD_1",
        "SECRETRD_2",
        "SECRETRD_3",
        "SECRETRD_4",
        "SHORTROOT_1",
    ];

    // The database: unreachable PostgreSQL with a password in the URL (both forms), an
    // unsupported scheme; the server and an admin command alike.
    for url in [
        format!("postgres://postgres:SECRETPW_1@127.0.0.1:{pg_port}/test"),
        format!("postgresql://127.0.0.1:{pg_port}/test?user=postgres&password=SECRETPW_2"),
        "mysql://root:SECRETPW_3@127.0.0.1/k".to_string(),
    ] {
        let mut cmd = server(&url, free_port());
        // Only the unreachable PostgreSQL is waited for here: no need for the full 5 s.
        cmd.env("KEYGATE_DB_CONNECT_TIMEOUT_MS", "500");
        let mut p = Proc::spawn(cmd);
        let out = p.output(false);
        assert!(!p.wait().success(), "{out}");
        assert!(out.contains("opening the database") || out.contains("DATABASE_URL"), "{out}");
        assert_clean(&out, &secrets);
        let admin = Command::new(BIN)
            .args(["workspaces", "create", "--name", "x"])
            .env("DATABASE_URL", &url)
            .env("KEYGATE_DB_CONNECT_TIMEOUT_MS", "500")
            .env("RUST_LOG", "debug")
            .output()
            .unwrap();
        assert!(!admin.status.success());
        let out =
            format!("{}{}", String::from_utf8_lossy(&admin.stdout), String::from_utf8_lossy(&admin.stderr));
        assert!(out.contains("***") || out.contains("keygate:"), "{out}");
        assert_clean(&out, &secrets);
    }

    // A short KEYGATE_ROOT_KEY: refused, and not echoed.
    let mut cmd = server(&sqlite, free_port());
    cmd.env("KEYGATE_ROOT_KEY", "SHORTROOT_1");
    let mut p = Proc::spawn(cmd);
    let out = p.output(false);
    assert!(out.contains("at least 24 characters"), "{out}");
    assert_clean(&out, &secrets);

    // Redis: a malformed URL fails the start; an unreachable one serves 503s and logs them.
    let mut cmd = server(&sqlite, free_port());
    cmd.env("REDIS_URL", "redis://:SECRETRD_1@[not-a-host/");
    let mut p = Proc::spawn(cmd);
    let out = p.output(false);
    assert!(out.contains("redis") || out.contains("Redis"), "{out}");
    assert_clean(&out, &secrets);

    // A Redis Cluster's seed list, each node with its password, none reachable.
    let mut cmd = server(&sqlite, free_port());
    let seeds = format!("redis://:SECRETRD_3@127.0.0.1:{},redis://u:SECRETRD_4@[not-a-host/", closed_port());
    cmd.env("REDIS_URL", seeds).env("KEYGATE_REDIS_CLUSTER", "on").env("RUST_LOG", "debug");
    let mut p = Proc::spawn(cmd);
    let out = p.output(false);
    assert!(out.contains("Redis") || out.contains("redis"), "{out}");
    assert_clean(&out, &secrets);

    let port = free_port();
    let mut cmd = server(&sqlite, port);
    cmd.env("REDIS_URL", format!("redis://default:SECRETRD_2@127.0.0.1:{}/0", closed_port()))
        .env("KEYGATE_ROOT_KEY", "kg_root_hostile_test_root_key_0001");
    let mut p = Proc::spawn(cmd);
    assert!(p.wait_for("keygate listening on", Duration::from_secs(30)), "{}", p.output(true));
    let res = post(
        port,
        "/v1/ratelimits.limit",
        "kg_root_hostile_test_root_key_0001",
        r#"{"identifier":"a","limit":1,"duration":1000}"#,
    );
    assert!(res.starts_with("HTTP/1.1 503"), "{res}");
    // The log line of the outage carries the id the client was given.
    let id = res
        .lines()
        .find_map(|l| l.split_once(": ").filter(|(k, _)| k.eq_ignore_ascii_case("unkey-request-id")))
        .map(|(_, v)| v.trim().to_string())
        .expect("a request id header");
    assert!(p.wait_for(&format!("{id}: storage unavailable"), Duration::from_secs(10)), "{}", p.output(true));
    // Malformed root keys reach the authentication path and its logs.
    for token in ["kg_root_hostile_test_root_key_0002", "SECRETPW_1", "x\u{1}y"] {
        let res = post(port, "/v1/keys.getKey", token, r#"{"keyId":"key_x"}"#);
        assert!(res.starts_with("HTTP/1.1 4"), "{res}");
    }
    let out = p.output(true);
    assert!(out.contains("***@127.0.0.1"), "the location is shown without its credentials: {out}");
    assert_clean(&out, &secrets);
    assert!(!out.contains("kg_root_hostile_test_root_key_000"), "no root key in the log: {out}");
}

#[test]
fn a_stalled_body_gets_408_and_is_closed_while_others_are_served() {
    let temp = TestDb::sqlite();
    let sqlite = temp.url.clone();
    let port = free_port();
    let mut cmd = server(&sqlite, port);
    cmd.env("KEYGATE_BODY_TIMEOUT_MS", "1000").env("RUST_LOG", "info");
    let mut p = Proc::spawn(cmd);
    assert!(p.wait_for("keygate listening on", Duration::from_secs(30)), "{}", p.output(true));

    // verifyKey needs no credential: the attack anyone can make. 50 connections each send
    // the head and a part of the body (none of it for some), then stall.
    let body = r#"{"key":"kg_whatever_0000000000"}"#;
    let mut stalled: Vec<TcpStream> = (0..50)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let head = format!(
                "POST /v1/keys.verifyKey HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                body.len(),
                &body[..(i % 3) * 10]
            );
            s.write_all(head.as_bytes()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            s
        })
        .collect();
    // Meanwhile another client is served.
    let ok = http(port, "GET /v1/liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    // Each stalled one gets 408 with the contract's body, then EOF (closed).
    for s in &mut stalled {
        let mut out = String::new();
        s.read_to_string(&mut out).expect("closed by the server, not by our read timeout");
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        assert!(out.contains(r#""code":"REQUEST_TIMEOUT""#), "{out}");
        assert!(out.to_ascii_lowercase().contains("connection: close"), "{out}");
    }
    let ok = http(port, "GET /v1/liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");

    // A body that trickles (a byte every 200 ms, each within any per-read timeout) is
    // bounded as a whole: 408 well before it would have ended (30 bytes: 6 s).
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /v1/keys.verifyKey HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut writer = s.try_clone().unwrap();
    let bytes = body.as_bytes().to_vec();
    let trickle = std::thread::spawn(move || {
        for b in bytes {
            std::thread::sleep(Duration::from_millis(200));
            if writer.write_all(&[b]).is_err() {
                return;
            }
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let started = Instant::now();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("closed by the server");
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    drop(s);
    trickle.join().unwrap();

    // A head that never ends is closed too (the header timeout).
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"POST /v1/keys.verifyKey HTTP/1.1\r\nHost: x\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("closed by the server within the header timeout");
    assert!(out.is_empty() || out.starts_with("HTTP/1.1 408"), "{out}");
}

#[test]
fn malformed_requests_cannot_flood_the_log() {
    let temp = TestDb::sqlite();
    let sqlite = temp.url.clone();
    let port = free_port();
    let mut cmd = server(&sqlite, port);
    cmd.env("RUST_LOG", "info");
    let mut p = Proc::spawn(cmd);
    assert!(p.wait_for("keygate listening on", Duration::from_secs(30)), "{}", p.output(true));
    // Each of these makes actix-http log an error line ("stream error: ...").
    for _ in 0..300 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n");
        let mut sink = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_end(&mut sink);
    }
    let out = p.output(true);
    let errors = out.lines().filter(|l| l.contains("ERROR") || l.contains("WARN")).count();
    assert!(errors <= 25, "{errors} warning/error lines for 300 bad requests:\n{out}");
}

#[test]
fn the_connection_cap_is_logged_when_reached_and_idle_connections_are_reclaimed() {
    let temp = TestDb::sqlite();
    let sqlite = temp.url.clone();
    let port = free_port();
    let mut cmd = server(&sqlite, port);
    cmd.env("KEYGATE_MAX_CONNECTIONS", "4").env("KEYGATE_HEADER_TIMEOUT_MS", "1000").env("RUST_LOG", "info");
    let mut p = Proc::spawn(cmd);
    assert!(p.wait_for("keygate listening on", Duration::from_secs(30)), "{}", p.output(true));
    // Four connections that never send a request hold the whole cap...
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    assert!(
        p.wait_for("open connections reached the cap of 4", Duration::from_secs(10)),
        "{}",
        p.output(true)
    );
    // ...until the header time limit closes them; then a client is served again.
    let started = Instant::now();
    let ok = http(port, "GET /v1/liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    drop(idle);
}

#[test]
fn the_access_log_has_one_json_line_per_request_with_its_id_and_no_secret() {
    let temp = TestDb::sqlite();
    let sqlite = temp.url.clone();
    let port = free_port();
    let root = "kg_root_access_log_test_root_key_0001";
    let mut cmd = server(&sqlite, port);
    cmd.env("RUST_LOG", "info").env("KEYGATE_LOG_FORMAT", "json").env("KEYGATE_ROOT_KEY", root);
    let mut p = Proc::spawn(cmd);
    assert!(p.wait_for("keygate listening on", Duration::from_secs(30)), "{}", p.output(true));
    let id_of = |res: &str| {
        res.lines()
            .find_map(|l| l.split_once(": ").filter(|(k, _)| k.eq_ignore_ascii_case("unkey-request-id")))
            .map(|(_, v)| v.trim().to_string())
            .expect("a request id header")
    };
    let limit =
        post(port, "/v1/ratelimits.limit", root, r#"{"identifier":"someone","limit":1,"duration":1000}"#);
    let created = post(port, "/v1/keys.createKey", root, r#"{"apiId":"api_log"}"#);
    let secret = created.split("\"key\":\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let verified = post(port, "/v1/keys.verifyKey", root, &format!(r#"{{"key":"{secret}"}}"#));
    let refused = post(port, "/v1/keys.getKey", "kg_root_not_a_real_key_000000001", r#"{"keyId":"key_x"}"#);
    let missing = http(port, "GET /no/such/path?token=abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let out = p.output(true);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let access: Vec<&serde_json::Value> = lines.iter().filter(|l| l["target"] == "keygate::access").collect();
    for (res, route, status) in [
        (&limit, "/v1/ratelimits.limit", 200),
        (&created, "/v1/keys.createKey", 200),
        (&verified, "/v1/keys.verifyKey", 200),
        (&refused, "/v1/keys.getKey", 401),
        (&missing, "unmatched", 404),
    ] {
        let id = id_of(res);
        let line =
            access.iter().find(|l| l["request_id"] == id.as_str()).unwrap_or_else(|| panic!("{id}: {out}"));
        assert_eq!((&line["route"], &line["status"]), (&route.into(), &status.into()), "{line}");
        assert!(line["latency_ms"].as_f64().is_some() && line["method"].is_string(), "{line}");
        assert!(line["ts"].as_str().unwrap().ends_with('Z') && line["level"] == "INFO", "{line}");
    }
    let authed = access.iter().find(|l| l["request_id"] == id_of(&limit).as_str()).unwrap();
    assert!(authed["workspace_id"].as_str().unwrap().starts_with("ws_"), "{authed}");
    assert!(authed["root_key_id"].as_str().unwrap().starts_with("rk_"), "{authed}");
    assert_clean(&out, &[root, &secret, "kg_root_not_a_real_key", "token=abc", "someone"]);
}
