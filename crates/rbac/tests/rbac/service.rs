//! The RBAC service over the real SQL store (a temp SQLite file per test).

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use keygate_domain::{ErrorCode, ManualClock, Named};
use keygate_rbac::{EntityRef, NewEntity, Principal, RbacService, RbacStore, VerifyScope};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;

struct Fixture {
    svc: Arc<RbacService<SqlStore>>,
    admin: Principal,
    ws: String,
    db: TestDb,
}

fn fixture() -> Fixture {
    let db = TestDb::fresh();
    let store =
        SqlStore::open(&db.url, PoolSettings { max_size: 8, ..PoolSettings::default() }).expect("open");
    let svc = Arc::new(RbacService::new(store, Arc::new(ManualClock::new(1_700_000_000_000))));
    let (ws, rk, _) = svc.bootstrap(None).expect("bootstrap").expect("fresh db");
    assert!(svc.bootstrap(None).expect("second bootstrap").is_none());
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    Fixture { svc, admin, ws: ws.id, db }
}

fn names(v: &[Named]) -> Vec<&str> {
    v.iter().map(|n| n.name.as_str()).collect()
}

fn count(store: &SqlStore, sql: &str) -> i64 {
    #[derive(QueryableByName)]
    struct C {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    store.with_conn(|c| diesel::sql_query(sql).get_result::<C>(c)).expect("count").n
}

fn perm_names(f: &Fixture) -> Vec<String> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::Text)]
        name: String,
    }
    let sql = format!("SELECT name FROM permissions WHERE workspace_id = '{}' ORDER BY name", f.ws);
    let rows: Vec<N> = f.svc.store().with_conn(|c| diesel::sql_query(sql).load(c)).expect("names");
    rows.into_iter().map(|n| n.name).collect()
}

#[test]
fn set_permissions_replaces_creates_and_audits() {
    let f = fixture();
    let (key, _) = f.svc.create_key(&f.ws, Some("k".into())).expect("key");
    let got = f
        .svc
        .set_permissions(&f.admin, &key.id, &[EntityRef::by_name("b.read"), EntityRef::by_name("a.write")])
        .expect("set");
    assert_eq!(names(&got), ["a.write", "b.read"]);
    let got = f
        .svc
        .set_permissions(&f.admin, &key.id, &[EntityRef::by_id(&got[1].id), EntityRef::by_name("c.x")])
        .expect("set again");
    assert_eq!(names(&got), ["b.read", "c.x"]);
    let view = f.svc.get_key(&f.admin, &key.id).expect("get");
    assert_eq!(view.permissions, got);
    // 3 created, 2 + 1 attached... first call: 2 created + 2 attached; second: 1 created,
    // 1 attached, 1 detached.
    let store = f.svc.store();
    assert_eq!(count(store, "SELECT COUNT(*) AS n FROM audit_events WHERE action = 'permission.create'"), 3);
    assert_eq!(
        count(store, "SELECT COUNT(*) AS n FROM audit_events WHERE action = 'key.attach_permission'"),
        3
    );
    assert_eq!(
        count(store, "SELECT COUNT(*) AS n FROM audit_events WHERE action = 'key.detach_permission'"),
        1
    );
    // Empty set detaches all.
    assert!(f.svc.set_permissions(&f.admin, &key.id, &[]).expect("clear").is_empty());
}

