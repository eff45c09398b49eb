//! Every route of the route table: authentication, methods, and the permission it needs.
#![allow(clippy::unwrap_used)]

use keygate::routes::ROUTES;
use keygate_tests::TestServer;
use serde_json::{Value, json};

/// The permission each authenticated route always needs, and a body that would otherwise
/// succeed (a fresh namespace is created on the way for ratelimits.limit). `spare` is a key
/// that only keys.deleteKey uses.
/// `ids` are a permission and two roles that only the permissions.* routes use, and two
/// APIs that only the apis.* routes use.
fn needs(
    path: &str,
    key: &str,
    spare: &str,
    ids: &(String, String, String, String, String),
) -> Option<(&'static str, Value)> {
    match path {
        "/v1/apis.createApi" => Some(("api.*.create_api", json!({"name": "routes"}))),
        "/v1/apis.getApi" => Some(("api.*.read_api", json!({"apiId": ids.3}))),
        "/v1/apis.listKeys" => Some(("api.*.read_api", json!({"apiId": ids.3}))),
        "/v1/apis.deleteApi" => Some(("api.*.delete_api", json!({"apiId": ids.4}))),
        "/v1/analytics.getVerifications" => Some(("api.*.read_analytics", json!({"apiId": ids.3}))),
        "/v1/keys.getVerifications" => Some(("api.*.read_analytics", json!({"keyId": key}))),
        "/v1/keys.setPermissions" => {
            Some(("rbac.*.add_permission_to_key", json!({"keyId": key, "permissions": [{"name": "x"}]})))
        }
        "/v1/keys.addRoles" => {
            Some(("rbac.*.add_role_to_key", json!({"keyId": key, "roles": [{"name": "r", "create": true}]})))
        }
        "/v1/keys.getKey" => Some(("api.*.read_key", json!({"keyId": key}))),
        "/v1/audit.listEvents" => Some(("audit.*.read", json!({"event": "key.create"}))),
        // Namespace "n" exists: the ratelimits.limit case, first in the table, created it.
        "/v1/ratelimits.setOverride" => Some((
            "ratelimit.*.set_override",
            json!({"namespaceName": "n", "identifier": "x", "limit": 1, "duration": 1000}),
        )),
        "/v1/ratelimits.getOverride" => {
            Some(("ratelimit.*.read_override", json!({"namespaceName": "n", "identifier": "x"})))
        }
        "/v1/ratelimits.listOverrides" => Some(("ratelimit.*.read_override", json!({"namespaceName": "n"}))),
        "/v1/ratelimits.deleteOverride" => {
            Some(("ratelimit.*.delete_override", json!({"namespaceName": "n", "identifier": "x"})))
        }
        "/v1/keys.createKey" => Some(("api.*.create_key", json!({"name": "k"}))),
        // "x" and "r" exist: created by the setPermissions and addRoles cases, which run first.
        "/v1/keys.addPermissions" => {
            Some(("rbac.*.add_permission_to_key", json!({"keyId": key, "permissions": [{"name": "x"}]})))
        }
        "/v1/keys.removePermissions" => {
            Some(("rbac.*.remove_permission_from_key", json!({"keyId": key, "permissions": [{"name": "x"}]})))
        }
        "/v1/keys.setRoles" => {
            Some(("rbac.*.add_role_to_key", json!({"keyId": key, "roles": [{"name": "r"}]})))
        }
        "/v1/keys.removeRoles" => {
            Some(("rbac.*.remove_role_from_key", json!({"keyId": key, "roles": [{"name": "r"}]})))
        }
        "/v1/keys.deleteKey" => Some(("api.*.delete_key", json!({"keyId": spare}))),
        "/v1/ratelimits.limit" => Some((
            "ratelimit.*.limit",
            json!({"identifier": "i", "limit": 1, "duration": 1000, "namespace": "n"}),
        )),
        "/v1/permissions.createPermission" => Some(("rbac.*.create_permission", json!({"name": "p.new"}))),
        "/v1/permissions.getPermission" => Some(("rbac.*.read_permission", json!({"permissionId": ids.0}))),
        "/v1/permissions.listPermissions" => Some(("rbac.*.read_permission", json!({}))),
        "/v1/permissions.deletePermission" => {
            Some(("rbac.*.delete_permission", json!({"permissionId": ids.0})))
        }
        "/v1/permissions.createRole" => Some(("rbac.*.create_role", json!({"name": "role.new"}))),
        "/v1/permissions.getRole" => Some(("rbac.*.read_role", json!({"roleId": ids.1}))),
        "/v1/permissions.listRoles" => Some(("rbac.*.read_role", json!({}))),
        "/v1/permissions.deleteRole" => Some(("rbac.*.delete_role", json!({"roleId": ids.1}))),
        "/v1/permissions.addPermissionsToRole" => {
            Some(("rbac.*.add_permission_to_role", json!({"roleId": ids.2, "permissions": [{"name": "x"}]})))
        }
        "/v1/permissions.setRolePermissions" => {
            Some(("rbac.*.add_permission_to_role", json!({"roleId": ids.2, "permissions": [{"name": "x"}]})))
        }
        "/v1/permissions.removePermissionsFromRole" => Some((
            "rbac.*.remove_permission_from_role",
            json!({"roleId": ids.2, "permissions": [{"name": "x"}]}),
        )),
        _ => None,
    }
}

