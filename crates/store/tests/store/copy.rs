//! `keygate_store::copy` (issue 47): a database copied into another holds the same rows
//! (the checksums say so, and so does reading them back); a target with rows is refused,
//! naming a table, unless replaced; a changed target row is caught; writes to the source
//! after the snapshot are not copied and are reported; a source at another schema, or the
//! target itself, is refused. The target is PostgreSQL with KEYGATE_TEST_POSTGRES_URL
//! (and the copy comes back to SQLite), else SQLite.
#![allow(clippy::unwrap_used)]

use diesel::connection::SimpleConnection;
use keygate_domain::SystemClock;
use keygate_rbac::RbacService;
use keygate_store::copy::{self, CopyError, Phase, TABLES};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;

fn open(db: &TestDb) -> Arc<SqlStore> {
    Arc::new(SqlStore::open(&db.url, PoolSettings::default()).unwrap())
}

/// A source with workspaces, root keys, keys (30 each) and audit events.
fn populated() -> (TestDb, Arc<SqlStore>, RbacService<SqlStore>) {
    let db = TestDb::sqlite();
    let store = open(&db);
    let rbac = RbacService::<SqlStore>::new(store.clone(), Arc::new(SystemClock));
    for w in ["alpha", "beta"] {
        let ws = rbac.create_workspace(w).unwrap();
        rbac.create_root_key(&ws.id, &["*".to_string(), "api.*.verify_key".to_string()]).unwrap();
        for i in 0..30 {
            rbac.create_key(&ws.id, Some(format!("key {i} of {w} \"quoted\" é"))).unwrap();
        }
        // One deleted: an audit event.
        let (key, _) = rbac.create_key(&ws.id, None).unwrap();
        rbac.delete_key_admin(&key.id).unwrap();
    }
    (db, store, rbac)
}

fn no_progress() -> impl FnMut(copy::Progress<'_>) {
    |_| {}
}

#[test]
fn a_copy_holds_every_row_and_comes_back_the_same() {
    let (_db, source, rbac) = populated();
    let target_db = TestDb::fresh();
    let target = open(&target_db);
    let report = copy::copy(&source, &target, false, &mut no_progress()).unwrap();
    assert_eq!(report.tables.len(), TABLES.len());
    let rows = |t: &str| report.tables.iter().find(|s| s.table == t).unwrap().rows;
    assert_eq!(rows("workspaces"), 2);
    assert_eq!(rows("root_keys"), 2);
    assert_eq!(rows("keys"), 60);
    assert_eq!(rows("audit_events"), 2, "{report:?}");
    assert_eq!(report.rows, report.tables.iter().map(|t| t.rows).sum::<u64>());
    assert!(report.changed_after_snapshot.is_empty(), "{report:?}");

    // Read back through the service: the same keys, names and all.
    let copied = RbacService::<SqlStore>::new(target.clone(), Arc::new(SystemClock));
    for w in ["alpha", "beta"] {
        assert_eq!(copied.list_keys(w).unwrap(), rbac.list_keys(w).unwrap());
        assert_eq!(copied.list_root_keys(w).unwrap(), rbac.list_root_keys(w).unwrap());
    }

    // And back to SQLite: the same checksums, table by table.
    let back_db = TestDb::sqlite();
    let back = open(&back_db);
    let again = copy::copy(&target, &back, false, &mut no_progress()).unwrap();
    assert_eq!(again.tables, report.tables);
    assert_eq!(copy::verify(&source, &back, &mut no_progress()).unwrap(), report.tables);
}