#[test]
fn failed_call_changes_nothing() {
    let f = fixture();
    let (key, _) = f.svc.create_key(&f.ws, None).expect("key");
    f.svc.set_permissions(&f.admin, &key.id, &[EntityRef::by_name("keep")]).expect("set");
    let audit_before = count(f.svc.store(), "SELECT COUNT(*) AS n FROM audit_events");
    let err = f
        .svc
        .set_permissions(
            &f.admin,
            &key.id,
            &[
                EntityRef::by_name("new.one"),
                EntityRef::by_id("perm_doesnotexist"),
                EntityRef::by_name("new.two"),
            ],
        )
        .expect_err("unknown id");
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert_eq!(err.to_string(), "permission perm_doesnotexist not found");
    assert_eq!(perm_names(&f), ["keep"]);
    assert_eq!(names(&f.svc.get_key(&f.admin, &key.id).expect("get").permissions), ["keep"]);
    assert_eq!(count(f.svc.store(), "SELECT COUNT(*) AS n FROM audit_events"), audit_before);

    // No create_permission: 403 and nothing created.
    let limited = Principal::new("rk_x".into(), f.ws.clone(), ["rbac.*.add_permission_to_key".to_string()]);
    let err = f.svc.set_permissions(&limited, &key.id, &[EntityRef::by_name("brand.new")]).expect_err("403");
    assert_eq!(err.code(), ErrorCode::InsufficientPermissions);
    assert!(err.to_string().contains("rbac.*.create_permission"));
    assert_eq!(perm_names(&f), ["keep"]);
    // ...but attaching existing ones works with the link permission alone.
    let got = f.svc.set_permissions(&limited, &key.id, &[EntityRef::by_name("keep")]).expect("existing");
    assert_eq!(names(&got), ["keep"]);
}

#[test]
fn add_roles_is_additive_and_needs_create_true() {
    let f = fixture();
    let (key, _) = f.svc.create_key(&f.ws, None).expect("key");
    let err = f.svc.add_roles(&f.admin, &key.id, &[EntityRef::by_name("admin")]).expect_err("no create");
    assert_eq!((err.code(), err.to_string()), (ErrorCode::NotFound, "role admin not found".to_string()));
    let got =
        f.svc.add_roles(&f.admin, &key.id, &[EntityRef::by_name("admin").with_create(true)]).expect("add");
    assert_eq!(names(&got), ["admin"]);
    let got = f
        .svc
        .add_roles(
            &f.admin,
            &key.id,
            &[EntityRef::by_name("Billing").with_create(true), EntityRef::by_name("admin")],
        )
        .expect("add 2");
    assert_eq!(names(&got), ["Billing", "admin"], "kept, sorted by bytes");
    let err = f.svc.add_roles(&f.admin, &key.id, &[]).expect_err("empty");
    assert_eq!(err.code(), ErrorCode::BadRequest);
}

#[test]
fn workspaces_are_isolated() {
    let f = fixture();
    let other = f.svc.create_workspace("other").expect("ws");
    let (key, _) = f.svc.create_key(&other.id, None).expect("key");
    let err = f.svc.set_permissions(&f.admin, &key.id, &[]).expect_err("other ws");
    assert_eq!(err.code(), ErrorCode::NotFound);
    let intruder = Principal::new("rk_y".into(), other.id.clone(), ["*".to_string()]);
    let (mine, _) = f.svc.create_key(&f.ws, None).expect("key");
    let p = f.svc.set_permissions(&f.admin, &mine.id, &[EntityRef::by_name("x")]).expect("set");
    let err =
        f.svc.set_permissions(&intruder, &key.id, &[EntityRef::by_id(&p[0].id)]).expect_err("foreign id");
    assert_eq!(err.to_string(), format!("permission {} not found", p[0].id));
    assert_eq!(f.svc.create_workspace("other").expect_err("dup").code(), ErrorCode::Conflict);
}

#[test]
fn concurrent_set_permissions_serialize() {
    let f = fixture();
    let (key, _) = f.svc.create_key(&f.ws, None).expect("key");
    let sets: Vec<Vec<String>> = (0..20).map(|i| (0..5).map(|j| format!("p{i}.{j}")).collect()).collect();
    std::thread::scope(|s| {
        for set in &sets {
            let (svc, admin, key) = (&f.svc, &f.admin, &key.id);
            s.spawn(move || {
                let refs: Vec<EntityRef> = set.iter().map(EntityRef::by_name).collect();
                svc.set_permissions(admin, key, &refs).expect("concurrent set");
            });
        }
    });
    let final_set: Vec<String> =
        f.svc.get_key(&f.admin, &key.id).expect("get").permissions.into_iter().map(|p| p.name).collect();
    assert!(sets.contains(&final_set), "final set {final_set:?} is one caller's set");
}

