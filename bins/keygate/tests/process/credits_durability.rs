//! A VALID answer that spent credits survives `kill -9` (API-v2.md §13.5): verifications
//! flood a key with credits, the server is killed with SIGKILL mid-flood and restarted on
//! the same database; then `remaining ≤ credits − VALID answers received`. On the run's
//! backend: the embedded default (SQLite), or PostgreSQL with Redis (where the restarted
//! instance also writes the live counter behind to the row, which a Redis that lost the
//! counter then reloads).
#![allow(clippy::unwrap_used)]

use keygate_test_support::{
    Proc, TestDb, free_port, keygate_command, redis_cluster, redis_url, start_keygate, try_http,
};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_credits_durability_0123456789abc";
const CREDITS: u64 = 1_000_000;
const CLIENTS: u64 = 16;

fn serve(db: &str, port: u16) -> Proc {
    serve_with(db, port, redis_url())
}

/// The server on `db` at `port`, with Redis at `redis` when given.
fn serve_with(db: &str, port: u16, redis: Option<String>) -> Proc {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY).env("KEYGATE_WORKERS", "2");
    if let Some(redis) = redis {
        cmd.env("REDIS_URL", redis).env("KEYGATE_REDIS_CLUSTER", if redis_cluster() { "on" } else { "off" });
    }
    start_keygate(cmd)
}

