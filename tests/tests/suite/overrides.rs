//! Rate-limit overrides (contract §5.6, §6): set, get, list, delete, and their effect on
//! `ratelimits.limit` (exact over pattern, most specific pattern, then the oldest).
#![allow(clippy::unwrap_used)]

use keygate_tests::{Resp, T0, TestServer};
use serde_json::{Value, json};

fn get(s: &TestServer, path: &str, query: &[(&str, &str)]) -> Resp {
    s.request(s.client.get(s.url(path)).query(query).bearer_auth(&s.root_key))
}

fn set(s: &TestServer, identifier: &str, limit: u64, duration: u64) -> Resp {
    s.post(
        "/v1/ratelimits.setOverride",
        &json!({"namespaceName": "api", "identifier": identifier, "limit": limit, "duration": duration}),
    )
}

fn limit(s: &TestServer, identifier: &str) -> Value {
    let r = s.limit(json!({"namespace": "api", "identifier": identifier, "limit": 100, "duration": 60_000}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.json
}

#[test]
fn an_override_replaces_limit_and_duration_from_the_next_request() {
    let s = TestServer::start();
    s.clock.set(T0 + 1_234);
    assert_eq!(limit(&s, "user_1")["limit"], 100, "no override yet (and the namespace now exists)");
    let r = set(&s, "user_1", 2, 10_000);
    assert_eq!(r.status, 200, "{}", r.text);
    let id = r.json["overrideId"].as_str().unwrap().to_string();
    assert!(id.starts_with("rlor_"));
    let first = limit(&s, "user_1");
    assert_eq!(
        (&first["limit"], &first["remaining"], &first["reset"]),
        (&json!(2), &json!(1), &json!(T0 + 10_000))
    );
    assert_eq!(limit(&s, "user_1")["success"], true);
    assert_eq!(limit(&s, "user_1")["success"], false, "the override's limit of 2 applies");
    assert_eq!(limit(&s, "user_2")["limit"], 100, "other identifiers keep the request's");

    // Updating keeps the id; deleting restores the request's limit and duration.
    let r = set(&s, "user_1", 5, 10_000);
    assert_eq!(r.json["overrideId"], id.as_str());
    assert_eq!(limit(&s, "user_1")["limit"], 5);
    let r = s.post("/v1/ratelimits.deleteOverride", &json!({"namespaceName": "api", "identifier": "user_1"}));
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    let after = limit(&s, "user_1");
    assert_eq!((&after["limit"], &after["reset"]), (&json!(100), &json!(T0 + 60_000)));
    let r = s.post("/v1/ratelimits.deleteOverride", &json!({"namespaceName": "api", "identifier": "user_1"}));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "override user_1 not found");
    assert_eq!(s.count("audit_events", "action = 'ratelimit_override.set'"), 2);
    assert_eq!(s.count("audit_events", "action = 'ratelimit_override.delete'"), 1);
}

#[test]
fn exact_beats_patterns_and_the_most_specific_oldest_pattern_wins() {
    let s = TestServer::start();
    limit(&s, "warm-up");
    for (identifier, l) in
        [("*", 1), ("user_*", 2), ("*@example.com", 3), ("user_7", 4), ("b*", 5), ("*a", 6)]
    {
        assert_eq!(set(&s, identifier, l, 60_000).status, 200);
    }
    let cases = [
        ("user_7", 4),             // exact
        ("user_8", 2),             // user_* (5 literal characters) over *
        ("x@example.com", 3),      // *@example.com (12)
        ("user_8@example.com", 3), // 12 beats 5
        ("ba", 5),                 // b* and *a tie (1 each): the older one
        ("zzz", 1),
    ];
    for (identifier, expected) in cases {
        assert_eq!(limit(&s, identifier)["limit"], expected, "{identifier}");
    }

    let r = get(&s, "/v1/ratelimits.getOverride", &[("namespaceName", "api"), ("identifier", "user_*")]);
    let id = r.json["id"].clone();
    assert_eq!(
        r.json,
        json!({"id": id, "identifier": "user_*", "limit": 2, "duration": 60_000, "async": false})
    );
    let r = get(&s, "/v1/ratelimits.getOverride", &[("namespaceName", "api"), ("identifier", "user_9")]);
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "override user_9 not found", "get is exact, no matching");
    let ns_id = s.state.rbac.namespace_cached(&principal(&s), "api").unwrap().unwrap().to_string();
    let r = get(&s, "/v1/ratelimits.listOverrides", &[("namespaceId", &ns_id)]);
    let listed: Vec<&str> =
        r.json["overrides"].as_array().unwrap().iter().map(|o| o["identifier"].as_str().unwrap()).collect();
    assert_eq!(listed, ["*", "user_*", "*@example.com", "user_7", "b*", "*a"], "oldest first");
    assert_eq!(r.json["total"], 6);
}

