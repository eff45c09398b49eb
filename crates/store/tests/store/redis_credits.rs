//! The Redis store's credit counters (`keygate_usage::SharedCredits`, API-v2.md §13.5)
//! step by step: load, spend, lock, install, settle. (The ledger over them, across
//! instances: `crates/usage/tests/usage/shared_credits.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_ratelimit::{BudgetKey, Entry, LimitRequest, RateLimitStore};
use keygate_rbac::Assumed;
use keygate_store::{RedisSettings, RedisStore, credit_shard};
use keygate_test_support::{REDIS_ENV, redis_test_prefix, redis_url};
use keygate_usage::{Installed, LiveCredits, SharedCredits, SharedSpend, SharedSpendAsk, WrittenBehind};
use std::sync::Arc;
use std::time::Duration;

const NOW: u64 = 1_800_000_000_000;

fn redis(prefix: &str) -> Arc<RedisStore> {
    let url =
        redis_url().unwrap_or_else(|| panic!("{REDIS_ENV} must be set for this (ignored by default) test"));
    let settings = RedisSettings {
        key_prefix: prefix.to_string(),
        cluster: keygate_test_support::redis_cluster(),
        ..RedisSettings::default()
    };
    let s = RedisStore::open(&url, settings).unwrap();
    s.ping().unwrap_or_else(|e| panic!("{REDIS_ENV}={url}: {e}"));
    Arc::new(s)
}

/// The store's steps one by one: a load only where no counter is; a lock stops spends and
/// an install replaces the counter; a write-behind of a superseded counter removes it.
#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn the_redis_steps_load_lock_install_and_settle() {
    let r = redis(&redis_test_prefix());
    let ask = |load: Option<LiveCredits>| SharedSpendAsk {
        key_id: "key_steps",
        cost: 2,
        refill: None,
        load,
        limits: &[],
        now_ms: NOW,
        assumed: None,
    };
    let row = LiveCredits { remaining: 10, last_refill_at: None, version: 3, seq: 7 };
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Missing);
    assert_eq!(
        r.spend(&ask(Some(row))).unwrap(),
        SharedSpend::Decided { paid: true, remaining: 8, limits: vec![] }
    );
    // Another load is ignored: the counter is there.
    let stale = LiveCredits { remaining: 1_000, ..row };
    assert_eq!(
        r.spend(&ask(Some(stale))).unwrap(),
        SharedSpend::Decided { paid: true, remaining: 6, limits: vec![] }
    );
    let live = r.read(&["key_steps"]).unwrap()[0].unwrap();
    assert_eq!(live, LiveCredits { remaining: 6, last_refill_at: None, version: 3, seq: 9 });
    assert_eq!(r.dirty(credit_shard("key_steps"), 1, Duration::from_secs(1), 10).unwrap().len(), 1);

    assert_eq!(r.lock("key_steps", 42, Duration::from_secs(5)).unwrap(), Some(Some(live)));
    assert_eq!(r.lock("key_steps", 43, Duration::from_secs(5)).unwrap(), None, "held by another");
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Locked);
    assert!(!r.unlock("key_steps", 43, None).unwrap(), "not the holder");
    let installed = LiveCredits { remaining: 50, last_refill_at: None, version: 4, seq: 0 };
    assert!(r.unlock("key_steps", 42, Some(Installed::Credits(installed))).unwrap());
    assert_eq!(
        r.spend(&ask(None)).unwrap(),
        SharedSpend::Decided { paid: true, remaining: 48, limits: vec![] }
    );

    // Superseded (the row moved to another version): removed, so the next spend loads.
    let live = r.read(&["key_steps"]).unwrap()[0].unwrap();
    let s = credit_shard("key_steps");
    r.settle(s, &[("key_steps".into(), live, WrittenBehind::Superseded)]).unwrap();
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Missing);

    // Unlimited installed: spends take nothing.
    assert_eq!(r.lock("key_steps", 44, Duration::from_secs(5)).unwrap(), Some(None));
    assert!(r.unlock("key_steps", 44, Some(Installed::Unlimited { version: 5 })).unwrap());
    assert_eq!(r.spend(&ask(Some(row))).unwrap(), SharedSpend::Unlimited { limits: vec![] });
}

