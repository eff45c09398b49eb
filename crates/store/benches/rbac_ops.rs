//! Latency of the RBAC writes through the service and the real store:
//! `setPermissions` with 100 entries (50 existing names, 50 new) and `addRoles` with 10
//! roles (5 existing, 5 created), on SQLite and, when `KEYGATE_TEST_POSTGRES_URL` is set,
//! on PostgreSQL. Prints p50 and p99 per operation and backend.
//!
//! `KEYGATE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p keygate-store --bench rbac_ops`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_domain::SystemClock;
use keygate_rbac::{EntityRef, Principal, RbacService};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use keygate_test_support::bench::report;
use std::sync::Arc;
use std::time::Instant;

const ITERATIONS: usize = 200;

fn run(backend: &str, db: &TestDb) {
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    let svc = RbacService::new(store, Arc::new(SystemClock));
    let (ws, rk, _) = svc.bootstrap(None).unwrap().unwrap();
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    // Existing names to mix in.
    let seed_key = svc.create_key(&ws.id, None).unwrap().0;
    let existing: Vec<EntityRef> = (0..50).map(|i| EntityRef::by_name(format!("existing.p{i}"))).collect();
    svc.set_permissions(&admin, &seed_key.id, &existing).unwrap();
    let roles: Vec<EntityRef> =
        (0..5).map(|i| EntityRef::by_name(format!("existing-role-{i}")).with_create(true)).collect();
    svc.add_roles(&admin, &seed_key.id, &roles).unwrap();

    let (mut set, mut add) = (Vec::new(), Vec::new());
    for it in 0..ITERATIONS + 10 {
        let key = svc.create_key(&ws.id, None).unwrap().0;
        let mut refs = existing.clone();
        refs.extend((0..50).map(|i| EntityRef::by_name(format!("new.i{it}.p{i}"))));
        let t = Instant::now();
        let out = svc.set_permissions(&admin, &key.id, &refs).unwrap();
        let set_time = t.elapsed();
        assert_eq!(out.len(), 100);

        let mut role_refs = roles.clone();
        role_refs.extend((0..5).map(|i| EntityRef::by_name(format!("new-role-{it}-{i}")).with_create(true)));
        let t = Instant::now();
        let out = svc.add_roles(&admin, &key.id, &role_refs).unwrap();
        let add_time = t.elapsed();
        assert_eq!(out.len(), 10);
        if it >= 10 {
            // The first 10 are warm-up.
            set.push(set_time);
            add.push(add_time);
        }
    }
    report(backend, "setPermissions 100 (50 new)", set);
    report(backend, "addRoles 10 (5 new)", add);
}

fn main() {
    // `cargo bench` passes flags such as --bench; there is nothing to filter here.
    run("sqlite", &TestDb::sqlite());
    match TestDb::postgres_url() {
        Some(base) => run("postgres", &TestDb::postgres(&base)),
        None => println!("postgres: skipped (set KEYGATE_TEST_POSTGRES_URL)"),
    }
}
