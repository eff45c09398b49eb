//! An analytics flush whose commit is not confirmed (API-v2.md §14, §14.1): a failure
//! before the commit loses nothing, and a reply lost after it adds nothing twice: the
//! next flush writes the same rows under the same id, and the id says whether they landed.

use keygate_analytics::{AnalyticsService, AnalyticsStore, AnalyticsTx, LimitSlice, RatelimitsQuery};
use keygate_domain::{Clock, ManualClock};
use keygate_rbac::{Principal, RbacError, RbacService, RbacStore, RbacTx, StorageError};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// The SQL store, made to fail a transaction before it runs, or to report a failure
/// after it committed (the reply lost).
#[derive(Debug)]
struct Unreliable {
    inner: SqlStore,
    fail_next: AtomicBool,
    lose_next_reply: AtomicBool,
    /// Transactions to let through before one fails (negative: none fails).
    fail_after: AtomicI64,
    /// Transactions to let through before one's reply is lost after its commit.
    lose_reply_after: AtomicI64,
}

/// The SQL store of a test database.
fn sql_store(db: &TestDb) -> SqlStore {
    SqlStore::open(&db.url, PoolSettings { max_size: 4, ..PoolSettings::default() }).expect("open")
}

impl Unreliable {
    /// The SQL store of `db`, failing nothing until a test asks.
    fn over(db: &TestDb) -> Self {
        Self {
            inner: sql_store(db),
            fail_next: AtomicBool::new(false),
            lose_next_reply: AtomicBool::new(false),
            fail_after: AtomicI64::new(-1),
            lose_reply_after: AtomicI64::new(-1),
        }
    }

    /// A transaction of the inner store, failed before or after as the test asks.
    fn unreliably<T>(&self, run: impl FnOnce() -> Result<T, RbacError>) -> Result<T, RbacError> {
        if self.fail_next.swap(false, Ordering::SeqCst) || self.fail_after.fetch_sub(1, Ordering::SeqCst) == 0
        {
            return Err(StorageError::Unavailable("the database is down (test)".into()).into());
        }
        let out = run()?;
        if self.lose_next_reply.swap(false, Ordering::SeqCst)
            || self.lose_reply_after.fetch_sub(1, Ordering::SeqCst) == 0
        {
            return Err(StorageError::Unavailable("the connection dropped after COMMIT (test)".into()).into());
        }
        Ok(out)
    }
}

impl AnalyticsStore for Unreliable {
    fn analytics_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>,
    {
        self.unreliably(|| self.inner.analytics_transaction(f))
    }
}

impl RbacStore for Unreliable {
    fn transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>,
    {
        self.unreliably(|| self.inner.transaction(f))
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn ping(&self) -> Result<(), StorageError> {
        self.inner.ping()
    }
}

#[test]
fn an_unconfirmed_flush_is_written_exactly_once() {
    let db = TestDb::fresh();
    let store = Unreliable::over(&db);
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(1_000));
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let q =
        RatelimitsQuery { namespace: "verify:requests".into(), slice: LimitSlice::Day, ..Default::default() };
    let counted = || -> (u64, u64) {
        let rows = svc.get_ratelimits(&admin, &q).expect("query");
        rows.iter().fold((0, 0), |(p, d), r| (p + r.passed, d + r.denied))
    };
    let decide = |n: usize, passed: bool| {
        for _ in 0..n {
            svc.record_limit(&ws.id, "verify:requests", "key_1", passed, clock.now_ms());
        }
    };

    decide(3, true);
    // The commit landed, its reply did not: the flush reports a failure...
    rbac.store().lose_next_reply.store(true, Ordering::SeqCst);
    assert!(svc.flush_analytics().is_err());
    assert_eq!(counted(), (3, 0), "the rows landed");
    // ...and the next flush, finding its id, adds nothing twice; it writes what is new.
    decide(2, false);
    svc.flush_analytics().expect("flush");
    assert_eq!(counted(), (3, 2));

