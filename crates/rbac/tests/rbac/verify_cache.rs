//! The verification cache at the service level (issue 18): its bounds, and the change
//! counters of writes made by another process on the same database.
#![allow(clippy::unwrap_used)]

use keygate_domain::{ManualClock, secret_digest};
use keygate_rbac::counters::{CounterSource, Scope, creation_shard};
use keygate_rbac::{RbacService, RbacStore, VerifyCode, VerifyScope};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;

fn service(db: &TestDb) -> RbacService<SqlStore> {
    let store = SqlStore::open(&db.url, PoolSettings::default()).unwrap();
    RbacService::new(store, Arc::new(ManualClock::new(1_800_000_000_000)))
}

const ANY: VerifyScope<'static> =
    VerifyScope { workspace_id: None, api_id: None, access: None, root_key: None, ip: None, migration: None };

fn code(rbac: &RbacService<SqlStore>, secret: &str) -> VerifyCode {
    rbac.check_key(secret, &ANY, None).unwrap().code
}

#[test]
fn random_unknown_keys_do_not_evict_valid_keys() {
    let db = TestDb::fresh();
    let rbac = service(&db);
    let ws = rbac.create_workspace("w").unwrap();
    let secrets: Vec<String> =
        (0..1_000).map(|_| rbac.create_key(&ws.id, None).unwrap().1.expose().to_string()).collect();
    for s in &secrets {
        assert_eq!(code(&rbac, s), VerifyCode::Valid);
    }
    // 100k distinct unknown secrets, each verified once, the valid keys used between them.
    for i in 0..100_000 {
        assert_eq!(code(&rbac, &format!("kg_unknown_{i:08}")), VerifyCode::NotFound);
        if i % 100 == 0 {
            assert_eq!(code(&rbac, &secrets[(i / 100) % secrets.len()]), VerifyCode::Valid);
        }
    }
    let before = rbac.verify_loads();
    for s in &secrets {
        assert_eq!(code(&rbac, s), VerifyCode::Valid);
    }
    let loads = rbac.verify_loads() - before;
    assert!(loads * 100 <= secrets.len() as u64, "{loads} of {} valid keys were read again", secrets.len());
}

#[test]
fn writes_of_another_process_apply_after_a_poll() {
    let db = TestDb::fresh();
    // `server` caches; `cli` writes the same database, as the admin CLI does.
    let (server, cli) = (service(&db), service(&db));
    server.poll_changes().unwrap();
    let ws = cli.create_workspace("w").unwrap();
    let (key, secret) = cli.create_key(&ws.id, None).unwrap();
    let secret = secret.expose().to_string();
    assert_eq!(code(&server, &secret), VerifyCode::Valid);
    assert_eq!(code(&server, &secret), VerifyCode::Valid);
    let loads = server.verify_loads();
    assert_eq!(code(&server, &secret), VerifyCode::Valid);
    assert_eq!(server.verify_loads(), loads, "answered from the cache");

    cli.delete_key_admin(&key.id).unwrap();
    assert!(server.poll_changes().unwrap() >= 1);
    assert_eq!(code(&server, &secret), VerifyCode::NotFound);

    // A cached "not found" ends when a key is created in its shard.
    let unknown = "kg_not_yet_0123456789abcdef";
    assert_eq!(code(&server, unknown), VerifyCode::NotFound);
    let loads = server.verify_loads();
    assert_eq!(code(&server, unknown), VerifyCode::NotFound);
    assert_eq!(server.verify_loads(), loads, "answered from the cache");
    let shard = Scope::KeysCreated(creation_shard(&secret_digest(unknown))).name();
    cli.store().transaction(|tx| Ok(tx.bump_counters(std::slice::from_ref(&shard), 0)?)).unwrap();
    server.poll_changes().unwrap();
    assert_eq!(code(&server, unknown), VerifyCode::NotFound);
    assert_eq!(server.verify_loads(), loads + 1, "read again after a creation in its shard");
}

#[test]
fn creating_a_key_bumps_its_creation_shard() {
    let db = TestDb::fresh();
    let rbac = service(&db);
    let ws = rbac.create_workspace("w").unwrap();
    let (_, secret) = rbac.create_key(&ws.id, None).unwrap();
    let shard = Scope::KeysCreated(creation_shard(&secret_digest(secret.expose()))).name();
    let value = rbac.store().read(|tx| Ok(tx.counters(std::slice::from_ref(&shard))?)).unwrap();
    assert_eq!(value, vec![1]);
}