/// `POST /v2/<op>` with `body`: the status and the answer's `data`, or `None` when the
/// server did not answer (killed).
fn v2(port: u16, op: &str, body: &Value) -> Option<(u16, Value)> {
    let body = body.to_string();
    let raw = format!(
        "POST /v2/{op} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let out = try_http(port, &raw).ok()?;
    let status: u16 = out.get(9..12)?.parse().ok()?;
    let json: Value = serde_json::from_str(out.split("\r\n\r\n").nth(1)?).ok()?;
    Some((status, json["data"].clone()))
}

#[test]
fn answered_credit_spends_survive_kill_9() {
    let db = TestDb::fresh();
    let port = free_port();
    let server = serve(&db.url, port);
    let (status, created) =
        v2(port, "keys.createKey", &json!({"apiId": "api_durable", "credits": {"remaining": CREDITS}}))
            .unwrap();
    assert_eq!(status, 200, "{created}");
    let (key_id, secret) = (created["keyId"].as_str().unwrap(), created["key"].as_str().unwrap());

    let valid = flood_and_kill(port, secret, server);
    if !db.is_postgres() {
        // Embedded: the answered spends went to the credit journal beside the database...
        let journal = std::fs::read(db.dir().join("keygate.db-credits")).unwrap_or_default();
        assert!(journal.iter().any(|b| *b != 0), "the spends were journaled");
        // ...which a backup of the killed server's database replays first.
        let backup = db.dir().join("backup.db");
        let out = std::process::Command::new(BIN)
            .env("DATABASE_URL", &db.url)
            .env_remove("KEYGATE_CONFIG")
            .args(["backup", "--to", backup.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let store = keygate_store::SqlStore::open(backup.to_str().unwrap(), Default::default()).unwrap();
        let row = keygate_usage::UsageStore::usage_read(&store, |tx| Ok(tx.key_credit_row(key_id)?)).unwrap();
        let in_backup = row.unwrap().remaining.unwrap();
        assert!(
            in_backup <= CREDITS - valid,
            "the backup holds every answered spend: {in_backup} > {CREDITS} - {valid}"
        );
        assert_eq!(
            std::fs::metadata(db.dir().join("keygate.db-credits")).unwrap().len(),
            0,
            "replayed and emptied"
        );
    }

    let port = free_port();
    let _server = serve(&db.url, port);
    let (status, key) = v2(port, "keys.getKey", &json!({"keyId": key_id})).unwrap();
    assert_eq!(status, 200, "{key}");
    let remaining = key["credits"]["remaining"].as_u64().unwrap();
    eprintln!(
        "{valid} VALID answers before the kill; {remaining} of {CREDITS} credits left after the restart"
    );
    assert!(remaining <= CREDITS - valid, "an answered spend was lost: {remaining} > {CREDITS} - {valid}");
    // And nothing beyond what was in flight at the kill was taken.
    assert!(CREDITS - valid - remaining <= CLIENTS, "{CREDITS} - {valid} - {remaining} > {CLIENTS}");

    if redis_url().is_some() {
        // Scale-out: the counter is in Redis; the restarted instance writes what the killed
        // one left behind to the row within the write-behind interval...
        let row = written_behind(&db.url, key_id, remaining);
        assert_eq!(row, remaining, "the row caught up with the live counter");
        // ...so a Redis that lost the counter reloads it from the row.
        forget_counter(&db.url, key_id);
        let (status, key) = v2(port, "keys.getKey", &json!({"keyId": key_id})).unwrap();
        assert_eq!(status, 200, "{key}");
        assert_eq!(key["credits"]["remaining"].as_u64().unwrap(), remaining);
    }
}

/// Verifications of `secret` from CLIENTS clients at `port` for 1.5 s, then `server`
/// killed with SIGKILL mid-flood: how many were answered VALID.
fn flood_and_kill(port: u16, secret: &str, server: Proc) -> u64 {
    let valid = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            let (valid, stop) = (&valid, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match v2(port, "keys.verifyKey", &json!({"key": secret})) {
                        Some((200, v)) if v["code"] == "VALID" => {
                            valid.fetch_add(1, Ordering::Relaxed);
                        }
                        Some((200, v)) => panic!("not VALID with credits left: {v}"),
                        // Killed: no answer, or the connection cut mid-answer.
                        _ => {}
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(1_500));
        drop(server); // SIGKILL, mid-flood
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
    });
    let valid = valid.load(Ordering::Relaxed);
    assert!(valid > 100, "the flood got answers before the kill: {valid}");
    valid
}

/// Embedded: `keygate store copy` from a killed server's database at another schema than
/// this build's is refused with the schema's message, and changes nothing: the journal the
/// killed server left is not replayed onto it (a failed call changes nothing).
#[test]
fn a_refused_copy_leaves_the_sources_journal_as_it_is() {
    let db = TestDb::sqlite();
    let port = free_port();
    let server = serve_with(&db.url, port, None);
    let (status, created) =
        v2(port, "keys.createKey", &json!({"apiId": "api_durable", "credits": {"remaining": CREDITS}}))
            .unwrap();
    assert_eq!(status, 200, "{created}");
    let key_id = created["keyId"].as_str().unwrap();
    flood_and_kill(port, created["key"].as_str().unwrap(), server);
    let journal = db.dir().join("keygate.db-credits");
    let journaled = std::fs::read(&journal).unwrap();
    assert!(journaled.iter().any(|b| *b != 0), "the spends were journaled");
    let source = keygate_store::SqlStore::open_as_is(&db.url, Default::default()).unwrap();
    source.revert_migrations_after("2026-11-26-000017").unwrap();
    let row = || {
        keygate_usage::UsageStore::usage_read(&source, |tx| Ok(tx.key_credit_row(key_id)?)).unwrap().unwrap()
    };
    let before = row().remaining;
    let target = TestDb::sqlite();
    let out = std::process::Command::new(BIN)
        .env_remove("KEYGATE_CONFIG")
        .env_remove("DATABASE_URL")
        .args(["store", "copy", "--from", &db.url, "--to", &target.url])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the source") && err.contains("older"), "{err}");
    assert!(std::fs::read(&journal).unwrap() == journaled, "the journal as it was");
    assert_eq!(row().remaining, before, "the row as it was");
}

/// Embedded: a second server on the same SQLite file, started while the first owned the
/// credit journal, takes the journal over at its first spend once the first was killed,
/// and replays what the first answered: no answered spend is lost.
#[test]
fn a_second_server_takes_over_the_journal_of_a_killed_one() {
    let db = TestDb::sqlite();
    let (port, second_port) = (free_port(), free_port());
    // The embedded default whatever the run's Redis: the credit journal is its own.
    let first = serve_with(&db.url, port, None);
    let second = serve_with(&db.url, second_port, None);
    let (status, created) =
        v2(port, "keys.createKey", &json!({"apiId": "api_durable", "credits": {"remaining": CREDITS}}))
            .unwrap();
    assert_eq!(status, 200, "{created}");
    let (key_id, secret) = (created["keyId"].as_str().unwrap(), created["key"].as_str().unwrap());
    let valid = flood_and_kill(port, secret, first);
    let (status, v) = v2(second_port, "keys.verifyKey", &json!({"key": secret})).unwrap();
    assert_eq!((status, v["code"].as_str()), (200, Some("VALID")), "{v}");
    let (status, key) = v2(second_port, "keys.getKey", &json!({"keyId": key_id})).unwrap();
    assert_eq!(status, 200, "{key}");
    let remaining = key["credits"]["remaining"].as_u64().unwrap();
    assert!(remaining < CREDITS - valid, "an answered spend was lost: {remaining} >= {CREDITS} - {valid}");
    assert!(CREDITS - valid - 1 - remaining <= CLIENTS, "{CREDITS} - {valid} - 1 - {remaining} > {CLIENTS}");
    drop(second);
}

/// The key's remaining credits in its row once it holds `live` (or what it holds after 10 s).
fn written_behind(db: &str, key_id: &str, live: u64) -> u64 {
    use keygate_usage::UsageStore;
    let store = keygate_store::SqlStore::open(db, Default::default()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = store.usage_read(|tx| Ok(tx.key_credit_row(key_id)?)).unwrap().unwrap();
        let remaining = row.remaining.unwrap();
        if remaining == live || std::time::Instant::now() > deadline {
            return remaining;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes the key's credit counter from Redis (under the servers' key prefix), as a Redis
/// that lost its data.
fn forget_counter(db: &str, key_id: &str) {
    let prefix = keygate_test_support::redis_prefix_for(db);
    let key = format!("{prefix}{{cr{}}}:k:{key_id}", keygate_store::credit_shard(key_id));
    let url = redis_url().unwrap();
    let removed: u64 = if redis_cluster() {
        let nodes: Vec<&str> = url.split(',').collect();
        let mut c = redis::cluster::ClusterClient::new(nodes).unwrap().get_connection().unwrap();
        redis::cmd("DEL").arg(&key).query(&mut c).unwrap()
    } else {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("DEL").arg(&key).query(&mut c).unwrap()
    };
    assert_eq!(removed, 1, "{key} was in Redis");
}
