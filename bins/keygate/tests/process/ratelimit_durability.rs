//! The embedded mode's rate-limit budgets survive `kill -9` (API-v2.md §26): a server
//! admits 60 of a limit of 100, is killed with SIGKILL and restarted on the same database,
//! and admits exactly 40 more in that window, under each algorithm; with
//! `KEYGATE_RATELIMIT_PERSIST=off`, the restarted server starts every budget afresh.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, keygate_command, start_keygate, v2_post};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_ratelimit_durability_0123456789ab";

fn serve(db: &str, port: u16, persist: bool) -> Proc {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("KEYGATE_RATELIMIT_PERSIST", if persist { "on" } else { "off" });
    start_keygate(cmd)
}

/// A v2 call: its status and its `data`.
fn v2(port: u16, op: &str, body: &Value) -> (u16, Value) {
    let (status, json) = v2_post(port, ROOT_KEY, op, body);
    (status, json["data"].clone())
}

/// How many of `n` requests of one token the budget of `namespace`/`user-1` admits.
fn admitted(port: u16, namespace: &str, duration: u64, n: usize) -> usize {
    let body = json!({"namespace": namespace, "identifier": "user-1", "limit": 100, "duration": duration});
    (0..n)
        .filter(|_| {
            let (status, data) = v2(port, "ratelimit.limit", &body);
            assert_eq!(status, 200, "{data}");
            data["success"].as_bool().unwrap()
        })
        .count()
}

/// Waits until a minute-long window has at least 20 s to run, so that the test's requests
/// fall in one window.
fn start_of_a_window() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    if now % 60_000 > 40_000 {
        std::thread::sleep(Duration::from_millis(60_000 - now % 60_000 + 100));
    }
}

/// Each algorithm's namespace admits 60, the server is killed, then admits `after` more.
/// A token bucket's duration is 30 days (a token every 7.2 hours), so that none comes
/// back while the test runs; the windows are minutes.
fn kill_and_restart(persist: bool) -> Vec<(&'static str, usize)> {
    let db = TestDb::sqlite();
    let port = free_port();
    let server = serve(&db.url, port, persist);
    let cases = [("fixed", 60_000), ("sliding", 60_000), ("token_bucket", 2_592_000_000)];
    for (algorithm, duration) in cases {
        let body = json!({"namespace": algorithm, "identifier": "setup", "limit": 1, "duration": duration, "cost": 0});
        assert_eq!(v2(port, "ratelimit.limit", &body).0, 200);
        let (status, data) =
            v2(port, "ratelimit.updateNamespace", &json!({"namespace": algorithm, "algorithm": algorithm}));
        assert_eq!(status, 200, "{data}");
    }
    start_of_a_window();
    for (algorithm, duration) in cases {
        assert_eq!(admitted(port, algorithm, duration, 60), 60, "{algorithm}");
    }
    drop(server); // SIGKILL
    if persist {
        assert!(db.dir().join("keygate.db-ratelimits").join("lock").exists());
    }
    let _server = serve(&db.url, port, persist);
    cases.iter().map(|&(algorithm, duration)| (algorithm, admitted(port, algorithm, duration, 100))).collect()
}

#[test]
fn a_restart_after_kill_9_admits_what_was_left_of_each_budget() {
    assert_eq!(kill_and_restart(true), [("fixed", 40), ("sliding", 40), ("token_bucket", 40)]);
}

#[test]
fn with_persistence_off_a_restart_starts_every_budget_afresh() {
    assert_eq!(kill_and_restart(false), [("fixed", 100), ("sliding", 100), ("token_bucket", 100)]);
}
