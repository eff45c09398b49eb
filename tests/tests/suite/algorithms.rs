//! Rate-limit algorithms per namespace (API-v2.md §26): `ratelimit.getNamespace`,
//! `listNamespaces`, `updateNamespace`, and `ratelimit.limit` deciding under the
//! namespace's algorithm, on the in-process store and (the run with
//! KEYGATE_TEST_REDIS_URL) on Redis; `multiLimit` across algorithms; the limits of keys
//! and identities under their own algorithms.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};

fn limit(s: &TestServer, namespace: &str, id: &str, limit: u64, duration: u64) -> Value {
    let r = s.v2(
        "ratelimit.limit",
        &json!({"namespace": namespace, "identifier": id, "limit": limit, "duration": duration}),
    );
    r.data().clone()
}

#[test]
fn a_namespace_shows_its_algorithm_and_is_listed_a_page_at_a_time() {
    let s = TestServer::start();
    for ns in ["charlie", "alpha", "bravo"] {
        limit(&s, ns, "u", 10, 60_000);
    }
    let alpha = s.v2("ratelimit.getNamespace", &json!({"namespace": "alpha"})).data().clone();
    assert_eq!(alpha["namespace"], "alpha");
    assert_eq!(alpha["algorithm"], "fixed", "the default");
    assert_eq!(alpha["createdAt"], json!(T0));
    let id = alpha["namespaceId"].as_str().unwrap();
    assert!(id.starts_with("rlns_"), "{id}");
    assert_eq!(s.v2("ratelimit.getNamespace", &json!({"namespace": id})).data(), &alpha, "by id too");

    let first = s.v2("ratelimit.listNamespaces", &json!({"limit": 2}));
    let names: Vec<&str> =
        first.data().as_array().unwrap().iter().map(|n| n["namespace"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "bravo"]);
    let cursor = first.json["pagination"]["cursor"].as_str().unwrap().to_string();
    let rest = s.v2("ratelimit.listNamespaces", &json!({"limit": 2, "cursor": cursor}));
    assert_eq!(rest.data()[0]["namespace"], "charlie");
    assert_eq!(rest.data().as_array().unwrap().len(), 1);

    s.v2("ratelimit.getNamespace", &json!({"namespace": "missing"}))
        .assert_problem(404, "unkey/data/ratelimit_namespace_not_found");
    s.v2("ratelimit.updateNamespace", &json!({"namespace": "missing", "algorithm": "fixed"}))
        .assert_problem(404, "unkey/data/ratelimit_namespace_not_found");

    // Permissions: the wildcard or the namespace's own read; updates need the wildcard.
    let reader = s.root_key_with(&[&format!("ratelimit.{id}.read_namespace")]);
    assert_eq!(s.v2_as(&reader, "ratelimit.getNamespace", &json!({"namespace": "alpha"})).data(), &alpha);
    s.v2_as(&reader, "ratelimit.getNamespace", &json!({"namespace": "bravo"}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let listed = s.v2_as(&reader, "ratelimit.listNamespaces", &json!({}));
    assert_eq!(listed.data().as_array().unwrap().len(), 1, "only what it may read: {}", listed.text);
    s.v2_as(&reader, "ratelimit.updateNamespace", &json!({"namespace": "alpha", "algorithm": "fixed"}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let nobody = s.root_key_with(&["ratelimit.*.limit"]);
    s.v2_as(&nobody, "ratelimit.listNamespaces", &json!({}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
}

#[test]
fn bad_algorithms_are_refused_and_change_nothing() {
    let s = TestServer::start();
    limit(&s, "api", "u", 10, 60_000);
    for bad in [json!("leaky_bucket"), json!("Sliding"), json!(""), json!(1), json!(null)] {
        let r = s.v2("ratelimit.updateNamespace", &json!({"namespace": "api", "algorithm": bad}));
        r.assert_problem(400, "unkey/application/invalid_input");
        assert!(r.text.contains("algorithm"), "names the field: {}", r.text);
    }
    s.v2("ratelimit.updateNamespace", &json!({"namespace": "api"}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("ratelimit.updateNamespace", &json!({"namespace": "", "algorithm": "fixed"}))
        .assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(s.v2("ratelimit.getNamespace", &json!({"namespace": "api"})).data()["algorithm"], "fixed");
}

/// 100 a minute: fixed windows admit 100 in the last millisecond of a window and 100 more
/// in the first of the next; a sliding window or a token bucket admits no more than 100
/// across the boundary. Changing the algorithm starts the budgets afresh.
#[test]
fn across_a_window_boundary_fixed_admits_twice_the_limit_and_the_others_the_limit() {
    let s = TestServer::start();
    let admitted = |ns: &str| {
        let mut n = 0;
        for at in [T0 + 59_999, T0 + 60_000] {
            s.clock.set(at);
            for _ in 0..100 {
                n += u64::from(limit(&s, ns, "burst", 100, 60_000)["success"] == json!(true));
            }
        }
        n
    };
    s.clock.set(T0);
    for ns in ["fixed", "sliding", "token_bucket"] {
        limit(&s, ns, "other", 100, 60_000);
        let r = s.v2("ratelimit.updateNamespace", &json!({"namespace": ns, "algorithm": ns}));
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(s.v2("ratelimit.getNamespace", &json!({"namespace": ns})).data()["algorithm"], ns);
    }
    assert_eq!(admitted("fixed"), 200);
    assert_eq!(admitted("sliding"), 100);
    assert_eq!(admitted("token_bucket"), 100);

    // A bucket refills one token every 600 ms; its answer says when it is full.
    s.clock.set(T0 + 60_600);
    let d = limit(&s, "token_bucket", "burst", 100, 60_000);
    assert_eq!((&d["success"], &d["remaining"]), (&json!(true), &json!(0)));
    assert!(!limit(&s, "token_bucket", "burst", 100, 60_000)["success"].as_bool().unwrap());
    // Drained at 59.999 s (full at 119.999 s), one token taken at 60.6 s: full 0.6 s later.
    assert_eq!(d["reset"], json!(T0 + 119_999 + 600), "when the bucket is full again");

    // Changing the algorithm starts the budget afresh: the exhausted bucket's identifier
    // has its whole limit under fixed windows.
    s.v2("ratelimit.updateNamespace", &json!({"namespace": "token_bucket", "algorithm": "fixed"})).data();
    let d = limit(&s, "token_bucket", "burst", 100, 60_000);
    assert_eq!((&d["success"], &d["remaining"]), (&json!(true), &json!(99)));
}

/// multiLimit decides every entry under its own namespace's algorithm, all or nothing (in
/// process under the shards' locks; on Redis one budget at a time, what was taken given
/// back when one does not fit).
#[test]
fn multi_limit_is_all_or_nothing_across_algorithms() {
    let s = TestServer::start();
    for (ns, algorithm) in [("a", "sliding"), ("b", "token_bucket")] {
        limit(&s, ns, "seed", 1, 60_000);
        s.v2("ratelimit.updateNamespace", &json!({"namespace": ns, "algorithm": algorithm})).data();
    }
    let call = |cost_b: u64| {
        s.v2(
            "ratelimit.multiLimit",
            &json!([
                {"namespace": "a", "identifier": "u", "limit": 5, "duration": 60_000, "cost": 2},
                {"namespace": "b", "identifier": "u", "limit": 3, "duration": 60_000, "cost": cost_b},
            ]),
        )
    };
    let both = |cost_b: u64| call(cost_b).data().clone();
    assert_eq!(both(2)["passed"], true);
    let failed = both(2);
    assert_eq!(failed["passed"], false, "the bucket holds 1 token: {failed}");
    assert_eq!(failed["limits"][0]["remaining"], 3, "nothing taken from the sliding window");
    assert_eq!(both(1)["passed"], true);
    assert_eq!(limit(&s, "a", "u", 5, 60_000)["remaining"], 0, "2 + 2 + 1 of 5");
}

/// The limits of keys and identities take an `algorithm` too (§26, default `fixed`): shown
/// by getKey/getIdentity, and deciding `verifyKey` (on Redis too, with credits beside).
#[test]
fn key_and_identity_limits_decide_by_their_own_algorithm() {
    let s = TestServer::start();
    s.clock.set(T0);
    let identity = s.v2(
        "identities.createIdentity",
        &json!({"externalId": "acme", "ratelimits": [
            {"name": "calls", "limit": 10, "duration": 60_000, "autoApply": true, "algorithm": "sliding"}
        ]}),
    );
    assert_eq!(identity.status, 200, "{}", identity.text);
    let created = s
        .v2(
            "keys.createKey",
            &json!({"apiId": "api_main", "externalId": "acme", "credits": {"remaining": 1000},
                    "ratelimits": [{"name": "burst", "limit": 3, "duration": 60_000, "algorithm": "token_bucket"}]}),
        )
        .data()
        .clone();
    let (key_id, secret) = (created["keyId"].as_str().unwrap(), created["key"].as_str().unwrap());
    let got = s.v2("keys.getKey", &json!({"keyId": key_id})).data().clone();
    assert_eq!(got["ratelimits"][0]["algorithm"], "token_bucket", "{got}");
    let shown = s.v2("identities.getIdentity", &json!({"identity": "acme"})).data().clone();
    assert_eq!(shown["ratelimits"][0]["algorithm"], "sliding", "{shown}");

    let verify = |limits: Value| {
        let r = s.v2("keys.verifyKey", &json!({"key": secret, "ratelimits": limits}));
        r.data()["code"].as_str().unwrap().to_string()
    };
    let burst = || verify(json!([{"name": "burst"}]));
    // The bucket: 3 tokens, one back every 20 s (a fixed window would hold none until 60 s).
    assert_eq!([burst(), burst(), burst(), burst()], ["VALID", "VALID", "VALID", "RATE_LIMITED"]);
    s.clock.set(T0 + 20_000);
    assert_eq!([burst(), burst()], ["VALID", "RATE_LIMITED"]);
    let credits = s.v2("keys.getKey", &json!({"keyId": key_id})).data()["credits"]["remaining"].clone();
    assert_eq!(credits, 1000 - 4, "a denial spends no credit");

    // The identity's sliding window: 4 of 10 taken above; at the window's end 6 more pass,
    // and 1 ms into the next window the previous one still weighs floor(10 × 59,999 /
    // 60,000) = 9 (fixed windows would admit 10 again).
    s.clock.set(T0 + 59_999);
    let plain = || verify(json!([]));
    let passed = (0..8).filter(|_| plain() == "VALID").count();
    assert_eq!(passed, 6);
    s.clock.set(T0 + 60_001);
    let passed = (0..8).filter(|_| plain() == "VALID").count();
    assert_eq!(passed, 1, "the previous window weighs 9 of 10");

    // An unknown algorithm: a 400 naming the field, nothing written.
    let r = s.v2(
        "keys.createKey",
        &json!({"apiId": "api_main", "ratelimits": [{"name": "x", "limit": 1, "duration": 1000, "algorithm": "leaky"}]}),
    );
    let detail = r.assert_problem(400, "unkey/application/invalid_input");
    assert!(detail.contains("ratelimits.0.algorithm"), "{detail}");
    let r = s.v2(
        "identities.updateIdentity",
        &json!({"identity": "acme", "ratelimits": [{"name": "calls", "limit": 10, "duration": 60_000, "algorithm": 7}]}),
    );
    assert_eq!(r.status, 400, "{}", r.text);
    let shown = s.v2("identities.getIdentity", &json!({"identity": "acme"})).data().clone();
    assert_eq!(shown["ratelimits"][0]["algorithm"], "sliding", "unchanged: {shown}");
}