#[test]
fn a_target_with_rows_is_refused_unless_replaced() {
    let (_db, source, _rbac) = populated();
    let target_db = TestDb::fresh();
    let target = open(&target_db);
    RbacService::<SqlStore>::new(target.clone(), Arc::new(SystemClock))
        .create_workspace("already_here")
        .unwrap();
    let err = copy::copy(&source, &target, false, &mut no_progress()).unwrap_err();
    assert!(matches!(&err, CopyError::TargetNotEmpty { table, rows: 1 } if table == "workspaces"), "{err}");
    assert!(err.to_string().contains("--replace"), "{err}");
    // Nothing was written: the one workspace is still the only one.
    let copied = RbacService::<SqlStore>::new(target.clone(), Arc::new(SystemClock));
    assert_eq!(copied.list_workspaces().unwrap().len(), 1);

    let report = copy::copy(&source, &target, true, &mut no_progress()).unwrap();
    let names: Vec<String> = copied.list_workspaces().unwrap().into_iter().map(|w| w.name).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(copy::verify(&source, &target, &mut no_progress()).unwrap(), report.tables);
}

#[test]
fn a_changed_target_row_is_caught_by_its_tables_checksum() {
    let (_db, source, _rbac) = populated();
    let target_db = TestDb::fresh();
    let target = open(&target_db);
    copy::copy(&source, &target, false, &mut no_progress()).unwrap();
    target
        .with_conn(|c| {
            c.batch_execute("UPDATE keys SET name = 'tampered' WHERE id = (SELECT MIN(id) FROM keys)")
        })
        .unwrap();
    let err = copy::verify(&source, &target, &mut no_progress()).unwrap_err();
    match &err {
        CopyError::Mismatch { table, source_rows, target_rows, source_checksum, target_checksum } => {
            assert_eq!(table, "keys");
            assert_eq!((source_rows, target_rows), (&60, &60), "same count, other content");
            assert_ne!(source_checksum, target_checksum);
        }
        other => panic!("{other}"),
    }
    // A row gone is caught too.
    target
        .with_conn(|c| {
            c.batch_execute("DELETE FROM keys_permissions; DELETE FROM keys WHERE name = 'tampered'")
        })
        .unwrap();
    let err = copy::verify(&source, &target, &mut no_progress()).unwrap_err();
    assert!(matches!(&err, CopyError::Mismatch { table, target_rows: 59, .. } if table == "keys"), "{err}");
}

#[test]
fn writes_after_the_snapshot_are_not_copied_and_are_reported() {
    let (_db, source, rbac) = populated();
    let target_db = TestDb::fresh();
    let target = open(&target_db);
    // Written by another connection while the copy runs, after its snapshot was taken.
    let mut written = false;
    let mut during = |p: copy::Progress<'_>| {
        if p.phase == Phase::Copy && !written {
            rbac.create_workspace("late").unwrap();
            written = true;
        }
    };
    let report = copy::copy(&source, &target, false, &mut during).unwrap();
    assert!(written);
    let changed: Vec<_> =
        report.changed_after_snapshot.iter().map(|c| (c.table, c.rows_at_snapshot, c.rows_now)).collect();
    assert!(changed.contains(&("workspaces", 2, 3)), "{changed:?}");
    let copied = RbacService::<SqlStore>::new(target.clone(), Arc::new(SystemClock));
    assert_eq!(copied.list_workspaces().unwrap().len(), 2, "the snapshot's rows, not the late one");
}

#[test]
fn another_schema_or_the_same_database_is_refused() {
    let (db, source, _rbac) = populated();
    let err = copy::copy(&source, &source, false, &mut no_progress()).unwrap_err();
    assert!(matches!(err, CopyError::SameDatabase), "{err}");
    let same_file = SqlStore::open_as_is(&db.url, PoolSettings::default()).unwrap();
    assert!(matches!(
        copy::copy(&source, &same_file, false, &mut no_progress()),
        Err(CopyError::SameDatabase)
    ));

    source.revert_migrations_after("2026-11-26-000017").unwrap();
    let target_db = TestDb::sqlite();
    let target = open(&target_db);
    let err = copy::copy(&source, &target, false, &mut no_progress()).unwrap_err();
    assert!(err.to_string().contains("the source") && err.to_string().contains("older"), "{err}");
    assert!(copy::verify(&target, &target, &mut no_progress()).is_ok(), "a database is itself");
}
