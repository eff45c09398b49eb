//! Every request type's deserialisation on generated bodies (issue 52's fuzz target for the
//! JSON body reader and the request types, bounded for CI): JSON objects built from the
//! field names of the OpenAPI documents and values of every kind, among them ids that
//! exist, sent to every POST route of v1 and v2. Each is answered with a 2xx or a 4xx in the
//! contract's error body, never a 5xx, and the server keeps answering.
#![allow(clippy::unwrap_used)]

use keygate::routes::ROUTES;
use keygate_tests::TestServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// Bodies per route (the suite runs three times: SQLite, PostgreSQL + Redis, a cluster).
const CASES: u32 = 24;

/// Every property name of every schema in `doc`.
fn field_names(doc: &Value, out: &mut BTreeSet<String>) {
    match doc {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                out.extend(props.keys().cloned());
            }
            map.values().for_each(|v| field_names(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| field_names(v, out)),
        _ => {}
    }
}

fn body(names: Vec<String>, pool: Vec<Value>) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::sample::select(pool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![0.5, -1.0, 1e300, f64::MIN_POSITIVE]).prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
        "[a-zA-Z0-9_.*:() \u{e9}-]{0,16}".prop_map(Value::from),
    ];
    let keys = prop::sample::select(names);
    let nested = keys.clone();
    let value = leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(nested.clone(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    });
    prop::collection::btree_map(keys, value, 0..6).prop_map(|m| Value::Object(m.into_iter().collect()))
}

#[test]
fn generated_bodies_on_every_post_route_get_an_answer_or_a_contract_error_never_a_5xx() {
    let s = TestServer::start();
    let mut names = BTreeSet::new();
    for doc in ["/openapi.json", "/openapi-v2.json"] {
        let r = s.request(s.client.get(s.url(doc)));
        assert_eq!(r.status, 200, "{doc}");
        field_names(&r.json, &mut names);
    }
    assert!(names.len() > 100, "the documents' field names: {names:?}");
    // Values that name things that exist, so that generated calls get past the lookups.
    let api = s.v2("apis.createApi", &json!({"name": "fuzz"})).data()["apiId"].clone();
    let key = s.v2("keys.createKey", &json!({"apiId": api, "name": "fuzz"})).data().clone();
    s.limit(json!({"namespace": "fuzz", "identifier": "u", "limit": 5, "duration": 60_000}));
    let pool = vec![
        api.clone(),
        key["keyId"].clone(),
        key["key"].clone(),
        json!("fuzz"),
        json!(s.workspace_id),
        json!("api.*.read_key"),
        json!("a AND (b OR c)"),
        json!(60_000),
        json!(1),
        json!([]),
        json!({}),
        json!("SELECT count(*) FROM key_verifications_v1"),
    ];
    let names: Vec<String> = names.into_iter().collect();
    let posts = ROUTES
        .iter()
        .filter(|(p, m)| (p.starts_with("/v1/") || p.starts_with("/v2/")) && m.contains(&"POST"));
    let mut routes = 0;
    for (path, _) in posts {
        routes += 1;
        let config = Config { cases: CASES, failure_persistence: None, ..Config::default() };
        let mut runner = TestRunner::new(config);
        let result = runner.run(&body(names.clone(), pool.clone()), |body| {
            let req = s.client.post(s.url(path)).header("content-type", "application/json");
            let r = s.request(req.bearer_auth(&s.root_key).body(body.to_string()));
            prop_assert!(r.status < 500, "{path} {body}: {} {}", r.status, r.text);
            if r.status >= 400 {
                // v1: {"error": {"code", "message"}}; v2: {"error": {"type", "status", ...}}.
                let error = &r.json["error"];
                let named =
                    error["code"].is_string() || (error["type"].is_string() && error["status"] == r.status);
                prop_assert!(named, "{path} {body}: {} {}", r.status, r.text);
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{path}: {e}");
        }
    }
    assert!(routes > 60, "{routes} POST routes");
    // Still answering (the generated calls were real: some deleted what they named).
    assert_eq!(s.request(s.client.get(s.url("/v1/liveness"))).status, 200);
}
