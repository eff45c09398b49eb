//! `POST /v1/ratelimits.limit`, contract §5, rule by rule. Time moves through the
//! injected clock; nothing sleeps.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

const PATH: &str = "/v1/ratelimits.limit";

fn req(identifier: &str, limit: u64, duration: u64) -> Value {
    json!({"identifier": identifier, "limit": limit, "duration": duration})
}

fn decision(r: &keygate_tests::Resp) -> (bool, u64, u64, u64) {
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json.as_object().unwrap().len(), 4, "exactly success, limit, remaining, reset: {}", r.text);
    (
        r.json["success"].as_bool().unwrap(),
        r.json["limit"].as_u64().unwrap(),
        r.json["remaining"].as_u64().unwrap(),
        r.json["reset"].as_u64().unwrap(),
    )
}

#[test]
fn passes_until_the_limit_then_denies_with_reset_at_window_end() {
    let s = TestServer::start();
    s.clock.set(T0 + 12_345);
    let reset = T0 + 60_000;
    assert_eq!(decision(&s.limit(req("u", 3, 60_000))), (true, 3, 2, reset));
    assert_eq!(decision(&s.limit(req("u", 3, 60_000))), (true, 3, 1, reset));
    assert_eq!(decision(&s.limit(req("u", 3, 60_000))), (true, 3, 0, reset));
    assert_eq!(decision(&s.limit(req("u", 3, 60_000))), (false, 3, 0, reset));
}

#[test]
fn windows_roll_over_on_epoch_boundaries() {
    let s = TestServer::start();
    s.clock.set(T0 + 59_999);
    assert_eq!(decision(&s.limit(req("w", 1, 60_000))), (true, 1, 0, T0 + 60_000));
    assert!(!decision(&s.limit(req("w", 1, 60_000))).0);
    s.clock.set(T0 + 60_000);
    assert_eq!(decision(&s.limit(req("w", 1, 60_000))), (true, 1, 0, T0 + 120_000));
    s.clock.advance(60_000 * 5 + 1);
    assert!(decision(&s.limit(req("w", 1, 60_000))).0);
}

#[test]
fn denial_deducts_nothing_and_cost_above_limit_is_denied() {
    let s = TestServer::start();
    let with_cost = |cost: u64| json!({"identifier": "c", "limit": 10, "duration": 60_000, "cost": cost});
    assert_eq!(decision(&s.limit(with_cost(7))).2, 3);
    let (ok, _, remaining, _) = decision(&s.limit(with_cost(4)));
    assert!(!ok);
    assert_eq!(remaining, 3, "the denied request deducted nothing");
    assert_eq!(decision(&s.limit(with_cost(3))), (true, 10, 0, T0 + 60_000));
    let fresh = json!({"identifier": "big", "limit": 5, "duration": 60_000, "cost": 6});
    assert_eq!(decision(&s.limit(fresh)), (false, 5, 5, T0 + 60_000));
}

#[test]
fn cost_zero_reports_without_consuming() {
    let s = TestServer::start();
    let zero = json!({"identifier": "z", "limit": 2, "duration": 10_000, "cost": 0});
    assert_eq!(decision(&s.limit(zero.clone())), (true, 2, 2, T0 + 10_000));
    s.limit(req("z", 2, 10_000));
    assert_eq!(decision(&s.limit(zero.clone())), (true, 2, 1, T0 + 10_000));
    s.limit(req("z", 2, 10_000));
    assert_eq!(decision(&s.limit(zero.clone())), (false, 2, 0, T0 + 10_000), "success = used < limit");
    assert_eq!(decision(&s.limit(zero)).2, 0, "still nothing consumed");
}