#[test]
fn concurrent_creation_of_one_name_yields_one_permission() {
    let f = fixture();
    let keys: Vec<String> = (0..20).map(|_| f.svc.create_key(&f.ws, None).expect("key").0.id).collect();
    std::thread::scope(|s| {
        for key in &keys {
            let (svc, admin) = (&f.svc, &f.admin);
            s.spawn(move || {
                svc.set_permissions(admin, key, &[EntityRef::by_name("shared.new")]).expect("200")
            });
        }
    });
    assert_eq!(perm_names(&f), ["shared.new"]);
}

#[test]
fn root_keys_authenticate_and_revoke() {
    let f = fixture();
    let (rk, secret) = f.svc.create_root_key(&f.ws, &["api.*.read_key".to_string()]).expect("rk");
    let p = f.svc.authenticate(secret.expose()).expect("auth");
    assert!(p.holds("api.*.read_key") && !p.holds("rbac.*.create_role"));
    assert!(f.svc.authenticate_cached(secret.expose()).is_some());
    f.svc.revoke_root_key(&rk.id).expect("revoke");
    assert_eq!(f.svc.authenticate(secret.expose()).expect_err("revoked").code(), ErrorCode::Unauthorized);
    assert_eq!(f.svc.authenticate("nope").expect_err("unknown").code(), ErrorCode::Unauthorized);
    assert_eq!(f.svc.revoke_root_key(&rk.id).expect_err("twice").code(), ErrorCode::NotFound);
    let listed = f.svc.list_root_keys("default").expect("list");
    assert_eq!(listed.len(), 1, "the bootstrap key only");
}

/// Whether the `keys` table exists: a query that fails exactly when it does not.
fn keys_table_exists(store: &SqlStore) -> bool {
    store.with_conn(|c| diesel::sql_query("SELECT COUNT(*) AS n FROM keys").execute(c)).is_ok()
}

#[test]
fn migrations_up_down_up() {
    let f = fixture();
    let store = f.svc.store();
    assert!(keys_table_exists(store));
    store.revert_all_migrations().expect("down");
    assert!(!keys_table_exists(store));
    store.migrate().expect("up again");
    assert!(keys_table_exists(store));
    assert_eq!(store.kind(), if f.db.is_postgres() { "postgres" } else { "sqlite" });
}

#[test]
fn instances_starting_together_migrate_safely_and_bootstrap_once() {
    let db = TestDb::fresh();
    let bootstrapped: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open and migrate");
                    let svc = RbacService::new(store, Arc::new(ManualClock::new(1)));
                    svc.bootstrap(None).expect("bootstrap").is_some()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(bootstrapped.iter().filter(|b| **b).count(), 1, "{bootstrapped:?}");
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    assert_eq!(count(&store, "SELECT COUNT(*) AS n FROM workspaces"), 1);
    assert_eq!(count(&store, "SELECT COUNT(*) AS n FROM root_keys"), 1);
}

