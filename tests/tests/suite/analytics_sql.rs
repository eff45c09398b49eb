//! Analytics in SQL over HTTP (API-v2.md §18): `analytics.getVerifications` and
//! `analytics.getRatelimits` answer real verifications and rate-limit decisions in the v2
//! envelope, columns in the query's order; refused queries answer the contract's problems.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn sql(s: &TestServer, op: &str, query: &str) -> keygate_tests::Resp {
    s.v2(op, &json!({ "query": query }))
}

/// Polls `query` (at most 5 s) until it answers `want`.
fn eventually(s: &TestServer, op: &str, query: &str, want: Value) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = sql(s, op, query);
        assert_eq!(r.status, 200, "{}", r.text);
        if *r.data() == want {
            return;
        }
        assert!(Instant::now() < deadline, "{query}: {} after 5 s, expected {want}", r.data());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn verifications_and_decisions_are_read_back_in_sql() {
    let s = TestServer::start();
    let api = s.v2("apis.createApi", &json!({"name": "sql"})).data()["apiId"].as_str().unwrap().to_string();
    let key =
        s.v2("keys.createKey", &json!({"apiId": api, "externalId": "acme", "credits": {"remaining": 2}}));
    let (key_id, secret) =
        (key.data()["keyId"].as_str().unwrap().to_string(), key.data()["key"].as_str().unwrap().to_string());
    for (tags, expected) in
        [(json!(["plan:pro"]), "VALID"), (json!([]), "VALID"), (json!([]), "USAGE_EXCEEDED")]
    {
        let r = s.v2("keys.verifyKey", &json!({"key": secret, "tags": tags}));
        assert_eq!(r.data()["code"], expected, "{}", r.text);
    }
    for _ in 0..3 {
        s.v2(
            "ratelimit.limit",
            &json!({"namespace": "sql_ns", "identifier": "u", "limit": 2, "duration": 60_000}),
        );
    }
    s.clock.advance(61_000);
    let by_outcome = "SELECT outcome, sum(count) AS total FROM key_verifications_per_day_v1 \
                      WHERE externalId = 'acme' GROUP BY outcome ORDER BY outcome";
    eventually(
        &s,
        "analytics.getVerifications",
        by_outcome,
        json!([{"outcome": "USAGE_EXCEEDED", "total": 1}, {"outcome": "VALID", "total": 2}]),
    );
    // Columns in the query's order (not sorted by name), times as Unix ms.
    let q = format!(
        "SELECT toStartOfMinute(time) AS t, key_id, has(tags, 'plan:pro') AS pro, count FROM \
         key_verifications_per_minute_v1 WHERE apiId = '{api}' AND outcome = 'VALID' ORDER BY pro DESC"
    );
    let r = sql(&s, "analytics.getVerifications", &q);
    assert_eq!(r.status, 200, "{}", r.text);
    let minute = T0 - T0 % 60_000;
    assert_eq!(
        *r.data(),
        json!([{"t": minute, "key_id": key_id, "pro": 1, "count": 1}, {"t": minute, "key_id": key_id, "pro": 0, "count": 1}])
    );
    let first = r.text.find("\"t\"").unwrap();
    assert!(
        first < r.text.find("\"key_id\"").unwrap()
            && r.text.find("\"pro\"").unwrap() < r.text.find("\"count\"").unwrap()
    );
    assert!(r.json["meta"]["requestId"].is_string());
    eventually(
        &s,
        "analytics.getRatelimits",
        "SELECT namespace_name, sum(passed) AS passed, sum(total) AS total FROM ratelimits_per_hour_v1 GROUP BY namespace_name",
        json!([{"namespace_name": "sql_ns", "passed": 2, "total": 3}]),
    );
}

#[test]
fn refused_queries_answer_the_contract_s_problems_and_no_permission_is_403() {
    let s = TestServer::start();
    let op = "analytics.getVerifications";
    sql(&s, op, "SELECT * FROM keys").assert_problem(400, "user/bad_request/invalid_analytics_query");
    sql(&s, op, "SELECT 1; DROP TABLE keys").assert_problem(400, "user/bad_request/invalid_analytics_query");
    sql(&s, op, "SELECT pg_read_file('/etc/passwd')")
        .assert_problem(400, "user/bad_request/invalid_analytics_query");
    let d = sql(&s, op, "SELECT * FROM key_verifications_v1")
        .assert_problem(400, "keygate/application/not_supported");
    assert!(d.contains("key_verifications_per_minute_v1"), "{d}");
    let d = sql(&s, "analytics.getRatelimits", "SELECT identifier FROM ratelimits_per_minute_v1")
        .assert_problem(400, "keygate/application/not_supported");
    assert!(d.contains("identifier"), "{d}");
    // The body: a query of 1 to 10,000 characters, nothing else.
    for body in
        [json!({}), json!({"query": ""}), json!({"query": 1}), json!({"query": "SELECT 1", "extra": true})]
    {
        let r = s.v2(op, &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text);
    }
    let r = s.v2(op, &json!({"query": format!("SELECT 1{}", " ".repeat(10_000))}));
    r.assert_problem(400, "unkey/application/invalid_input");
    // Without read_analytics: 403; without a root key: 401.
    let reader = s.root_key_with(&["api.*.read_api"]);
    let r = s.v2_as(&reader, op, &json!({"query": "SELECT 1 AS x"}));
    r.assert_problem(403, "unkey/authorization/insufficient_permissions");
    let r = s.v2_as("not-a-key", op, &json!({"query": "SELECT 1 AS x"}));
    assert_eq!(r.status, 401, "{}", r.text);
    // The tables are all there after all that.
    let r = sql(&s, op, "SELECT count() AS n FROM key_verifications_per_day_v1");
    assert_eq!(*r.data(), json!([{"n": 0}]), "{}", r.text);
}

#[test]
fn another_workspace_s_counts_are_never_read() {
    let s = TestServer::start();
    let other = s.create_workspace("other");
    let theirs = s.root_key_in(&other, &["*"]);
    let api = s.v2_as(&theirs, "apis.createApi", &json!({"name": "theirs"})).data()["apiId"]
        .as_str()
        .unwrap()
        .to_string();
    let secret = s.v2_as(&theirs, "keys.createKey", &json!({"apiId": api})).data()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.v2_as(&theirs, "keys.verifyKey", &json!({"key": secret}));
    assert_eq!(r.data()["valid"], true, "{}", r.text);
    s.clock.advance(61_000);
    // Their count lands (read as them)...
    let mine = "SELECT sum(count) AS n FROM key_verifications_per_day_v1";
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.v2_as(&theirs, "analytics.getVerifications", &json!({"query": mine})).data() != &json!([{"n": 1}])
    {
        assert!(Instant::now() < deadline, "their verification was never counted");
        std::thread::sleep(Duration::from_millis(100));
    }
    // ...and is never ours, however we ask.
    for q in [
        mine.to_string(),
        format!("{mine} WHERE workspace_id = '{other}'"),
        format!("{mine} WHERE workspace_id = '{other}' OR 1 = 1"),
        format!("{mine} WHERE apiId = '{api}'"),
    ] {
        let r = sql(&s, "analytics.getVerifications", &q);
        assert_eq!(*r.data(), json!([{"n": 0}]), "{q}: {}", r.text);
    }
}
