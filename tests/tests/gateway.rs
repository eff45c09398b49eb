//! `/v1/gateway.authorize` (docs/gateways.md): the forward auth a gateway calls, over HTTP
//! (the real nginx and Caddy in front of it: bins/keygate/tests/gateways.rs).
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::json;
use std::sync::Arc;

const PATH: &str = "/v1/gateway.authorize";

/// A forward-auth call as a gateway makes it: its root key, then `headers`.
fn authorize(s: &TestServer, root: &str, headers: &[(&str, &str)]) -> keygate_tests::Resp {
    let mut req = s.client.get(s.url(PATH)).header("x-keygate-root-key", root);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    s.request(req)
}

fn key(s: &TestServer, body: serde_json::Value) -> (String, String) {
    let r = s.post("/v1/keys.createKey", &body);
    (r.json["keyId"].as_str().unwrap().to_string(), r.json["key"].as_str().unwrap().to_string())
}

#[test]
fn a_key_its_permission_and_its_rate_limit_in_one_call() {
    let s = TestServer::start();
    let (id, secret) = key(
        &s,
        json!({"apiId": "api_gw", "name": "checkout", "meta": {"plan": "pro"}, "permissions": ["docs.read"]}),
    );
    let bearer = format!("Bearer {secret}");
    let policy = [
        ("authorization", bearer.as_str()),
        ("x-keygate-permissions", "docs.read"),
        ("x-keygate-ratelimit", "namespace=gw; limit=2; duration=60000"),
        ("x-original-method", "GET"),
        ("x-original-uri", "/docs/1"),
    ];
    let r = authorize(&s, &s.root_key, &policy);
    assert_eq!(r.status, 200, "{}", r.text);
    // No body, so that nginx keeps its connection to keygate (docs/gateways.md).
    assert_eq!((r.text.as_str(), r.header("content-length")), ("", Some("0")));
    assert_eq!(r.header("x-keygate-key-id"), Some(id.as_str()));
    assert_eq!(r.header("x-keygate-key-name"), Some("checkout"));
    assert_eq!(r.header("x-keygate-key-meta"), Some(r#"{"plan":"pro"}"#));
    assert_eq!((r.header("ratelimit-limit"), r.header("ratelimit-remaining")), (Some("2"), Some("1")));
    assert_eq!(r.header("ratelimit-reset"), Some("60"));
    assert_eq!(authorize(&s, &s.root_key, &policy).header("ratelimit-remaining"), Some("0"));
    let r = authorize(&s, &s.root_key, &policy);
    r.assert_error(429, "TOO_MANY_REQUESTS");
    assert_eq!((r.header("retry-after"), r.header("ratelimit-remaining")), (Some("60"), Some("0")));
    s.clock.advance(59_500);
    assert_eq!(authorize(&s, &s.root_key, &policy).header("retry-after"), Some("1"), "rounded up");
    // The budget is the key's (identifier = key id) and the one v1 sees.
    let v1 = s.limit(json!({"namespace": "gw", "identifier": id, "limit": 2, "duration": 60_000, "cost": 0}));
    assert_eq!(v1.json["remaining"], 0);
    s.clock.advance(500);
    assert_eq!(authorize(&s, &s.root_key, &policy).status, 200, "a new window");
    // Envoy appends the original path to the configured prefix.
    let r = s.request(
        s.client
            .post(s.url("/v1/gateway.authorize/docs/1?x=1"))
            .header("x-keygate-root-key", &s.root_key)
            .header("authorization", &bearer),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn refusals_name_the_key_the_permission_or_the_configuration_and_consume_nothing() {
    let s = TestServer::start();
    let (id, secret) = key(&s, json!({"apiId": "api_gw", "permissions": ["docs.read"]}));
    let bearer = format!("Bearer {secret}");
    let limit = ("x-keygate-ratelimit", "namespace=gw; limit=5; duration=60000");
    // No key, a wrong key, a malformed Authorization: 401 with WWW-Authenticate.
    let huge = format!("Bearer {}", "k".repeat(600));
    for headers in [
        vec![limit],
        vec![("authorization", "Bearer sk_wrong_key_000"), limit],
        vec![("authorization", "Basic abc"), limit],
        vec![("authorization", huge.as_str()), limit],
    ] {
        let r = authorize(&s, &s.root_key, &headers);
        r.assert_error(401, "UNAUTHORIZED");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    }
    // A key without the permission: 403, and its budget untouched.
    let r = authorize(
        &s,
        &s.root_key,
        &[("authorization", &bearer), ("x-keygate-permissions", "docs.write"), limit],
    );
    r.assert_error(403, "INSUFFICIENT_PERMISSIONS");
    let v1 = s.limit(json!({"namespace": "gw", "identifier": id, "limit": 5, "duration": 60_000, "cost": 0}));
    assert_eq!(v1.json["remaining"], 5, "a refused request consumes nothing");
    // Disabled, expired, deleted keys: 401.
    let (_, disabled) = key(&s, json!({"enabled": false}));
    let (_, expiring) = key(&s, json!({"expires": T0 + 1_000}));
    authorize(&s, &s.root_key, &[("authorization", &format!("Bearer {disabled}"))])
        .assert_error(401, "UNAUTHORIZED");
    assert_eq!(authorize(&s, &s.root_key, &[("authorization", &format!("Bearer {expiring}"))]).status, 200);
    s.clock.advance(1_000);
    authorize(&s, &s.root_key, &[("authorization", &format!("Bearer {expiring}"))])
        .assert_error(401, "UNAUTHORIZED");
    assert_eq!(authorize(&s, &s.root_key, &[("authorization", &bearer)]).status, 200);
    s.post("/v1/keys.deleteKey", &json!({"keyId": id}));
    authorize(&s, &s.root_key, &[("authorization", &bearer)]).assert_error(401, "UNAUTHORIZED");

    // The gateway's own configuration: a clear 400, never a pass.
    let (_, fresh) = key(&s, json!({}));
    let fresh = format!("Bearer {fresh}");
    for (name, value) in [
        ("x-keygate-ratelimit", "namespace=gw; limit=0; duration=60000"),
        ("x-keygate-ratelimit", "limit=5"),
        ("x-keygate-ratelimit", "namespace=gw; limit=5; duration=60000; identifier=ip"),
        ("x-keygate-ratelimit", "namespace=gw; limit=5; duration=60000; identifier=header:x-real-ip"),
        ("x-keygate-permissions", "a AND"),
        ("x-keygate-key-header", "bad header"),
        ("x-keygate-policy", "no-such-policy"),
    ] {
        let r = authorize(&s, &s.root_key, &[("authorization", &fresh), (name, value)]);
        r.assert_error(400, "BAD_REQUEST");
    }
    // The gateway's root key: missing or unknown 401; without a verify permission 403.
    let r = s.request(s.client.get(s.url(PATH)).header("authorization", &fresh));
    assert!(r.assert_error(401, "UNAUTHORIZED").contains("X-Keygate-Root-Key"));
    authorize(&s, "kg_root_not_a_real_one_00000000", &[("authorization", &fresh)])
        .assert_error(401, "UNAUTHORIZED");
    let weak = s.root_key_with(&["ratelimit.*.limit"]);
    authorize(&s, &weak, &[("authorization", &fresh)]).assert_error(403, "INSUFFICIENT_PERMISSIONS");
    // Another workspace's gateway never accepts this workspace's keys.
    let other = s.create_workspace("other");
    let foreign = s.root_key_in(&other, &["*"]);
    authorize(&s, &foreign, &[("authorization", &fresh)]).assert_error(401, "UNAUTHORIZED");
}

#[test]
fn a_named_policy_a_key_header_and_an_identifier_header() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.json");
    std::fs::write(
        &file,
        r#"{"policies": {"docs": {"permissions": "docs.read OR admin", "ratelimit": "namespace=docs; limit=1; duration=1000; identifier=header:x-real-ip", "keyHeader": "X-API-Key"}}}"#,
    )
    .unwrap();
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.gateway_policies = Some(file.display().to_string());
    let s = TestServer::start_with(config, db);
    let (_, secret) = key(&s, json!({"permissions": ["docs.read"]}));
    let call = |ip: &str| {
        authorize(&s, &s.root_key, &[("x-keygate-policy", "docs"), ("x-api-key", &secret), ("x-real-ip", ip)])
    };
    assert_eq!(call("10.0.0.1").status, 200);
    call("10.0.0.1").assert_error(429, "TOO_MANY_REQUESTS");
    assert_eq!(call("10.0.0.2").status, 200, "one budget per client address");
    // Headers override the policy's fields.
    let r = authorize(
        &s,
        &s.root_key,
        &[
            ("x-keygate-policy", "docs"),
            ("x-api-key", &secret),
            ("x-real-ip", "10.0.0.3"),
            ("x-keygate-permissions", "admin"),
        ],
    );
    r.assert_error(403, "INSUFFICIENT_PERMISSIONS");
    // The Authorization header is not read when the policy names another.
    let r = authorize(
        &s,
        &s.root_key,
        &[
            ("x-keygate-policy", "docs"),
            ("authorization", &format!("Bearer {secret}")),
            ("x-real-ip", "10.0.0.4"),
        ],
    );
    r.assert_error(401, "UNAUTHORIZED");
}