/// A spend takes the key's own limits with it, all or nothing, in the counter's slot: a
/// limit that does not fit spends nothing and takes nothing; credits that do not pay take
/// no limit; a paid spend takes them all; and the rate-limit store finds the same budgets
/// under the namespace the store names (`limits_namespace`).
#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_spend_takes_the_keys_own_limits_all_or_nothing() {
    let r = redis(&redis_test_prefix());
    let id = "key_limited";
    let ns = Arc::new(r.limits_namespace(id));
    let budget = |identifier: &'static str, duration: u64| BudgetKey {
        namespace_id: &ns,
        identifier,
        duration,
        algorithm: Default::default(),
    };
    let req = |limit: u64, cost: u64| LimitRequest { limit, duration: 60_000, cost };
    let left = |identifier: &'static str, limit: u64| {
        r.limit(budget(identifier, 60_000), LimitRequest { limit, duration: 60_000, cost: 0 }, NOW)
            .unwrap()
            .remaining
    };
    let row = LiveCredits { remaining: 5, last_refill_at: None, version: 1, seq: 0 };
    let spend = |cost: u64, limits: &[Entry<'_>]| {
        r.spend(&SharedSpendAsk {
            key_id: id,
            cost,
            refill: None,
            load: Some(row),
            limits,
            now_ms: NOW,
            assumed: None,
        })
        .unwrap()
    };
    let decided = |s: &SharedSpend| match s {
        SharedSpend::Decided { limits, .. }
        | SharedSpend::RateLimited { limits }
        | SharedSpend::Unlimited { limits } => {
            limits.iter().map(|d| (d.success, d.remaining)).collect::<Vec<_>>()
        }
        other => panic!("{other:?}"),
    };

    // Paid: both taken.
    let both = [(budget("a", 60_000), req(3, 1)), (budget("b", 60_000), req(10, 4))];
    let s = spend(2, &both);
    assert!(matches!(s, SharedSpend::Decided { paid: true, remaining: 3, .. }), "{s:?}");
    assert_eq!(decided(&s), [(true, 2), (true, 6)]);
    assert_eq!((left("a", 3), left("b", 10)), (2, 6), "the limiter sees the same budgets");

    // `b` does not fit (6 left, cost 7): nothing spent, `a` not taken.
    let too_much = [(budget("a", 60_000), req(3, 1)), (budget("b", 60_000), req(10, 7))];
    let s = spend(1, &too_much);
    assert!(matches!(s, SharedSpend::RateLimited { .. }), "{s:?}");
    assert_eq!(decided(&s), [(true, 2), (false, 6)], "each budget as it is");
    assert_eq!((left("a", 3), left("b", 10)), (2, 6));
    assert_eq!(r.read(&[id]).unwrap()[0].unwrap().remaining, 3, "no credit spent");

    // The credits do not pay (3 left, cost 4): no limit taken.
    let s = spend(4, &both);
    assert!(matches!(s, SharedSpend::Decided { paid: false, remaining: 3, .. }), "{s:?}");
    assert_eq!(decided(&s), [(true, 2), (true, 6)]);
    assert_eq!((left("a", 3), left("b", 10)), (2, 6));

    // No credits any more (an update): the limits are taken alone.
    assert_eq!(r.lock(id, 7, Duration::from_secs(5)).unwrap().map(|l| l.is_some()), Some(true));
    assert!(r.unlock(id, 7, Some(Installed::Unlimited { version: 2 })).unwrap());
    let s = spend(1, &both);
    assert!(matches!(s, SharedSpend::Unlimited { .. }), "{s:?}");
    assert_eq!(decided(&s), [(true, 1), (true, 2)]);
    assert_eq!((left("a", 3), left("b", 10)), (1, 2));
}

/// On one Redis a spend checks the change counters its answer assumed, in the same step:
/// one moved (or the epoch changed), nothing is done. A cluster cannot (another slot).
#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_spend_checks_the_change_counters_its_answer_assumed() {
    let r = redis(&redis_test_prefix());
    if keygate_test_support::redis_cluster() {
        assert!(!r.checks_counters(), "a cluster keeps counters and credits in different slots");
        return;
    }
    assert!(r.checks_counters());
    let names = ["key:key_assumed".to_string(), "ws:ws_assumed".to_string()];
    let publish = |c: &[(String, u64)]| keygate_rbac::SharedCounters::publish(&*r, c).unwrap();
    publish(&[(names[0].clone(), 4), (names[1].clone(), 9)]);
    let (epoch, values) = keygate_rbac::SharedCounters::read(&*r, &names).unwrap();
    assert_eq!(values, [4, 9]);
    let row = LiveCredits { remaining: 5, last_refill_at: None, version: 1, seq: 0 };
    let spend = |assumed: &Assumed| {
        let ask = SharedSpendAsk {
            key_id: "key_assumed",
            cost: 1,
            refill: None,
            load: Some(row),
            limits: &[],
            now_ms: NOW,
            assumed: Some(assumed),
        };
        r.spend(&ask).unwrap()
    };
    let current = Assumed { epoch, counters: vec![(names[0].clone(), 4), (names[1].clone(), 9)] };
    assert_eq!(spend(&current), SharedSpend::Decided { paid: true, remaining: 4, limits: vec![] });
    publish(&[(names[1].clone(), 10)]);
    assert_eq!(spend(&current), SharedSpend::Stale, "the workspace's counter moved");
    let other_epoch =
        Assumed { epoch: epoch ^ 4, counters: vec![(names[0].clone(), 4), (names[1].clone(), 10)] };
    assert_eq!(spend(&other_epoch), SharedSpend::Stale, "another epoch");
    let absent = Assumed { epoch, counters: vec![(names[0].clone(), 4), ("key:never".into(), 0)] };
    assert_eq!(
        spend(&absent),
        SharedSpend::Decided { paid: true, remaining: 3, limits: vec![] },
        "absent = 0"
    );
    assert_eq!(
        SharedCredits::read(&*r, &["key_assumed"]).unwrap()[0].unwrap().remaining,
        3,
        "the stale spends took nothing"
    );
}

