//! Faults short of an outage (issue 52), injected by a proxy in front of Redis or
//! PostgreSQL (tests/src/proxy.rs) while three instances serve a load of verifications
//! that spend credits under an auto-applied key limit, and rate-limit decisions:
//! added latency (50 ms and 500 ms each way), connections dropped again and again,
//! half-open connections that swallow every byte, each for 1.5 s; a Redis Cluster failing
//! over to its replicas; PostgreSQL stopped and started again (run alone).
//!
//! Under each, the invariants (docs/operations.md, "Faults"): every request is answered
//! within its timeouts, with a 200 or a 503 (fail closed); no over-admission (the limit's
//! passes and the key limit's VALIDs at most their limits); credits exact against the
//! answers: every VALID spent one credit, and the balance lost beyond that is at most the
//! number of spending verifications answered 503 (a spend that reached Redis whose answer
//! did not come back); and the service answers again within 5 s of the fault's end.
#![allow(clippy::unwrap_used)]

use keygate_test_support::TestDb;
use keygate_tests::TestServer;
use keygate_tests::proxy::{CuttableProxy, proxied_postgres};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// Sized so that, at the paced load (9 clients, one request each 10 ms at most: half
// verifications, half decisions), the credits and the limit run out while the fault is on.
const CREDITS: u64 = 600;
const KEY_LIMIT: u64 = 1_000;
const LIMIT: u64 = 600;
/// Each client's pause between requests.
const PACE: Duration = Duration::from_millis(10);
/// The longest a request may take: the Redis and database timeouts (500 ms, 1 s) several
/// times over, on a loaded CI machine.
const ANSWER_WITHIN: Duration = Duration::from_secs(4);

/// The stores the three instances use, and the proxy in front of one of them.
struct Target {
    db: Arc<TestDb>,
    db_url: String,
    redis_url: String,
    cluster: bool,
    proxy: Option<CuttableProxy>,
}

impl Target {
    /// Redis reached through a proxy.
    fn redis() -> Self {
        let redis = keygate_tests::scale_out();
        let db = Arc::new(TestDb::fresh());
        let proxy = CuttableProxy::start(keygate_tests::redis_addr(&redis)).unwrap();
        let redis_url = format!("redis://{}", proxy.addr);
        Self { db_url: db.url.clone(), db, redis_url, cluster: false, proxy: Some(proxy) }
    }

    /// PostgreSQL reached through a proxy.
    fn postgres() -> Self {
        let redis_url = keygate_tests::scale_out();
        let db = Arc::new(TestDb::fresh());
        let (proxy, db_url) = proxied_postgres(&db.url);
        Self { db, db_url, redis_url, cluster: false, proxy: Some(proxy) }
    }

    /// PostgreSQL reached directly (to be stopped and started), Redis too.
    fn postgres_server() -> Self {
        let redis_url = keygate_tests::scale_out();
        let db = Arc::new(TestDb::fresh());
        Self { db_url: db.url.clone(), db, redis_url, cluster: false, proxy: None }
    }

    /// A private Redis Cluster of three masters with a replica each (7051-7056).
    fn cluster_with_replicas() -> Self {
        keygate_tests::scale_out();
        let db = Arc::new(TestDb::fresh());
        let redis_url = keygate_test_support::local_redis_cluster_with_replicas(7050);
        Self { db_url: db.url.clone(), db, redis_url, cluster: true, proxy: None }
    }

    fn proxy(&self) -> &CuttableProxy {
        self.proxy.as_ref().unwrap()
    }
}

#[derive(Default)]
struct Counts {
    valid: AtomicU64,
    /// USAGE_EXCEEDED or RATE_LIMITED: a refusal that spent nothing.
    refused: AtomicU64,
    verify_unavailable: AtomicU64,
    passed: AtomicU64,
    denied: AtomicU64,
    limit_unavailable: AtomicU64,
    /// The slowest answer (ms).
    slowest_ms: AtomicU64,
}

