//! The verification cache across a server's restart (issue 82, docs/operations.md): a
//! graceful stop writes the cached keys beside the SQLite database, the next start reads
//! them back (and removes the file), so its first verification of a key is answered from
//! memory; a `kill -9` writes nothing, and the next start loads keys as they are asked.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, keygate_command, start_keygate, try_http};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_warm_restart_0123456789abcdef";

fn serve(db: &str, port: u16) -> Proc {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY);
    start_keygate(cmd)
}

fn post(port: u16, path: &str, body: &Value) -> Value {
    let body = body.to_string();
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let out = try_http(port, &raw).unwrap();
    assert_eq!(&out[9..12], "200", "{out}");
    serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap()
}

/// A line of `/metrics` (its name and labels as printed): its value, 0 when absent.
fn metric(port: u16, line: &str) -> f64 {
    let out = try_http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    out.lines().find_map(|l| l.strip_prefix(line)?.trim().parse().ok()).unwrap_or(0.0)
}

const HITS: &str = "keygate_cache_requests_total{cache=\"verifications\",result=\"hit\"}";
const MISSES: &str = "keygate_cache_requests_total{cache=\"verifications\",result=\"miss\"}";

fn verify(port: u16, secret: &str) -> Value {
    let v = post(port, "/v2/keys.verifyKey", &json!({"key": secret}));
    assert_eq!(v["data"]["code"], "VALID", "{v}");
    v["data"]["permissions"].clone()
}

#[test]
fn a_graceful_restart_answers_from_the_cache_it_wrote_and_a_kill_writes_none() {
    // The snapshot is the embedded default's (SQLite, counters in memory).
    let db = TestDb::sqlite();
    let file = PathBuf::from(format!("{}-keys", db.url.strip_prefix("sqlite://").unwrap()));
    let port = free_port();
    let mut server = serve(&db.url, port);
    let api = post(port, "/v2/apis.createApi", &json!({"name": "warm"}))["data"]["apiId"].clone();
    let created = post(port, "/v2/keys.createKey", &json!({"apiId": api, "permissions": ["documents.read"]}));
    let secret = created["data"]["key"].as_str().unwrap().to_string();
    // (The poll that follows a write moves its counters once more: let it pass.)
    std::thread::sleep(Duration::from_millis(200));
    verify(port, &secret);
    server.terminate();
    assert_eq!(server.wait_exit(Duration::from_secs(15)), Some(0), "stopped gracefully");
    assert!(file.exists(), "the cached keys were written at the stop");

    // Twice: a start with nothing changed since the last one (whose own start wrote
    // nothing either) still finds its snapshot current.
    let mut server: Option<Proc> = None;
    for restart in 0..2 {
        if let Some(mut before) = server.take() {
            before.terminate();
            assert_eq!(before.wait_exit(Duration::from_secs(15)), Some(0), "stopped gracefully");
            assert!(file.exists(), "written again at the stop");
        }
        let port = free_port();
        server = Some(serve(&db.url, port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric(port, "keygate_verify_cache_keys") < 1.0 {
            assert!(Instant::now() < deadline, "restart {restart}: the snapshot was not read within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!file.exists(), "read once, then removed");
        assert_eq!(verify(port, &secret), json!(["documents.read"]));
        assert_eq!(
            (metric(port, HITS), metric(port, MISSES)),
            (1.0, 0.0),
            "restart {restart}: from the snapshot"
        );
    }

    // kill -9: nothing written; the next start loads the key when it is asked.
    drop(server);
    assert!(!file.exists());
    let port = free_port();
    let _server = serve(&db.url, port);
    assert_eq!(verify(port, &secret), json!(["documents.read"]));
    assert_eq!((metric(port, HITS), metric(port, MISSES)), (0.0, 1.0));
}
