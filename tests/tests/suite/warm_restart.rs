//! The verification cache kept across a restart (issue 82, `keygate_runtime::warm`): the
//! keys a stopping process had cached are cached again by the next one from the snapshot,
//! with no read of the store, unless something they depend on changed in between; a
//! snapshot of another database or schema is not used. SQLite (the embedded default, whose
//! counters are in memory): on PostgreSQL nothing is written.
#![allow(clippy::unwrap_used)]

use keygate_domain::{EntityRef, NewEntity, SystemClock};
use keygate_rbac::snapshot::{FORMAT, SnapshotHeader, SnapshotReader, write_snapshot};
use keygate_rbac::{EntityKind, Principal, VerifyCode, VerifyScope};
use keygate_runtime::warm::Warmed;
use keygate_runtime::{Runtime, RuntimeSettings};
use keygate_test_support::TestDb;
use std::path::PathBuf;
use std::sync::Arc;

const ANY: VerifyScope<'static> =
    VerifyScope { workspace_id: None, api_id: None, access: None, root_key: None, ip: None, migration: None };

/// A process on the database: its runtime, as a server opens it.
fn process(db: &TestDb) -> Runtime {
    let rt = Runtime::open(&RuntimeSettings::new(db.url.clone()), Arc::new(SystemClock)).unwrap();
    rt.sync_counters().unwrap();
    rt
}

/// A workspace and its admin, and `n` keys each holding `documents.read`: (key id, secret).
fn keys(rt: &Runtime, n: usize) -> (Principal, Vec<(String, String)>) {
    let ws = rt.rbac.create_workspace("w").unwrap();
    let admin = Principal::new("test".into(), ws.id.clone(), ["*".to_string()]);
    let keys = (0..n)
        .map(|_| {
            let (key, secret) = rt.rbac.create_key(&ws.id, None).unwrap();
            rt.rbac.set_permissions(&admin, &key.id, &[EntityRef::by_name("documents.read")]).unwrap();
            (key.id, secret.expose().to_string())
        })
        .collect();
    // The poll a server's upkeep makes within 50 ms of its writes (it moves their scopes'
    // counters once more: what was cached before it is loaded again).
    rt.rbac.poll_changes().unwrap();
    (admin, keys)
}

fn permissions(rt: &Runtime, secret: &str) -> (VerifyCode, Vec<String>) {
    let v = rt.rbac.check_key(secret, &ANY, None).unwrap();
    (v.code, v.permissions().iter().map(|p| p.to_string()).collect())
}

fn snapshot_path(db: &TestDb) -> PathBuf {
    let file = db.url.strip_prefix("sqlite://").unwrap();
    PathBuf::from(format!("{file}-keys"))
}

#[test]
fn a_restart_serves_its_keys_from_the_snapshot_except_those_changed_meanwhile() {
    let db = TestDb::sqlite();
    let path = snapshot_path(&db);
    let first = process(&db);
    let (admin, keys) = keys(&first, 20);
    for (_, secret) in &keys {
        assert_eq!(permissions(&first, secret).0, VerifyCode::Valid);
    }
    assert_eq!(first.save_verify_cache(&path).unwrap(), 20);
    drop(first);

    // While no server runs, another process (the admin CLI) changes two keys: one's
    // permissions, the other disabled.
    let cli = process(&db);
    cli.rbac.set_permissions(&admin, &keys[0].0, &[EntityRef::by_name("documents.write")]).unwrap();
    let disable = keygate_domain::KeyUpdate { enabled: Some(false), ..Default::default() };
    cli.rbac.update_key(&admin, &keys[1].0, disable).unwrap();
    drop(cli);

    let next = process(&db);
    let warmed = next.load_verify_cache(&path).unwrap();
    assert_eq!(warmed, Warmed { read: 20, cached: 18 }, "the two changed keys are not taken from it");
    assert!(!path.exists(), "a snapshot is read once");
    let loads = next.rbac.verify_loads();
    assert_eq!(permissions(&next, &keys[0].1), (VerifyCode::Valid, vec!["documents.write".to_string()]));
    assert_eq!(permissions(&next, &keys[1].1).0, VerifyCode::Disabled);
    assert_eq!(next.rbac.verify_loads(), loads + 2, "the changed keys are read from the database");
    for (_, secret) in &keys[2..] {
        assert_eq!(permissions(&next, secret), (VerifyCode::Valid, vec!["documents.read".to_string()]));
    }
    assert_eq!(next.rbac.verify_loads(), loads + 2, "the others are answered from the snapshot, no read");

    // A change after the warm start applies at once, as for any cached key.
    next.rbac.set_permissions(&admin, &keys[2].0, &[]).unwrap();
    assert_eq!(permissions(&next, &keys[2].1), (VerifyCode::Valid, vec![]));
    // No file: nothing to do.
    assert_eq!(next.load_verify_cache(&path).unwrap(), Warmed::default());
}