/// Two services on one SQLite file, as a keygate server and an embedded verifier: the
/// one with a change probe sees the other's write at its next verification (no poll in
/// between); without one, the cached answer stands until a poll.
#[test]
fn a_change_probe_sees_another_process_s_write_at_the_next_verification() {
    use keygate_rbac::{EntityRef, PermissionQuery, Principal};
    let db = TestDb::sqlite();
    let url = db.url.clone();
    let clock = Arc::new(keygate_domain::SystemClock);
    let writer = RbacService::new(SqlStore::open(&url, PoolSettings::default()).unwrap(), clock.clone());
    let reader_store = SqlStore::open(&url, PoolSettings::default()).unwrap();
    let probe = reader_store.change_probe().unwrap().expect("SQLite has a change probe");
    let probed = RbacService::new(reader_store, clock.clone())
        .with_change_probe(probe, std::time::Duration::from_micros(100));
    let unprobed = RbacService::new(SqlStore::open(&url, PoolSettings::default()).unwrap(), clock);
    for s in [&probed, &unprobed] {
        s.poll_changes().unwrap();
    }

    let ws = writer.create_workspace("shared").unwrap();
    let admin = Principal::new("test".into(), ws.id.clone(), ["*".to_string()]);
    let (key, secret) = writer.create_key(&ws.id, None).unwrap();
    writer.set_permissions(&admin, &key.id, &[EntityRef::by_name("documents.read")]).unwrap();
    let query = PermissionQuery::Permission("documents.read".into());
    let scope = VerifyScope::default();
    let verify = |s: &RbacService<SqlStore>| s.check_key(secret.expose(), &scope, Some(&query)).unwrap().code;
    let cached = |s: &RbacService<SqlStore>| {
        s.check_cached(secret.expose(), &scope, Some(&query), |c| Some(c.verification.code))
    };
    for s in [&probed, &unprobed] {
        assert_eq!(verify(s), VerifyCode::Valid);
        assert_eq!(cached(s), Some(VerifyCode::Valid), "answered from the cache");
    }

    writer.set_permissions(&admin, &key.id, &[]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1));
    assert_eq!(cached(&probed), None, "the file changed: not answered from the cache");
    assert_eq!(verify(&probed), VerifyCode::InsufficientPermissions);
    assert_eq!(cached(&probed), Some(VerifyCode::InsufficientPermissions), "cached again, current");
    assert_eq!(cached(&unprobed), Some(VerifyCode::Valid), "without a probe: stale until the next poll");
    unprobed.poll_changes().unwrap();
    assert_eq!(cached(&unprobed), None);
    assert_eq!(verify(&unprobed), VerifyCode::InsufficientPermissions);
}

#[test]
fn a_deleted_key_leaves_the_cache_at_once() {
    use keygate_rbac::Principal;
    let db = TestDb::fresh();
    let rbac = service(&db);
    let ws = rbac.create_workspace("w").unwrap();
    let admin = Principal::new("test".into(), ws.id.clone(), ["*".to_string()]);
    let keys: Vec<_> = (0..10).map(|_| rbac.create_key(&ws.id, None).unwrap()).collect();
    for (_, secret) in &keys {
        assert_eq!(code(&rbac, secret.expose()), VerifyCode::Valid);
    }
    let (held, weight) = rbac.verify_cache_keys();
    assert_eq!(held, 10);
    // Keys alike (no permissions, no identity) share their names: about 200 bytes each.
    assert!((150..300).contains(&(weight / 10)), "{weight} for 10 keys");
    // Counters live in a fixed number of slots that scopes share by hash: a remaining key
    // whose slot a deleted key's shares is loaded again (rarely; a stale answer never).
    let tags = |rbac: &RbacService<SqlStore>| -> Vec<_> {
        let CounterSource::Local(counters) = rbac.counter_source() else { panic!("local counters") };
        keys[4..].iter().map(|(k, _)| counters.read(&[Scope::Key(&k.id), Scope::Workspace(&ws.id)])).collect()
    };
    let tags_before = tags(&rbac);
    for (key, _) in &keys[..4] {
        rbac.delete_key(&admin, &key.id).unwrap();
    }
    // Freed without being verified again (a churn of keys does not fill the cache)...
    assert_eq!(rbac.verify_cache_keys().0, 6);
    assert!(rbac.verify_cache_keys().1 < weight, "their weight with them");
    // ...and a deleted key still answers NOT_FOUND, the others VALID from the cache.
    assert_eq!(code(&rbac, keys[0].1.expose()), VerifyCode::NotFound);
    let shared_slots = tags(&rbac).iter().zip(&tags_before).filter(|(a, b)| a != b).count() as u64;
    let before = rbac.verify_loads();
    for (_, secret) in &keys[4..] {
        assert_eq!(code(&rbac, secret.expose()), VerifyCode::Valid);
    }
    assert_eq!(rbac.verify_loads(), before + shared_slots);
    // A failed delete (no such key) changes nothing.
    assert!(rbac.delete_key(&admin, &keys[0].0.id).is_err());
    assert_eq!(rbac.verify_cache_keys().0, 6);
}
