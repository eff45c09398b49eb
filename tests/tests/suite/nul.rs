//! NUL characters (issue 16): PostgreSQL's text cannot hold them, so every backend refuses
//! them alike, in every string field of every endpoint: 400 naming the field, never a 5xx,
//! and nothing stored. The cases come from one list of endpoints and their string fields.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::{Value, json};

/// (path, a well-formed body, the dot paths of its string fields).
fn post_cases() -> Vec<(&'static str, Value, Vec<&'static str>)> {
    let perm_refs = json!([{"id": "perm_x", "name": "p.a", "slug": "p.a"}]);
    let role_refs = json!([{"id": "role_x", "name": "r"}]);
    let key_perm = |_: ()| json!({"keyId": "key_x", "permissions": perm_refs});
    let key_role = |_: ()| json!({"keyId": "key_x", "roles": role_refs});
    let perm_fields = vec!["keyId", "permissions.0.id", "permissions.0.name", "permissions.0.slug"];
    let role_fields = vec!["keyId", "roles.0.id", "roles.0.name"];
    let role_perm = json!({"roleId": "role_x", "permissions": perm_refs});
    let role_perm_fields = vec!["roleId", "permissions.0.id", "permissions.0.name", "permissions.0.slug"];
    let ns = json!({"namespaceName": "api", "identifier": "user_1", "limit": 1, "duration": 1000});
    vec![
        ("/v1/keys.setPermissions", key_perm(()), perm_fields.clone()),
        ("/v1/keys.addPermissions", key_perm(()), perm_fields.clone()),
        ("/v1/keys.removePermissions", key_perm(()), perm_fields),
        ("/v1/keys.addRoles", key_role(()), role_fields.clone()),
        ("/v1/keys.setRoles", key_role(()), role_fields.clone()),
        ("/v1/keys.removeRoles", key_role(()), role_fields),
        ("/v1/keys.getKey", json!({"keyId": "key_x"}), vec!["keyId"]),
        ("/v1/keys.deleteKey", json!({"keyId": "key_x"}), vec!["keyId"]),
        (
            "/v1/keys.createKey",
            json!({"apiId": "api_1", "name": "n", "prefix": "p", "meta": {"m": "v"},
                   "permissions": ["p.a"], "roles": ["r"]}),
            vec!["apiId", "name", "prefix", "meta.m", "permissions.0", "roles.0"],
        ),
        (
            "/v1/keys.verifyKey",
            json!({"key": "kg_x", "apiId": "api_1", "authorization": {"permissions": "p.a"}}),
            vec!["key", "apiId", "authorization.permissions"],
        ),
        (
            "/v1/permissions.createPermission",
            json!({"name": "p.a", "description": "d"}),
            vec!["name", "description"],
        ),
        ("/v1/permissions.createRole", json!({"name": "r", "description": "d"}), vec!["name", "description"]),
        ("/v1/permissions.deletePermission", json!({"permissionId": "perm_x"}), vec!["permissionId"]),
        ("/v1/permissions.deleteRole", json!({"roleId": "role_x"}), vec!["roleId"]),
        ("/v1/permissions.addPermissionsToRole", role_perm.clone(), role_perm_fields.clone()),
        ("/v1/permissions.setRolePermissions", role_perm.clone(), role_perm_fields.clone()),
        ("/v1/permissions.removePermissionsFromRole", role_perm, role_perm_fields),
        (
            "/v1/ratelimits.limit",
            json!({"namespace": "api", "identifier": "user_1", "limit": 1, "duration": 1000}),
            vec!["namespace", "identifier"],
        ),
        ("/v1/ratelimits.setOverride", ns.clone(), vec!["namespaceName", "identifier"]),
        ("/v1/ratelimits.deleteOverride", ns, vec!["namespaceName", "identifier"]),
    ]
}

/// (path, a well-formed query, its parameters).
const GET_CASES: &[(&str, &str, &[&str])] = &[
    ("/v1/keys.getKey", "keyId=key_x", &["keyId"]),
    ("/v1/permissions.getPermission", "permissionId=perm_x", &["permissionId"]),
    ("/v1/permissions.getRole", "roleId=role_x", &["roleId"]),
    ("/v1/ratelimits.getOverride", "namespaceName=api&identifier=user_1", &["namespaceName", "identifier"]),
    ("/v1/ratelimits.listOverrides", "namespaceName=api", &["namespaceName"]),
];

/// `body` with the string at `path` given a NUL in its middle.
fn with_nul(mut body: Value, path: &str) -> Value {
    let mut v = &mut body;
    for part in path.split('.') {
        v = match part.parse::<usize>() {
            Ok(i) => &mut v[i],
            Err(_) => &mut v[part],
        };
    }
    let s = v.as_str().unwrap_or_else(|| panic!("{path} is not a string")).to_string();
    *v = Value::String(format!("{}\u{0}{}", &s[..1], &s[1..]));
    body
}

#[test]
fn nul_in_any_string_field_of_any_endpoint_is_400_naming_the_field() {
    let s = TestServer::start();
    let mut checked = 0;
    for (path, body, fields) in post_cases() {
        for field in fields {
            let r = s.post(path, &with_nul(body.clone(), field));
            let msg = r.assert_error(400, "BAD_REQUEST");
            assert_eq!(msg, format!("{field}: must not contain NUL (\\u0000) characters"), "{path}");
            checked += 1;
        }
    }
    for (path, query, params) in GET_CASES {
        for param in *params {
            let q = query.replacen(&format!("{param}="), &format!("{param}=a%00"), 1);
            let r = s.request(s.client.get(s.url(&format!("{path}?{q}"))).bearer_auth(&s.root_key));
            let msg = r.assert_error(400, "BAD_REQUEST");
            assert_eq!(msg, format!("{param}: must not contain NUL (%00) characters"), "{path}");
            checked += 1;
        }
    }
    assert!(checked >= 50, "{checked}");
    // Nothing was stored by any of them.
    assert_eq!(s.count("permissions", "1 = 1"), 0);
    assert_eq!(s.count("roles", "1 = 1"), 0);
    assert_eq!(s.count("keys", "1 = 1"), 0);
    // An escaped backslash followed by "u0000" is not a NUL: accepted.
    let r = s.post("/v1/permissions.createPermission", &json!({"name": "p.ok", "description": "\\u0000"}));
    assert_eq!(r.status, 200, "{}", r.text);
}
