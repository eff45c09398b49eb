//! The Redis store's credit counters (`keygate_usage::SharedCredits`, API-v2.md §13.5)
//! step by step: load, spend, lock, install, settle. (The ledger over them, across
//! instances: `crates/usage/tests/shared_credits.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_ratelimit::RateLimitStore;
use keygate_store::{RedisSettings, RedisStore, credit_shard};
use keygate_test_support::{REDIS_ENV, redis_test_prefix, redis_url};
use keygate_usage::{Installed, LiveCredits, SharedCredits, SharedSpend, SharedSpendAsk, WrittenBehind};
use std::sync::Arc;
use std::time::Duration;

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
    let ask = |load: Option<LiveCredits>| SharedSpendAsk { key_id: "key_steps", cost: 2, refill: None, load };
    let row = LiveCredits { remaining: 10, last_refill_at: None, version: 3, seq: 7 };
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Missing);
    assert_eq!(r.spend(&ask(Some(row))).unwrap(), SharedSpend::Decided { paid: true, remaining: 8 });
    // Another load is ignored: the counter is there.
    let stale = LiveCredits { remaining: 1_000, ..row };
    assert_eq!(r.spend(&ask(Some(stale))).unwrap(), SharedSpend::Decided { paid: true, remaining: 6 });
    let live = r.read(&["key_steps"]).unwrap()[0].unwrap();
    assert_eq!(live, LiveCredits { remaining: 6, last_refill_at: None, version: 3, seq: 9 });
    assert_eq!(r.dirty(credit_shard("key_steps"), 1, Duration::from_secs(1), 10).unwrap().len(), 1);

    assert_eq!(r.lock("key_steps", 42, Duration::from_secs(5)).unwrap(), Some(Some(live)));
    assert_eq!(r.lock("key_steps", 43, Duration::from_secs(5)).unwrap(), None, "held by another");
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Locked);
    assert!(!r.unlock("key_steps", 43, None).unwrap(), "not the holder");
    let installed = LiveCredits { remaining: 50, last_refill_at: None, version: 4, seq: 0 };
    assert!(r.unlock("key_steps", 42, Some(Installed::Credits(installed))).unwrap());
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Decided { paid: true, remaining: 48 });

    // Superseded (the row moved to another version): removed, so the next spend loads.
    let live = r.read(&["key_steps"]).unwrap()[0].unwrap();
    let s = credit_shard("key_steps");
    r.settle(s, &[("key_steps".into(), live, WrittenBehind::Superseded)]).unwrap();
    assert_eq!(r.spend(&ask(None)).unwrap(), SharedSpend::Missing);

    // Unlimited installed: spends take nothing.
    assert_eq!(r.lock("key_steps", 44, Duration::from_secs(5)).unwrap(), Some(None));
    assert!(r.unlock("key_steps", 44, Some(Installed::Unlimited { version: 5 })).unwrap());
    assert_eq!(r.spend(&ask(Some(row))).unwrap(), SharedSpend::Unlimited);
}
