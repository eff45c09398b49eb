//! v2 `ratelimit.*` (API-v2.md §5): one budget with v1, overrides named by namespace name
//! or id, and `multiLimit` all-or-nothing, under concurrency too.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};

fn limit(ns: &str, id: &str, limit: u64, cost: u64) -> Value {
    json!({"namespace": ns, "identifier": id, "limit": limit, "duration": 60_000, "cost": cost})
}

/// What the budget has left, through v1 with `cost: 0` (changes nothing).
fn remaining_v1(s: &TestServer, ns: &str, id: &str, lim: u64) -> u64 {
    let r = s.limit(json!({"namespace": ns, "identifier": id, "limit": lim, "duration": 60_000, "cost": 0}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["remaining"].as_u64().unwrap()
}

#[test]
fn v2_and_v1_calls_draw_on_one_budget_and_a_denial_is_a_200() {
    let s = TestServer::start();
    let r = s.v2("ratelimit.limit", &limit("api", "u1", 3, 2));
    let d = r.data();
    assert_eq!(d, &json!({"success": true, "limit": 3, "remaining": 1, "reset": T0 + 60_000}));
    assert_eq!(remaining_v1(&s, "api", "u1", 3), 1, "v1 sees v2's tokens");
    let v1 = s.limit(json!({"namespace": "api", "identifier": "u1", "limit": 3, "duration": 60_000}));
    assert_eq!(v1.json["remaining"], 0);
    let denied = s.v2("ratelimit.limit", &limit("api", "u1", 3, 1));
    assert_eq!(denied.data(), &json!({"success": false, "limit": 3, "remaining": 0, "reset": T0 + 60_000}));
    // cost 0 on a full window: success false, nothing changes.
    assert_eq!(s.v2("ratelimit.limit", &limit("api", "u1", 3, 0)).data()["success"], false);
    // Namespace required; bounds; v1's fields are unknown (ignored) here.
    let r = s.v2("ratelimit.limit", &json!({"identifier": "u", "limit": 1, "duration": 60_000}));
    r.assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(r.json["error"]["errors"][0]["location"], "body.namespace");
    for (body, location) in [
        (json!({"namespace": "a", "identifier": "u", "limit": 1, "duration": 999}), "body.duration"),
        (
            json!({"namespace": "a", "identifier": "u", "limit": 1, "duration": 2_592_000_001u64}),
            "body.duration",
        ),
        (json!({"namespace": "a", "identifier": "u", "limit": 0, "duration": 1000}), "body.limit"),
        (json!({"namespace": "a", "identifier": "", "limit": 1, "duration": 1000}), "body.identifier"),
        (json!({"namespace": "a", "identifier": "u", "limit": "1", "duration": 1000}), "body.limit"),
    ] {
        let r = s.v2("ratelimit.limit", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{}", r.text);
    }
    let with_v1_fields = json!({"namespace": "api", "identifier": "u9", "limit": 1, "duration": 60_000,
                                "async": true, "meta": {"a": 1}, "resources": []});
    assert_eq!(s.v2("ratelimit.limit", &with_v1_fields).data()["success"], true);
}

#[test]
fn namespaces_by_id_missing_namespaces_and_overrides_with_their_id() {
    let s = TestServer::start();
    s.v2("ratelimit.limit", &limit("api", "seed", 10, 1)).data();
    let set = s.v2(
        "ratelimit.setOverride",
        &json!({"namespace": "api", "identifier": "vip", "limit": 100, "duration": 60_000}),
    );
    let override_id = set.data()["overrideId"].as_str().unwrap().to_string();
    let got = s.v2("ratelimit.getOverride", &json!({"namespace": "api", "identifier": "vip"}));
    assert_eq!(
        got.data(),
        &json!({"overrideId": override_id, "identifier": "vip", "limit": 100, "duration": 60_000})
    );
    let r = s.v2("ratelimit.limit", &limit("api", "vip", 1, 1));
    assert_eq!((&r.data()["limit"], &r.data()["overrideId"]), (&json!(100), &json!(override_id)));
    assert!(s.v2("ratelimit.limit", &limit("api", "plain", 1, 1)).data().get("overrideId").is_none());
    // The namespace's id names it too.
    let ns_id = s.state.rbac.store().with_conn(|c| {
        use diesel::prelude::*;
        #[derive(QueryableByName)]
        struct I {
            #[diesel(sql_type = diesel::sql_types::Text)]
            id: String,
        }
        diesel::sql_query("SELECT id FROM ratelimit_namespaces WHERE name = 'api'")
            .get_result::<I>(c)
            .map(|i| i.id)
    });
    let ns_id = ns_id.unwrap();
    assert_eq!(s.v2("ratelimit.limit", &limit(&ns_id, "vip", 1, 1)).data()["remaining"], 98);
    assert_eq!(
        s.v2("ratelimit.getOverride", &json!({"namespace": ns_id, "identifier": "vip"})).data()["limit"],
        100
    );
    // Upsert keeps the id; limit 0 denies everything.
    let again = s.v2(
        "ratelimit.setOverride",
        &json!({"namespace": "api", "identifier": "vip", "limit": 0, "duration": 60_000}),
    );
    assert_eq!(again.data()["overrideId"], override_id.as_str());
    assert_eq!(s.v2("ratelimit.limit", &limit("api", "vip", 5, 1)).data()["success"], false);
    // Overrides never create a namespace; limit does only with create_namespace.
    s.v2(
        "ratelimit.setOverride",
        &json!({"namespace": "ghost", "identifier": "x", "limit": 1, "duration": 60_000}),
    )
    .assert_problem(404, "unkey/data/ratelimit_namespace_not_found");
    let limiter = s.root_key_with(&["ratelimit.*.limit"]);
    let d = s
        .v2_as(&limiter, "ratelimit.limit", &limit("fresh", "x", 1, 1))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(d.contains("ratelimit.*.create_namespace") && d.contains("does not exist"), "{d}");
    assert_eq!(s.count("ratelimit_namespaces", "name = 'fresh'"), 0);
    s.v2("ratelimit.deleteOverride", &json!({"namespace": "api", "identifier": "vip"})).data();
    s.v2("ratelimit.getOverride", &json!({"namespace": "api", "identifier": "vip"}))
        .assert_problem(404, "unkey/data/ratelimit_override_not_found");
    assert!(s.v2("ratelimit.limit", &limit("api", "vip", 5, 1)).data().get("overrideId").is_none());
}

#[test]
fn override_pages_visit_every_override_once_by_identifier() {
    let s = TestServer::start();
    s.v2("ratelimit.limit", &limit("api", "seed", 10, 1)).data();
    for i in (0..23).rev() {
        let body =
            json!({"namespace": "api", "identifier": format!("user{i:02}*"), "limit": i, "duration": 60_000});
        s.v2("ratelimit.setOverride", &body).data();
    }
    let first = s.v2("ratelimit.listOverrides", &json!({"namespace": "api"}));
    assert_eq!(first.data().as_array().unwrap().len(), 10, "10 by default");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut body = json!({"namespace": "api", "limit": 4});
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let r = s.v2("ratelimit.listOverrides", &body);
        seen.extend(
            r.data().as_array().unwrap().iter().map(|o| o["identifier"].as_str().unwrap().to_string()),
        );
        match r.json["pagination"]["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..23).map(|i| format!("user{i:02}*")).collect();
    assert_eq!(seen, expected);
}

#[test]
fn multi_limit_consumes_all_or_nothing() {
    let s = TestServer::start();
    let calls = json!([limit("api", "a", 5, 2), limit("api", "b", 3, 1), limit("api", "a", 5, 3)]);
    let r = s.v2("ratelimit.multiLimit", &calls);
    let d = r.data();
    assert_eq!(d["passed"], true);
    let remaining: Vec<u64> =
        d["limits"].as_array().unwrap().iter().map(|l| l["remaining"].as_u64().unwrap()).collect();
    assert_eq!(remaining, [3, 2, 0], "entries on one budget add up");
    assert_eq!(d["limits"][0]["namespace"], "api");
    assert_eq!(d["limits"][1]["identifier"], "b");
    assert_eq!(remaining_v1(&s, "api", "a", 5), 0);
    assert_eq!(remaining_v1(&s, "api", "b", 3), 2);

    // One entry that does not fit: nothing is consumed anywhere.
    let calls = json!([limit("api", "b", 3, 1), limit("other", "c", 10, 1), limit("api", "a", 5, 1)]);
    let d = s.v2("ratelimit.multiLimit", &calls).data().clone();
    assert_eq!(d["passed"], false);
    let fitted: Vec<bool> =
        d["limits"].as_array().unwrap().iter().map(|l| l["passed"].as_bool().unwrap()).collect();
    assert_eq!(fitted, [true, true, false]);
    let remaining: Vec<u64> =
        d["limits"].as_array().unwrap().iter().map(|l| l["remaining"].as_u64().unwrap()).collect();
    assert_eq!(remaining, [2, 10, 0], "each budget as it is");
    assert_eq!(remaining_v1(&s, "api", "b", 3), 2);
    assert_eq!(remaining_v1(&s, "other", "c", 10), 10);
    assert_eq!(
        s.count("ratelimit_namespaces", "name = 'other'"),
        1,
        "a new namespace is created even when the limits fail"
    );

    // Bad input: nothing created, nothing consumed.
    for (body, location) in [
        (json!([]), "body"),
        (json!({"namespace": "x"}), "body"),
        (
            json!([limit("api", "b", 3, 1), {"namespace": "new.ns", "identifier": "x", "limit": 0, "duration": 60_000}]),
            "body[1].limit",
        ),
    ] {
        let r = s.v2("ratelimit.multiLimit", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{}", r.text);
    }
    let too_many: Vec<Value> = (0..101).map(|i| limit("api", &format!("x{i}"), 1, 1)).collect();
    s.v2("ratelimit.multiLimit", &json!(too_many)).assert_problem(400, "unkey/application/invalid_input");
    let limiter = s.root_key_with(&["ratelimit.*.limit"]);
    s.v2_as(
        &limiter,
        "ratelimit.multiLimit",
        &json!([limit("brand.new", "x", 1, 1), limit("api", "b", 3, 1)]),
    )
    .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert_eq!(s.count("ratelimit_namespaces", "name IN ('new.ns', 'brand.new')"), 0);
    assert_eq!(remaining_v1(&s, "api", "b", 3), 2);
}

#[test]
fn concurrent_multi_limits_sharing_a_budget_never_over_admit() {
    let s = TestServer::start();
    s.v2("ratelimit.limit", &limit("api", "seed", 1, 0)).data();
    let passed: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    // Each call takes 1 from the shared budget and 1 from its own.
                    let calls = json!([limit("api", "shared", 7, 1), limit("api", &format!("own{i}"), 1, 1)]);
                    let d = s.v2("ratelimit.multiLimit", &calls).data().clone();
                    usize::from(d["passed"].as_bool().unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(passed, 7, "exactly the shared budget's limit passed");
    assert_eq!(remaining_v1(&s, "api", "shared", 7), 0);
    let own_used: u64 = (0..20).map(|i| 1 - remaining_v1(&s, "api", &format!("own{i}"), 1)).sum();
    assert_eq!(own_used, 7, "a failed call consumed nothing of its own budget either");
}

#[test]
fn override_pages_visit_every_override_once_while_overrides_are_set_and_deleted() {
    let s = TestServer::start();
    s.v2("ratelimit.limit", &limit("api", "seed", 10, 1)).data();
    let set = |id: &str| {
        let body = json!({"namespace": "api", "identifier": id, "limit": 5, "duration": 60_000});
        s.v2("ratelimit.setOverride", &body).data();
    };
    let originals: Vec<String> = (0..20).map(|i| format!("u{i:02}")).collect();
    originals.iter().for_each(|id| set(id));
    let (mut seen, mut gone_ahead) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    for page in 0.. {
        let mut body = json!({"namespace": "api", "limit": 3});
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let r = s.v2("ratelimit.listOverrides", &body);
        seen.extend(
            r.data().as_array().unwrap().iter().map(|o| o["identifier"].as_str().unwrap().to_string()),
        );
        let Some(c) = r.json["pagination"]["cursor"].as_str() else { break };
        cursor = Some(c.to_string());
        set(&format!("a{page:02}"));
        set(&format!("v{page:02}"));
        // Page k has visited 3(k + 1): the last ones are ahead for the first 4 pages.
        if page < 4 {
            let gone = originals[originals.len() - 1 - page].clone();
            s.v2("ratelimit.deleteOverride", &json!({"namespace": "api", "identifier": gone})).data();
            gone_ahead.push(gone);
        }
    }
    let unique: std::collections::BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no override twice: {seen:?}");
    for id in &originals {
        assert_eq!(seen.contains(id), !gone_ahead.contains(id), "{id}");
    }
    assert!(seen.iter().any(|i| i.starts_with('v')), "set ahead of the cursor: visited");
    assert!(!seen.iter().any(|i| i.starts_with('a')), "set behind the cursor: not visited");
}
