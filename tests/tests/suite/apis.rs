//! API objects (API-v2.md §10) through both wires: create, read, list keys a page at a time,
//! delete with every key; implicit creation by `keys.createKey`; the 400/403/404 paths.
#![allow(clippy::unwrap_used)]

use keygate_tests::{Resp, TestServer};
use serde_json::{Value, json};

fn create_api(s: &TestServer, name: &str) -> String {
    s.v2("apis.createApi", &json!({ "name": name })).data()["apiId"].as_str().unwrap().to_string()
}

/// v2 `keys.createKey` in an API: (keyId, secret).
fn create_key(s: &TestServer, api_id: &str) -> (String, String) {
    let d = s.v2("keys.createKey", &json!({ "apiId": api_id, "permissions": ["docs.read"] })).data().clone();
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn v1_get(s: &TestServer, path: &str, query: &[(&str, &str)], token: &str) -> Resp {
    s.request(s.client.get(s.url(path)).query(query).bearer_auth(token))
}

fn verify(s: &TestServer, secret: &str) -> Value {
    s.v2("keys.verifyKey", &json!({ "key": secret })).data()["code"].clone()
}

#[test]
fn an_api_is_created_read_listed_and_deleted_with_its_keys() {
    let s = TestServer::start();
    let api = create_api(&s, "payments");
    assert!(api.starts_with("api_"), "{api}");
    assert_eq!(
        s.v2("apis.getApi", &json!({ "apiId": api })).data(),
        &json!({ "id": api, "name": "payments", "keyFormat": "plain" })
    );
    let other = create_api(&s, "payments");
    assert_ne!(api, other, "names need not be unique");

    let mut keys: Vec<(String, String)> = (0..5).map(|_| create_key(&s, &api)).collect();
    create_key(&s, &other);
    keys.sort();
    // Pages of 2 by keyId: every key once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut body = json!({ "apiId": api, "limit": 2 });
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let r = s.v2("apis.listKeys", &body);
        let page = r.data().as_array().unwrap().clone();
        assert!(page.len() <= 2);
        for k in &page {
            assert_eq!(k["permissions"], json!(["docs.read"]), "{k}");
            assert!(k["start"].is_string() && k["createdAt"].is_i64(), "{k}");
            seen.push(k["keyId"].as_str().unwrap().to_string());
        }
        let pagination = &r.json["pagination"];
        match pagination["hasMore"].as_bool().unwrap() {
            true => cursor = Some(pagination["cursor"].as_str().unwrap().to_string()),
            false => {
                assert!(pagination.get("cursor").is_none(), "{pagination}");
                break;
            }
        }
    }
    assert_eq!(seen, keys.iter().map(|k| k.0.clone()).collect::<Vec<_>>());
    // `externalId` keeps the keys of that identity: none has one.
    let none = s.v2("apis.listKeys", &json!({ "apiId": api, "externalId": "customer_1" }));
    assert_eq!(none.data(), &json!([]));
    // `revalidateKeysCache` is accepted.
    let all = s.v2("apis.listKeys", &json!({ "apiId": api, "revalidateKeysCache": true }));
    assert_eq!(all.data().as_array().unwrap().len(), 5);

    // Delete: the API and its keys go, in one call; the other API's keys stay.
    for (_, secret) in &keys {
        assert_eq!(verify(&s, secret), "VALID");
    }
    assert_eq!(s.v2("apis.deleteApi", &json!({ "apiId": api })).data(), &json!({}));
    for (key_id, secret) in &keys {
        assert_eq!(verify(&s, secret), "NOT_FOUND");
        s.v2("keys.getKey", &json!({ "keyId": key_id })).assert_problem(404, "unkey/data/key_not_found");
    }
    s.v2("apis.getApi", &json!({ "apiId": api })).assert_problem(404, "unkey/data/api_not_found");
    s.v2("apis.listKeys", &json!({ "apiId": api })).assert_problem(404, "unkey/data/api_not_found");
    s.v2("apis.deleteApi", &json!({ "apiId": api })).assert_problem(404, "unkey/data/api_not_found");
    assert_eq!(s.v2("apis.listKeys", &json!({ "apiId": other })).data().as_array().unwrap().len(), 1);

    // The audit log holds the API's creation and deletion, and each key's deletion.
    let events = v1_get(&s, "/v1/audit.listEvents", &[("resourceId", api.as_str())], &s.root_key);
    let mut kinds: Vec<&str> =
        events.json["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    kinds.sort();
    assert_eq!(kinds, ["api.create", "api.delete"], "(the test clock stands still: sorted)");
    let deleted = v1_get(&s, "/v1/audit.listEvents", &[("event", "key.delete")], &s.root_key);
    assert_eq!(deleted.json["events"].as_array().unwrap().len(), 5);
}

#[test]
fn create_key_makes_the_api_it_names_when_there_is_none() {
    let s = TestServer::start();
    create_key(&s, "legacy_label");
    let api = s.v2("apis.getApi", &json!({ "apiId": "legacy_label" }));
    assert_eq!(api.data(), &json!({ "id": "legacy_label", "name": "legacy_label", "keyFormat": "plain" }));
    // v1's free-form label too, and a second key joins the same API.
    let r = s.post("/v1/keys.createKey", &json!({ "apiId": "v1 label" }));
    assert_eq!(r.status, 200, "{}", r.text);
    let r = s.post("/v1/keys.createKey", &json!({ "apiId": "v1 label" }));
    assert_eq!(r.status, 200, "{}", r.text);
    let list = v1_get(&s, "/v1/apis.listKeys", &[("apiId", "v1 label")], &s.root_key);
    assert_eq!((list.status, &list.json["total"]), (200, &json!(2)), "{}", list.text);
    // A refused createKey creates no API.
    let r = s.v2("keys.createKey", &json!({ "apiId": "never_made", "roles": ["no-such-role"] }));
    r.assert_problem(404, "unkey/data/role_not_found");
    s.v2("apis.getApi", &json!({ "apiId": "never_made" })).assert_problem(404, "unkey/data/api_not_found");
}

#[test]
fn bad_input_is_400_and_changes_nothing() {
    let s = TestServer::start();
    for name in ["ab", "1abc", "has space", "x".repeat(256).as_str(), "_abc"] {
        let r = s.v2("apis.createApi", &json!({ "name": name }));
        r.assert_problem(400, "unkey/application/invalid_input");
    }
    s.v2("apis.createApi", &json!({})).assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(s.count("apis", "1 = 1"), 0);
    let api = create_api(&s, "ok.name_1-x");
    for body in [
        json!({ "apiId": api, "limit": 0 }),
        json!({ "apiId": api, "limit": 101 }),
        json!({ "apiId": api, "cursor": "not-ours" }),
        json!({ "apiId": "" }),
        json!({ "limit": 10 }),
    ] {
        s.v2("apis.listKeys", &body).assert_problem(400, "unkey/application/invalid_input");
    }
    // `decrypt` of keys that are not recoverable: nothing to add (tests/tests/suite/recoverable.rs).
    assert_eq!(s.v2("apis.listKeys", &json!({ "apiId": api, "decrypt": true })).data(), &json!([]));
    s.v2("apis.getApi", &json!({ "apiId": 12 })).assert_problem(400, "unkey/application/invalid_input");
    let q = |limit: &str| {
        v1_get(&s, "/v1/apis.listKeys", &[("apiId", api.as_str()), ("limit", limit)], &s.root_key)
    };
    q("0").assert_error(400, "BAD_REQUEST");
    q("101").assert_error(400, "BAD_REQUEST");
    q("x").assert_error(400, "BAD_REQUEST");
    s.post("/v1/apis.createApi", &json!({ "name": "no" })).assert_error(400, "BAD_REQUEST");
}

#[test]
fn scoped_root_keys_reach_their_api_only_and_other_workspaces_are_missing() {
    let s = TestServer::start();
    let (a, b) = (create_api(&s, "alpha"), create_api(&s, "beta"));
    create_key(&s, &a);
    let scoped = s.root_key_with(&[
        &format!("api.{a}.read_api"),
        &format!("api.{a}.read_key"),
        &format!("api.{a}.delete_api"),
    ]);
    assert_eq!(s.v2_as(&scoped, "apis.getApi", &json!({ "apiId": a })).data()["name"], "alpha");
    assert_eq!(s.v2_as(&scoped, "apis.listKeys", &json!({ "apiId": a })).data().as_array().unwrap().len(), 1);
    for op in ["apis.getApi", "apis.listKeys", "apis.deleteApi"] {
        let detail = s
            .v2_as(&scoped, op, &json!({ "apiId": b }))
            .assert_problem(403, "unkey/authorization/insufficient_permissions");
        assert!(detail.contains(&format!("api.{b}.")), "{op}: {detail}");
    }
    // listKeys needs read_key too; createApi needs api.*.create_api.
    let read_api_only = s.root_key_with(&["api.*.read_api"]);
    let detail = s
        .v2_as(&read_api_only, "apis.listKeys", &json!({ "apiId": a }))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(detail.contains("read_key"), "{detail}");
    s.v2_as(&scoped, "apis.createApi", &json!({ "name": "gamma" }))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    // Another workspace's root key finds nothing.
    let ws2 = s.create_workspace("second");
    let stranger = s.root_key_in(&ws2, &["*"]);
    for op in ["apis.getApi", "apis.listKeys", "apis.deleteApi"] {
        s.v2_as(&stranger, op, &json!({ "apiId": a })).assert_problem(404, "unkey/data/api_not_found");
    }
    assert_eq!(s.v2_as(&scoped, "apis.deleteApi", &json!({ "apiId": a })).data(), &json!({}));
}

#[test]
fn v1_speaks_unkey_v1s_wire_over_the_same_apis() {
    let s = TestServer::start();
    let r = s.post("/v1/apis.createApi", &json!({ "name": "v1-api" }));
    assert_eq!(r.status, 200, "{}", r.text);
    let api = r.json["apiId"].as_str().unwrap().to_string();
    let got = v1_get(&s, "/v1/apis.getApi", &[("apiId", api.as_str())], &s.root_key);
    assert_eq!(got.json, json!({ "id": api, "name": "v1-api", "workspaceId": s.workspace_id }));
    // The same object through v2.
    assert_eq!(s.v2("apis.getApi", &json!({ "apiId": api })).data()["name"], "v1-api");
    let mut keys: Vec<String> = (0..3).map(|_| create_key(&s, &api).0).collect();
    keys.sort();
    let first = v1_get(&s, "/v1/apis.listKeys", &[("apiId", api.as_str()), ("limit", "2")], &s.root_key);
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json["total"], 3);
    let cursor = first.json["cursor"].as_str().unwrap().to_string();
    let second = v1_get(
        &s,
        "/v1/apis.listKeys",
        &[("apiId", api.as_str()), ("limit", "2"), ("cursor", cursor.as_str())],
        &s.root_key,
    );
    assert!(second.json.get("cursor").is_none(), "{}", second.text);
    let ids: Vec<String> = first.json["keys"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second.json["keys"].as_array().unwrap())
        .map(|k| {
            assert_eq!(k["apiId"], json!(api));
            assert_eq!(k["permissions"][0]["name"], "docs.read");
            k["id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids, keys);
    let owned = v1_get(&s, "/v1/apis.listKeys", &[("apiId", api.as_str()), ("ownerId", "u1")], &s.root_key);
    assert_eq!((owned.json["keys"].as_array().unwrap().len(), &owned.json["total"]), (0, &json!(3)));
    assert_eq!(s.post("/v1/apis.deleteApi", &json!({ "apiId": api })).json, json!({}));
    v1_get(&s, "/v1/apis.getApi", &[("apiId", api.as_str())], &s.root_key).assert_error(404, "NOT_FOUND");
    v1_get(&s, "/v1/apis.listKeys", &[("apiId", api.as_str())], &s.root_key).assert_error(404, "NOT_FOUND");
    for k in &keys {
        s.get_key(k).assert_error(404, "NOT_FOUND");
    }
}