fn principal(s: &TestServer) -> keygate_rbac::Principal {
    keygate_rbac::Principal::new("rk_test".into(), s.workspace_id.clone(), ["*".to_string()])
}

#[test]
fn bad_input_missing_namespaces_and_other_workspaces_are_refused() {
    let s = TestServer::start();
    limit(&s, "warm-up");
    let base = json!({"namespaceName": "api", "identifier": "x", "limit": 1, "duration": 1000});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let cases = [
        (with("limit", json!(0)), "limit: must be >= 1"),
        (with("duration", json!(999)), "duration: must be >= 1000"),
        (with("limit", json!(1.5)), "limit: must be an integer"),
        (with("identifier", json!("")), "identifier: must not be empty"),
        (with("identifier", json!("i".repeat(513))), "identifier: must be at most 512 characters"),
        (
            json!({"identifier": "x", "limit": 1, "duration": 1000}),
            "namespaceId: one of namespaceId or namespaceName is required",
        ),
        (with("namespaceName", json!("")), "namespaceName: must not be empty"),
    ];
    for (body, expected) in cases {
        let r = s.post("/v1/ratelimits.setOverride", &body);
        assert_eq!(r.assert_error(400, "BAD_REQUEST"), expected, "for {body}");
    }
    let r = s.post("/v1/ratelimits.setOverride", &with("namespaceName", json!("nope")));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "namespace nope not found");
    let r = s.post("/v1/ratelimits.setOverride", &with("namespaceId", json!("rlns_missing")));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "namespace rlns_missing not found");
    let r = get(&s, "/v1/ratelimits.getOverride", &[("namespaceName", "api")]);
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "identifier: is required");
    let twice = [("namespaceName", "api"), ("identifier", "a"), ("identifier", "b")];
    let r = get(&s, "/v1/ratelimits.getOverride", &twice);
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "identifier: given more than once in the query");
    assert_eq!(s.count("ratelimit_overrides", "1 = 1"), 0, "nothing was written");

    // Another workspace: its namespace "api" is another namespace; ours is invisible.
    assert_eq!(s.post("/v1/ratelimits.setOverride", &base).status, 200);
    let ws = s.create_workspace("other");
    let outsider = s.root_key_in(&ws, &["*"]);
    let r = s.post_as(
        &outsider,
        "/v1/ratelimits.deleteOverride",
        &json!({"namespaceName": "api", "identifier": "x"}),
    );
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "namespace api not found");
    // A namespace-scoped permission is enough for that namespace.
    let ns_id = s.state.rbac.namespace_cached(&principal(&s), "api").unwrap().unwrap().to_string();
    let scoped = s.root_key_with(&[&format!("ratelimit.{ns_id}.set_override")]);
    assert_eq!(s.post_as(&scoped, "/v1/ratelimits.setOverride", &with("identifier", json!("y"))).status, 200);
    let r = s.post_as(
        &scoped,
        "/v1/ratelimits.deleteOverride",
        &json!({"namespaceName": "api", "identifier": "y"}),
    );
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("ratelimit.*.delete_override"));
}

/// Issue 15, defect 3: patterns are bounded so that no namespace's overrides make its
/// decisions (or anyone else's) expensive.
#[test]
fn patterns_are_bounded_in_stars_and_in_bytes_per_namespace() {
    let s = TestServer::start();
    limit(&s, "create the namespace");
    let r = set(&s, &"a*".repeat(9), 1, 1_000);
    assert_eq!(
        r.assert_error(400, "BAD_REQUEST"),
        "identifier: a pattern holds at most 8 '*' (this one has 9)"
    );
    assert_eq!(set(&s, &"a*".repeat(8), 1, 1_000).status, 200);
    // 64 KiB of patterns: 131 of 500 bytes fit beside the one above, the 132nd does not.
    for i in 0..131 {
        let r = set(&s, &format!("*{i:04}{}", "x".repeat(495)), 1, 1_000);
        assert_eq!(r.status, 200, "{i}: {}", r.text);
    }
    let r = set(&s, &format!("*9999{}", "x".repeat(495)), 1, 1_000);
    let msg = r.assert_error(400, "BAD_REQUEST");
    assert!(
        msg.starts_with("identifier: the patterns of namespace api may hold at most 65536 bytes"),
        "{msg}"
    );
    // Replacing an existing pattern's limit is no growth; exact identifiers do not count.
    assert_eq!(set(&s, &format!("*0000{}", "x".repeat(495)), 5, 1_000).status, 200);
    assert_eq!(set(&s, &"e".repeat(512), 5, 1_000).status, 200);
    // The matching still works against the largest set.
    assert_eq!(limit(&s, &format!("{}0007{}", "z".repeat(10), "x".repeat(495)))["limit"], 1);
    assert_eq!(limit(&s, &"e".repeat(512))["limit"], 5);
    assert_eq!(limit(&s, "unmatched")["limit"], 100);
}
