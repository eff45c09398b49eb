//! Analytics across restarts (API-v2.md §14 and §14.1, docs/operations.md *Analytics*): a graceful
//! stop writes every count held in memory, so a restart on the same database answers
//! them all; a `kill -9` loses at most the counts not yet written (the last flush
//! interval), never more than were made.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, keygate_command, start_keygate, try_http};
use serde_json::{Value, json};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_analytics_durability_0123456789";

fn serve(db: &str, port: u16) -> Proc {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY);
    start_keygate(cmd)
}

fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let out = try_http(port, &raw).unwrap();
    let status: u16 = out[9..12].parse().unwrap();
    (status, serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap_or(Value::Null))
}

/// The total the API's verifications count, as `analytics.getVerifications` answers.
fn total(port: u16, api: &str) -> u64 {
    let (status, rows) = call(port, "GET", &format!("/v1/analytics.getVerifications?apiId={api}"), None);
    assert_eq!(status, 200, "{rows}");
    rows.as_array().unwrap().first().map_or(0, |r| r["total"].as_u64().unwrap())
}

/// Creates an API and a key in it, verifies it `n` times: the API's id.
fn verify_n(port: u16, n: u64) -> String {
    let (_, api) = call(port, "POST", "/v2/apis.createApi", Some(&json!({"name": "durable"})));
    let api = api["data"]["apiId"].as_str().unwrap().to_string();
    let (_, key) = call(port, "POST", "/v2/keys.createKey", Some(&json!({"apiId": api})));
    let secret = key["data"]["key"].as_str().unwrap().to_string();
    for _ in 0..n {
        let (status, v) = call(port, "POST", "/v2/keys.verifyKey", Some(&json!({"key": secret})));
        assert_eq!((status, &v["data"]["code"]), (200, &json!("VALID")), "{v}");
    }
    api
}

/// `n` decisions in the namespace `ns` for identifier `who`, through v1.
fn limit_n(port: u16, ns: &str, who: &str, n: u64) {
    for _ in 0..n {
        let body = json!({"namespace": ns, "identifier": who, "limit": 1_000, "duration": 60_000});
        let (status, v) = call(port, "POST", "/v1/ratelimits.limit", Some(&body));
        assert_eq!((status, &v["success"]), (200, &json!(true)), "{v}");
    }
}

/// The namespace's decisions as `keygate.getRatelimits` counts them: in all, and by
/// identifier.
fn decisions(port: u16, ns: &str) -> (u64, Vec<(String, u64)>) {
    let ask = |body: Value| {
        let (status, v) = call(port, "POST", "/v2/keygate.getRatelimits", Some(&body));
        assert_eq!(status, 200, "{v}");
        v["data"].as_array().unwrap().clone()
    };
    let total =
        ask(json!({"namespace": ns, "groupBy": "day"})).iter().map(|r| r["total"].as_u64().unwrap()).sum();
    let by_identifier = ask(json!({"namespace": ns, "identifiers": true}))
        .iter()
        .map(|r| (r["identifier"].as_str().unwrap().to_string(), r["total"].as_u64().unwrap()))
        .collect();
    (total, by_identifier)
}

#[test]
fn a_graceful_stop_writes_every_count_and_kill_9_loses_at_most_the_unwritten() {
    let db = TestDb::fresh();
    let port = free_port();
    let mut server = serve(&db.url, port);
    let api = verify_n(port, 25);
    limit_n(port, "durable", "alice", 7);
    limit_n(port, "durable", "bob", 2);
    server.terminate();
    assert_eq!(server.wait_exit(Duration::from_secs(15)), Some(0), "stopped gracefully");
    let port = free_port();
    let server = serve(&db.url, port);
    assert_eq!(total(port, &api), 25, "every count was written at the stop");
    let expected = (9, vec![("alice".to_string(), 7), ("bob".to_string(), 2)]);
    assert_eq!(decisions(port, "durable"), expected, "and every rate-limit decision");

    let killed = verify_n(port, 10);
    limit_n(port, "killed", "carol", 10);
    drop(server); // SIGKILL
    let port = free_port();
    let _server = serve(&db.url, port);
    let left = total(port, &killed);
    assert!(left <= 10, "never more than were made: {left}");
    let (left, _) = decisions(port, "killed");
    assert!(left <= 10, "never more than were made: {left}");
    assert_eq!(total(port, &api), 25, "what was written stays");
    assert_eq!(decisions(port, "durable"), expected);
}
