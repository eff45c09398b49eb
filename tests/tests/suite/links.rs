//! `keys.addPermissions`, `keys.removePermissions`, `keys.setRoles`, `keys.removeRoles`
//! (contract §6): the same rules as setPermissions/addRoles, in the other modes.
#![allow(clippy::unwrap_used)]

use keygate_tests::{TestServer, roles_body, set_body};
use serde_json::json;

const ADD_PERMISSIONS: &str = "/v1/keys.addPermissions";
const REMOVE_PERMISSIONS: &str = "/v1/keys.removePermissions";
const SET_ROLES: &str = "/v1/keys.setRoles";
const REMOVE_ROLES: &str = "/v1/keys.removeRoles";

#[test]
fn add_permissions_keeps_the_others_and_creates_missing_names() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"name": "a.read"}])));
    let r = s.post(ADD_PERMISSIONS, &set_body(&key, json!([{"name": "b.read"}, {"slug": "a.read"}])));
    assert_eq!(r.names(), ["a.read", "b.read"], "all attached, sorted");
    assert_eq!(s.key_permissions(&key), ["a.read", "b.read"]);
    let r = s.post(ADD_PERMISSIONS, &set_body(&key, json!([{"name": "c.read", "create": false}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission c.read not found");
    let r = s.post(ADD_PERMISSIONS, &set_body(&key, json!([])));
    assert!(r.assert_error(400, "BAD_REQUEST").starts_with("permissions: "));
    // A new name needs create_permission; nothing changes on refusal.
    let linker = s.root_key_with(&["rbac.*.add_permission_to_key"]);
    let r =
        s.post_as(&linker, ADD_PERMISSIONS, &set_body(&key, json!([{"name": "a.read"}, {"name": "new"}])));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("rbac.*.create_permission"));
    assert_eq!(s.key_permissions(&key), ["a.read", "b.read"]);
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["a.read", "b.read"]);
    assert_eq!(s.count("audit_events", &format!("action = 'key.attach_permission' AND key_id = '{key}'")), 2);
}

#[test]
fn remove_permissions_detaches_only_what_exists_and_is_all_or_nothing() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])));
    let other = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&other, json!([{"name": "a"}, {"name": "d"}])));
    let b_id = s.get_key(&key).json["permissions"][1]["id"].as_str().unwrap().to_string();

    let r = s.post(REMOVE_PERMISSIONS, &set_body(&key, json!([{"name": "a"}, {"id": b_id}, {"name": "d"}])));
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    assert_eq!(s.key_permissions(&key), ["c"], "d was not attached: not an error");
    assert_eq!(s.key_permissions(&other), ["a", "d"], "other keys keep theirs");
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["a", "b", "c", "d"], "nothing deleted");
    assert_eq!(s.count("audit_events", &format!("action = 'key.detach_permission' AND key_id = '{key}'")), 2);

    // An unknown name is 404 (never created, whatever `create` says) and nothing changes.
    let r =
        s.post(REMOVE_PERMISSIONS, &set_body(&key, json!([{"name": "c"}, {"name": "zzz", "create": true}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission zzz not found");
    assert_eq!(s.key_permissions(&key), ["c"]);
    assert!(!s.workspace_names("permissions", &s.workspace_id).contains(&"zzz".to_string()));
    s.post(REMOVE_PERMISSIONS, &set_body("key_missing", json!([{"name": "c"}])))
        .assert_error(404, "NOT_FOUND");
    let adder = s.root_key_with(&["rbac.*.add_permission_to_key", "rbac.*.create_permission"]);
    let r = s.post_as(&adder, REMOVE_PERMISSIONS, &set_body(&key, json!([{"name": "c"}])));
    assert_eq!(
        r.assert_error(403, "INSUFFICIENT_PERMISSIONS"),
        "the root key lacks the permission rbac.*.remove_permission_from_key"
    );
    assert_eq!(s.key_permissions(&key), ["c"]);
}

#[test]
fn set_roles_replaces_and_remove_roles_detaches() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(SET_ROLES, &roles_body(&key, json!([{"name": "admin"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role admin not found", "new roles need create: true");
    let r = s.post(
        SET_ROLES,
        &roles_body(&key, json!([{"name": "viewer", "create": true}, {"name": "editor", "create": true}])),
    );
    assert_eq!(r.names(), ["editor", "viewer"]);
    let r =
        s.post(SET_ROLES, &roles_body(&key, json!([{"name": "viewer"}, {"name": "ops", "create": true}])));
    assert_eq!(r.names(), ["ops", "viewer"], "editor detached");
    assert_eq!(s.key_roles(&key), ["ops", "viewer"]);
    let r = s.post(SET_ROLES, &roles_body(&key, json!([])));
    assert_eq!(r.names(), Vec::<String>::new(), "an empty list detaches all");
    s.post(SET_ROLES, &roles_body(&key, json!([{"name": "ops"}, {"name": "viewer"}])));

    let r = s.post(REMOVE_ROLES, &roles_body(&key, json!([{"name": "ops"}])));
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    assert_eq!(s.key_roles(&key), ["viewer"]);
    let r = s.post(REMOVE_ROLES, &roles_body(&key, json!([{"name": "viewer"}, {"id": "role_nope"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role role_nope not found");
    assert_eq!(s.key_roles(&key), ["viewer"]);
    let r = s.post(REMOVE_ROLES, &roles_body(&key, json!([{}])));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "roles.0: an entry needs an id or a name");
    assert_eq!(s.workspace_names("roles", &s.workspace_id), ["editor", "ops", "viewer"], "roles stay");
    let adder = s.root_key_with(&["rbac.*.add_role_to_key", "rbac.*.create_role"]);
    let r = s.post_as(&adder, REMOVE_ROLES, &roles_body(&key, json!([{"name": "viewer"}])));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("rbac.*.remove_role_from_key"));
}

#[test]
fn concurrent_set_roles_end_with_exactly_one_callers_set() {
    let s = TestServer::start();
    let key = s.create_key();
    // Each set sorted by name, as keys.getKey lists roles (r10 before r9).
    let sets: Vec<Vec<String>> = (0..10)
        .map(|i| {
            let mut set = vec![format!("r{i}"), format!("r{}", i + 1)];
            set.sort();
            set
        })
        .collect();
    std::thread::scope(|scope| {
        for set in &sets {
            let entries: Vec<_> = set.iter().map(|n| json!({"name": n, "create": true})).collect();
            let (s, key) = (&s, &key);
            scope.spawn(move || assert_eq!(s.post(SET_ROLES, &roles_body(key, json!(entries))).status, 200));
        }
    });
    let last = s.key_roles(&key);
    assert!(sets.contains(&last), "final roles {last:?} are one caller's set");
}
