//! The Redis rate-limit store against a real Redis (`KEYGATE_TEST_REDIS_URL`; `.ci/run`
//! sets it and makes sure Redis is up).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_ratelimit::{Algorithm, BudgetKey, Checked, Decision, LimitRequest, MemoryStore, RateLimitStore};
use keygate_store::{BACKOFF, CounterGuard, EXPIRY_SLACK_MS, RedisSettings, RedisStore};
use keygate_test_support::{REDIS_ENV, redis_test_prefix, redis_url};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NOW: u64 = 1_800_000_000_000;

/// A store on the test Redis with a prefix of its own, or `None` (and a note) when the
/// tests do not run against Redis.
fn store(prefix: &str) -> RedisStore {
    let url =
        redis_url().unwrap_or_else(|| panic!("{REDIS_ENV} must be set for this (ignored by default) test"));
    let settings = RedisSettings { key_prefix: prefix.to_string(), ..settings() };
    let s = RedisStore::open(&url, settings).unwrap();
    s.ping().unwrap_or_else(|e| panic!("{REDIS_ENV}={url}: {e}"));
    s
}

/// A plain connection to the test Redis (or cluster), to look at or disturb its state.
pub(crate) fn raw_conn() -> Box<dyn redis::ConnectionLike> {
    let url = redis_url().unwrap();
    if keygate_test_support::redis_cluster() {
        let nodes: Vec<&str> = url.split(',').collect();
        Box::new(redis::cluster::ClusterClient::new(nodes).unwrap().get_connection().unwrap())
    } else {
        Box::new(redis::Client::open(url).unwrap().get_connection().unwrap())
    }
}

/// The default settings, on the test cluster when the run uses one.
fn settings() -> RedisSettings {
    RedisSettings { cluster: keygate_test_support::redis_cluster(), ..RedisSettings::default() }
}

