//! v2 list pages in a big workspace: `permissions.listPermissions` (the service's
//! `list_page`, one keyset query) over 100,000 permissions, the first page and the last
//! page (the cursor near the end), 100 items each, on SQLite and, when
//! `KEYGATE_TEST_POSTGRES_URL` is set, on PostgreSQL. Prints p50 and p99 of each; the
//! target (issue 30) is under 20 ms p50 for both pages on both backends. Loading the whole
//! table, for comparison.
//!
//! `KEYGATE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p keygate-store --bench list_pages`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_domain::{IdPrefix, Named, SystemClock, new_id};
use keygate_rbac::store::{EntityKind, RbacStore};
use keygate_rbac::{Principal, RbacService};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use keygate_test_support::bench::report;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PERMISSIONS: usize = 100_000;
const PAGE: usize = 100;
const ITERATIONS: usize = 200;

fn run(backend: &str, db: &TestDb) {
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    let svc = RbacService::new(store, Arc::new(SystemClock));
    let (ws, rk, _) = svc.bootstrap(None).unwrap().unwrap();
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    // 100,000 permissions, inserted in batches (the service's own batch insert).
    let names: Vec<String> = (0..PERMISSIONS).map(|i| format!("perm.{i:06}")).collect();
    for chunk in names.chunks(10_000) {
        let batch: Vec<Named> =
            chunk.iter().map(|n| Named::new(new_id(IdPrefix::Permission), n.clone())).collect();
        svc.store()
            .transaction(|tx| Ok(tx.insert_entities_if_absent(EntityKind::Permission, &ws.id, &batch, 0)?))
            .unwrap();
    }
    let last_cursor = names[PERMISSIONS - PAGE - 1].clone();
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for it in 0..ITERATIONS + 10 {
        let t = Instant::now();
        let page = svc.list_page(&admin, EntityKind::Permission, None, None, PAGE).unwrap();
        let first_time = t.elapsed();
        assert_eq!((page.items.len(), page.next.as_deref()), (PAGE, Some(names[PAGE - 1].as_str())));
        let t = Instant::now();
        let page = svc.list_page(&admin, EntityKind::Permission, None, Some(&last_cursor), PAGE).unwrap();
        let last_time = t.elapsed();
        assert_eq!((page.items.len(), page.next), (PAGE, None));
        if it >= 10 {
            first.push(first_time);
            last.push(last_time);
        }
    }
    report(backend, "listPermissions first page (100k)", first);
    report(backend, "listPermissions last page (100k)", last);
    // For comparison: loading the whole table (what a page cost before keyset queries; v1's
    // listPermissions, which has no pages, still answers everything).
    let whole: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(svc.list_entities(&admin, EntityKind::Permission).unwrap().len(), PERMISSIONS);
            t.elapsed()
        })
        .collect();
    report(backend, "whole table (v1 listPermissions, 100k)", whole);
}

fn main() {
    run("sqlite", &TestDb::sqlite());
    match TestDb::postgres_url() {
        Some(base) => run("postgres", &TestDb::postgres(&base)),
        None => println!("postgres: skipped (set KEYGATE_TEST_POSTGRES_URL)"),
    }
}