#[test]
fn create_key_as_is_all_or_nothing_and_delete_key_takes_the_links() {
    use keygate_rbac::NewKey;
    let f = fixture();
    let other = f.svc.create_key(&f.ws, None).expect("key").0;
    f.svc.add_roles(&f.admin, &other.id, &[EntityRef::by_name("viewer").with_create(true)]).expect("role");
    let rows = |t: &str| count(f.svc.store(), &format!("SELECT COUNT(*) AS n FROM {t}"));
    let before = (rows("keys"), rows("permissions"), rows("audit_events"));

    // A missing role fails the call after the permission was resolved as new: nothing stays.
    let new = NewKey {
        permissions: vec!["p.new".into()],
        roles: vec!["viewer".into(), "ghost".into()],
        ..NewKey::default()
    };
    let err = f.svc.create_key_as(&f.admin, new.clone()).expect_err("ghost role");
    assert_eq!(err.code(), ErrorCode::NotFound);
    assert_eq!((rows("keys"), rows("permissions"), rows("audit_events")), before);

    let (key, secret) = f
        .svc
        .create_key_as(&f.admin, NewKey { roles: vec!["viewer".into()], prefix: Some("ab".into()), ..new })
        .expect("create");
    assert!(secret.expose().starts_with("ab_"));
    let view = f.svc.get_key(&f.admin, &key.id).expect("view");
    assert_eq!((names(&view.permissions), names(&view.roles)), (vec!["p.new"], vec!["viewer"]));
    // Audit: key.create, permission.create, attach of the permission and of the role.
    assert_eq!(rows("audit_events"), before.2 + 4);

    // Another workspace's root key cannot delete it; the owner can, and the links go too.
    let ws2 = f.svc.create_workspace("two").expect("ws");
    let stranger = Principal::new("rk_x".into(), ws2.id, ["*".to_string()]);
    assert_eq!(f.svc.delete_key(&stranger, &key.id).expect_err("other ws").code(), ErrorCode::NotFound);
    f.svc.delete_key(&f.admin, &key.id).expect("delete");
    assert_eq!(f.svc.get_key(&f.admin, &key.id).expect_err("gone").code(), ErrorCode::NotFound);
    let links = format!("SELECT COUNT(*) AS n FROM keys_roles WHERE key_id = '{}'", key.id);
    assert_eq!(count(f.svc.store(), &links), 0);
    assert_eq!(f.svc.get_key(&f.admin, &other.id).expect("other key stays").roles.len(), 1);
}

#[test]
fn verify_key_reads_the_key_and_its_effective_permissions() {
    use keygate_rbac::{NewKey, PermissionQuery, VerifyCode};
    let f = fixture();
    let (key, secret) = f
        .svc
        .create_key_as(&f.admin, NewKey { permissions: vec!["a.read".into()], ..NewKey::default() })
        .expect("create");
    let v = f.svc.check_key(secret.expose(), &VerifyScope::default(), None).expect("verify");
    assert_eq!((v.code, v.key().map(|k| k.id())), (VerifyCode::Valid, Some(key.id.as_str())));
    assert_eq!(v.permissions(), ["a.read"]);
    let q = PermissionQuery::And(vec![
        PermissionQuery::Permission("a.read".into()),
        PermissionQuery::Permission("a.write".into()),
    ]);
    assert_eq!(
        f.svc.check_key(secret.expose(), &VerifyScope::default(), Some(&q)).expect("verify").code,
        VerifyCode::InsufficientPermissions
    );
    assert_eq!(
        f.svc.check_key("kg_unknown", &VerifyScope::default(), None).expect("verify").code,
        VerifyCode::NotFound
    );
    f.svc.delete_key(&f.admin, &key.id).expect("delete");
    assert_eq!(
        f.svc.check_key(secret.expose(), &VerifyScope::default(), None).expect("verify").code,
        VerifyCode::NotFound
    );
}

