//! How many Redis round trips one verification makes (issue 48), counted by Redis itself:
//! `MONITOR` on a private server (or a private three-node cluster) that nothing else talks
//! to shows every command a client sends (those a script runs inside Redis are marked and
//! left out), less the server's own background traffic: the credits' write-behind sweep of
//! every shard's dirty set (once a second, whichever requests ran) by name, the handshake of
//! a connection the pool opens when a background task and a request want one at the same
//! moment (once per connection, not per request), the rest (a cluster client's checks) by
//! its rate over quiet spells of the same server just before and after.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, wait_for_port};
use keygate_tests::TestServer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Verifications per measurement: enough that what runs once a second besides them (the
/// credits' write-behind, a cluster client's own checks) weighs little per verification.
const N: u32 = 600;

/// A private Redis server on a free port, stopped when dropped; its URL.
fn private_redis() -> (Proc, String) {
    let port = free_port();
    let mut cmd = std::process::Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
    let proc = Proc::spawn(cmd).terminate_on_drop();
    wait_for_port(port, "redis-server");
    (proc, format!("redis://127.0.0.1:{port}"))
}

/// A server on a fresh database and the Redis at `urls` (seed nodes separated by commas
/// when `cluster`).
fn server_on(urls: &str, cluster: bool) -> TestServer {
    let db = Arc::new(TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.redis_url = Some(urls.to_string());
    config.redis.cluster = cluster;
    TestServer::start_with(config, db)
}

/// The commands clients send to the nodes at `urls`, as `MONITOR` shows them (those a
/// script runs inside Redis are not round trips and are left out): when (the node's
/// clock, Unix seconds) and which.
struct Monitor {
    seen: Arc<Mutex<Vec<(f64, String)>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(urls: &str) -> Self {
        let (seen, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let threads = urls
            .split(',')
            .map(|url| {
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                redis::cmd("MONITOR").query::<()>(&mut conn).unwrap();
                conn.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                let (seen, stop) = (seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    // The clients (connections) that have sent a command other than a
                    // handshake's.
                    let mut working = std::collections::HashSet::new();
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(redis::Value::SimpleString(line)) = conn.recv_response() else { continue };
                        // `1700000000.123456 [0 127.0.0.1:50000] "evalsha" ...`; `[0 lua]` inside scripts.
                        let Some((time, rest)) = line.split_once(' ') else { continue };
                        let Some((client, command)) = rest.split_once("] ") else { continue };
                        if client.ends_with("lua") {
                            continue;
                        }
                        // The credits' write-behind sweeps every shard's dirty set once a
                        // second under the shard's lease: a burst of one script per shard,
                        // whichever requests ran (no request touches a lease).
                        if command.contains("}:lease\"") {
                            continue;
                        }
                        let mut words = command.split('"').skip(1).step_by(2);
                        let mut name = words.next().unwrap_or("").to_ascii_lowercase();
                        if name == "evalsha" {
                            let sha = words.next().unwrap_or("");
                            name = format!("evalsha {}", sha.get(..8).unwrap_or(sha));
                        }
                        // A new connection's handshake: what it sends before its first
                        // command of work (a cluster client: `PING`s to each node and
                        // `CLUSTER SLOTS`). A `PING` on a connection that has worked counts.
                        if HANDSHAKE.contains(&name.as_str()) && !working.contains(client) {
                            name = format!("handshake {name}");
                        } else {
                            working.insert(client.to_string());
                        }
                        seen.lock().unwrap().push((time.parse().unwrap_or(0.0), name));
                    }
                })
            })
            .collect();
        Self { seen, stop, threads }
    }

    /// The commands seen between `from` and `to`, by name: those of work, and the
    /// handshakes of new connections.
    fn between(&self, from: f64, to: f64) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let (mut work, mut handshakes) = (BTreeMap::new(), BTreeMap::new());
        for (_, name) in self.seen.lock().unwrap().iter().filter(|(t, _)| (from..to).contains(t)) {
            let into = if name.starts_with("handshake ") { &mut handshakes } else { &mut work };
            *into.entry(name.clone()).or_default() += 1;
        }
        (work, handshakes)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// What a new connection sends before its first command of work (redis-rs: a `PING`; a
/// cluster connection's `PING`s to each node and its `CLUSTER SLOTS`).
const HANDSHAKE: [&str; 4] = ["ping", "cluster", "hello", "client"];

/// Now, as Unix seconds (the clock the nodes' `MONITOR` lines use: the same machine).
fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Redis round trips per verification of `secret` (v2), each answered `code`, and what
/// they were: the server's background rate (besides the write-behind sweep, which the
/// monitor leaves out), measured over quiet seconds before and after, is taken off.
fn round_trips_per_verification(
    s: &TestServer,
    monitor: &Monitor,
    secret: &str,
    code: &str,
) -> (f64, String) {
    round_trips_in_parallel(s, monitor, secret, code, 1)
}

/// [`round_trips_per_verification`] with `parallel` clients verifying at once (N in all, at
/// least ten each).
fn round_trips_in_parallel(
    s: &TestServer,
    monitor: &Monitor,
    secret: &str,
    code: &str,
    parallel: u32,
) -> (f64, String) {
    let verify = || {
        let r = s.v2("keys.verifyKey", &json!({"key": secret}));
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.data()["code"], code, "{}", r.text);
    };
    // Loaded and cached first: the count is of a cached verification.
    verify();
    verify();
    let quiet = now();
    std::thread::sleep(Duration::from_secs(2));
    let started = now();
    let each = N.div_ceil(parallel).max(10);
    std::thread::scope(|scope| {
        for _ in 0..parallel {
            scope.spawn(|| {
                for _ in 0..each {
                    verify();
                }
            });
        }
    });
    let ended = now();
    std::thread::sleep(Duration::from_secs(2));
    let after = now();
    // What MONITOR shows arrives a little after the command ran.
    std::thread::sleep(Duration::from_millis(300));
    // The rest of the background (a cluster client's checks) comes in bursts: its rate is
    // the higher of the quiet seconds before and after the verifications.
    let (before_bg, after_bg) = (monitor.between(quiet, started).0, monitor.between(ended, after).0);
    let (sent, handshakes) = monitor.between(started, ended);
    let rate = |bg: &BTreeMap<String, u64>, secs: f64| bg.values().sum::<u64>() as f64 / secs;
    let rate = rate(&before_bg, started - quiet).max(rate(&after_bg, after - ended));
    let n = each * parallel;
    let per = (sent.values().sum::<u64>() as f64 - rate * (ended - started)) / f64::from(n);
    (
        per,
        format!(
            "{sent:?} in {n} verifications, {parallel} at a time (and new connections' \
             {handshakes:?}); background {before_bg:?} before, {after_bg:?} after, 2 s each"
        ),
    )
}

/// A key of `body` (v2 createKey), its secret.
fn key(s: &TestServer, body: Value) -> String {
    s.v2("keys.createKey", &body).data()["key"].as_str().unwrap().to_string()
}

/// A plain key makes one round trip (one `MGET` reads the counters' epoch, the root key's,
/// the key's and the workspace's change counters), and many at once share theirs; one with credits and an auto-applied limit of its own
/// makes one on a single Redis (its limit, its credit spend and the check of the counters,
/// one script; many at once share it) and two on a cluster (the counters are in another
/// slot: a shared read, then a shared spend); with an
/// identity's limits too, three (those are in the identity's slot).
fn round_trips_are_counted(urls: &str, cluster: bool) {
    let s = server_on(urls, cluster);
    let monitor = Monitor::start(urls);
    let plain = key(&s, json!({"apiId": "api_rt"}));
    let (per, what) = round_trips_per_verification(&s, &monitor, &plain, "VALID");
    eprintln!("plain verification: {per:.2} Redis commands ({what})");
    assert!(per <= 1.1, "a plain verification sends at most one command to Redis, not {per:.2}: {what}");
    // Many at once: the confirmations of the verifications that arrive while one read is in
    // flight share the next (one MGET for many).
    let (per, what) = round_trips_in_parallel(&s, &monitor, &plain, "VALID", 64);
    eprintln!("plain verifications, 64 at a time: {per:.3} Redis commands each ({what})");
    assert!(
        per <= 0.5,
        "64 plain verifications at a time share their reads, not {per:.2} commands each: {what}"
    );

    let limit = json!({"name": "calls", "limit": 1_000_000, "duration": 60_000, "autoApply": true});
    let spending =
        key(&s, json!({"apiId": "api_rt", "credits": {"remaining": 1_000_000}, "ratelimits": [limit]}));
    let (per, what) = round_trips_per_verification(&s, &monitor, &spending, "VALID");
    eprintln!("verification spending credits and its own limit: {per:.2} Redis commands ({what})");
    // One Redis: the spend's script checks the change counters too (one round trip); a
    // cluster keeps them in another slot (two).
    let most = if cluster { 2.1 } else { 1.1 };
    assert!(
        per <= most,
        "a spending verification sends at most {most:.0} commands to Redis, not {per:.2}: {what}"
    );
    // Many at once: the spends queued while a round trip is in flight go in the next, in
    // one script call (up to 64 spends each; on a cluster one per shard of the credits,
    // after the confirmations' shared MGET).
    let (per, what) = round_trips_in_parallel(&s, &monitor, &spending, "VALID", 64);
    eprintln!("spending verifications, 64 at a time: {per:.3} Redis commands each ({what})");
    assert!(
        per <= 0.5,
        "64 spending verifications at a time share their script calls, not {per:.2} commands each: {what}"
    );

    // An identity's limits are shared by its keys, in the identity's slot: one more.
    let shared = json!({"name": "team", "limit": 1_000_000, "duration": 60_000, "autoApply": true});
    let r = s.v2("identities.createIdentity", &json!({"externalId": "team_rt", "ratelimits": [shared]}));
    assert_eq!(r.status, 200, "{}", r.text);
    let body = json!({"apiId": "api_rt", "externalId": "team_rt", "credits": {"remaining": 1_000_000}, "ratelimits": [limit]});
    let (per, what) = round_trips_per_verification(&s, &monitor, &key(&s, body), "VALID");
    eprintln!(
        "verification spending credits, its own limit and its identity's: {per:.2} Redis commands ({what})"
    );
    assert!(per <= 3.1, "with an identity's limits, at most three commands, not {per:.2}: {what}");
}

#[test]
#[ignore = "needs redis-server: starts a private Redis; run with --include-ignored (.ci/run does)"]
fn a_verification_s_redis_round_trips_on_one_server() {
    let (_redis, url) = private_redis();
    round_trips_are_counted(&url, false);
}

#[test]
#[ignore = "needs redis-server: starts a private three-node Redis Cluster on 127.0.0.1:7031-7033 (.ci/redis-cluster.sh); run with --include-ignored (.ci/run does)"]
fn a_verification_s_redis_round_trips_on_a_cluster() {
    let urls = keygate_test_support::local_redis_cluster(7030);
    round_trips_are_counted(&urls, true);
}
