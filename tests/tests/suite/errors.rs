//! Error codes, order of checks and hostile input (contract §1, §1.1): every bad input is
//! a 4xx with the contract's body, never a 5xx or a panic, and changes nothing.
#![allow(clippy::unwrap_used)]

use keygate_tests::{TestServer, set_body};
use serde_json::json;

const ENDPOINTS: [&str; 18] = [
    "/v1/keys.setPermissions",
    "/v1/keys.addRoles",
    "/v1/ratelimits.limit",
    "/v1/keys.createKey",
    "/v1/keys.deleteKey",
    "/v1/keys.addPermissions",
    "/v1/keys.removePermissions",
    "/v1/keys.setRoles",
    "/v1/keys.removeRoles",
    "/v1/permissions.createPermission",
    "/v1/permissions.deletePermission",
    "/v1/permissions.createRole",
    "/v1/permissions.deleteRole",
    "/v1/permissions.addPermissionsToRole",
    "/v1/permissions.setRolePermissions",
    "/v1/permissions.removePermissionsFromRole",
    "/v1/ratelimits.setOverride",
    "/v1/ratelimits.deleteOverride",
];

#[test]
fn unknown_path_404_and_wrong_method_405_before_auth() {
    let s = TestServer::start();
    let r = s.request(s.client.post(s.url("/v1/keys.nope")));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "no route POST /v1/keys.nope");
    let r = s.request(s.client.get(s.url("/")));
    r.assert_error(404, "NOT_FOUND");
    for path in ENDPOINTS {
        for method in
            [reqwest::Method::GET, reqwest::Method::PUT, reqwest::Method::DELETE, reqwest::Method::PATCH]
        {
            let r = s.request(s.client.request(method.clone(), s.url(path)));
            r.assert_error(405, "METHOD_NOT_ALLOWED");
            assert_eq!(r.header("allow"), Some("POST"), "{method} {path}");
        }
    }
}

#[test]
fn authentication_comes_before_the_body() {
    let s = TestServer::start();
    let revoked = {
        let (rk, secret) = s.state.rbac.create_root_key("default", &["*".to_string()]).unwrap();
        s.state.rbac.revoke_root_key(&rk.id).unwrap();
        secret.expose().to_string()
    };
    let key = s.create_key();
    // A real key's secret is not a root key.
    let key_secret = s.state.rbac.create_key(&s.workspace_id, None).unwrap().1.expose().to_string();
    let bad_auth: [Option<String>; 6] = [
        None,
        Some("kg_root_unknown".into()),
        Some(revoked),
        Some(String::new()),
        Some(key.clone()),
        Some(key_secret),
    ];
    for path in ENDPOINTS {
        for auth in &bad_auth {
            // A garbage, oversized, non-JSON body: still 401.
            let mut req =
                s.client.post(s.url(path)).header("content-type", "text/plain").body(vec![b'x'; 2 << 20]);
            if let Some(token) = auth {
                req = req.header("authorization", format!("Bearer {token}"));
            }
            let r = s.request(req);
            r.assert_error(401, "UNAUTHORIZED");
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        }
        for header in ["Basic abc", "Bearer", "Bearer ", "bearer", "Token x"] {
            let r = s.request(s.client.post(s.url(path)).header("authorization", header));
            r.assert_error(401, "UNAUTHORIZED");
        }
    }
}

