//! Rate-limit analytics (API-v2.md §14.1): every decision of `ratelimits.limit`,
//! `ratelimit.limit`, `ratelimit.multiLimit` and the key and identity limits of a
//! verification counted per namespace and minute, the heaviest identifiers per hour, and
//! read by `keygate.getRatelimits`.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 86_400_000;

fn query(s: &TestServer, body: Value) -> Vec<Value> {
    let r = s.v2("keygate.getRatelimits", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    r.data().as_array().unwrap().clone()
}

/// `(time or identifier, passed, denied, total)` of each row.
fn summary(rows: &[Value]) -> Vec<(Value, u64, u64, u64)> {
    rows.iter()
        .map(|r| {
            let at = r.get("time").or_else(|| r.get("identifier")).cloned().unwrap();
            let n = |f: &str| r[f].as_u64().unwrap();
            (at, n("passed"), n("denied"), n("total"))
        })
        .collect()
}

/// Waits (at most 5 s) until the namespace's counts reach `total`.
fn flushed(s: &TestServer, namespace: &str, total: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let rows = query(s, json!({"namespace": namespace, "groupBy": "day"}));
        let seen: u64 = rows.iter().map(|r| r["total"].as_u64().unwrap()).sum();
        if seen == total {
            return;
        }
        assert!(seen < total && Instant::now() < deadline, "{namespace}: {seen} of {total} after 5 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The id of the namespace named `name`.
fn namespace_id(s: &TestServer, name: &str) -> String {
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let sql = format!("SELECT id FROM ratelimit_namespaces WHERE name = '{name}'");
    let rows: Vec<Id> =
        s.state.rbac.store().with_conn(|c| diesel::RunQueryDsl::load(diesel::sql_query(sql), c)).unwrap();
    rows.into_iter().next().unwrap().id
}

fn limit_v1(s: &TestServer, namespace: &str, identifier: &str, limit: u64) -> bool {
    let r = s
        .limit(json!({"namespace": namespace, "identifier": identifier, "limit": limit, "duration": 60_000}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["success"].as_bool().unwrap()
}

#[test]
fn every_kind_of_decision_is_counted_per_namespace_and_identifier() {
    let s = TestServer::start();
    // v1: 5 asks of a limit of 3 for `alice`, 1 for `bob`, in the first minute.
    for _ in 0..5 {
        limit_v1(&s, "email", "alice", 3);
    }
    assert!(limit_v1(&s, "email", "bob", 3));
    // v2, a minute later: `alice` is allowed again (a new window).
    s.clock.advance(MINUTE);
    let r = s.v2(
        "ratelimit.limit",
        &json!({"namespace": "email", "identifier": "alice", "limit": 1, "duration": 60_000}),
    );
    assert_eq!(r.data()["success"], true);
    // A multiLimit that fails as a whole counts each of its entries as denied (one budget
    // twice, so that a Redis Cluster takes the call: its entries share a slot).
    let r = s.v2(
        "ratelimit.multiLimit",
        &json!([
            {"namespace": "email", "identifier": "carol", "limit": 5, "duration": 60_000},
            {"namespace": "email", "identifier": "carol", "limit": 1, "duration": 60_000, "cost": 2}
        ]),
    );
    assert_eq!(r.data()["passed"], false, "{}", r.text);
    let r = s.v2(
        "ratelimit.multiLimit",
        &json!([{"namespace": "email", "identifier": "carol", "limit": 5, "duration": 60_000}]),
    );
    assert_eq!(r.data()["passed"], true);

    // Key and identity limits of verifications: under `verify:<name>`.
    let api =
        s.v2("apis.createApi", &json!({"name": "ratelimited"})).data()["apiId"].as_str().unwrap().to_string();
    let r = s.v2(
        "identities.createIdentity",
        &json!({"externalId": "acme", "ratelimits": [{"name": "tokens", "limit": 2, "duration": 60_000, "autoApply": true}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let identity = s.v2("identities.getIdentity", &json!({"identity": "acme"})).data()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.v2(
        "keys.createKey",
        &json!({"apiId": api, "externalId": "acme",
                "ratelimits": [{"name": "requests", "limit": 10, "duration": 60_000, "autoApply": true}]}),
    );
    let (key_id, secret) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    let codes: Vec<String> = (0..3)
        .map(|_| s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(codes, ["VALID", "VALID", "RATE_LIMITED"]);

    // The minute ends; the counts reach the API within 5 s.
    s.clock.advance(MINUTE);
    flushed(&s, "email", 10);
    let hour = json!(T0);
    assert_eq!(summary(&query(&s, json!({"namespace": "email"}))), [(hour.clone(), 6, 4, 10)]);
    assert_eq!(
        summary(&query(&s, json!({"namespace": "email", "groupBy": "minute"}))),
        [(json!(T0), 4, 2, 6), (json!(T0 + MINUTE), 2, 2, 4)]
    );
    assert_eq!(summary(&query(&s, json!({"namespace": "email", "groupBy": "day"}))), [(json!(T0), 6, 4, 10)]);
    assert_eq!(
        summary(&query(&s, json!({"namespace": "email", "identifiers": true}))),
        [(json!("alice"), 4, 2, 6), (json!("carol"), 1, 2, 3), (json!("bob"), 1, 0, 1)]
    );
    // By the namespace's id, too.
    let ns_id = namespace_id(&s, "email");
    assert_eq!(summary(&query(&s, json!({"namespace": ns_id}))), [(hour.clone(), 6, 4, 10)]);
    // The verification's limits: each applied limit, all denied when one was exceeded.
    flushed(&s, "verify:requests", 3);
    assert_eq!(
        summary(&query(&s, json!({"namespace": "verify:requests", "identifiers": true}))),
        [(json!(key_id), 2, 1, 3)]
    );
    assert_eq!(
        summary(&query(&s, json!({"namespace": "verify:tokens", "identifiers": true}))),
        [(json!(identity), 2, 1, 3)]
    );
    // A range: `start` truncated to its slice, `end` inclusive; nothing yet: [].
    assert_eq!(
        summary(&query(
            &s,
            json!({"namespace": "email", "groupBy": "minute", "start": T0 + MINUTE + 5, "end": T0 + MINUTE})
        )),
        [(json!(T0 + MINUTE), 2, 2, 4)]
    );
    assert!(query(&s, json!({"namespace": "email", "start": T0 + DAY})).is_empty());
    assert!(query(&s, json!({"namespace": "verify:unused"})).is_empty());
}

#[test]
fn bad_queries_and_missing_permissions_are_refused() {
    let s = TestServer::start();
    assert!(limit_v1(&s, "email", "alice", 3));
    let ns_id = namespace_id(&s, "email");
    for (body, field) in [
        (json!({"namespace": "email", "groupBy": "week"}), "groupBy"),
        (json!({"namespace": "email", "start": 7_200_000, "end": 5}), "start"),
        (json!({"namespace": "email", "start": -1}), "start"),
        (json!({"namespace": "email", "start": "soon"}), "start"),
        (json!({"namespace": ""}), "namespace"),
        (json!({"namespace": "email", "color": "red"}), "color"),
        (json!({"namespace": "email", "identifiers": "yes"}), "identifiers"),
        (json!({}), "namespace"),
    ] {
        let r = s.v2("keygate.getRatelimits", &body);
        let detail = r.assert_problem(400, "unkey/application/invalid_input");
        assert!(detail.contains(field) || r.text.contains(field), "{body}: {}", r.text);
    }
    s.v2("keygate.getRatelimits", &json!({"namespace": "nowhere"}))
        .assert_problem(404, "unkey/data/ratelimit_namespace_not_found");

    let as_key = |perms: &[&str], ns: &str| {
        let token = s.root_key_with(perms);
        s.v2_as(&token, "keygate.getRatelimits", &json!({"namespace": ns}))
    };
    as_key(&["ratelimit.*.limit"], "email")
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    // Before anything is looked up: no answer tells whether a namespace exists.
    as_key(&["ratelimit.*.limit"], "nowhere")
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    as_key(&["ratelimit.rlns_other.read_analytics"], "email")
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert_eq!(as_key(&["ratelimit.*.read_analytics"], "email").status, 200);
    assert_eq!(as_key(&[&format!("ratelimit.{ns_id}.read_analytics")], "email").status, 200);
    // The limits of keys: with the wildcard, or their own `verify:<name>`.
    assert_eq!(as_key(&["ratelimit.verify:requests.read_analytics"], "verify:requests").status, 200);
}

/// Closed hours keep their 100 heaviest identifiers by total and by denials; minutes roll
/// into hours after a day and hours into days after 30 days, the answers unchanged;
/// retention deletes what is older. Two instances on one database add up.
#[test]
fn rollups_keep_the_heaviest_identifiers_and_the_answers() {
    let db = std::sync::Arc::new(keygate_test_support::TestDb::fresh());
    let servers = [TestServer::start_on(db.clone()), TestServer::start_on(db)];
    let s = &servers[0];
    // 150 identifiers: `heavy_i` (i < 20) 5 asks of a limit of 2 (2 passed, 3 denied),
    // `busy_i` (i < 10) 8 passed, and 120 `light_i` 1 passed; spread over both instances.
    let mut asks: Vec<(String, u64)> = Vec::new();
    for i in 0..20 {
        asks.extend((0..5).map(|_| (format!("heavy_{i:02}"), 2)));
    }
    for i in 0..10 {
        asks.extend((0..8).map(|_| (format!("busy_{i:02}"), 100)));
    }
    asks.extend((0..120).map(|i| (format!("light_{i:03}"), 100)));
    std::thread::scope(|scope| {
        for (n, server) in servers.iter().enumerate() {
            let asks = &asks;
            scope.spawn(move || {
                // Each identifier on one instance (their budgets are per instance here).
                for (id, limit) in asks.iter().filter(|(id, _)| id.len() % 2 == n) {
                    limit_v1(server, "api", id, *limit);
                }
            });
        }
    });
    for server in &servers {
        server.clock.advance(MINUTE);
    }
    let total = 20 * 5 + 10 * 8 + 120;
    flushed(s, "api", total);
    // While the hour is open, every identifier each instance held is written.
    assert_eq!(s.count("ratelimit_identifiers", "width = 0"), 150);
    for server in &servers {
        server.clock.advance(HOUR + 5 * MINUTE);
    }
    let by_minute = || summary(&query(s, json!({"namespace": "api", "groupBy": "day"})));
    let top = || summary(&query(s, json!({"namespace": "api", "identifiers": true})));
    let before = (by_minute(), top());
    assert_eq!(before.0, [(json!(T0), 40 + 80 + 120, 60, total)]);
    // The answer: the 100 heaviest by total (and the heaviest deniers, among them here),
    // from every identifier while the hour is open.
    assert_eq!(before.1.len(), 100);
    assert_eq!(before.1[0], (json!("busy_00"), 8, 0, 8));

    let analytics = &s.state.analytics;
    assert!(analytics.roll_up_analytics(90).unwrap() > 0);
    // Closed: the top 100 by total (20 heavy, 10 busy, 70 light) and by denials (heavy).
    let trimmed = top();
    assert_eq!(trimmed, before.1);
    assert_eq!(s.count("ratelimit_identifiers", "width = 0"), 0);
    assert_eq!(s.count("ratelimit_identifiers", "width = 3600000"), 100);
    assert_eq!(by_minute(), before.0);
    s.clock.advance(2 * DAY);
    assert!(analytics.roll_up_analytics(90).unwrap() > 0, "minutes rolled into hours");
    assert_eq!(s.count("ratelimit_counts", "width = 60000"), 0);
    assert_eq!((by_minute(), top()), (before.0.clone(), trimmed.clone()));
    s.clock.advance(30 * DAY);
    assert!(analytics.roll_up_analytics(90).unwrap() > 0, "hours rolled into days");
    assert_eq!(s.count("ratelimit_counts", "width = 3600000"), 0);
    assert_eq!(s.count("ratelimit_identifiers", "width = 3600000"), 0);
    assert_eq!((by_minute(), top()), (before.0.clone(), trimmed));
    assert_eq!(analytics.roll_up_analytics(90).unwrap(), 0, "idempotent");
    s.clock.advance(90 * DAY);
    assert!(analytics.roll_up_analytics(90).unwrap() > 0, "retention");
    assert!(by_minute().is_empty() && top().is_empty());
}
