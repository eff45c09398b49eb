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

/// Spent credits (API-v2.md §22): a month of verifications of several identities' keys,
/// some with credits and some without, some refused: `SUM(spent_credits)` per external id
/// is what the VALID answers of keys with credits were charged, read in SQL, by v2
/// `keygate.getVerifications` and by v1 `analytics.getVerifications`; another workspace's
/// charges are never in it.
#[test]
fn a_month_of_charges_sums_per_external_id_in_its_own_workspace() {
    use std::collections::BTreeMap;
    const DAY: u64 = 86_400_000;
    let s = TestServer::start();
    let api =
        s.v2("apis.createApi", &json!({"name": "billing"})).data()["apiId"].as_str().unwrap().to_string();
    let key = |token: &str, api: &str, body: Value| -> (String, String) {
        let mut body = body;
        body["apiId"] = json!(api);
        let r = s.v2_as(token, "keys.createKey", &body);
        assert_eq!(r.status, 200, "{}", r.text);
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string())
    };
    let root = s.root_key.clone();
    let (acme_big, acme_big_secret) =
        key(&root, &api, json!({"externalId": "acme", "credits": {"remaining": 1000}}));
    let (_, acme_small) = key(&root, &api, json!({"externalId": "acme", "credits": {"remaining": 5}}));
    let (_, acme_free) = key(&root, &api, json!({"externalId": "acme"}));
    let (_, globex) = key(&root, &api, json!({"externalId": "globex", "credits": {"remaining": 1000}}));
    let other = s.create_workspace("other");
    let theirs = s.root_key_in(&other, &["*"]);
    let their_api = s.v2_as(&theirs, "apis.createApi", &json!({"name": "theirs"})).data()["apiId"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, their_acme) =
        key(&theirs, &their_api, json!({"externalId": "acme", "credits": {"remaining": 1000}}));

    let mut charged: BTreeMap<&str, u64> = BTreeMap::new();
    let mut codes: BTreeMap<String, u64> = BTreeMap::new();
    for day in 0..30u64 {
        let calls = [
            (&acme_big_secret, "acme", 3),
            (&acme_small, "acme", 2),
            (&acme_free, "acme", 7),
            (&globex, "globex", day % 4),
        ];
        for (secret, who, cost) in calls {
            let r = s.v2("keys.verifyKey", &json!({"key": secret, "credits": {"cost": cost}}));
            assert_eq!(r.status, 200, "{}", r.text);
            let code = r.data()["code"].as_str().unwrap().to_string();
            if code == "VALID" && r.data().get("credits").is_some_and(|c| !c.is_null()) {
                *charged.entry(who).or_default() += cost;
            }
            *codes.entry(code).or_default() += 1;
        }
        let r = s.v2_as(&theirs, "keys.verifyKey", &json!({"key": their_acme, "credits": {"cost": 9}}));
        assert_eq!(r.data()["code"], "VALID", "{}", r.text);
        s.clock.advance(DAY / 3);
        // A check-only verification spends nothing.
        let r = s.v2("keys.verifyKey", &json!({"key": acme_big_secret, "credits": {"cost": 0}}));
        assert_eq!(r.data()["code"], "VALID", "{}", r.text);
        s.clock.advance(DAY - DAY / 3);
    }
    // acme: 3 a day, and 2 twice before its small key ran out (then USAGE_EXCEEDED, which
    // charges nothing); its key without credits is charged nothing. globex: day % 4.
    assert_eq!(charged, BTreeMap::from([("acme", 30 * 3 + 2 * 2), ("globex", 6 * 7 + 1)]));
    assert_eq!(codes.get("USAGE_EXCEEDED"), Some(&28));
    eventually(
        &s,
        "analytics.getVerifications",
        "SELECT external_id, SUM(spent_credits) AS spent FROM key_verifications_per_month_v1 \
         GROUP BY external_id ORDER BY external_id",
        json!([{"external_id": "acme", "spent": 94}, {"external_id": "globex", "spent": 43}]),
    );
    // Per outcome: only VALID answers were charged.
    let r = sql(
        &s,
        "analytics.getVerifications",
        "SELECT outcome, sum(spent_credits) AS spent FROM key_verifications_per_day_v1 GROUP BY outcome ORDER BY outcome",
    );
    assert_eq!(
        *r.data(),
        json!([{"outcome": "USAGE_EXCEEDED", "spent": 0}, {"outcome": "VALID", "spent": 137}])
    );
    // Theirs, read as them: their own 9 a day only.
    let r = s.v2_as(
        &theirs,
        "analytics.getVerifications",
        &json!({"query": "SELECT external_id, sum(spent_credits) AS spent FROM key_verifications_per_month_v1 GROUP BY external_id"}),
    );
    assert_eq!(*r.data(), json!([{"external_id": "acme", "spent": 270}]), "{}", r.text);

    // v2 keygate.getVerifications by identity, and v1 analytics.getVerifications by key.
    let r = s.v2("keygate.getVerifications", &json!({"apiId": api, "groupBy": ["identity"]}));
    assert_eq!(r.status, 200, "{}", r.text);
    let mut by_identity: Vec<(String, u64)> = r
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["identity"]["externalId"].as_str().unwrap().to_string(),
                row["spentCredits"].as_u64().unwrap(),
            )
        })
        .collect();
    by_identity.sort();
    assert_eq!(by_identity, [("acme".to_string(), 94), ("globex".to_string(), 43)]);
    let r = s.request(
        s.client
            .get(s.url("/v1/analytics.getVerifications"))
            .query(&[("apiId", api.as_str()), ("groupBy", "key"), ("keyId", acme_big.as_str())])
            .bearer_auth(&s.root_key),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json[0]["spentCredits"], 90, "{}", r.text);
    assert_eq!(r.json[0]["valid"], 60, "{}", r.text);
}