/// Three instances on `target`'s stores under load; `fault` turned on at 1 s and `heal`ed
/// at 2.5 s (or when `fault` and `heal` are done), the load going on for 1.5 s after (and
/// until an answer asked after the heal is served, at most 10 s); the invariants checked.
fn under_fault(target: Target, fault: impl Fn(&Target), heal: impl Fn(&Target)) {
    let servers: Vec<TestServer> = (0..3)
        .map(|_| {
            let mut config = TestServer::config(&target.db_url);
            config.redis_url = Some(target.redis_url.clone());
            config.redis.cluster = target.cluster;
            config.redis.connect_timeout = Duration::from_millis(500);
            config.redis.io_timeout = Duration::from_millis(500);
            config.pool.connect_timeout = Duration::from_millis(1_000);
            config.pool.statement_timeout = Duration::from_millis(1_000);
            TestServer::start_with(config, target.db.clone())
        })
        .collect();
    let a = &servers[0];
    let api = a.v2("apis.createApi", &json!({"name": "faults"})).data()["apiId"].clone();
    let limits = json!([{"name": "calls", "limit": KEY_LIMIT, "duration": 60_000, "autoApply": true}]);
    let body = json!({"apiId": api, "credits": {"remaining": CREDITS}, "ratelimits": limits});
    let key = a.v2("keys.createKey", &body).data().clone();
    let (key_id, secret) = (key["keyId"].as_str().unwrap(), key["key"].as_str().unwrap());
    let verify = json!({"key": secret});
    let limit = json!({"namespace": "faults", "identifier": "u", "limit": LIMIT, "duration": 60_000});
    // Every instance knows the key and the namespace before the fault.
    for s in &servers {
        assert_eq!(s.v2("keys.verifyKey", &json!({"key": secret, "credits": {"cost": 0}})).status, 200);
        assert_eq!(
            s.v2(
                "ratelimit.limit",
                &json!({"namespace": "faults", "identifier": "warm", "limit": 1, "duration": 60_000})
            )
            .status,
            200
        );
    }

    let counts = Counts::default();
    let healed_at = std::sync::OnceLock::<Instant>::new();
    let answered_after_heal = AtomicU64::new(0);
    let fault_at = std::sync::OnceLock::<Instant>::new();
    let served_during_fault = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for (i, s) in servers.iter().cycle().take(9).enumerate() {
            let (counts, verify, limit, healed_at, after) =
                (&counts, &verify, &limit, &healed_at, &answered_after_heal);
            let (fault_at, during) = (&fault_at, &served_during_fault);
            scope.spawn(move || {
                let mut n = 0;
                // Until 1.5 s after the heal (which may take a while: a failover settling),
                // and on until an answer asked after the heal came back (at most 10 s: on a
                // loaded machine the first answers after a failover can take seconds).
                let going = |at: &Instant| {
                    at.elapsed() < Duration::from_millis(1_500)
                        || (after.load(Ordering::Relaxed) == 0 && at.elapsed() < Duration::from_secs(10))
                };
                while healed_at.get().is_none_or(going) {
                    n += 1;
                    let spend = (i + n) % 2 == 0;
                    let asked = Instant::now();
                    let r =
                        if spend { s.v2("keys.verifyKey", verify) } else { s.v2("ratelimit.limit", limit) };
                    let took = asked.elapsed();
                    assert!(took < ANSWER_WITHIN, "answered after {took:?}: {}", r.text);
                    counts.slowest_ms.fetch_max(took.as_millis() as u64, Ordering::Relaxed);
                    match (spend, r.status) {
                        (true, 200) => match r.data()["code"].as_str().unwrap() {
                            "VALID" => counts.valid.fetch_add(1, Ordering::Relaxed),
                            "USAGE_EXCEEDED" | "RATE_LIMITED" => {
                                counts.refused.fetch_add(1, Ordering::Relaxed)
                            }
                            other => panic!("{other}: {}", r.text),
                        },
                        (true, 503) => counts.verify_unavailable.fetch_add(1, Ordering::Relaxed),
                        (false, 200) if r.data()["success"] == true => {
                            counts.passed.fetch_add(1, Ordering::Relaxed)
                        }
                        (false, 200) => counts.denied.fetch_add(1, Ordering::Relaxed),
                        (false, 503) => counts.limit_unavailable.fetch_add(1, Ordering::Relaxed),
                        (_, other) => panic!("status {other} under a fault: {}", r.text),
                    };
                    let faulty = fault_at.get().is_some_and(|at| asked > *at) && healed_at.get().is_none();
                    if r.status == 200 && faulty {
                        during.fetch_add(1, Ordering::Relaxed);
                    }
                    if r.status == 200 && healed_at.get().is_some_and(|at| asked > *at) {
                        after.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(PACE);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(1_000));
        let on = Instant::now();
        let _ = fault_at.set(on);
        fault(&target);
        // 1.5 s of fault, however long `fault` itself took (some drop connections for it).
        std::thread::sleep(Duration::from_millis(1_500).saturating_sub(on.elapsed()));
        heal(&target);
        let _ = healed_at.set(Instant::now());
    });
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let (valid, unavailable) = (get(&counts.valid), get(&counts.verify_unavailable));
    let summary = format!(
        "valid {valid}, refused {}, verify 503 {unavailable}, passed {}, denied {}, limit 503 {}; \
         200s asked during the fault {}, after it {}; slowest answer {} ms",
        get(&counts.refused),
        get(&counts.passed),
        get(&counts.denied),
        get(&counts.limit_unavailable),
        get(&served_during_fault),
        get(&answered_after_heal),
        get(&counts.slowest_ms),
    );
    println!("{summary}");
    assert!(get(&counts.passed) <= LIMIT, "over-admitted: {summary}");
    assert!(valid <= KEY_LIMIT.min(CREDITS), "over-admitted: {summary}");
    assert!(get(&answered_after_heal) > 0, "nothing served after the fault: {summary}");

    // Recovery: each instance answers a spending verification within 5 s.
    for s in &servers {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = s.v2("keys.verifyKey", &json!({"key": secret, "credits": {"cost": 0}}));
            if r.status == 200 {
                break;
            }
            assert_eq!(r.status, 503, "{}", r.text);
            assert!(Instant::now() < deadline, "not answering 5 s after the fault: {summary}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Credits against the answers (a read that cannot reach the live counter is a 503,
    // never the lagging row's value).
    let deadline = Instant::now() + Duration::from_secs(5);
    let r = loop {
        let r = a.v2("keys.getKey", &json!({"keyId": key_id}));
        if r.status != 503 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(r.status, 200, "{}", r.text);
    let remaining = r.data()["credits"]["remaining"].as_u64().unwrap();
    println!("{remaining} credits left");
    assert!(remaining + valid <= CREDITS, "a VALID answer spent nothing: {remaining} left, {summary}");
    assert!(
        remaining + valid + unavailable >= CREDITS,
        "credits lost beyond the 503s: {remaining} left, {summary}"
    );
}

/// The proxy's connections dropped every 100 ms, for the fault's 1.5 s.
fn drop_connections_for_the_fault(t: &Target) {
    for _ in 0..14 {
        t.proxy().drop_connections();
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs PostgreSQL and Redis (KEYGATE_TEST_POSTGRES_URL, KEYGATE_TEST_REDIS_URL; .ci/run sets them)"]
fn injected_redis_latency_50ms() {
    under_fault(
        Target::redis(),
        |t| t.proxy().set_latency(Duration::from_millis(50)),
        |t| t.proxy().set_latency(Duration::ZERO),
    );
}

#[test]
#[ignore = "needs PostgreSQL and Redis (KEYGATE_TEST_POSTGRES_URL, KEYGATE_TEST_REDIS_URL; .ci/run sets them)"]
fn injected_redis_latency_500ms() {
    under_fault(
        Target::redis(),
        |t| t.proxy().set_latency(Duration::from_millis(500)),
        |t| t.proxy().set_latency(Duration::ZERO),
    );
}

#[test]
#[ignore = "needs PostgreSQL and Redis (KEYGATE_TEST_POSTGRES_URL, KEYGATE_TEST_REDIS_URL; .ci/run sets them)"]
fn injected_redis_connections_dropped_again_and_again() {
    under_fault(Target::redis(), drop_connections_for_the_fault, |_| {});
}

#[test]
#[ignore = "needs PostgreSQL and Redis (KEYGATE_TEST_POSTGRES_URL, KEYGATE_TEST_REDIS_URL; .ci/run sets them)"]
fn injected_redis_half_open() {
    under_fault(
        Target::redis(),
        |t| t.proxy().set_black_hole(true),
        |t| {
            t.proxy().set_black_hole(false);
            // The swallowed connections stay stuck: the clients drop them on their timeouts.
        },
    );
}

#[test]
#[ignore = "needs PostgreSQL and Redis (KEYGATE_TEST_POSTGRES_URL, KEYGATE_TEST_REDIS_URL; .ci/run sets them)"]
fn injected_postgres_connections_dropped_again_and_again() {
    under_fault(Target::postgres(), drop_connections_for_the_fault, |_| {});
}

#[test]
#[ignore = "needs PostgreSQL and Redis (KEYGATE_TEST_POSTGRES_URL, KEYGATE_TEST_REDIS_URL; .ci/run sets them)"]
fn injected_postgres_latency_500ms() {
    under_fault(
        Target::postgres(),
        |t| t.proxy().set_latency(Duration::from_millis(500)),
        |t| t.proxy().set_latency(Duration::ZERO),
    );
}

#[test]
#[ignore = "needs PostgreSQL and redis-server: starts a private Redis Cluster with replicas on 127.0.0.1:7051-7056 (.ci/redis-cluster.sh); run with --include-ignored (.ci/run does)"]
fn injected_redis_cluster_failover() {
    under_fault(
        Target::cluster_with_replicas(),
        |t| {
            // Every replica takes over from its master (CLUSTER FAILOVER: the master stops
            // its clients, the replica catches up, then the roles switch).
            for url in t.redis_url.split(',') {
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).unwrap();
                if matches!(&role[0], redis::Value::BulkString(r) if r == b"slave") {
                    redis::cmd("CLUSTER").arg("FAILOVER").query::<()>(&mut conn).unwrap();
                }
            }
        },
        |t| {
            // The cluster whole again, its new masters serving.
            let seed = t.redis_url.split(',').next().unwrap();
            let mut conn = redis::Client::open(seed).unwrap().get_connection().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster did not settle: {info}");
                std::thread::sleep(Duration::from_millis(100));
            }
        },
    );
}

/// PostgreSQL stopped and started again under load. It stops the server every other test
/// shares: ignored, and run alone by `.ci/run` after the suites (its name is skipped there
/// with `postgres_stopped_and_started_again`).
#[test]
#[ignore = "stops the shared PostgreSQL server; .ci/run runs it alone"]
fn postgres_stopped_and_started_again_under_load() {
    let _restart = keygate_tests::postgres_server::Restart;
    under_fault(
        Target::postgres_server(),
        |_| keygate_tests::postgres_server::pg_ctl("stop"),
        |_| keygate_tests::postgres_server::start_and_wait(),
    );
}
