//! `POST /v1/keys.addRoles`, contract §4, rule by rule.
#![allow(clippy::unwrap_used)]

use keygate_tests::{TestServer, roles_body};
use serde_json::json;

const PATH: &str = "/v1/keys.addRoles";

#[test]
fn rule1_additive_and_idempotent() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "viewer", "create": true}])));
    assert_eq!(r.names(), ["viewer"]);
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "editor", "create": true}])));
    assert_eq!(r.names(), ["editor", "viewer"], "existing roles stay");
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "viewer"}])));
    assert_eq!(r.names(), ["editor", "viewer"], "attaching an attached role is not an error");
    assert_eq!(s.key_roles(&key), ["editor", "viewer"]);
}

#[test]
fn rule2_entries_need_id_or_name_and_must_agree() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &roles_body(&key, json!([{"create": true}])));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "roles.0: an entry needs an id or a name");
    let r = s.post(PATH, &roles_body(&key, json!([])));
    assert!(r.assert_error(400, "BAD_REQUEST").starts_with("roles: "));
    let a = s
        .post(PATH, &roles_body(&key, json!([{"name": "a", "create": true}, {"name": "b", "create": true}])));
    let a_id = a.json[0]["id"].as_str().unwrap().to_string();
    assert!(a_id.starts_with("role_"));
    let r = s.post(PATH, &roles_body(&key, json!([{"id": a_id, "name": "b"}])));
    r.assert_error(400, "BAD_REQUEST");
    let r = s.post(PATH, &roles_body(&key, json!([{"id": a_id, "name": "a"}])));
    assert_eq!(r.names(), ["a", "b"]);
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "bad\u{0007}name", "create": true}])));
    assert!(r.assert_error(400, "BAD_REQUEST").starts_with("roles.0.name: "));
}

#[test]
fn rule3_new_names_need_create_true() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "admin"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role admin not found");
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "admin", "create": false}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role admin not found");
    assert!(s.workspace_names("roles", &s.workspace_id).is_empty());
    let r = s.post(PATH, &roles_body(&key, json!([{"id": "role_missing"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role role_missing not found");
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "Admin Team", "create": true}])));
    assert_eq!(r.names(), ["Admin Team"]);
}

#[test]
fn rule4_required_permissions_and_rule5_all_or_nothing() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post(PATH, &roles_body(&key, json!([{"name": "existing", "create": true}])));
    let none = s.root_key_with(&["rbac.*.add_permission_to_key"]);
    let r = s.post_as(&none, PATH, &roles_body(&key, json!([{"name": "existing"}])));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("rbac.*.add_role_to_key"));
    let link = s.root_key_with(&["rbac.*.add_role_to_key"]);
    let r = s.post_as(
        &link,
        PATH,
        &roles_body(&key, json!([{"name": "existing"}, {"name": "fresh", "create": true}])),
    );
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("rbac.*.create_role"));
    assert_eq!(s.workspace_names("roles", &s.workspace_id), ["existing"]);
    // A valid new role next to an unknown id: nothing is created or attached.
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "fresh", "create": true}, {"id": "role_nope"}])));
    r.assert_error(404, "NOT_FOUND");
    assert_eq!(s.workspace_names("roles", &s.workspace_id), ["existing"]);
    assert_eq!(s.key_roles(&key), ["existing"]);
    let both = s.root_key_with(&["rbac.*.add_role_to_key", "rbac.*.create_role"]);
    let r = s.post_as(&both, PATH, &roles_body(&key, json!([{"name": "fresh", "create": true}])));
    assert_eq!(r.names(), ["existing", "fresh"]);
}

#[test]
fn rule5_concurrent_adds_keep_every_role_and_create_once() {
    let s = TestServer::start();
    let key = s.create_key();
    std::thread::scope(|scope| {
        for i in 0..20 {
            let (s, key) = (&s, &key);
            scope.spawn(move || {
                let body = roles_body(
                    key,
                    json!([{"name": format!("r{i:02}"), "create": true}, {"name": "shared", "create": true}]),
                );
                let r = s.post(PATH, &body);
                assert_eq!(r.status, 200, "{}", r.text);
            });
        }
    });
    let roles = s.key_roles(&key);
    assert_eq!(roles.len(), 21, "{roles:?}");
    assert_eq!(s.count("roles", "name = 'shared'"), 1);
}

#[test]
fn rule6_sorted_and_rule7_audited() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &roles_body(&key, json!([{"name": "b", "create": true}, {"name": "B", "create": true}, {"name": "a", "create": true}])));
    assert_eq!(r.names(), ["B", "a", "b"]);
    assert_eq!(s.count("audit_events", "action = 'role.create'"), 3);
    assert_eq!(s.count("audit_events", &format!("action = 'key.attach_role' AND key_id = '{key}'")), 3);
}
