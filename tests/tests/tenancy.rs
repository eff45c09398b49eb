//! Workspaces are isolated (contract §2) and getKey (contract §6).
#![allow(clippy::unwrap_used)]

use keygate_tests::{TestServer, roles_body, set_body};
use serde_json::json;

#[test]
fn a_root_key_of_workspace_a_cannot_see_or_change_workspace_b() {
    let s = TestServer::start();
    let b = s.create_workspace("tenant-b");
    let b_root = s.root_key_in(&b, &["*"]);
    let b_key = s.create_key_in(&b);
    let b_perms =
        s.post_as(&b_root, "/v1/keys.setPermissions", &set_body(&b_key, json!([{"name": "b.secret"}])));
    let b_perm_id = b_perms.json[0]["id"].as_str().unwrap().to_string();
    let b_roles = s.post_as(
        &b_root,
        "/v1/keys.addRoles",
        &roles_body(&b_key, json!([{"name": "b-role", "create": true}])),
    );
    let b_role_id = b_roles.json[0]["id"].as_str().unwrap().to_string();

    // A (bootstrap root key, holds "*") cannot touch B's key...
    let r = s.post("/v1/keys.setPermissions", &set_body(&b_key, json!([])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), format!("key {b_key} not found"));
    s.post("/v1/keys.addRoles", &roles_body(&b_key, json!([{"name": "x", "create": true}])))
        .assert_error(404, "NOT_FOUND");
    s.get_key(&b_key).assert_error(404, "NOT_FOUND");
    // ...nor use B's permission or role ids on its own key.
    let a_key = s.create_key();
    let r = s.post("/v1/keys.setPermissions", &set_body(&a_key, json!([{"id": b_perm_id}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), format!("permission {b_perm_id} not found"));
    let r = s.post("/v1/keys.addRoles", &roles_body(&a_key, json!([{"id": b_role_id}])));
    r.assert_error(404, "NOT_FOUND");
    // Same names in A are A's own.
    let r = s.post("/v1/keys.setPermissions", &set_body(&a_key, json!([{"name": "b.secret"}])));
    assert_ne!(r.json[0]["id"], b_perm_id);
    // B is untouched.
    let r =
        s.request(s.client.get(s.url("/v1/keys.getKey")).query(&[("keyId", &b_key)]).bearer_auth(&b_root));
    assert_eq!(r.json["permissions"], json!([{"id": b_perm_id, "name": "b.secret"}]));
    assert_eq!(r.json["roles"], json!([{"id": b_role_id, "name": "b-role"}]));
    // Rate-limit budgets do not cross workspaces either.
    let body = json!({"identifier": "same", "limit": 1, "duration": 60_000});
    assert_eq!(s.post("/v1/ratelimits.limit", &body).json["success"], true);
    assert_eq!(s.post_as(&b_root, "/v1/ratelimits.limit", &body).json["success"], true);
}

#[test]
fn get_key_shows_direct_permissions_and_roles_sorted() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"name": "z.z"}, {"name": "a.a"}])));
    s.post(
        "/v1/keys.addRoles",
        &roles_body(&key, json!([{"name": "r2", "create": true}, {"name": "r1", "create": true}])),
    );
    let r = s.get_key(&key);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["id"], key);
    assert_eq!(r.json["enabled"], true);
    assert!(r.json["createdAt"].is_i64());
    let names = |field: &str| -> Vec<String> {
        r.json[field].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names("permissions"), ["a.a", "z.z"]);
    assert_eq!(names("roles"), ["r1", "r2"]);
    // POST form too; and its permission.
    let r = s.post("/v1/keys.getKey", &json!({"keyId": key}));
    assert_eq!(r.status, 200);
    let no_read = s.root_key_with(&["rbac.*.add_role_to_key"]);
    let r = s.request(s.client.get(s.url("/v1/keys.getKey")).query(&[("keyId", &key)]).bearer_auth(&no_read));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("api.*.read_key"));
    let r = s.request(s.client.get(s.url("/v1/keys.getKey")).bearer_auth(&s.root_key));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "keyId: is required (query parameter ?keyId=...)");
    // Two values for one parameter: which one was meant is unknown, so neither is used.
    let twice = [("keyId", key.as_str()), ("keyId", "key_other")];
    let r = s.request(s.client.get(s.url("/v1/keys.getKey")).query(&twice).bearer_auth(&s.root_key));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "keyId: given more than once in the query");
}

#[test]
fn revoked_root_key_is_rejected_at_once_by_this_instance() {
    let s = TestServer::start();
    let (rk, secret) = s
        .state
        .rbac
        .create_root_key(
            "default",
            &["ratelimit.*.limit".to_string(), "ratelimit.*.create_namespace".to_string()],
        )
        .unwrap();
    let body = json!({"identifier": "a", "limit": 10, "duration": 1000});
    assert_eq!(s.post_as(secret.expose(), "/v1/ratelimits.limit", &body).status, 200);
    s.state.rbac.revoke_root_key(&rk.id).unwrap();
    s.post_as(secret.expose(), "/v1/ratelimits.limit", &body).assert_error(401, "UNAUTHORIZED");
}
