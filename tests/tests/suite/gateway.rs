//! `/v1/gateway.authorize` (docs/gateways.md): the forward auth a gateway calls, over HTTP
//! (the real nginx and Caddy in front of it: bins/keygate/tests/process/gateways.rs).
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
    // A named policy is authoritative: a call that also carries a field of its own (as an
    // end user's header a gateway let through would) is refused, never laid over it.
    for (name, value) in [
        ("x-keygate-permissions", "admin"),
        ("x-keygate-permissions", ""),
        ("X-KEYGATE-RATELIMIT", "namespace=docs; limit=1000000; duration=60000"),
        ("x-keygate-key-header", "authorization"),
    ] {
        let r = authorize(
            &s,
            &s.root_key,
            &[("x-keygate-policy", "docs"), ("x-api-key", &secret), ("x-real-ip", "10.0.0.3"), (name, value)],
        );
        assert!(r.assert_error(400, "BAD_REQUEST").contains("authoritative"), "{name}: {}", r.text);
    }
    // Nor can a policy be laid over inline fields.
    let r = authorize(
        &s,
        &s.root_key,
        &[("x-keygate-permissions", "docs.read"), ("x-keygate-policy", "docs"), ("x-api-key", &secret)],
    );
    r.assert_error(400, "BAD_REQUEST");
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

/// Sends `headers` as they are (names repeated where given twice).
fn authorize_raw(s: &TestServer, headers: &[(&str, &str)]) -> keygate_tests::Resp {
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        map.append(reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    s.request(s.client.get(s.url(PATH)).headers(map))
}

/// `keygate_gateway_refusals_total{reason}` now (the recorder is the process's: other tests
/// of this binary may add to it, never take away).
fn refusals(s: &TestServer, reason: &str) -> u64 {
    let text = s.request(s.client.get(s.url("/metrics"))).text;
    let series = format!("keygate_gateway_refusals_total{{reason=\"{reason}\"}} ");
    let line = text.lines().find_map(|l| l.strip_prefix(series.as_str()));
    line.unwrap_or_else(|| panic!("no {series} in /metrics")).trim().parse().unwrap()
}

#[test]
fn a_control_header_sent_twice_is_refused_whichever_copy_comes_first() {
    let s = TestServer::start();
    let before = refusals(&s, "duplicate_header");
    let (_, secret) = key(&s, json!({"permissions": ["docs.read"]}));
    let bearer = format!("Bearer {secret}");
    let root = s.root_key.as_str();
    let base = [("x-keygate-root-key", root), ("authorization", bearer.as_str())];
    assert_eq!(authorize_raw(&s, &base).status, 200);
    for twice in [
        [("x-keygate-root-key", root), ("x-keygate-root-key", "kg_root_someone_elses_0000000000")],
        [("x-keygate-permissions", "nothing.held"), ("x-keygate-permissions", "docs.read")],
        [
            ("x-keygate-ratelimit", "namespace=a; limit=9; duration=60000"),
            ("x-keygate-ratelimit", "namespace=a; limit=1; duration=60000"),
        ],
        [("x-keygate-key-header", "x-other"), ("x-keygate-key-header", "x-api-key")],
        [("x-keygate-policy", "a"), ("X-Keygate-Policy", "b")],
    ] {
        let mut headers = base.to_vec();
        headers.retain(|(k, _)| *k != twice[0].0);
        headers.extend(twice);
        let r = authorize_raw(&s, &headers);
        assert!(r.assert_error(400, "BAD_REQUEST").contains("more than once"), "{twice:?}: {}", r.text);
    }
    // Two keys: not a key.
    let r = authorize_raw(&s, &[base[0], base[1], ("authorization", "Bearer sk_another_000000")]);
    r.assert_error(401, "UNAUTHORIZED");
    // An identifier header twice: its budget is not the client's to pick.
    let limit = ("x-keygate-ratelimit", "namespace=ip; limit=5; duration=60000; identifier=header:x-real-ip");
    let r =
        authorize_raw(&s, &[base[0], base[1], limit, ("x-real-ip", "10.0.0.1"), ("x-real-ip", "10.0.0.2")]);
    r.assert_error(400, "BAD_REQUEST");
    let after = refusals(&s, "duplicate_header");
    assert!(after >= before + 5, "the control headers sent twice are counted: {before} -> {after}");
}

#[test]
fn a_root_key_bound_to_a_policy_uses_only_it_and_takes_no_inline_fields() {
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    // The gateway's root key exists before the server that binds it starts.
    let (gateway, gateway_secret) = {
        let first = TestServer::start_on(db.clone());
        let perms = [
            "api.*.verify_key".to_string(),
            "ratelimit.*.limit".into(),
            "ratelimit.*.create_namespace".into(),
        ];
        let (rk, secret) = first.state.rbac.create_root_key(&first.workspace_id, &perms).unwrap();
        (rk.id, secret.expose().to_string())
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"policies": {{"docs": {{"permissions": "docs.read", "ratelimit": "namespace=docs; limit=2; duration=60000"}}, "open": {{}}}},
               "rootKeys": {{"{gateway}": ["docs"]}}}}"#
        ),
    )
    .unwrap();
    let mut config = TestServer::config(&db.url);
    config.gateway_policies = Some(file.display().to_string());
    let s = TestServer::start_with(config, db);
    let (_, reader) = key(&s, json!({"permissions": ["docs.read"]}));
    let (_, writer) = key(&s, json!({"permissions": ["docs.write"]}));
    let (reader, writer) = (format!("Bearer {reader}"), format!("Bearer {writer}"));
    // No X-Keygate-Policy: its one policy.
    let r = authorize(&s, &gateway_secret, &[("authorization", &reader)]);
    assert_eq!((r.status, r.header("ratelimit-limit")), (200, Some("2")), "{}", r.text);
    authorize(&s, &gateway_secret, &[("authorization", &writer)])
        .assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert_eq!(
        authorize(&s, &gateway_secret, &[("authorization", &reader), ("x-keygate-policy", "docs")]).status,
        200
    );
    // Another policy: forbidden; inline fields: refused; and nothing was spent by either.
    let r = authorize(&s, &gateway_secret, &[("authorization", &writer), ("x-keygate-policy", "open")]);
    assert!(r.assert_error(403, "FORBIDDEN").contains("\"docs\""), "{}", r.text);
    for inline in [
        ("x-keygate-permissions", "docs.write"),
        ("x-keygate-ratelimit", "namespace=x; limit=9; duration=1000"),
    ] {
        authorize(&s, &gateway_secret, &[("authorization", &writer), inline])
            .assert_error(400, "BAD_REQUEST");
    }
    authorize(&s, &gateway_secret, &[("authorization", &reader)]).assert_error(429, "TOO_MANY_REQUESTS");
    assert!(refusals(&s, "policy_not_bound") >= 1 && refusals(&s, "policy_overridden") >= 2);
    // An unbound root key still decides by inline fields.
    let r =
        authorize(&s, &s.root_key, &[("authorization", &writer), ("x-keygate-permissions", "docs.write")]);
    assert_eq!(r.status, 200, "{}", r.text);
}