#[test]
fn roles_carry_permissions_to_their_keys_and_deletes_detach_everywhere() {
    use keygate_rbac::{EntityKind, VerifyCode};
    let f = fixture();
    let role = f
        .svc
        .create_entity(
            &f.admin,
            EntityKind::Role,
            NewEntity {
                name: "editor".into(),
                name_field: "name",
                description: Some("edits".into()),
                ..NewEntity::default()
            },
        )
        .expect("role");
    let dup = f
        .svc
        .create_entity(
            &f.admin,
            EntityKind::Role,
            NewEntity { name: "editor".into(), name_field: "name", ..NewEntity::default() },
        )
        .expect_err("taken");
    assert_eq!(dup.code(), ErrorCode::Conflict);
    let attached = f
        .svc
        .add_role_permissions(
            &f.admin,
            &role.id,
            &[EntityRef::by_name("doc.write"), EntityRef::by_name("doc.read")],
        )
        .expect("attach");
    assert_eq!(names(&attached), ["doc.read", "doc.write"]);
    let (key, secret) = f.svc.create_key(&f.ws, None).expect("key");
    f.svc.add_roles(&f.admin, &key.id, &[EntityRef::by_id(&role.id)]).expect("role on key");
    let v = f.svc.check_key(secret.expose(), &VerifyScope::default(), None).expect("verify");
    assert_eq!(
        (v.code, v.permissions().to_vec()),
        (VerifyCode::Valid, vec!["doc.read".into(), "doc.write".into()])
    );

    let view = f.svc.get_role(&f.admin, &role.id).expect("view");
    assert_eq!(view.role.description.as_deref(), Some("edits"));
    let write = view.permissions.iter().find(|p| p.name == "doc.write").expect("write").id.clone();
    f.svc.delete_entity(&f.admin, EntityKind::Permission, &write).expect("delete permission");
    assert_eq!(
        f.svc.check_key(secret.expose(), &VerifyScope::default(), None).expect("verify").permissions(),
        ["doc.read"]
    );
    f.svc.delete_entity(&f.admin, EntityKind::Role, &role.id).expect("delete role");
    let v = f.svc.check_key(secret.expose(), &VerifyScope::default(), None).expect("verify");
    assert!(v.permissions().is_empty() && v.roles().is_empty(), "{v:?}");
    let gone = f.svc.delete_entity(&f.admin, EntityKind::Role, &role.id).expect_err("gone");
    assert_eq!(gone.code(), ErrorCode::NotFound);
    assert_eq!(perm_names(&f), ["doc.read"]);
}

#[test]
fn verification_is_scoped_to_the_callers_workspace_and_the_named_api() {
    use keygate_rbac::{NewKey, VerifyCode};
    let f = fixture();
    let new = |api: Option<&str>| NewKey { api_id: api.map(str::to_string), ..NewKey::default() };
    let (key, secret) = f.svc.create_key_as(&f.admin, new(Some("api_a"))).expect("create");
    let code = |scope: VerifyScope<'_>| f.svc.check_key(secret.expose(), &scope, None).expect("verify").code;
    let ws = f.ws.as_str();
    assert_eq!(code(VerifyScope::default()), VerifyCode::Valid);
    assert_eq!(
        code(VerifyScope {
            workspace_id: Some(ws),
            api_id: Some("api_a"),
            access: None,
            root_key: None,
            ip: None,
            migration: None
        }),
        VerifyCode::Valid
    );
    assert_eq!(
        code(VerifyScope {
            workspace_id: None,
            api_id: Some("api_b"),
            access: None,
            root_key: None,
            ip: None,
            migration: None
        }),
        VerifyCode::NotFound
    );
    assert_eq!(
        code(VerifyScope {
            workspace_id: Some("ws_other"),
            api_id: None,
            access: None,
            root_key: None,
            ip: None,
            migration: None
        }),
        VerifyCode::NotFound
    );
    let v = f.svc.check_key(
        secret.expose(),
        &VerifyScope {
            workspace_id: Some("ws_other"),
            api_id: None,
            access: None,
            root_key: None,
            ip: None,
            migration: None,
        },
        None,
    );
    let v = v.expect("verify");
    assert!(v.key().is_none() && v.permissions().is_empty(), "nothing of the key is shown: {v:?}");
    assert_eq!(f.svc.get_key(&f.admin, &key.id).expect("get").key.api_id.as_deref(), Some("api_a"));
    // A key created without an apiId is not found by a call that names one.
    let (_, plain) = f.svc.create_key_as(&f.admin, new(None)).expect("create");
    let scoped = VerifyScope {
        workspace_id: None,
        api_id: Some("api_a"),
        access: None,
        root_key: None,
        ip: None,
        migration: None,
    };
    assert_eq!(f.svc.check_key(plain.expose(), &scoped, None).expect("verify").code, VerifyCode::NotFound);
}
