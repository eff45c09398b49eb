//! Upgrades: a database written by the release before a migration, then migrated, keeps
//! working (on SQLite, and on PostgreSQL when `KEYGATE_TEST_POSTGRES_URL` is set).

use diesel::prelude::*;
use keygate_domain::ManualClock;
use keygate_rbac::{Principal, RbacService, VerifyCode, VerifyScope};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Migration 9 (API objects): keys under three `apiId` labels, written before API objects
/// existed, become three APIs named after the labels; every key keeps its label and still
/// verifies; a key without a label stays without an API.
#[test]
fn api_labels_on_keys_become_api_objects() {
    let db = TestDb::fresh();
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    let svc = RbacService::new(store, Arc::new(ManualClock::new(1_700_000_000_000)));
    let (ws, rk, _) = svc.bootstrap(None).expect("bootstrap").expect("fresh");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);

    // Keys, then the schema of the release before (no `apis` table: the keys stay), where
    // keys carried bare labels.
    let labels = ["payments", "payments", "search", "api_legacy", ""];
    let keys: Vec<_> =
        (0..labels.len()).map(|i| svc.create_key(&ws.id, Some(format!("k{i}"))).expect("key")).collect();
    svc.store().revert_migrations_after("2026-11-25-000008").expect("back to migration 8");
    let mut secrets = Vec::new();
    for (label, (key, secret)) in labels.iter().zip(keys) {
        if !label.is_empty() {
            let sql = format!("UPDATE keys SET api_id = '{label}' WHERE id = '{}'", key.id);
            svc.store().with_conn(|c| diesel::sql_query(sql).execute(c)).expect("label");
        }
        secrets.push((label.to_string(), key.id, secret));
    }
    svc.store().migrate().expect("migrate to the current release");

    let mut apis = Vec::new();
    for label in ["api_legacy", "payments", "search"] {
        let api = svc.get_api(&admin, label).expect(label);
        assert_eq!(
            (api.id.as_str(), api.name.as_str(), api.workspace_id.as_str()),
            (label, label, ws.id.as_str())
        );
        apis.push(api);
    }
    let (page, total) = svc.list_api_keys(&admin, "payments", None, None, 100, |_, k| Ok(k)).expect("list");
    assert_eq!((page.items.len(), total), (2, 2));
    for (label, key_id, secret) in &secrets {
        let scope = VerifyScope {
            workspace_id: Some(&ws.id),
            api_id: None,
            access: None,
            root_key: None,
            ip: None,
            migration: None,
        };
        let v = svc.check_key(secret.expose(), &scope, None).expect("verify");
        assert_eq!(v.code, VerifyCode::Valid, "{key_id}");
        let key = v.key().expect("key");
        assert_eq!(key.api_id(), (!label.is_empty()).then_some(label.as_str()), "{key_id}");
    }
    // Creating a key into a migrated API adds to it (no second API of that id).
    let new = keygate_rbac::NewKey { api_id: Some("search".into()), enabled: true, ..Default::default() };
    svc.create_key_as(&admin, new).expect("create into a migrated API");
    let (_, total) = svc.list_api_keys(&admin, "search", None, None, 100, |_, k| Ok(k)).expect("list");
    assert_eq!(total, 2);
}

#[derive(QueryableByName)]
struct Timeout {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    timeout: i64,
}

/// An instance waits for another's migration (and migrates) beyond its per-request
/// timeout: several instances starting together on one database, a loaded server, a large
/// table. The pooled connection gets the per-request timeout back after.
#[test]
fn migrating_waits_beyond_the_per_request_timeout() {
    let db = TestDb::fresh();
    let other = SqlStore::open(&db.url, PoolSettings::default()).expect("the first instance migrates");
    // Another instance holds the migration lock (SQLite: the write lock) for 1.5 s.
    let (hold, release_after) = if db.is_postgres() {
        (take_migration_lock(), "SELECT pg_advisory_unlock_all()")
    } else {
        ("BEGIN IMMEDIATE".to_string(), "COMMIT")
    };
    let (locked_tx, locked) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        other
            .with_conn(|c| {
                diesel::sql_query(hold).execute(c)?;
                locked_tx.send(()).expect("the test waits");
                std::thread::sleep(Duration::from_millis(1_500));
                diesel::sql_query(release_after).execute(c)
            })
            .expect("hold the lock")
    });
    locked.recv().expect("the lock is held");
    let short = PoolSettings { statement_timeout: Duration::from_millis(200), ..PoolSettings::default() };
    let started = Instant::now();
    let store = SqlStore::open(&db.url, short).expect("waits for the other migration, then opens");
    assert!(started.elapsed() >= Duration::from_millis(1_000), "it waited for the lock");
    holder.join().expect("holder");
    let sql = if db.is_postgres() {
        "SELECT setting::bigint AS timeout FROM pg_settings WHERE name = 'statement_timeout'"
    } else {
        "SELECT timeout FROM pragma_busy_timeout()"
    };
    let after: Timeout = store.with_conn(|c| diesel::sql_query(sql).get_result(c)).expect("read the timeout");
    assert_eq!(after.timeout, 200, "the per-request timeout is back");
}

#[cfg(feature = "postgres")]
fn take_migration_lock() -> String {
    format!("SELECT pg_advisory_lock({})", keygate_store::MIGRATION_LOCK_KEY)
}

#[cfg(not(feature = "postgres"))]
fn take_migration_lock() -> String {
    unreachable!("a PostgreSQL database needs the postgres feature")
}