    // A failure before the commit: nothing landed, nothing is lost.
    decide(4, true);
    rbac.store().fail_next.store(true, Ordering::SeqCst);
    assert!(svc.flush_analytics().is_err());
    assert_eq!(counted(), (3, 2));
    decide(1, false);
    // The unconfirmed flush first, then what came since.
    svc.flush_analytics().expect("flush");
    assert_eq!(counted(), (7, 3));
    assert_eq!(svc.limit_recorder().unwrap().dropped(), 0);

    // The ids are forgotten after a day, by the roll-up.
    clock.advance(86_400_001);
    svc.roll_up_analytics(90).expect("roll-up");
    let left = rbac.store().inner.with_conn(|c| {
        use diesel::prelude::*;
        keygate_store::schema::analytics_flushes::table.count().get_result::<i64>(c)
    });
    assert_eq!(left.expect("count"), 0);
}

/// A flush of many rows is written in chunks, one transaction each (so that a write
/// waiting behind it waits for one chunk): a chunk that fails stays queued with those after
/// it, the chunks before it stay written, and the next flush completes it, each row once.
#[test]
fn a_large_flush_is_written_in_chunks_each_exactly_once() {
    let db = TestDb::fresh();
    let store = Unreliable::over(&db);
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(1_000));
    let (ws, _, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    for i in 0..450 {
        svc.record_limit(&ws.id, "verify:requests", &format!("user_{i}"), true, clock.now_ms());
    }
    let identifiers = || -> (usize, i64) {
        use diesel::prelude::*;
        use keygate_store::schema::ratelimit_identifiers::dsl as t;
        let passed =
            rbac.store().inner.with_conn(|c| t::ratelimit_identifiers.select(t::passed).load::<i64>(c));
        let passed = passed.expect("count");
        (passed.len(), passed.iter().sum())
    };
    // The namespace's row (one chunk) and the first 200 identifiers land; the next fails.
    rbac.store().fail_after.store(2, Ordering::SeqCst);
    assert!(svc.flush_analytics().is_err());
    assert_eq!(identifiers(), (200, 200));
    svc.flush_analytics().expect("flush");
    assert_eq!(identifiers(), (450, 450), "the rest, once");
    svc.flush_analytics().expect("nothing more");
    assert_eq!(identifiers(), (450, 450));
}