/// The marks a spend reads with the counter's values instead of other keys: an update's
/// lock (`x`: a lock that lapsed without its unlock stops no spend, and one ended without
/// an install leaves the counter as it was), and the dirty set's (`d`: a spend joins the
/// set and loses the counter's expiry once; written behind, it leaves the set, gets its
/// expiry back, and the next spend joins again).
#[test]
#[ignore = "needs Redis: set KEYGATE_TEST_REDIS_URL and run with --include-ignored (.ci/run does)"]
fn a_counters_lock_and_dirty_marks_follow_the_lock_and_the_write_behind() {
    let prefix = redis_test_prefix();
    let r = redis(&prefix);
    let id = "key_marks";
    let row = LiveCredits { remaining: 100, last_refill_at: None, version: 1, seq: 0 };
    let spend = || {
        let ask = SharedSpendAsk {
            key_id: id,
            cost: 1,
            refill: None,
            load: None,
            limits: &[],
            now_ms: NOW,
            assumed: None,
        };
        r.spend(&ask).unwrap()
    };
    let paid = |remaining: u64| SharedSpend::Decided { paid: true, remaining, limits: vec![] };
    let shard = credit_shard(id);
    let dirty = || r.dirty(shard, 9, Duration::from_millis(1), 100).unwrap();
    let counter = format!("{prefix}{{cr{shard}}}:k:{id}");
    let mut conn = crate::redis::raw_conn();
    let mut ttl = || -> i64 { redis::cmd("PTTL").arg(&counter).query(&mut *conn).unwrap() };

    assert_eq!(r.lock(id, 1, Duration::from_secs(5)).unwrap(), Some(None));
    assert!(r.unlock(id, 1, Some(Installed::Credits(row))).unwrap());
    assert!(ttl() > 0, "installed, clean: it expires when idle");
    assert_eq!(spend(), paid(99));
    assert_eq!(ttl(), -1, "changed: no expiry until written behind");
    let changed = dirty();
    assert_eq!(changed.len(), 1);
    assert_eq!(spend(), paid(98), "already in the set");
    r.settle(shard, &[(id.into(), changed[0].1, WrittenBehind::Written)]).unwrap();
    assert_eq!(dirty().len(), 1, "changed after the values written behind: still dirty");
    let changed = dirty();
    r.settle(shard, &[(id.into(), changed[0].1, WrittenBehind::Written)]).unwrap();
    assert!(dirty().is_empty(), "written behind");
    assert!(ttl() > 0, "clean again: it expires when idle");
    assert_eq!(spend(), paid(97));
    assert_eq!(ttl(), -1);
    assert_eq!(dirty().len(), 1, "the next change joins the set again");

    // A lock ended without an install: spends go on from the counter as it was.
    assert!(r.lock(id, 2, Duration::from_secs(5)).unwrap().is_some());
    assert_eq!(spend(), SharedSpend::Locked);
    assert!(r.unlock(id, 2, None).unwrap());
    assert_eq!(spend(), paid(96));
    // A lock whose holder never ended it stops spends only while its lease runs.
    assert!(r.lock(id, 3, Duration::from_millis(100)).unwrap().is_some());
    assert_eq!(spend(), SharedSpend::Locked);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(spend(), paid(95));
    assert_eq!(spend(), paid(94));
    assert_eq!(r.read(&[id]).unwrap()[0].unwrap().remaining, 94);
}