fn key<'a>(ns: &'a Arc<String>, id: &'a str, duration: u64) -> BudgetKey<'a> {
    BudgetKey { namespace_id: ns, identifier: id, duration, algorithm: Default::default() }
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn answers_what_the_in_process_decision_answers() {
    let redis = store(&redis_test_prefix());
    let memory = MemoryStore::new();
    let ns = Arc::new("rlns_parity".to_string());
    let ids = ["a", "b:c", "b", "ünï"];
    for algorithm in ALGORITHMS {
        let mut seed = 7u64;
        let mut now = NOW;
        for step in 0..2_000 {
            let r = splitmix(&mut seed);
            let id = ids[(r % 4) as usize];
            let duration = [1_000, 5_000][(r >> 8) as usize % 2];
            // Limits change between calls (the count is kept); costs are 0, small, or over.
            let limit = 1 + (r >> 16) % 12;
            let cost = [0, 1, 1, 1, 2, 3, 13][(r >> 24) as usize % 7];
            now += (r >> 32) % 400; // windows roll over now and then
            let req = LimitRequest { limit, duration, cost };
            let key = BudgetKey { algorithm, ..key(&ns, id, duration) };
            let expected = memory.limit(key, req, now).unwrap();
            let got = redis.limit(key, req, now).unwrap();
            assert_eq!(got, expected, "{algorithm} step {step}: {id} {req:?} at {now}");
        }
    }
}

/// Every algorithm (API-v2.md §26).
const ALGORITHMS: [Algorithm; 3] = [Algorithm::Fixed, Algorithm::Sliding, Algorithm::TokenBucket];

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn exact_across_instances_under_concurrency() {
    let prefix = redis_test_prefix();
    let a = store(&prefix);
    let b = store(&prefix);
    let ns = Arc::new("rlns_conc".to_string());
    let passed = AtomicU64::new(0);
    let req = LimitRequest { limit: 100, duration: 60_000, cost: 1 };
    std::thread::scope(|s| {
        for t in 0..8 {
            // Two "instances" (separate pools), four clients each.
            let (store, ns, passed) = (if t % 2 == 0 { &a } else { &b }, &ns, &passed);
            s.spawn(move || {
                for _ in 0..50 {
                    if store.limit(key(ns, "hot", 60_000), req, NOW).unwrap().success {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(passed.load(Ordering::Relaxed), 100);
    let d = a.limit(key(&ns, "hot", 60_000), LimitRequest { cost: 0, ..req }, NOW).unwrap();
    assert_eq!((d.success, d.remaining), (false, 0));
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn largest_numbers_are_exact() {
    let s = store(&redis_test_prefix());
    let ns = Arc::new("rlns_big".to_string());
    let max = (1u64 << 53) - 1;
    let k = key(&ns, "u", max);
    let d = s.limit(k, LimitRequest { limit: max, duration: max, cost: max - 1 }, NOW).unwrap();
    assert_eq!(d, Decision { success: true, limit: max, remaining: 1, reset: max });
    // used + cost = 2^53 + 1 would round in a double if the script added: it must deny.
    let d = s.limit(k, LimitRequest { limit: max, duration: max, cost: 2 }, NOW).unwrap();
    assert_eq!((d.success, d.remaining), (false, 1));
    let d = s.limit(k, LimitRequest { limit: max, duration: max, cost: 1 }, NOW).unwrap();
    assert_eq!((d.success, d.remaining), (true, 0));
    // A sliding window's previous count weighted by the time left (a product past 2^53,
    // and one under it) and a bucket's instant, as the in-process store computes them.
    let memory = MemoryStore::new();
    let duration = 2_592_000_000;
    for (algorithm, limit, cost, id) in [
        (Algorithm::Sliding, max, max / 3, "w1"),
        (Algorithm::Sliding, 1_000, 999, "w2"),
        (Algorithm::TokenBucket, max, max / 3, "w3"),
    ] {
        let k = BudgetKey { algorithm, ..key(&ns, id, duration) };
        let start = NOW - NOW % duration;
        for (now, cost) in
            [(start + 7, cost), (start + duration + 1_234_567, 1), (start + duration + 7_654_321, 0)]
        {
            let req = LimitRequest { limit, duration, cost };
            assert_eq!(
                s.limit(k, req, now).unwrap(),
                memory.limit(k, req, now).unwrap(),
                "{algorithm} {req:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_window_key_expires_after_its_window_plus_slack() {
    let prefix = redis_test_prefix();
    let s = store(&prefix);
    let ns = Arc::new("rlns_ttl".to_string());
    let now = NOW + 12_345;
    s.limit(key(&ns, "u", 60_000), LimitRequest { limit: 5, duration: 60_000, cost: 1 }, now).unwrap();
    let start = now - now % 60_000;
    let k = format!("{prefix}{{rlns_ttl:60000:u}}:{start}");
    let mut conn = raw_conn();
    let used: u64 = redis::cmd("GET").arg(&k).query(&mut *conn).unwrap();
    assert_eq!(used, 1);
    let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut *conn).unwrap();
    let expected = (start + 60_000 - now + EXPIRY_SLACK_MS) as i64;
    assert!(ttl > expected - 5_000 && ttl <= expected, "pttl {ttl}, expected ~{expected}");
    // A denial or a cost-0 call writes nothing: no key for a budget never charged.
    s.limit(key(&ns, "v", 60_000), LimitRequest { limit: 1, duration: 60_000, cost: 2 }, now).unwrap();
    s.limit(key(&ns, "w", 60_000), LimitRequest { limit: 1, duration: 60_000, cost: 0 }, now).unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}*")).query(&mut *conn).unwrap();
    assert_eq!(keys, vec![k]);
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_bucket_key_outlives_its_instant_and_sets_its_expiry_about_once_a_duration() {
    let prefix = redis_test_prefix();
    let s = store(&prefix);
    let memory = MemoryStore::new();
    let ns = Arc::new("rlns_bucket_ttl".to_string());
    let bucket = BudgetKey { algorithm: Algorithm::TokenBucket, ..key(&ns, "u", 60_000) };
    let req = LimitRequest { limit: 10, duration: 60_000, cost: 1 };
    let k = format!("{prefix}{{rlns_bucket_ttl:60000:u}}:token_bucket:b");
    let mut conn = raw_conn();
    let state = |conn: &mut dyn redis::ConnectionLike| -> (String, i64) {
        let v: String = redis::cmd("GET").arg(&k).query(conn).unwrap();
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query(conn).unwrap();
        (v, ttl)
    };
    let decide =
        |now: u64| assert_eq!(s.limit(bucket, req, now).unwrap(), memory.limit(bucket, req, now).unwrap());
    // Epochs of D = 60 s (NOW starts one). Created: the end of the epoch after the
    // instant's, plus the slack (q = 6 s a token).
    let around = |ttl: i64, expected: u64| ttl > expected as i64 - 5_000 && ttl <= expected as i64;
    decide(NOW);
    let (v, ttl) = state(&mut *conn);
    assert_eq!(v, format!("{}:0", NOW + 6_000));
    assert!(around(ttl, 120_000 + EXPIRY_SLACK_MS), "pttl {ttl}");
    // A busy bucket whose instant stays in its epoch keeps it.
    decide(NOW + 1_000);
    std::thread::sleep(Duration::from_millis(20));
    decide(NOW + 2_000);
    let (v2, ttl2) = state(&mut *conn);
    assert_eq!(v2, format!("{}:0", NOW + 18_000));
    assert!(ttl2 < ttl && around(ttl2, 120_000 + EXPIRY_SLACK_MS), "pttl {ttl2} after {ttl}");
    // An instant moved into a later epoch sets it again, from the call's now.
    let later = NOW + 130_000; // full again: the instant goes to later + 6 s, epoch + 2
    decide(later);
    let (v3, ttl3) = state(&mut *conn);
    assert_eq!(v3, format!("{}:0", later + 6_000));
    assert!(around(ttl3, 240_000 + EXPIRY_SLACK_MS - 130_000), "pttl {ttl3}");
    // An instant written by earlier versions ("ms:r:e") is read; a denial leaves it as it is.
    let legacy = format!("{}:0:{}", later + 12_000, later + 300_000);
    let _: () = redis::cmd("SET").arg(&k).arg(&legacy).arg("PX").arg(200_000).query(&mut *conn).unwrap();
    let d = s.limit(bucket, LimitRequest { cost: 9, ..req }, later + 1).unwrap();
    assert!(!d.success && d.remaining == 8, "{d:?}"); // 12 s - 1 ms of debt: 8 whole tokens left
    assert_eq!(state(&mut *conn).0, legacy);
    let d = s.limit(bucket, req, later + 1).unwrap();
    assert!(d.success && d.remaining == 7, "{d:?}"); // 18 s - 1 ms of debt: 3 tokens
    let (v4, ttl4) = state(&mut *conn);
    assert_eq!(v4, format!("{}:0", later + 18_000));
    assert!(around(ttl4, 200_000), "pttl {ttl4}: the same epoch keeps the expiry");
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_settled_previous_window_is_read_once_and_a_clock_back_in_it_reads_it_again() {
    let prefix = redis_test_prefix();
    let s = store(&prefix);
    let ns = Arc::new("rlns_finished".to_string());
    let budget = BudgetKey { algorithm: Algorithm::Sliding, ..key(&ns, "u", 60_000) };
    let start = NOW - NOW % 60_000 + 600_000;
    let previous = format!("{prefix}{{rlns_finished:60000:u}}:sliding:{}", start - 60_000);
    let mut conn = raw_conn();
    let take = |cost: u64, now: u64| {
        s.limit(budget, LimitRequest { limit: 10, duration: 60_000, cost }, now).unwrap()
    };
    assert!(take(4, start - 60_000 + 10).success);
    // Settled (1 s into the next window): read once, then kept. Weighted 4·58.5/60 = 3.
    let settled = start + keygate_store::SLIDING_SETTLED_MS + 500;
    assert_eq!(take(1, settled).remaining, 10 - 3 - 1);
    // Kept: a count written behind keygate's back (no instance adds to an ended window)
    // is not read again.
    let _: () = redis::cmd("SET").arg(&previous).arg(9).query(&mut *conn).unwrap();
    assert_eq!(take(1, settled + 1).remaining, 10 - 3 - 2);
    let _: () = redis::cmd("SET").arg(&previous).arg(4).query(&mut *conn).unwrap();
    // The clock steps back into that window: it is counted in again, and the kept count
    // forgotten, so back in the later window the previous one is read as it now is.
    assert!(take(3, start - 60_000 + 20_000).success);
    let d = take(1, settled + 2);
    // Weighted floor(7 · 58.498 / 60) = 6, current 3 after: 1 left.
    assert_eq!((d.success, d.remaining), (true, 1));
    // Before settling, the previous window is read every time.
    let early = BudgetKey { identifier: "v", ..budget };
    let previous_v = format!("{prefix}{{rlns_finished:60000:v}}:sliding:{}", start - 60_000);
    let take_v =
        |now: u64| s.limit(early, LimitRequest { limit: 10, duration: 60_000, cost: 1 }, now).unwrap();
    let _: () = redis::cmd("SET").arg(&previous_v).arg(6).query(&mut *conn).unwrap();
    assert_eq!(take_v(start + 10).remaining, 10 - 5 - 1);
    let _: () = redis::cmd("SET").arg(&previous_v).arg(2).query(&mut *conn).unwrap();
    assert_eq!(take_v(start + 20).remaining, 10 - 1 - 2);
}

#[test]
fn unreachable_redis_is_unavailable_within_the_timeouts() {
    // Port 1 on loopback: nothing listens, connections are refused at once.
    let settings = RedisSettings { connect_timeout: Duration::from_millis(300), ..settings() };
    let s = RedisStore::open("redis://:secret@127.0.0.1:1/0", settings).unwrap();
    assert_eq!(s.display_location(), "redis://***@127.0.0.1:1/0");
    let ns = Arc::new("rlns_down".to_string());
    let started = Instant::now();
    let err = s.limit(key(&ns, "u", 1_000), LimitRequest { limit: 1, duration: 1_000, cost: 1 }, NOW);
    let err = err.unwrap_err();
    assert_eq!(err.code(), keygate_domain::ErrorCode::ServiceUnavailable, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    // Within the back-off the next calls fail at once, saying so, without a connection wait.
    let again = s.limit(key(&ns, "u", 1_000), LimitRequest { limit: 1, duration: 1_000, cost: 1 }, NOW);
    assert!(again.unwrap_err().to_string().contains("retrying shortly"));
    assert!(s.ping().is_err());
    // After it, one call probes again (and fails again: nothing listens).
    std::thread::sleep(BACKOFF + Duration::from_millis(50));
    let probe = s.ping().unwrap_err().to_string();
    assert!(!probe.contains("retrying shortly"), "{probe}");
}

#[test]
fn a_malformed_url_is_refused_at_open() {
    for url in ["http://127.0.0.1:6379", "redis://[::1", "not a url"] {
        let err = RedisStore::open(url, RedisSettings::default()).unwrap_err();
        assert!(err.to_string().contains("invalid Redis URL"), "{url}: {err}");
    }
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_stale_overrides_epoch_decides_nothing() {
    let prefix = redis_test_prefix();
    let a = store(&prefix);
    let b = store(&prefix);
    let ns = Arc::new("rlns_epoch".to_string());
    let req = LimitRequest { limit: 5, duration: 60_000, cost: 1 };
    assert_eq!(a.overrides_epoch(&ns).unwrap(), 0, "no change yet: epoch 0");
    assert!(
        matches!(a.limit_if_current(key(&ns, "u", 60_000), req, NOW, 0).unwrap(), Checked::Decided(d) if d.remaining == 4)
    );
    // Another instance changes the namespace's overrides.
    b.bump_overrides_epoch(&ns).unwrap();
    assert_eq!(a.overrides_epoch(&ns).unwrap(), 1);
    assert_eq!(a.limit_if_current(key(&ns, "u", 60_000), req, NOW, 0).unwrap(), Checked::StaleOverrides);
    // Nothing was deducted by the stale call; with the new epoch the decision goes through.
    assert!(
        matches!(a.limit_if_current(key(&ns, "u", 60_000), req, NOW, 1).unwrap(), Checked::Decided(d) if d.remaining == 3)
    );
    // Other namespaces are not affected.
    let other = Arc::new("rlns_other".to_string());
    assert!(matches!(
        a.limit_if_current(key(&other, "u", 60_000), req, NOW, 0).unwrap(),
        Checked::Decided(_)
    ));
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn change_counters_only_rise_and_a_lost_epoch_is_a_new_one() {
    use keygate_rbac::SharedCounters;
    let prefix = redis_test_prefix();
    let redis = store(&prefix);
    let names = ["key:a".to_string(), "ws:w".to_string()];
    let (epoch, values) = redis.read(&names).unwrap();
    assert!(epoch >= 2, "never the local or database tag");
    assert_eq!(values, vec![0, 0], "absent counters read 0");
    redis.publish(&[("key:a".into(), 5), ("ws:w".into(), 2)]).unwrap();
    assert_eq!(redis.read(&names).unwrap(), (epoch, vec![5, 2]));
    redis.publish(&[("key:a".into(), 3)]).unwrap();
    assert_eq!(redis.read(&names).unwrap().1, vec![5, 2], "publishing never lowers a counter");
    // Redis loses its data (a restart without persistence): a new epoch, so no answer
    // cached under the old values can match again.
    let mut conn = raw_conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}{{cc}}:*")).query(&mut *conn).unwrap();
    assert_eq!(keys.len(), 3, "{keys:?}");
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut *conn).unwrap();
    let (after, values) = redis.read(&names).unwrap();
    assert_ne!(after, epoch);
    assert_eq!(values, vec![0, 0]);
}

/// A confirmation of named counters at given values, under `epoch`.
struct Names(u64, Vec<(String, u64)>);

impl keygate_rbac::Confirm for Names {
    fn epoch(&self) -> u64 {
        self.0
    }
    fn counters(&self) -> usize {
        self.1.len()
    }
    fn counter(&self, i: usize, out: &mut String) -> u64 {
        out.push_str(&self.1[i].0);
        self.1[i].1
    }
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn confirmations_hold_while_the_counters_do_and_share_their_reads() {
    use keygate_rbac::SharedCounters;
    let prefix = redis_test_prefix();
    let redis = store(&prefix);
    let (epoch, _) = redis.read(&["key:a".to_string()]).unwrap();
    redis.publish(&[("key:a".into(), 5), ("ws:w".into(), 2)]).unwrap();
    let confirm = |epoch: u64, counters: &[(&str, u64)]| {
        let names = counters.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        redis.confirm(Box::new(Names(epoch, names))).expect("on a tokio runtime")
    };
    assert!(redis.confirm(Box::new(Names(epoch, Vec::new()))).is_none(), "no runtime: no confirmation");
    let rt = runtime();
    rt.block_on(async {
        assert!(confirm(epoch, &[("key:a", 5), ("ws:w", 2)]).await.unwrap());
        assert!(confirm(epoch, &[("key:none", 0)]).await.unwrap(), "an absent counter holds 0");
        assert!(!confirm(epoch, &[("key:a", 4), ("ws:w", 2)]).await.unwrap(), "a counter moved");
        assert!(!confirm(epoch ^ 4, &[("key:a", 5)]).await.unwrap(), "another epoch");
        // Many at once, most naming the same workspace: fewer reads than confirmations,
        // each answered for itself.
        let before = redis.batch_stats();
        let asked = (0..200u64).map(|i| {
            let value = if i % 3 == 0 { 9 } else { 5 };
            confirm(epoch, &[("ws:w", 2), ("key:a", value)])
        });
        let got = futures_util::future::join_all(asked).await;
        for (i, got) in got.into_iter().enumerate() {
            assert_eq!(got.unwrap(), i % 3 != 0, "confirmation {i}");
        }
        let after = redis.batch_stats();
        assert_eq!(after.confirmations - before.confirmations, 200);
        assert!(after.counter_reads - before.counter_reads < 200, "{before:?} -> {after:?}");
    });
    // Redis lost its data: no epoch, nothing confirmed (the caller reads, which sets one).
    let mut conn = raw_conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}{{cc}}:*")).query(&mut *conn).unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut *conn).unwrap();
    rt.block_on(async { assert!(!confirm(epoch, &[("key:none", 0)]).await.unwrap()) });
}

/// A change published on one instance is announced to the others, whose confirmations of
/// answers it made stale are answered without a round trip; a change whose announcement is
/// lost (a counter raised in Redis with none) is still seen, by the read.
#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn pushed_changes_skip_the_read_of_a_stale_answer_and_a_lost_one_costs_only_the_read() {
    use keygate_rbac::SharedCounters;
    let prefix = redis_test_prefix();
    let (writer, reader) = (store(&prefix), store(&prefix));
    let (epoch, _) = reader.read(&["key:p".to_string()]).unwrap();
    writer.publish(&[("key:p".into(), 3), ("ws:p".into(), 1)]).unwrap();
    let confirm = |counters: &[(&str, u64)]| {
        let names = counters.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        reader.confirm(Box::new(Names(epoch, names))).expect("on a tokio runtime")
    };
    let rt = runtime();
    rt.block_on(async {
        // The subscriber connects in the background: raise the key's counter until the
        // announcement arrives before the confirmation of the value it replaced.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut value = 3;
        let after = loop {
            assert!(std::time::Instant::now() < deadline, "no announcement reached the reader");
            value += 1;
            writer.publish(&[("key:p".into(), value)]).unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let before = reader.batch_stats();
            assert!(!confirm(&[("ws:p", 1), ("key:p", value - 1)]).await.unwrap(), "a move");
            let after = reader.batch_stats();
            if after.pushed_stale > before.pushed_stale {
                assert_eq!(after.counter_reads, before.counter_reads, "no read for a known move");
                break after;
            }
        };
        assert!(after.pushed_changes > 0, "{after:?}");
        // Unannounced counters, and values at or above the announced one, are read.
        assert!(confirm(&[("ws:p", 1), ("key:p", value)]).await.unwrap());
        assert!(confirm(&[("key:other", 0)]).await.unwrap());
        assert!(reader.batch_stats().counter_reads > after.counter_reads);
        // A change raised without its announcement (a lost message): the read sees it.
        let mut conn = raw_conn();
        let key = format!("{prefix}{{cc}}:ws:p");
        let _: () = redis::cmd("SET").arg(&key).arg(7).query(&mut *conn).unwrap();
        assert!(!confirm(&[("ws:p", 1), ("key:p", value)]).await.unwrap(), "a move not announced");
    });
}

/// A runtime for the batched path (the server's workers are current-thread runtimes).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn batched_decisions_answer_what_the_in_process_store_answers_in_arrival_order() {
    let redis = store(&redis_test_prefix());
    let memory = MemoryStore::new();
    let ns = Arc::new("rlns_batch".to_string());
    let ids = ["a", "b:c", "b", "ünï", "x}:1", "{y}"];
    let mut seed = 11u64;
    let mut now = NOW;
    // One runtime for the store: a thread's connection lives on the runtime it was made on
    // (in the server, the worker's, for the life of the process).
    let rt = runtime();
    rt.block_on(async {
        for round in 0..300 {
            // A burst of decisions asked together, several on the same budget, of every
            // algorithm in one batch: they are queued in this order and must be decided in it.
            let burst: Vec<_> = (0..1 + splitmix(&mut seed) % 40)
                .map(|_| {
                    let r = splitmix(&mut seed);
                    let id = ids[(r % ids.len() as u64) as usize];
                    let duration = [1_000, 5_000][(r >> 8) as usize % 2];
                    let limit = 1 + (r >> 16) % 12;
                    let cost = [0, 1, 1, 1, 2, 3, 13][(r >> 24) as usize % 7];
                    let algorithm = ALGORITHMS[(r >> 32) as usize % 3];
                    (id, algorithm, LimitRequest { limit, duration, cost })
                })
                .collect();
            now += splitmix(&mut seed) % 700;
            let budget = |id, algorithm, duration| BudgetKey { algorithm, ..key(&ns, id, duration) };
            let asked = burst.iter().map(|(id, algorithm, req)| {
                redis.limit_batched(budget(id, *algorithm, req.duration), *req, now, None, None)
            });
            let got = futures_util::future::join_all(asked).await;
            for (i, ((id, algorithm, req), got)) in burst.iter().zip(got).enumerate() {
                let expected = memory.limit(budget(id, *algorithm, req.duration), *req, now).unwrap();
                assert_eq!(
                    got.unwrap(),
                    Checked::Decided(expected),
                    "round {round} #{i}: {id} {algorithm} {req:?}"
                );
            }
        }
    });
    let stats = redis.batch_stats();
    assert!(stats.script_calls < stats.decisions / 2, "bursts go to Redis in batches: {stats:?}");
    // The blocking path and the batched path share the budgets.
    let req = LimitRequest { limit: 3, duration: 60_000, cost: 1 };
    let other = Arc::new("rlns_batch_both".to_string());
    assert!(redis.limit(key(&other, "u", 60_000), req, NOW).unwrap().success);
    let d = rt.block_on(redis.limit_batched(key(&other, "u", 60_000), req, NOW, None, None)).unwrap();
    assert!(matches!(d, Checked::Decided(d) if d.success && d.remaining == 1));
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn batched_decisions_are_exact_across_instances_and_threads() {
    let prefix = redis_test_prefix();
    let (a, b) = (Arc::new(store(&prefix)), Arc::new(store(&prefix)));
    let ns = Arc::new("rlns_batch_conc".to_string());
    let req = LimitRequest { limit: 1_000, duration: 60_000, cost: 1 };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let passed: u64 = rt.block_on(async {
        let tasks: Vec<_> = (0..3_000)
            .map(|i| {
                let (store, ns) = (if i % 2 == 0 { a.clone() } else { b.clone() }, ns.clone());
                tokio::spawn(async move {
                    let d =
                        store.limit_batched(key(&ns, "hot", 60_000), req, NOW, Some(0), None).await.unwrap();
                    matches!(d, Checked::Decided(d) if d.success) as u64
                })
            })
            .collect();
        let mut passed = 0;
        for t in tasks {
            passed += t.await.unwrap();
        }
        passed
    });
    assert_eq!(passed, 1_000);
    let d = a.limit(key(&ns, "hot", 60_000), LimitRequest { cost: 0, ..req }, NOW).unwrap();
    assert_eq!((d.success, d.remaining), (false, 0));
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_stale_overrides_epoch_decides_nothing_in_a_batch_either() {
    let prefix = redis_test_prefix();
    let a = store(&prefix);
    let ns = Arc::new("rlns_batch_epoch".to_string());
    let req = LimitRequest { limit: 5, duration: 60_000, cost: 1 };
    a.bump_overrides_epoch(&ns).unwrap();
    runtime().block_on(async {
        // One batch: the first decision under the current epoch, the second under an old
        // one, the third without a check.
        let (x, y, z) = tokio::join!(
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(1), None),
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(0), None),
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, None, None),
        );
        assert!(matches!(x.unwrap(), Checked::Decided(d) if d.remaining == 4));
        assert_eq!(y.unwrap(), Checked::StaleOverrides, "nothing deducted");
        assert!(matches!(z.unwrap(), Checked::Decided(d) if d.remaining == 3));
    });
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_changed_counter_guard_decides_nothing() {
    use keygate_rbac::SharedCounters as _;
    let prefix = redis_test_prefix();
    let a = store(&prefix);
    let ns = Arc::new("rlns_guard".to_string());
    let req = LimitRequest { limit: 5, duration: 60_000, cost: 1 };
    let (epoch, values) = a.read(&["rk:r1".to_string()]).unwrap();
    assert_eq!(values, [0]);
    let guard = |epoch, value| Some(CounterGuard { name: "rk:r1", epoch, value });
    let rt = runtime();
    let d = rt.block_on(a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(0), guard(epoch, 0)));
    assert!(matches!(d.unwrap(), Checked::Decided(d) if d.remaining == 4));
    // A revocation through another instance publishes the counter's new value.
    a.publish(&[("rk:r1".to_string(), 1)]).unwrap();
    rt.block_on(async {
        let (stale, other_epoch, both, current) = tokio::join!(
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(0), guard(epoch, 0)),
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(0), guard(epoch ^ 4, 1)),
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(7), guard(epoch, 0)),
            a.limit_batched(key(&ns, "u", 60_000), req, NOW, Some(0), guard(epoch, 1)),
        );
        assert_eq!(stale.unwrap(), Checked::StaleCounter, "nothing deducted");
        assert_eq!(other_epoch.unwrap(), Checked::StaleCounter, "counters from before a data loss");
        assert_eq!(both.unwrap(), Checked::StaleCounter, "the root key is checked first");
        assert!(matches!(current.unwrap(), Checked::Decided(d) if d.remaining == 3));
    });
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_flushed_script_is_sent_again_on_both_paths() {
    let prefix = redis_test_prefix();
    let s = store(&prefix);
    let ns = Arc::new("rlns_flush".to_string());
    let req = LimitRequest { limit: 5, duration: 60_000, cost: 1 };
    let rt = runtime();
    assert!(rt.block_on(s.limit_batched(key(&ns, "u", 60_000), req, NOW, None, None)).is_ok());
    let mut conn = raw_conn();
    redis::cmd("SCRIPT").arg("FLUSH").query::<()>(&mut *conn).unwrap();
    let d = rt.block_on(s.limit_batched(key(&ns, "u", 60_000), req, NOW, None, None)).unwrap();
    assert!(matches!(d, Checked::Decided(d) if d.remaining == 3));
    redis::cmd("SCRIPT").arg("FLUSH").query::<()>(&mut *conn).unwrap();
    assert_eq!(s.limit(key(&ns, "u", 60_000), req, NOW).unwrap().remaining, 2);
}

#[test]
fn unreachable_redis_fails_batched_decisions_within_the_timeouts() {
    let settings = RedisSettings { connect_timeout: Duration::from_millis(300), ..settings() };
    let s = RedisStore::open("redis://127.0.0.1:1/0", settings).unwrap();
    let ns = Arc::new("rlns_down".to_string());
    let req = LimitRequest { limit: 1, duration: 1_000, cost: 1 };
    runtime().block_on(async {
        let started = Instant::now();
        let err = s.limit_batched(key(&ns, "u", 1_000), req, NOW, None, None).await.unwrap_err();
        assert_eq!(err.code(), keygate_domain::ErrorCode::ServiceUnavailable, "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        // Within the back-off (shared with the blocking path) the next ones fail at once.
        let again = s.limit_batched(key(&ns, "u", 1_000), req, NOW, None, None).await.unwrap_err();
        assert!(again.to_string().contains("retrying shortly"), "{again}");
        assert!(s.ping().unwrap_err().to_string().contains("retrying shortly"));
    });
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn local_denials_never_deny_what_redis_would_pass() {
    let url = redis_url().unwrap_or_else(|| panic!("{REDIS_ENV} must be set"));
    let open = |local_denials: bool| {
        let settings = RedisSettings { key_prefix: redis_test_prefix(), local_denials, ..settings() };
        RedisStore::open(&url, settings).unwrap()
    };
    let (cached, plain) = (open(true), open(false));
    let ns = Arc::new("rlns_denials".to_string());
    let ids = ["a", "b", "c", "d"];
    let mut seed = 5u64;
    let mut now = NOW;
    let rt = runtime();
    rt.block_on(async {
        for round in 0..300 {
            let burst: Vec<_> = (0..1 + splitmix(&mut seed) % 8)
                .map(|_| {
                    let r = splitmix(&mut seed);
                    let id = ids[(r % ids.len() as u64) as usize];
                    let duration = [1_000, 3_000][(r >> 8) as usize % 2];
                    // Limits change between calls (the count is kept), so a budget known
                    // exhausted under one limit may have room under a higher one.
                    let limit = [2, 3, 5, 8][(r >> 16) as usize % 4];
                    let cost = [0, 1, 1, 1, 2, 4][(r >> 24) as usize % 6];
                    (id, LimitRequest { limit, duration, cost })
                })
                .collect();
            now += splitmix(&mut seed) % 150;
            let mut answers = Vec::new();
            for s in [&cached, &plain] {
                let asks = burst
                    .iter()
                    .map(|(id, req)| s.limit_batched(key(&ns, id, req.duration), *req, now, Some(0), None));
                answers.push(futures_util::future::join_all(asks).await);
            }
            let without = answers.pop().unwrap();
            let with_cache = answers.pop().unwrap();
            for (i, (got, expected)) in with_cache.into_iter().zip(without).enumerate() {
                let (Checked::Decided(got), Checked::Decided(expected)) = (got.unwrap(), expected.unwrap())
                else {
                    panic!("no stale overrides here")
                };
                let what = format!("round {round} #{i}: {:?}", burst[i]);
                assert_eq!(
                    (got.success, got.limit, got.reset),
                    (expected.success, expected.limit, expected.reset),
                    "{what}"
                );
                if got.success {
                    assert_eq!(got.remaining, expected.remaining, "{what}");
                } else {
                    assert!(got.remaining >= expected.remaining, "{what}");
                }
            }
        }
    });
    let (c, p) = (cached.batch_stats().decisions, plain.batch_stats().decisions);
    assert!(c < p * 3 / 4, "most denials were answered locally: {c} decisions sent against {p}");
}

/// A decision as `ratelimits.limit` makes it: `async: true` from local state when the store
/// knows the window, else (and for sync requests) in Redis.
async fn decide_as_server(
    s: &RedisStore,
    key: BudgetKey<'_>,
    req: LimitRequest,
    now: u64,
    is_async: bool,
) -> Decision {
    if let Some(d) = is_async.then(|| s.limit_async(key, req, now)).flatten() {
        return d;
    }
    match s.limit_batched(key, req, now, None, None).await.unwrap() {
        Checked::Decided(d) => d,
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn on_one_instance_async_and_sync_requests_answer_what_the_in_process_store_answers() {
    let settings = RedisSettings {
        key_prefix: redis_test_prefix(),
        async_sync_interval: Duration::from_millis(2),
        ..settings()
    };
    let redis = RedisStore::open(&redis_url().unwrap(), settings).unwrap();
    let memory = MemoryStore::new();
    let ns = Arc::new("rlns_async_parity".to_string());
    let ids = ["a", "b", "c"];
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut seed = 11u64;
    let mut now = NOW;
    let mut local = 0;
    for step in 0..3_000 {
        let r = splitmix(&mut seed);
        let id = ids[(r % 3) as usize];
        let req = LimitRequest {
            limit: 1 + (r >> 8) % 40,
            duration: 1_000,
            cost: [0, 1, 1, 2, 5][(r >> 16) as usize % 5],
        };
        // Mostly async; windows roll over now and then.
        let is_async = !(r >> 24).is_multiple_of(4);
        now += (r >> 32) % 3;
        let expected = memory.limit(key(&ns, id, 1_000), req, now).unwrap();
        let before = redis.batch_stats().decisions;
        let got = rt.block_on(decide_as_server(&redis, key(&ns, id, 1_000), req, now, is_async));
        local += u64::from(redis.batch_stats().decisions == before);
        assert_eq!(got, expected, "step {step}: {id} {req:?} async {is_async}");
        if (r >> 40).is_multiple_of(50) {
            // Now and then let the background flush run between requests.
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    assert!(local > 1_000, "async requests are answered locally: {local} of 3000");
    // Every token passed locally has reached Redis: a sync read agrees with the in-process
    // store (the windows of the last moment).
    std::thread::sleep(Duration::from_millis(50));
    for id in ids {
        let req = LimitRequest { limit: 1_000, duration: 1_000, cost: 0 };
        let expected = memory.limit(key(&ns, id, 1_000), req, now).unwrap();
        assert_eq!(
            rt.block_on(decide_as_server(&redis, key(&ns, id, 1_000), req, now, false)),
            expected,
            "{id}"
        );
    }
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn tokens_passed_locally_reach_the_other_instances_within_a_sync_interval() {
    let prefix = redis_test_prefix();
    let open = || {
        let interval = Duration::from_millis(20);
        let settings =
            RedisSettings { key_prefix: prefix.clone(), async_sync_interval: interval, ..settings() };
        RedisStore::open(&redis_url().unwrap(), settings).unwrap()
    };
    let (a, b) = (open(), open());
    let ns = Arc::new("rlns_async_spread".to_string());
    let req = LimitRequest { limit: 10, duration: 60_000, cost: 1 };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // B learns the window (its first request goes to Redis), then A passes 9 locally.
        assert!(decide_as_server(&b, key(&ns, "u", 60_000), req, NOW, true).await.success);
        for _ in 0..9 {
            assert!(decide_as_server(&a, key(&ns, "u", 60_000), req, NOW, true).await.success);
        }
        assert_eq!(
            a.limit_async(key(&ns, "u", 60_000), req, NOW),
            Some(Decision { success: false, limit: 10, remaining: 0, reset: NOW + 60_000 }),
            "A counts B's token (its first answer) and its own"
        );
        // A's flush has run (20 ms); B still believes 9 are left, as it has had no answer
        // since: it passes one more, and its own flush's answer brings A's tokens.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let d = decide_as_server(&b, key(&ns, "u", 60_000), req, NOW, true).await;
        assert!(d.success, "B over-admits at most what it passes before its next answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let d = decide_as_server(&b, key(&ns, "u", 60_000), req, NOW, true).await;
        assert_eq!((d.success, d.remaining), (false, 0), "B's flush answer brought A's tokens");
    });
    // Redis holds every token passed: 1 + 9 + 1.
    let d = b.limit(key(&ns, "u", 60_000), LimitRequest { cost: 0, limit: 100, ..req }, NOW).unwrap();
    assert_eq!(d.remaining, 100 - 11);
}

/// `limit_all` (v2's multiLimit) on one call's entries, as `(identifier, limit, cost)`.
fn limit_all_of(
    s: &dyn RateLimitStore,
    ns: &Arc<String>,
    entries: &[(&str, u64, u64)],
    now: u64,
) -> Result<Option<keygate_ratelimit::AllOrNothing>, keygate_ratelimit::StoreError> {
    let all: Vec<_> = entries
        .iter()
        .map(|&(id, limit, cost)| (key(ns, id, 60_000), LimitRequest { limit, duration: 60_000, cost }))
        .collect();
    s.limit_all(&all, &[], now)
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn all_or_nothing_answers_what_the_in_process_store_answers() {
    let redis = store(&redis_test_prefix());
    let memory = MemoryStore::new();
    let ns = Arc::new("rlns_multi".to_string());
    // On a cluster every entry of a call must share a slot: one budget there.
    let ids: &[&str] = if keygate_test_support::redis_cluster() { &["a"] } else { &["a", "b", "ü"] };
    let mut seed = 11u64;
    let mut now = NOW;
    for step in 0..500 {
        let r = splitmix(&mut seed);
        let n = 1 + (r % 4) as usize;
        let entries: Vec<(&str, u64, u64)> = (0..n)
            .map(|_| {
                let x = splitmix(&mut seed);
                (
                    ids[(x % ids.len() as u64) as usize],
                    1 + (x >> 8) % 9,
                    [0, 1, 1, 2, 4][(x >> 16) as usize % 5],
                )
            })
            .collect();
        now += (r >> 32) % 2_000;
        let expected = limit_all_of(&memory, &ns, &entries, now).unwrap().unwrap();
        let got = limit_all_of(&redis, &ns, &entries, now).unwrap().unwrap();
        assert_eq!(got, expected, "step {step}: {entries:?} at {now}");
    }
}

#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn all_or_nothing_checks_the_overrides_epochs_and_on_a_cluster_needs_one_slot() {
    let redis = store(&redis_test_prefix());
    let ns = Arc::new("rlns_multi_epoch".to_string());
    let entry = [(key(&ns, "a", 60_000), LimitRequest { limit: 5, duration: 60_000, cost: 1 })];
    let epoch = redis.overrides_epoch(&ns).unwrap();
    assert!(redis.limit_all(&entry, &[(&ns, epoch)], NOW).unwrap().is_some());
    redis.bump_overrides_epoch(&ns).unwrap();
    assert_eq!(redis.limit_all(&entry, &[(&ns, epoch)], NOW).unwrap(), None, "a stale epoch decides nothing");
    let now_used = |id: &str| {
        redis.limit(key(&ns, id, 60_000), LimitRequest { limit: 5, duration: 60_000, cost: 0 }, NOW)
    };
    assert_eq!(now_used("a").unwrap().remaining, 4, "nothing was consumed by the stale call");
    // Budgets in several slots: exact on one server; refused on a cluster, consuming nothing.
    let spread: Vec<String> = (0..8).map(|i| format!("spread{i}")).collect();
    let entries: Vec<(&str, u64, u64)> = spread.iter().map(|id| (id.as_str(), 5, 1)).collect();
    match limit_all_of(&redis, &ns, &entries, NOW) {
        Ok(Some(out)) => assert!(!keygate_test_support::redis_cluster() && out.passed),
        Err(keygate_ratelimit::StoreError::CannotAtomically(msg)) => {
            assert!(keygate_test_support::redis_cluster(), "{msg}");
            for id in &spread {
                assert_eq!(now_used(id).unwrap().remaining, 5, "{id}: nothing consumed");
            }
        }
        other => panic!("{other:?}"),
    }
}