const ALL: &[&str] = &[
    "rbac.*.add_permission_to_key",
    "rbac.*.create_permission",
    "rbac.*.add_role_to_key",
    "rbac.*.create_role",
    "rbac.*.remove_permission_from_key",
    "rbac.*.remove_role_from_key",
    "rbac.*.read_permission",
    "rbac.*.delete_permission",
    "rbac.*.read_role",
    "rbac.*.delete_role",
    "rbac.*.add_permission_to_role",
    "rbac.*.remove_permission_from_role",
    "api.*.read_key",
    "api.*.create_key",
    "api.*.delete_key",
    "ratelimit.*.limit",
    "ratelimit.*.create_namespace",
    "ratelimit.*.set_override",
    "ratelimit.*.read_override",
    "ratelimit.*.delete_override",
    "audit.*.read",
    "api.*.create_api",
    "api.*.read_api",
    "api.*.delete_api",
    "api.*.read_analytics",
];

#[test]
fn every_route_checks_auth_method_and_its_permission() {
    let s = TestServer::start();
    let (key, spare) = (s.create_key(), s.create_key());
    let created = |path: &str, field: &str, name: &str| {
        let r = s.post(path, &json!({ "name": name }));
        r.json[field].as_str().unwrap().to_string()
    };
    let ids = (
        created("/v1/permissions.createPermission", "permissionId", "only.for.routes"),
        created("/v1/permissions.createRole", "roleId", "deleted-by-the-routes"),
        created("/v1/permissions.createRole", "roleId", "kept-by-the-routes"),
        created("/v1/apis.createApi", "apiId", "kept-by-the-routes"),
        created("/v1/apis.createApi", "apiId", "deleted-by-the-routes"),
    );
    let methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"];
    let mut checked = 0;
    for (path, allowed) in ROUTES.iter().filter(|(p, _)| !p.starts_with("/v2/")) {
        // HEAD is served wherever GET is.
        let allow = allowed.join(", ").replace("GET", "GET, HEAD");
        let served = |m: &str| allowed.contains(&m) || (m == "HEAD" && allowed.contains(&"GET"));
        for m in methods.iter().filter(|m| !served(m)) {
            let r = s.request(s.client.request(m.parse().unwrap(), s.url(path)));
            if *m == "HEAD" {
                // No body on a HEAD response, the status and headers alone.
                assert_eq!((r.status, r.text.as_str()), (405, ""), "{m} {path}");
            } else {
                r.assert_error(405, "METHOD_NOT_ALLOWED");
            }
            assert_eq!(r.header("allow"), Some(allow.as_str()), "{m} {path}");
        }
        let Some((permission, body)) = needs(path, &key, &spare, &ids) else {
            // The gateway's forward auth takes its root key in X-Keygate-Root-Key
            // (tests/tests/suite/gateway.rs covers it): without one, 401.
            if path.starts_with("/v1/gateway.authorize") {
                let r = s.request(s.client.get(s.url("/v1/gateway.authorize/x")).bearer_auth(&s.root_key));
                r.assert_error(401, "UNAUTHORIZED");
                continue;
            }
            // GitHub's secret scanning reports carry GitHub's signature, not a root key
            // (tests/tests/suite/scanning.rs): a root key alone is 401.
            if *path == "/v1/secret-scanning/github" {
                let r = s.request(s.client.post(s.url(path)).bearer_auth(&s.root_key).json(&json!([])));
                r.assert_error(401, "UNAUTHORIZED");
                continue;
            }
            // Public routes answer without a root key.
            if *path == "/v1/keys.verifyKey" {
                let r = s.post_raw(path, None, json!({"key": "kg_unknown"}).to_string());
                assert_eq!((r.status, &r.json["code"]), (200, &json!("NOT_FOUND")), "{}", r.text);
                continue;
            }
            assert!(
                matches!(
                    *path,
                    "/v1/liveness"
                        | "/v1/readiness"
                        | "/docs/errors"
                        | "/openapi.json"
                        | "/openapi-v2.json"
                        | "/metrics"
                ),
                "{path} needs a case here"
            );
            let get = s.request(s.client.get(s.url(path)));
            assert_eq!(get.status, 200);
            let head = s.request(s.client.head(s.url(path)));
            assert_eq!((head.status, head.text.as_str()), (200, ""), "HEAD {path}");
            assert_eq!(head.header("content-type"), get.header("content-type"), "HEAD {path}");
            assert!(head.header("unkey-request-id").is_some(), "HEAD {path}");
            continue;
        };
        // POST routes take the body; GET-only routes take its fields as the query.
        let get_only = !allowed.contains(&"POST");
        let query: Vec<(String, String)> = match get_only {
            true => body
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().into()))
                .collect(),
            false => Vec::new(),
        };
        let send = |token: Option<&str>| {
            if !get_only {
                return s.post_raw(path, token, body.to_string());
            }
            let mut req = s.client.get(s.url(path)).query(&query);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            s.request(req)
        };
        send(None).assert_error(401, "UNAUTHORIZED");
        let others: Vec<&str> = ALL.iter().copied().filter(|p| *p != permission).collect();
        let without = s.root_key_with(&others);
        let msg = send(Some(&without)).assert_error(403, "INSUFFICIENT_PERMISSIONS");
        assert!(msg.contains(permission), "{path}: {msg}");
        for other in others {
            assert!(!msg.contains(other), "{path} names only what is missing: {msg}");
        }
        let with = s.root_key_with(ALL);
        let r = send(Some(&with));
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        if get_only {
            // HEAD runs the GET handler, its checks included, and sends no body.
            let head = |token: &str| s.request(s.client.head(s.url(path)).query(&query).bearer_auth(token));
            let (ok, denied) = (head(&with), head("kg_unknown_root_key"));
            assert_eq!((ok.status, ok.text.as_str()), (200, ""), "HEAD {path}");
            assert_eq!((denied.status, denied.text.as_str()), (401, ""), "HEAD {path}");
            assert_eq!(denied.header("www-authenticate"), Some("Bearer"), "HEAD {path}");
        }
        checked += 1;
    }
    assert_eq!(checked, 32, "every authenticated route was checked");
}

#[test]
fn one_call_takes_at_most_1000_entries() {
    let s = TestServer::start();
    let key = s.create_key();
    let entries: Vec<Value> = (0..1001).map(|i| json!({"name": format!("p{i}")})).collect();
    let r = s.post("/v1/keys.setPermissions", &json!({"keyId": key, "permissions": entries}));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "permissions: at most 1000 entries");
    let entries: Vec<Value> = (0..1000).map(|i| json!({"name": format!("p{i}")})).collect();
    let r = s.post("/v1/keys.setPermissions", &json!({"keyId": key, "permissions": entries}));
    assert_eq!(r.names().len(), 1000);
}

#[test]
fn readiness_is_200_while_every_store_answers() {
    let s = TestServer::start();
    let r = s.request(s.client.get(s.url("/v1/readiness")));
    assert_eq!((r.status, &r.json["status"]), (200, &json!("ok")), "{}", r.text);
    assert_eq!(r.json["services"]["database"]["status"], "ok");
    assert_eq!(r.json["services"]["ratelimit"]["status"], "ok");
}