#[test]
fn identity_excludes_limit_and_async_but_includes_namespace_and_duration() {
    let s = TestServer::start();
    for _ in 0..4 {
        s.limit(req("id", 10, 60_000));
    }
    // Changing the limit keeps the count.
    assert_eq!(decision(&s.limit(req("id", 5, 60_000))), (true, 5, 0, T0 + 60_000));
    assert_eq!(decision(&s.limit(req("id", 100, 60_000))).2, 94);
    // async draws on the same budget.
    let r = s.limit(json!({"identifier": "id", "limit": 100, "duration": 60_000, "async": true}));
    assert_eq!(decision(&r).2, 93);
    // Another duration or namespace is another budget.
    assert_eq!(decision(&s.limit(req("id", 100, 30_000))).2, 99);
    let r = s.limit(json!({"identifier": "id", "limit": 100, "duration": 60_000, "namespace": "other"}));
    assert_eq!(decision(&r).2, 99);
    let r = s.limit(json!({"identifier": "id", "limit": 100, "duration": 60_000, "namespace": "default"}));
    assert_eq!(decision(&r).2, 92, "namespace defaults to \"default\"");
}

#[test]
fn exact_under_concurrency_8_clients_x_50() {
    let s = TestServer::start();
    let passed = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let (s, passed) = (&s, &passed);
            scope.spawn(move || {
                for _ in 0..50 {
                    if decision(&s.limit(req("hot", 100, 60_000))).0 {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(passed.load(Ordering::Relaxed), 100);
}

#[test]
fn namespaces_are_created_only_with_create_namespace() {
    let s = TestServer::start();
    let limit_only = s.root_key_with(&["ratelimit.*.limit"]);
    let body = json!({"identifier": "a", "limit": 1, "duration": 1_000, "namespace": "fresh.ns"});
    let msg = s.post_as(&limit_only, PATH, &body).assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("fresh.ns") && msg.contains("does not exist"), "{msg}");
    assert!(msg.contains("ratelimit.*.create_namespace"), "{msg}");
    assert_eq!(s.count("ratelimit_namespaces", "name = 'fresh.ns'"), 0);

    let creator = s.root_key_with(&["ratelimit.*.limit", "ratelimit.*.create_namespace"]);
    assert!(decision(&s.post_as(&creator, PATH, &body)).0);
    assert_eq!(s.count("ratelimit_namespaces", "name = 'fresh.ns'"), 1);
    // Now it exists, the limit permission alone suffices, and the budget is shared.
    assert!(!decision(&s.post_as(&limit_only, PATH, &body)).0);
}

#[test]
fn limit_permission_may_be_scoped_to_one_namespace() {
    let s = TestServer::start();
    s.limit(json!({"identifier": "a", "limit": 5, "duration": 1_000, "namespace": "scoped"}));
    s.limit(json!({"identifier": "a", "limit": 5, "duration": 1_000, "namespace": "elsewhere"}));
    let ns_id = {
        #[allow(clippy::unwrap_used)]
        let p = s.state.rbac.authenticate(&s.root_key).unwrap();
        s.state.rbac.resolve_namespace(&p, "scoped").unwrap().to_string()
    };
    assert!(ns_id.starts_with("rlns_"));
    let scoped = s.root_key_with(&[&format!("ratelimit.{ns_id}.limit")]);
    let ok = s.post_as(
        &scoped,
        PATH,
        &json!({"identifier": "a", "limit": 5, "duration": 1_000, "namespace": "scoped"}),
    );
    assert_eq!(decision(&ok).2, 3);
    let denied = s.post_as(
        &scoped,
        PATH,
        &json!({"identifier": "a", "limit": 5, "duration": 1_000, "namespace": "elsewhere"}),
    );
    denied.assert_error(403, "INSUFFICIENT_PERMISSIONS");
    let none = s.root_key_with(&["rbac.*.create_role"]);
    let msg = s
        .post_as(&none, PATH, &json!({"identifier": "a", "limit": 5, "duration": 1_000}))
        .assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("ratelimit.*.limit"), "{msg}");
}

#[test]
fn meta_and_resources_are_validated_but_never_change_the_decision() {
    let s = TestServer::start();
    let body = json!({
        "identifier": "m", "limit": 2, "duration": 1_000,
        "meta": {"plan": "pro", "n": 1, "ok": true, "nothing": null},
        "resources": [{"type": "project", "id": "p1", "name": "P"}, {"type": "doc", "id": "d", "meta": {"a": 1}}]
    });
    assert_eq!(decision(&s.limit(body)).2, 1);
    let bad_meta = json!({"identifier": "m", "limit": 2, "duration": 1_000, "meta": {"deep": {"x": 1}}});
    assert_eq!(
        s.limit(bad_meta).assert_error(400, "BAD_REQUEST"),
        "meta.deep: must be a string, number, boolean or null"
    );
    let bad_res = json!({"identifier": "m", "limit": 2, "duration": 1_000, "resources": [{"type": "t"}]});
    assert_eq!(s.limit(bad_res).assert_error(400, "BAD_REQUEST"), "resources.0.id: is required");
    let many: Vec<Value> = (0..101).map(|i| json!({"type": "t", "id": i.to_string()})).collect();
    let too_many = json!({"identifier": "m", "limit": 2, "duration": 1_000, "resources": many});
    s.limit(too_many).assert_error(400, "BAD_REQUEST");
    let huge_meta =
        json!({"identifier": "m", "limit": 2, "duration": 1_000, "meta": {"x": "y".repeat(70_000)}});
    s.limit(huge_meta).assert_error(400, "BAD_REQUEST");
    assert_eq!(decision(&s.limit(req("m", 2, 1_000))).2, 0, "failed calls consumed nothing");
}

#[test]
fn bounds_of_every_field() {
    let s = TestServer::start();
    let max = 9_007_199_254_740_991u64;
    let cases = [
        (json!({"limit": 1, "duration": 1000}), "identifier: is required"),
        (json!({"identifier": "", "limit": 1, "duration": 1000}), "identifier: must not be empty"),
        (
            json!({"identifier": "x".repeat(513), "limit": 1, "duration": 1000}),
            "identifier: must be at most 512 characters",
        ),
        (json!({"identifier": "a", "duration": 1000}), "limit: is required"),
        (json!({"identifier": "a", "limit": 0, "duration": 1000}), "limit: must be >= 1"),
        (json!({"identifier": "a", "limit": -5, "duration": 1000}), "limit: must be >= 1"),
        (
            json!({"identifier": "a", "limit": max + 1, "duration": 1000}),
            "limit: must be <= 9007199254740991",
        ),
        (json!({"identifier": "a", "limit": 1, "duration": 999}), "duration: must be >= 1000"),
        (json!({"identifier": "a", "limit": 1, "duration": 1000, "cost": -1}), "cost: must be >= 0"),
        (
            json!({"identifier": "a", "limit": 1, "duration": 1000, "namespace": ""}),
            "namespace: must not be empty",
        ),
        (
            json!({"identifier": "a", "limit": "1", "duration": 1000}),
            "limit: invalid type: string \"1\", expected a JSON number",
        ),
        (json!({"identifier": "a", "limit": 1.5, "duration": 1000}), "limit: must be an integer"),
        (
            json!({"identifier": "a", "limit": 1, "duration": 1000, "async": "yes"}),
            "async: invalid type: string \"yes\", expected a boolean",
        ),
        (
            json!({"identifier": 7, "limit": 1, "duration": 1000}),
            "identifier: invalid type: integer `7`, expected a string",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(s.limit(body.clone()).assert_error(400, "BAD_REQUEST"), expected, "for {body}");
    }
    // Characters, not bytes: 512 two-byte characters are fine.
    let ok = s.limit(json!({"identifier": "é".repeat(512), "limit": max, "duration": max, "cost": max}));
    assert!(decision(&ok).0);
    // null means absent.
    let r = s.limit(json!({"identifier": "n", "limit": 1, "duration": 1000, "cost": null, "namespace": null, "meta": null}));
    assert!(decision(&r).0);
}
