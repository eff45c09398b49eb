//! What the periodic flush costs per verification (issue 82): `SERIES` keys of one API
//! verified in a random order, `PER_FLUSH` verifications between flushes a second apart
//! (the server's cadence), the flush thread's time per verification counted and per series
//! journaled, measured on the thread that flushes (CPU time, which the VM's neighbours move
//! less than wall time) over two minutes after the first: the journal's appends and the
//! folds the periodic flush runs when its oldest entry has waited a minute (no reads). On
//! SQLite, and on PostgreSQL when `KEYGATE_TEST_POSTGRES_URL` is set (there most of a row's
//! cost is the server's, not measured here).
//!
//!   cargo bench -p keygate-analytics --bench flush
//!   SERIES=1000 cargo bench -p keygate-analytics --bench flush
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_analytics::AnalyticsService;
use keygate_analytics::recorder::Outcome;
use keygate_domain::{Clock, ManualClock};
use keygate_rbac::{Principal, RbacService, VerifyCode};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// CPU time of the calling thread, in microseconds.
fn thread_cpu_us() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    ticks * 10_000 // USER_HZ = 100
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn run(backend: &str, db: &TestDb) {
    let (series, per_flush, flushes) =
        (env("SERIES", 100_000), env("PER_FLUSH", 100_000), env("FLUSHES", 185));
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(10_000_000));
    let (ws, rk, _) = rbac.bootstrap(None).unwrap().unwrap();
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api = rbac.create_api(&admin, "bench").unwrap().id;
    let keys: Vec<String> = (0..series).map(|i| format!("key_2bench{i:09}abcdefghijklmnopq")).collect();
    let identities: Vec<String> = (0..1_000).map(|i| format!("id_2bench{i:09}abcdefghijklmnopq")).collect();
    let recorder = svc.recorder().unwrap().clone();
    let mut seed = 11;
    let (mut rows, mut counted, mut cpu_us) = (0u64, 0u64, 0u64);
    for f in 0..flushes {
        // The verifications spread over the second between flushes, a millisecond at a time.
        let per_ms = (per_flush / 1_000).max(1);
        for v in 0..per_flush {
            if v % per_ms == per_ms - 1 {
                clock.advance(1);
            }
            let i = (splitmix(&mut seed) % series) as usize;
            recorder.record(&Outcome {
                workspace_id: &ws.id,
                api_id: Some(&api),
                key_id: &keys[i],
                identity_id: Some(&identities[i % identities.len()]),
                code: VerifyCode::Valid,
                tags: &[],
                at_ms: clock.now_ms(),
                spent_credits: 0,
            });
        }
        clock.advance(1_000u64.saturating_sub(per_flush / per_ms));
        let before = thread_cpu_us();
        let written = svc.flush_analytics_due().expect("flush") as u64;
        // The first minute's entries are folded into new rows (at about 63 s); measured
        // after, over the folds at about 123 s and 184 s and the appends between.
        if f >= 64 {
            cpu_us += thread_cpu_us() - before;
            rows += written;
            counted += per_flush;
        }
    }
    println!(
        "{backend:8} {series} series, {per_flush} verifications per flush: {rows} series journaled, \
         {:.2} us per series journaled, {:.3} us per verification, {:.2} series journaled per verification",
        cpu_us as f64 / rows.max(1) as f64,
        cpu_us as f64 / counted.max(1) as f64,
        rows as f64 / counted.max(1) as f64,
    );
}

fn main() {
    let sqlite = TestDb::sqlite();
    run("sqlite", &sqlite);
    if std::env::var("KEYGATE_TEST_POSTGRES_URL").is_ok() {
        let pg = TestDb::fresh();
        run("postgres", &pg);
    }
}