#[test]
fn content_type_and_size() {
    let s = TestServer::start();
    let key = s.create_key();
    let body = set_body(&key, json!([])).to_string();
    for path in ENDPOINTS {
        for ct in
            [None, Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("application/jsonx")]
        {
            let mut req = s.client.post(s.url(path)).bearer_auth(&s.root_key).body(body.clone());
            if let Some(ct) = ct {
                req = req.header("content-type", ct);
            }
            let msg = s.request(req).assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
            assert!(msg.contains("Content-Type: application/json"), "{msg}");
        }
        // A compressed body is refused for its coding, not parsed as malformed JSON.
        for coding in ["gzip", "br", "deflate, gzip"] {
            let req = s
                .client
                .post(s.url(path))
                .bearer_auth(&s.root_key)
                .header("content-type", "application/json")
                .header("content-encoding", coding)
                .body(vec![0x1f, 0x8b, 8, 0]);
            let msg = s.request(req).assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
            assert!(msg.contains(&format!("Content-Encoding {coding} is not supported")), "{msg}");
        }
        let r = s.post_raw(path, Some(&s.root_key), vec![b' '; (1 << 20) + 1]);
        r.assert_error(413, "PAYLOAD_TOO_LARGE");
        let big = format!("{{\"keyId\":\"{key}\",\"permissions\":[],\"pad\":\"{}\"}}", "x".repeat(2 << 20));
        s.post_raw(path, Some(&s.root_key), big).assert_error(413, "PAYLOAD_TOO_LARGE");
    }
    // Size is checked before the media type.
    let r = s.request(
        s.client
            .post(s.url("/v1/keys.setPermissions"))
            .bearer_auth(&s.root_key)
            .header("content-type", "text/plain")
            .body(vec![b'x'; 2 << 20]),
    );
    r.assert_error(413, "PAYLOAD_TOO_LARGE");
    // A charset suffix is fine, and so is the `identity` coding (none).
    let r = s.request(
        s.client
            .post(s.url("/v1/keys.setPermissions"))
            .bearer_auth(&s.root_key)
            .header("content-type", "application/json; charset=utf-8")
            .header("content-encoding", "identity")
            .body(body),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn hostile_bodies_are_400_and_change_nothing() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"name": "before"}])));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_obj = format!("{{\"keyId\":{}1{}}}", "{\"a\":".repeat(5_000), "}".repeat(5_000));
    let bodies: Vec<String> = vec![
        String::new(),
        "   ".into(),
        "{".into(),
        "not json".into(),
        "null".into(),
        "[]".into(),
        "42".into(),
        "\"string\"".into(),
        "{}".into(),
        "{\"keyId\": null, \"permissions\": []}".into(),
        format!("{{\"keyId\": \"{key}\"}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": null}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": {{}}}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [\"a\"]}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [{{\"name\": 1}}]}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [{{\"name\": \"\"}}]}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [{{\"name\": \"{}\"}}]}}", "x".repeat(256)),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [{{\"id\": \"\"}}]}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [{{\"name\": \"a\", \"create\": \"yes\"}}]}}"),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [{{\"name\": \"bad name\"}}]}}"),
        "{\"keyId\": \"\", \"permissions\": []}".into(),
        format!("{{\"keyId\": \"{}\", \"permissions\": []}}", "k".repeat(256)),
        "{\"keyId\": 18446744073709551616, \"permissions\": []}".into(),
        "{\"keyId\": 1e400, \"permissions\": []}".into(),
        format!("{{\"keyId\": \"{key}\", \"permissions\": [], }}"),
        format!("{{\"keyId\": \"{key}\", \"keyId\": \"{key}\", \"permissions\": []}}"),
        "{\"keyId\": \"\\ud800\", \"permissions\": []}".into(),
        deep,
        deep_obj,
    ];
    for body in &bodies {
        let r = s.post_raw("/v1/keys.setPermissions", Some(&s.root_key), body.clone());
        let msg = r.assert_error(400, "BAD_REQUEST");
        assert!(!msg.is_empty());
    }
    let invalid_utf8 = b"{\"keyId\": \"\xff\xfe\", \"permissions\": []}".to_vec();
    s.post_raw("/v1/keys.setPermissions", Some(&s.root_key), invalid_utf8).assert_error(400, "BAD_REQUEST");
    assert_eq!(s.key_permissions(&key), ["before"]);
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["before"]);

    let limit_bodies = [
        "{\"identifier\": \"a\", \"limit\": 18446744073709551616, \"duration\": 1000}",
        "{\"identifier\": \"a\", \"limit\": 1e400, \"duration\": 1000}",
        "{\"identifier\": \"a\", \"limit\": 1, \"duration\": 1.0005e3}",
        "{\"identifier\": \"a\", \"limit\": 1, \"duration\": 1000.5}",
        "{\"identifier\": \"a\", \"limit\": 1, \"duration\": -1000}",
        "{\"identifier\": \"a\", \"limit\": 1, \"duration\": 1000, \"cost\": 0.5}",
        "{\"identifier\": \"a\", \"limit\": 1, \"duration\": 1000, \"resources\": {}}",
        "{\"identifier\": \"a\", \"limit\": 1, \"duration\": 1000, \"meta\": []}",
        "{\"identifier\": [\"a\"], \"limit\": 1, \"duration\": 1000}",
    ];
    for body in limit_bodies {
        s.post_raw("/v1/ratelimits.limit", Some(&s.root_key), body).assert_error(400, "BAD_REQUEST");
    }
}

#[test]
fn messages_use_dot_paths() {
    let s = TestServer::start();
    let key = s.create_key();
    let cases = [
        (json!({"permissions": []}), "keyId: is required"),
        (json!({"keyId": key}), "permissions: is required"),
        (
            json!({"keyId": key, "permissions": [{"name": "ok"}, {"name": 5}]}),
            "permissions.1.name: invalid type: integer `5`, expected a string",
        ),
        (json!({"keyId": key, "permissions": [{}]}), "permissions.0: an entry needs an id or a name"),
        (json!({"keyId": "", "permissions": []}), "keyId: must not be empty"),
    ];
    for (body, expected) in cases {
        let r = s.post("/v1/keys.setPermissions", &body);
        assert_eq!(r.assert_error(400, "BAD_REQUEST"), expected);
    }
    // Unknown fields are ignored.
    let r = s.post(
        "/v1/keys.setPermissions",
        &json!({"keyId": key, "permissions": [{"name": "x", "extra": 1}], "apiId": "a"}),
    );
    assert_eq!(r.names(), ["x"]);
}

#[test]
fn success_responses_carry_a_request_id_too() {
    let s = TestServer::start();
    let r = s.limit(json!({"identifier": "a", "limit": 1, "duration": 1000}));
    assert_eq!(r.status, 200);
    assert!(r.header("unkey-request-id").unwrap().starts_with("req_"));
    assert!(r.header("content-type").unwrap().starts_with("application/json"));
    let live = s.request(s.client.get(s.url("/v1/liveness")));
    assert_eq!(live.status, 200);
    assert_eq!(live.json["status"], "ok");
    let kind = if s.db.is_postgres() { "postgres" } else { "sqlite" };
    assert_eq!(live.json["services"]["database"]["kind"], kind);
    assert_eq!(live.json["services"]["database"]["status"], "ok");
    let docs = s.request(s.client.get(s.url("/docs/errors")));
    assert!(docs.text.contains("INSUFFICIENT_PERMISSIONS"));
}

#[test]
fn nul_characters_are_4xx_on_every_backend() {
    let s = TestServer::start();
    let key = s.create_key();
    let cases = [
        ("/v1/keys.setPermissions", json!({"keyId": "key_\u{0}x", "permissions": []})),
        ("/v1/keys.setPermissions", json!({"keyId": key, "permissions": [{"id": "perm_\u{0}"}]})),
        ("/v1/keys.addRoles", json!({"keyId": key, "roles": [{"id": "role_\u{0}"}]})),
        ("/v1/keys.getKey", json!({"keyId": "key_\u{0}"})),
        (
            "/v1/ratelimits.limit",
            json!({"identifier": "a", "limit": 1, "duration": 1000, "namespace": "n\u{0}s"}),
        ),
    ];
    for (path, body) in cases {
        let r = s.post(path, &body);
        assert!((400..500).contains(&r.status), "{path} {body}: {} {}", r.status, r.text);
    }
    // Refused in every string alike, also where it would never reach the database (an
    // identifier): one rule for every field (tests/nul.rs covers them all).
    let r = s.limit(json!({"identifier": "a\u{0}b", "limit": 1, "duration": 1000}));
    r.assert_error(400, "BAD_REQUEST");
}