/// `"name";a=1;b=2` (one member of an sf-list whose parameters are integers): its string
/// and parameters. A strict reading of the draft's shape; the gateway tests parse the same
/// fields with a structured-field library.
fn sf_item(field: &str) -> (String, std::collections::BTreeMap<String, u64>) {
    let rest = field.strip_prefix('"').unwrap();
    let end = rest.find('"').unwrap();
    let params = rest[end + 1..]
        .split(';')
        .skip(1)
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    (rest[..end].to_string(), params)
}

#[test]
fn draft_rate_limit_fields_agree_with_the_legacy_headers_on_forward_auth_and_on_limit() {
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.ratelimit_headers = true;
    let s = TestServer::start_with(config, db);
    let (_, secret) = key(&s, json!({}));
    let bearer = format!("Bearer {secret}");
    let limit = ("x-keygate-ratelimit", "namespace=gw.fields; limit=3; duration=90500");
    for remaining in [2, 1, 0] {
        let r = authorize(&s, &s.root_key, &[("authorization", &bearer), limit]);
        assert_eq!(r.status, 200, "{}", r.text);
        let (name, policy) = sf_item(r.header("ratelimit-policy").unwrap());
        let (same, now) = sf_item(r.header("ratelimit").unwrap());
        assert_eq!((name.as_str(), same.as_str()), ("gw.fields", "gw.fields"));
        assert_eq!((policy["q"], policy["w"]), (3, 91), "the window in whole seconds, rounded up");
        assert_eq!(now["r"], remaining);
        assert_eq!(r.header("ratelimit-remaining"), Some(remaining.to_string().as_str()));
        assert_eq!(Some(now["t"].to_string().as_str()), r.header("ratelimit-reset"));
    }
    let r = authorize(&s, &s.root_key, &[("authorization", &bearer), limit]);
    r.assert_error(429, "TOO_MANY_REQUESTS");
    let (_, now) = sf_item(r.header("ratelimit").unwrap());
    assert_eq!((now["r"], Some(now["t"].to_string())), (0, r.header("retry-after").map(str::to_owned)));
    // ratelimits.limit (v1) and ratelimit.limit (v2), with KEYGATE_RATELIMIT_HEADERS on.
    let body = json!({"namespace": "plain", "identifier": "u1", "limit": 10, "duration": 60_000, "cost": 4});
    let v1 = s.limit(body.clone());
    let (_, now) = sf_item(v1.header("ratelimit").unwrap());
    assert_eq!((v1.json["remaining"].as_u64(), now["r"]), (Some(6), 6));
    let reset_s = (v1.json["reset"].as_u64().unwrap() - T0).div_ceil(1000);
    assert_eq!(now["t"], reset_s);
    let v2 = s.post("/v2/ratelimit.limit", &body);
    let (name, policy) = sf_item(v2.header("ratelimit-policy").unwrap());
    assert_eq!((name.as_str(), policy["q"], policy["w"]), ("plain", 10, 60));
    assert_eq!(
        (v2.json["data"]["remaining"].as_u64(), v2.header("ratelimit-remaining")),
        (Some(2), Some("2"))
    );
}

#[test]
fn limit_answers_carry_no_rate_limit_fields_unless_asked() {
    let s = TestServer::start();
    let body = json!({"namespace": "plain", "identifier": "u1", "limit": 10, "duration": 60_000});
    let v1 = s.limit(body.clone());
    let v2 = s.post("/v2/ratelimit.limit", &body);
    for r in [&v1, &v2] {
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(r.header("ratelimit").is_none() && r.header("ratelimit-policy").is_none(), "{:?}", r.text);
    }
}