/// The periodic flush writes a series once its oldest count not yet written has waited
/// `WRITE_AFTER_FLUSHES` flushes, with every count it gathered meanwhile in one row (counted
/// in flushes, so it holds whatever the clock does: this one stands still); an explicit
/// flush writes everything held.
#[test]
fn the_periodic_flush_writes_each_series_when_its_oldest_count_is_due() {
    use keygate_analytics::VerificationsQuery;
    use keygate_analytics::flush::WRITE_AFTER_FLUSHES;
    use keygate_analytics::recorder::Outcome;
    use keygate_rbac::VerifyCode;

    assert_eq!(WRITE_AFTER_FLUSHES, 2, "the steps below count on it");
    let db = TestDb::fresh();
    let store = sql_store(&db);
    // 10 s into a minute.
    let clock = Arc::new(ManualClock::new(1_700_000_040_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(1_000));
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api = rbac.create_api(&admin, "due").expect("api").id;
    let recorder = svc.recorder().expect("analytics on").clone();
    let record = |key: &str| {
        recorder.record(&Outcome {
            workspace_id: &ws.id,
            api_id: Some(&api),
            key_id: key,
            identity_id: None,
            code: VerifyCode::Valid,
            tags: &[],
            at_ms: clock.now_ms(),
            spent_credits: 0,
        })
    };
    let written = |key: &str| -> u64 {
        let q = VerificationsQuery { api_id: api.clone(), key_ids: vec![key.into()], ..Default::default() };
        svc.get_verifications(&admin, &q).expect("read").iter().map(|r| r.total()).sum()
    };
    let flush = || svc.flush_analytics_due().expect("flush");

    record("key_a");
    assert_eq!(flush(), 0, "flush 0: nothing has waited");
    record("key_a");
    record("key_b");
    assert_eq!(flush(), 0, "flush 1");
    assert_eq!((written("key_a"), written("key_b")), (0, 0));
    // Flush 2: key_a's first count waited two flushes; both of its counts go in one row.
    assert_eq!(flush(), 1);
    assert_eq!((written("key_a"), written("key_b")), (2, 0));
    // key_a verified again: its series is still held, due two flushes from this count.
    record("key_a");
    assert_eq!(flush(), 1, "flush 3: key_b only");
    assert_eq!((written("key_a"), written("key_b")), (2, 1));
    assert_eq!(flush(), 0, "flush 4");
    assert_eq!(flush(), 1, "flush 5");
    assert_eq!(written("key_a"), 3);
    // An explicit flush writes what is not due yet too.
    record("key_b");
    assert_eq!(svc.flush_analytics().expect("flush"), 1);
    assert_eq!(written("key_b"), 2);
    assert_eq!(flush(), 0);
    // Past the minute's end, its series are let go.
    clock.advance(60_000);
    flush();
    assert_eq!(recorder.series(), 0);
    assert_eq!((written("key_a"), written("key_b")), (3, 2));
}

/// Verifications of found keys made without tags are counted beside the key's cache entry
/// (its tally): written when due, as the table's series are; a count of the next minute
/// while the last minute's still wait is counted apart, under its own minute; tags and
/// unknown keys are counted in the table; a key's last minute is known before any flush.
#[test]
fn counts_kept_beside_a_cached_key_are_written_when_due_each_under_its_minute() {
    use keygate_domain::NewKey;
    use keygate_rbac::{VerifyCode, VerifyScope};

    let db = TestDb::fresh();
    let store = sql_store(&db);
    // 50 s into a minute.
    let minute: u64 = 1_700_000_040_000; // a minute's start
    let clock = Arc::new(ManualClock::new(minute + 50_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(1_000));
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api = rbac.create_api(&admin, "beside").expect("api").id;
    let new = || NewKey { api_id: Some(api.clone()), ..NewKey::default() };
    let (a, a_secret) = rbac.create_key_as(&admin, new()).expect("key a");
    let (b, b_secret) = rbac.create_key_as(&admin, new()).expect("key b");
    let scope = VerifyScope {
        workspace_id: Some(&ws.id),
        api_id: Some(&api),
        access: None,
        root_key: None,
        ip: None,
        migration: None,
    };
    let verify = |secret: &str, tags: &[String]| {
        let v = rbac.check_key(secret, &scope, None).expect("verify");
        svc.record_verification(&v, &scope, tags, 0);
        v.code
    };
    let recorder = svc.recorder().expect("analytics on").clone();
    // A key's counts per minute: (minutes after `minute`, count).
    let per_minute = |key: &str| -> Vec<(i64, i64)> {
        let q = format!(
            "SELECT toUnixTimestamp64Milli(time) AS t, sum(count) AS n FROM key_verifications_per_minute_v1 \
             WHERE key_id = '{key}' GROUP BY t ORDER BY t"
        );
        let rows = svc.query_sql(&admin, keygate_analytics::sql::Family::Verifications, &q).expect("sql");
        let rows = serde_json::to_value(rows).expect("json");
        let rows = rows.as_array().expect("rows");
        let at = |r: &serde_json::Value, c: &str| r[c].as_i64().expect("a number");
        rows.iter().map(|r| ((at(r, "t") - minute as i64) / 60_000, at(r, "n"))).collect()
    };
    let flush = || svc.flush_analytics_due().expect("flush");

    // An entry's first verification makes its tally and is counted in the table; the
    // next ones beside the key.
    assert_eq!(verify(a_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(recorder.series(), 1);
    assert_eq!(verify(a_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(verify(a_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(recorder.series(), 1, "a found key without tags is counted beside its entry");
    assert_eq!(recorder.last_minutes(&[&a.id]), vec![(a.id.clone(), minute)]);
    assert_eq!(flush(), 0, "flush 0");
    assert_eq!(verify(b_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(verify(b_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(flush(), 0, "flush 1");
    assert_eq!(per_minute(&a.id), vec![]);
    assert_eq!(flush(), 2, "flush 2: a's counts are due, the table's and the tally's");
    assert_eq!((per_minute(&a.id), per_minute(&b.id)), (vec![(0, 3)], vec![]));
    // b's counts wait into the next minute, where b is verified again: counted apart.
    clock.advance(15_000);
    assert_eq!(verify(b_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(recorder.last_minutes(&[&b.id]), vec![(b.id.clone(), minute + 60_000)]);
    assert_eq!(flush(), 2, "flush 3: b's counts of the first minute");
    assert_eq!(per_minute(&b.id), vec![(0, 2)]);
    // Tags and unknown secrets are counted in the table.
    let before = recorder.series();
    assert_eq!(verify(a_secret.expose(), &["t".to_string()]), VerifyCode::Valid);
    assert_eq!(verify("kg_no_such_key", &[]), VerifyCode::NotFound);
    assert_eq!(recorder.series(), before + 2);
    assert_eq!(svc.flush_analytics().expect("flush everything"), 3);
    assert_eq!((per_minute(&a.id), per_minute(&b.id)), (vec![(0, 3), (1, 1)], vec![(0, 2), (1, 1)]));
    // A count taken leaves its tally to the next minute's counts.
    assert_eq!(verify(b_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(verify(b_secret.expose(), &[]), VerifyCode::Valid);
    assert_eq!(svc.flush_analytics().expect("flush"), 1);
    assert_eq!(per_minute(&b.id), vec![(0, 2), (1, 3)]);
    // Charged verifications add their credits beside the key too (to its VALID series);
    // one whose credits the tally's sum cannot hold is counted in the table.
    let charge = |secret: &str, spent: u64| {
        let v = rbac.check_key(secret, &scope, None).expect("verify");
        svc.record_verification(&v, &scope, &[], spent);
    };
    let spent_of = |key: &str| -> i64 {
        let q = format!(
            "SELECT sum(spent_credits) AS s FROM key_verifications_per_minute_v1 WHERE key_id = '{key}'"
        );
        let rows = svc.query_sql(&admin, keygate_analytics::sql::Family::Verifications, &q).expect("sql");
        serde_json::to_value(rows).expect("json")[0]["s"].as_i64().expect("a number")
    };
    assert_eq!(spent_of(&b.id), 0);
    let before = recorder.series();
    charge(b_secret.expose(), 5);
    charge(b_secret.expose(), 7);
    assert_eq!(recorder.series(), before, "counted beside the key");
    charge(b_secret.expose(), u64::from(u32::MAX));
    assert_eq!(recorder.series(), before + 1, "past the tally's sum: in the table");
    assert_eq!(svc.flush_analytics().expect("flush"), 2);
    assert_eq!(spent_of(&b.id), 12 + i64::from(u32::MAX));
    assert_eq!(per_minute(&b.id), vec![(0, 2), (1, 6)]);
    // Two minutes on, the latest minutes noted are let go (the database tells them).
    clock.advance(120_000);
    for _ in 0..60 {
        flush();
    }
    assert_eq!(recorder.last_minutes(&[&a.id, &b.id]), vec![]);
}

/// A flush of more series than one statement writes (SQLite's statements hold 32 counts,
/// then one at a time): every series lands with its count and its spent credits, a second
/// flush adds to them, and rolling minutes into hours keeps both, per key and per API.
#[test]
fn a_flush_of_many_series_adds_each_count_to_its_row() {
    use keygate_analytics::VerificationsQuery;
    use keygate_analytics::recorder::Outcome;
    use keygate_rbac::VerifyCode;

    let db = TestDb::fresh();
    let store = sql_store(&db);
    let clock = Arc::new(ManualClock::new(1_700_000_040_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(10_000));
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api = rbac.create_api(&admin, "many").expect("api").id;
    let recorder = svc.recorder().expect("analytics on").clone();
    let keys: Vec<String> = (0..71).map(|i| format!("key_{i:03}")).collect();
    let tags = vec!["plan:pro".to_string(), "region:eu".to_string()];
    // A VALID verification of key i is charged i % 7 credits; the others nothing.
    let cost = |i: usize| if i.is_multiple_of(2) { i as u64 % 7 } else { 0 };
    let record_all = || {
        for (i, key) in keys.iter().enumerate() {
            for _ in 0..(i % 3 + 1) {
                recorder.record(&Outcome {
                    workspace_id: &ws.id,
                    api_id: Some(&api),
                    key_id: key,
                    identity_id: None,
                    code: if i % 2 == 0 { VerifyCode::Valid } else { VerifyCode::RateLimited },
                    tags: if i % 5 == 0 { &tags } else { &[] },
                    at_ms: clock.now_ms(),
                    spent_credits: cost(i),
                });
            }
        }
    };
    let by_key = || -> Vec<(String, u64, u64)> {
        let q = VerificationsQuery { api_id: api.clone(), by_key: true, ..Default::default() };
        let mut rows: Vec<(String, u64, u64)> = svc
            .get_verifications(&admin, &q)
            .expect("read")
            .into_iter()
            .map(|r| (r.key_id.clone().unwrap_or_default(), r.total(), r.spent_credits))
            .collect();
        rows.sort();
        rows
    };
    // The API's sums (read from its own table).
    let whole_api = || -> (u64, u64) {
        let q = VerificationsQuery { api_id: api.clone(), ..Default::default() };
        let rows = svc.get_verifications(&admin, &q).expect("read");
        (rows.iter().map(|r| r.total()).sum(), rows.iter().map(|r| r.spent_credits).sum())
    };
    let expected = |times: u64| -> Vec<(String, u64, u64)> {
        let n = |i: usize| times * (i as u64 % 3 + 1);
        keys.iter().enumerate().map(|(i, k)| (k.clone(), n(i), n(i) * cost(i))).collect()
    };
    let sums = |rows: &[(String, u64, u64)]| (rows.iter().map(|r| r.1).sum(), rows.iter().map(|r| r.2).sum());
    record_all();
    assert_eq!(svc.flush_analytics().expect("flush"), 71);
    assert_eq!(by_key(), expected(1));
    record_all();
    assert_eq!(svc.flush_analytics().expect("flush"), 71);
    assert_eq!(by_key(), expected(2));
    assert_eq!(whole_api(), sums(&expected(2)));
    assert!(whole_api().1 > 0);
    // Two days on, the minutes are hours: the same sums.
    clock.advance(2 * 86_400_000);
    assert!(svc.roll_up_analytics(90).expect("roll up") > 0);
    assert_eq!(by_key(), expected(2));
    assert_eq!(whole_api(), sums(&expected(2)));
}

/// The periodic flush appends its counts to the journal; they reach `verification_counts`
/// when a fold adds them up, each series once for all the entries it is in: before a read,
/// or once the oldest entry has waited `FOLD_AFTER_MS`. A fold that fails anywhere (before
/// a transaction, or after one committed with its reply lost) lands each count once when
/// the next one completes it.
#[test]
fn the_journal_is_folded_by_a_read_or_after_a_minute_each_count_once() {
    use keygate_analytics::VerificationsQuery;
    use keygate_analytics::flush::FOLD_AFTER_MS;
    use keygate_analytics::recorder::Outcome;
    use keygate_rbac::VerifyCode;

    let db = TestDb::fresh();
    let store = Unreliable::over(&db);
    // 5 s into a minute.
    let clock = Arc::new(ManualClock::new(1_700_000_045_000));
    let rbac = Arc::new(RbacService::new(store, clock.clone()));
    let svc = AnalyticsService::new(rbac.clone(), Some(1_000));
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    let api = rbac.create_api(&admin, "journal").expect("api").id;
    let recorder = svc.recorder().expect("analytics on").clone();
    let record = |key: &str| {
        recorder.record(&Outcome {
            workspace_id: &ws.id,
            api_id: Some(&api),
            key_id: key,
            identity_id: None,
            code: VerifyCode::Valid,
            tags: &[],
            at_ms: clock.now_ms(),
            spent_credits: 0,
        })
    };
    // Three periodic flushes: whatever was recorded before them is due and journaled.
    let journaled = || {
        for _ in 0..3 {
            svc.flush_analytics_due().expect("flush");
        }
    };
    let rows = |table: &str| -> i64 {
        use diesel::prelude::*;
        #[derive(diesel::QueryableByName)]
        struct N {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let q = format!("SELECT COUNT(*) AS n FROM {table}");
        rbac.store().inner.with_conn(|c| diesel::sql_query(&q).get_result::<N>(c)).expect("count").n
    };
    let total = |key: &str| -> u64 {
        let q = VerificationsQuery { api_id: api.clone(), key_ids: vec![key.into()], ..Default::default() };
        svc.get_verifications(&admin, &q).expect("read").iter().map(|r| r.total()).sum()
    };

    // Two entries carrying key_a, one key_b: nothing in the counts yet.
    record("key_a");
    record("key_b");
    journaled();
    record("key_a");
    journaled();
    assert_eq!(rows("verification_journal"), 2);
    assert_eq!(rows("verification_counts"), 0);
    // A minute after the first entry, the periodic flush folds: a row per series.
    clock.advance(FOLD_AFTER_MS as u64);
    svc.flush_analytics_due().expect("flush");
    assert_eq!((rows("verification_journal"), rows("verification_counts")), (0, 2));
    assert_eq!((total("key_a"), total("key_b")), (2, 1));

    // A read folds first: a count journaled a moment ago is in its answer.
    record("key_a");
    journaled();
    assert_eq!(rows("verification_journal"), 1);
    assert_eq!(total("key_a"), 3);
    assert_eq!(rows("verification_journal"), 0);

    // The fold's merge commits, its reply lost: the merged entry waits, and lands once.
    record("key_a");
    record("key_b");
    journaled();
    rbac.store().fail_after.store(0, Ordering::SeqCst);
    assert!(svc.fold_journal().is_err(), "the transaction before the merge failed");
    rbac.store().lose_next_reply.store(true, Ordering::SeqCst);
    assert!(svc.fold_journal().is_err());
    assert_eq!(rows("verification_journal"), 1, "one merged entry of both series");
    // Its application commits, its reply lost (after the merge's transaction, with
    // nothing to merge): nothing is added twice after.
    rbac.store().lose_reply_after.store(1, Ordering::SeqCst);
    assert!(svc.fold_journal().is_err());
    assert_eq!(rows("verification_journal"), 0);
    assert_eq!(svc.fold_journal().expect("fold"), 0);
    assert_eq!((total("key_a"), total("key_b")), (4, 2));

    // An entry that does not decode is dropped, not retried forever, nor a panic.
    rbac.store()
        .inner
        .analytics_transaction(|tx| Ok(tx.append_journal("req_damaged", false, 0, &[1, 2, 3])?))
        .expect("append");
    assert_eq!(svc.fold_journal().expect("fold"), 0);
    assert_eq!(rows("verification_journal"), 0);
    assert_eq!((total("key_a"), total("key_b")), (4, 2));
}
