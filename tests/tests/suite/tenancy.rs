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

/// Issue 15, defect 1: a key of workspace B verified by tenant A's gateway.
#[test]
fn verify_key_finds_only_keys_of_the_callers_workspace_and_named_api() {
    let s = TestServer::start();
    let b = s.create_workspace("tenant-b");
    let b_root = s.root_key_in(&b, &["*"]);
    let created =
        s.post_as(&b_root, "/v1/keys.createKey", &json!({"apiId": "api_b", "permissions": ["b.perm"]}));
    assert_eq!(created.status, 200, "{}", created.text);
    let b_secret = created.json["key"].as_str().unwrap().to_string();
    let b_key_id = created.json["keyId"].as_str().unwrap().to_string();
    let verify = |token: Option<&str>, body: serde_json::Value| {
        s.post_raw("/v1/keys.verifyKey", token, body.to_string())
    };
    let not_found = json!({"valid": false, "code": "NOT_FOUND"});
    let answer = |r: &keygate_tests::Resp| json!({"valid": r.json["valid"], "code": r.json["code"]});
    let query = json!({"permissions": "b.perm"});

    // Another apiId (tenant A's), with or without a root key: exactly as a missing key.
    let r = verify(None, json!({"key": b_secret, "apiId": "api_a", "authorization": query}));
    assert_eq!((r.status, answer(&r)), (200, not_found.clone()), "{}", r.text);
    assert!(r.json.get("keyId").is_none() && r.json["permissions"] == json!([]), "{}", r.text);
    // Workspace A's root key (the bootstrap key, holding "*"): B's keys are not found.
    let r = verify(Some(&s.root_key), json!({"key": b_secret, "authorization": query}));
    assert_eq!((r.status, answer(&r)), (200, not_found.clone()), "{}", r.text);
    let r = verify(Some(&s.root_key), json!({"key": b_secret, "apiId": "api_b"}));
    assert_eq!(answer(&r), not_found, "{}", r.text);

    // B's own gateway: valid, with the key's apiId in the answer.
    let r = verify(Some(&b_root), json!({"key": b_secret, "apiId": "api_b", "authorization": query}));
    assert_eq!(answer(&r), json!({"valid": true, "code": "VALID"}), "{}", r.text);
    assert_eq!((r.json["keyId"].as_str(), r.json["apiId"].as_str()), (Some(&*b_key_id), Some("api_b")));
    // No root key and no apiId: the key alone (documented; single-tenant deployments).
    let r = verify(None, json!({"key": b_secret}));
    assert_eq!(answer(&r), json!({"valid": true, "code": "VALID"}), "{}", r.text);
    // A root key that is sent must be valid: a gateway whose key was revoked learns it
    // instead of silently losing its scope.
    let r = verify(Some("kg_root_not_a_real_key_at_all_000"), json!({"key": b_secret}));
    r.assert_error(401, "UNAUTHORIZED");
    // getKey shows the label.
    let r =
        s.request(s.client.get(s.url("/v1/keys.getKey")).query(&[("keyId", &b_key_id)]).bearer_auth(&b_root));
    assert_eq!(r.json["apiId"], "api_b", "{}", r.text);
}
