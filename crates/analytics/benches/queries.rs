//! Analytics storage (issue 33): 10 million verifications of 90 days over 1,000 keys of one
//! API, stored as the roll-ups leave them (the last day in minutes, the 29 days before in
//! hours, the rest in days), then a 30-day, per-key, per-day `analytics.getVerifications`
//! timed. Prints the rows, the size on disk and p50/p99 of the query; on SQLite and, when
//! `KEYGATE_TEST_POSTGRES_URL` is set, on PostgreSQL.
//!
//! `KEYGATE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p keygate-analytics --bench queries`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use diesel::RunQueryDsl;
use keygate_analytics::store::VerificationCount;
use keygate_analytics::{AnalyticsService, AnalyticsStore, TimeSlice, VerificationsQuery};
use keygate_domain::ManualClock;
use keygate_rbac::{Principal, RbacService, VerifyCode};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use keygate_test_support::bench::report;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

const VERIFICATIONS: u64 = 10_000_000;
const KEYS: u64 = 1_000;
const DAYS: u64 = 90;
const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 86_400_000;
const NOW: u64 = 1_800_000_000_000 - 1_800_000_000_000 % DAY;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn run(backend: &str, db: &TestDb) {
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    let rbac = Arc::new(RbacService::new(store, Arc::new(ManualClock::new(NOW))));
    let svc = AnalyticsService::new(rbac.clone(), None);
    let (ws, rk, _) = rbac.bootstrap(None).unwrap().unwrap();
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api = rbac.create_api(&admin, "bench").unwrap().id;
    // The verifications, each in the bucket the roll-ups leave it in.
    let started = Instant::now();
    let mut seed = 7;
    let mut counts: HashMap<(u64, u64, u64, VerifyCode), u64> = HashMap::new();
    for _ in 0..VERIFICATIONS {
        let r = splitmix(&mut seed);
        let at = NOW - 1 - r % (DAYS * DAY);
        let width = match NOW - at {
            age if age <= DAY => MINUTE,
            age if age <= 30 * DAY => HOUR,
            _ => DAY,
        };
        let code = match (r >> 40) % 100 {
            0..=89 => VerifyCode::Valid,
            90..=96 => VerifyCode::RateLimited,
            _ => VerifyCode::UsageExceeded,
        };
        *counts.entry((width, at - at % width, (r >> 20) % KEYS, code)).or_default() += 1;
    }
    let rows: Vec<VerificationCount> = counts
        .into_iter()
        .map(|((width, bucket, key, code), count)| VerificationCount {
            workspace_id: ws.id.clone(),
            width: width as i64,
            bucket: bucket as i64,
            api_id: api.clone(),
            key_id: format!("key_bench{key:04}"),
            identity_id: String::new(),
            outcome: code.as_str().to_string(),
            tags: Vec::new(),
            count,
            spent_credits: if code == VerifyCode::Valid { count } else { 0 },
        })
        .collect();
    for chunk in rows.chunks(50_000) {
        rbac.store().analytics_transaction(|tx| Ok(tx.add_verification_counts(chunk)?)).unwrap();
    }
    if db.is_postgres() {
        // What autovacuum does after such a load: the planner's statistics.
        rbac.store().with_conn(|c| diesel::sql_query("ANALYZE verification_counts").execute(c)).unwrap();
        #[derive(diesel::QueryableByName)]
        struct Line {
            #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
            line: String,
        }
        let explain = format!(
            "EXPLAIN ANALYZE SELECT * FROM verification_counts WHERE workspace_id = '{}' AND api_id = '{api}' \
             AND bucket >= {} AND bucket <= {NOW} AND key_id = ANY(ARRAY['key_bench0001'])",
            ws.id,
            NOW - 30 * DAY
        );
        let plan: Vec<Line> = rbac.store().with_conn(|c| diesel::sql_query(&explain).load(c)).unwrap();
        for l in plan {
            println!("  {}", l.line);
        }
    }
    println!(
        "{backend}: {VERIFICATIONS} verifications stored as {} rows in {:?}",
        rows.len(),
        started.elapsed()
    );
    println!("{backend}: size on disk {:.1} MiB", size(&rbac, db) as f64 / (1 << 20) as f64);

    let q = |key: u64| VerificationsQuery {
        api_id: api.clone(),
        key_ids: vec![format!("key_bench{key:04}")],
        start: Some((NOW - 30 * DAY) as i64),
        end: Some(NOW as i64),
        time: Some(TimeSlice::Day),
        ..VerificationsQuery::default()
    };
    let mut samples = Vec::new();
    for i in 0..220u64 {
        let t = Instant::now();
        let rows = svc.get_verifications(&admin, &q(i % KEYS)).unwrap();
        let took = t.elapsed();
        assert!(rows.len() >= 29, "a row per day: {}", rows.len());
        if i >= 20 {
            samples.push(took);
        }
    }
    report(backend, "30-day per-key per-day getVerifications", samples);

    // The whole API: 90 days per day, and grouped by key.
    for (name, by_key) in [("90-day whole-API per-day", false), ("90-day whole-API per-key", true)] {
        let q = VerificationsQuery {
            api_id: api.clone(),
            start: Some((NOW - 90 * DAY) as i64),
            end: Some(NOW as i64),
            time: (!by_key).then_some(TimeSlice::Day),
            by_key,
            ..VerificationsQuery::default()
        };
        let mut samples = Vec::new();
        for i in 0..12 {
            let t = Instant::now();
            let rows = svc.get_verifications(&admin, &q).unwrap();
            let took = t.elapsed();
            let total: u64 = rows.iter().map(|r| r.total()).sum();
            assert_eq!(total, VERIFICATIONS, "every verification");
            if i >= 2 {
                samples.push(took);
            }
        }
        report(backend, &format!("{name} getVerifications"), samples);
    }
}

/// The database's size on disk (SQLite: the file; PostgreSQL: the table and its indexes).
fn size(rbac: &RbacService<SqlStore>, db: &TestDb) -> u64 {
    #[derive(diesel::QueryableByName)]
    struct Size {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    if db.is_postgres() {
        let sql = "SELECT pg_total_relation_size('verification_counts')::int8 AS n";
        return rbac.store().with_conn(|c| diesel::sql_query(sql).get_result::<Size>(c)).unwrap().n as u64;
    }
    let path = db.url.trim_start_matches("sqlite://");
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(format!("{path}-wal")).map(|m| m.len()).unwrap_or(0)
}

fn main() {
    if std::env::var("BENCH_SKIP_SQLITE").is_err() {
        run("sqlite", &TestDb::sqlite());
    }
    if let Some(base) = TestDb::postgres_url() {
        run("postgres", &TestDb::postgres(&base));
    }
}