#[test]
fn a_change_to_what_many_keys_hold_drops_them_all() {
    let db = TestDb::sqlite();
    let path = snapshot_path(&db);
    let first = process(&db);
    let (admin, keys) = keys(&first, 5);
    let new = NewEntity { name: "reader".into(), name_field: "name", ..Default::default() };
    let role = first.rbac.create_entity(&admin, EntityKind::Role, new).unwrap();
    for (id, _) in &keys {
        first.rbac.add_roles(&admin, id, &[EntityRef::by_id(&role.id)]).unwrap();
    }
    first.rbac.poll_changes().unwrap();
    for (_, secret) in &keys {
        assert_eq!(permissions(&first, secret), (VerifyCode::Valid, vec!["documents.read".to_string()]));
    }
    first.save_verify_cache(&path).unwrap();
    drop(first);
    // The role's permissions change while down: every key holding it (the workspace's
    // counter) is read again.
    let cli = process(&db);
    cli.rbac.set_role_permissions(&admin, &role.id, &[EntityRef::by_name("admin.all")]).unwrap();
    drop(cli);
    let next = process(&db);
    assert_eq!(next.load_verify_cache(&path).unwrap(), Warmed { read: 5, cached: 0 });
    for (_, secret) in &keys {
        assert_eq!(
            permissions(&next, secret),
            (VerifyCode::Valid, vec!["admin.all".to_string(), "documents.read".to_string()])
        );
    }
}

#[test]
fn a_snapshot_of_another_database_or_schema_is_not_used() {
    let (a, b) = (TestDb::sqlite(), TestDb::sqlite());
    let path = snapshot_path(&a);
    let first = process(&a);
    let (_, keys) = keys(&first, 3);
    for (_, secret) in &keys {
        permissions(&first, secret);
    }
    assert_eq!(first.save_verify_cache(&path).unwrap(), 3);
    let bytes = std::fs::read(&path).unwrap();

    // Another database, with a history of its own (the same keys' secrets do not exist
    // there: a snapshot taken for it would answer them).
    let other = process(&b);
    keys_of(&other);
    assert_eq!(other.load_verify_cache(&path).unwrap(), Warmed::default());
    assert_eq!(permissions(&other, &keys[0].1).0, VerifyCode::NotFound);
    assert!(!path.exists(), "a snapshot not used is removed too");

    // The same database, the snapshot rewritten as another schema's (or a newer keygate's
    // format, which the reader refuses: keygate-cache's tests).
    let reader = SnapshotReader::read(&bytes[..]).unwrap();
    let header = SnapshotHeader { schema: "1999-01-01-000001".into(), ..reader.header().clone() };
    assert_eq!(header.format, FORMAT);
    let cached = reader.keys(first.rbac.cache_interner()).unwrap();
    let refs: Vec<_> = cached.iter().map(|(d, k)| (*d, k)).collect();
    write_snapshot(std::fs::File::create(&path).unwrap(), &header, &refs).unwrap();
    drop(first);
    let next = process(&a);
    assert_eq!(next.load_verify_cache(&path).unwrap(), Warmed::default());
    // A damaged file: an error, nothing cached, the file gone.
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert!(next.load_verify_cache(&path).is_err());
    assert!(!path.exists());
    let loads = next.rbac.verify_loads();
    assert_eq!(permissions(&next, &keys[0].1).0, VerifyCode::Valid);
    assert_eq!(next.rbac.verify_loads(), loads + 1, "read from the database");
}

/// Gives `rt`'s database a history of its own.
fn keys_of(rt: &Runtime) {
    keys(rt, 2);
}

/// The last change before the stop wrote several counters at once (keys brought in by
/// `keys.migrateKeys`, one transaction, a creation counter per shard, one change number),
/// and the next start, which changes nothing, finds the snapshot current: the change it is
/// checked against is the same counter on both sides, whichever of them the database lists
/// first.
#[test]
fn a_snapshot_after_a_change_of_many_counters_at_once_is_used() {
    use keygate_rbac::MigratedKey;
    let db = TestDb::sqlite();
    let path = snapshot_path(&db);
    let first = process(&db);
    let (admin, keys) = keys(&first, 5);
    let api = first.rbac.create_api(&admin, "imported").unwrap();
    let migrated: Vec<MigratedKey> = (0..16)
        .map(|i| MigratedKey::with_hash(keygate_domain::hash_secret(&format!("imported_key_{i}"))))
        .collect();
    first.rbac.migrate_keys(&admin, "sha256_hex", &api.id, &migrated).unwrap();
    first.rbac.poll_changes().unwrap();
    for (_, secret) in &keys {
        assert_eq!(permissions(&first, secret).0, VerifyCode::Valid);
    }
    assert_eq!(first.save_verify_cache(&path).unwrap(), 5);
    drop(first);

    let next = process(&db);
    assert_eq!(next.load_verify_cache(&path).unwrap(), Warmed { read: 5, cached: 5 });
    let loads = next.rbac.verify_loads();
    for (_, secret) in &keys {
        assert_eq!(permissions(&next, secret).0, VerifyCode::Valid);
    }
    assert_eq!(next.rbac.verify_loads(), loads, "every key answered from the snapshot");
}
