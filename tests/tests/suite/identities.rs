//! Identities (API-v2.md §11) and keys linked to them (§12.1, §12.2): every operation's
//! success and 400/403/404/409 paths; a refused call changes nothing.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::{Value, json};

fn limits(v: &Value) -> Vec<(String, u64, u64, bool)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert!(l["id"].as_str().unwrap().starts_with("rl_"), "{l}");
            (
                l["name"].as_str().unwrap().to_string(),
                l["limit"].as_u64().unwrap(),
                l["duration"].as_u64().unwrap(),
                l["autoApply"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn limit_ids(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap().into(), l["id"].as_str().unwrap().into()))
        .collect()
}

#[test]
fn an_identity_is_created_read_listed_updated_and_deleted() {
    let s = TestServer::start();
    let body = json!({
        "externalId": "customer_1",
        "meta": {"plan": "pro"},
        "ratelimits": [
            {"name": "requests", "limit": 100, "duration": 60000, "autoApply": true},
            {"name": "bulk", "limit": 5, "duration": 1000},
        ],
    });
    let id = s.v2("identities.createIdentity", &body).data()["identityId"].as_str().unwrap().to_string();
    assert!(id.starts_with("id_"), "{id}");
    let by_external = s.v2("identities.getIdentity", &json!({"identity": "customer_1"})).data().clone();
    let by_id = s.v2("identities.getIdentity", &json!({"identity": id})).data().clone();
    assert_eq!(by_external, by_id);
    assert_eq!(
        (&by_id["id"], &by_id["externalId"], &by_id["meta"]),
        (&json!(id), &json!("customer_1"), &json!({"plan": "pro"}))
    );
    assert_eq!(
        limits(&by_id["ratelimits"]),
        [("bulk".into(), 5, 1000, false), ("requests".into(), 100, 60000, true)],
        "sorted by name"
    );
    s.v2("identities.createIdentity", &json!({"externalId": "customer_1"}))
        .assert_problem(409, "unkey/data/identity_already_exists");

    // Unset meta is {}, no limits is [].
    s.v2("identities.createIdentity", &json!({"externalId": "customer_2"})).data();
    let bare = s.v2("identities.getIdentity", &json!({"identity": "customer_2"})).data().clone();
    assert_eq!((&bare["meta"], &bare["ratelimits"]), (&json!({}), &json!([])));

    // Pages by externalId; search in id or externalId, ASCII case-insensitively.
    for i in 3..=6 {
        s.v2("identities.createIdentity", &json!({"externalId": format!("customer_{i}")})).data();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut b = json!({"limit": 2});
        if let Some(c) = &cursor {
            b["cursor"] = json!(c);
        }
        let r = s.v2("identities.listIdentities", &b);
        seen.extend(
            r.data().as_array().unwrap().iter().map(|i| i["externalId"].as_str().unwrap().to_string()),
        );
        match r.json["pagination"]["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, (1..=6).map(|i| format!("customer_{i}")).collect::<Vec<_>>());
    let found = s.v2("identities.listIdentities", &json!({"search": "CUSTOMER_4"}));
    assert_eq!(found.data().as_array().unwrap().len(), 1);

    // Update: absent leaves, null clears, a value sets; limits keep their ids by name.
    let before = limit_ids(&by_id["ratelimits"]);
    let r = s.v2("identities.updateIdentity", &json!({"identity": "customer_1"}));
    assert_eq!(r.data(), &by_id, "nothing given: unchanged");
    let r = s.v2(
        "identities.updateIdentity",
        &json!({"identity": id, "ratelimits": [{"name": "requests", "limit": 7, "duration": 1000}, {"name": "new", "limit": 1, "duration": 1000}]}),
    );
    let after = r.data().clone();
    assert_eq!(after["meta"], json!({"plan": "pro"}), "meta absent: kept");
    let ids = limit_ids(&after["ratelimits"]);
    assert_eq!(ids.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["new", "requests"]);
    assert_eq!(ids[1].1, before.iter().find(|(n, _)| n == "requests").unwrap().1, "a kept name keeps its id");
    assert_eq!(limits(&after["ratelimits"])[1], ("requests".into(), 7, 1000, false));
    let r = s.v2("identities.updateIdentity", &json!({"identity": id, "meta": null, "ratelimits": null}));
    assert_eq!((&r.data()["meta"], &r.data()["ratelimits"]), (&json!({}), &json!([])));
    let r =
        s.v2("identities.updateIdentity", &json!({"identity": id, "meta": {"tier": 2}, "ratelimits": []}));
    assert_eq!(r.data()["meta"], json!({"tier": 2}));

    // Delete: gone, its limits with it; a second delete is 404.
    assert_eq!(s.v2("identities.deleteIdentity", &json!({"identity": "customer_1"})).data(), &json!({}));
    s.v2("identities.getIdentity", &json!({"identity": id}))
        .assert_problem(404, "unkey/data/identity_not_found");
    s.v2("identities.deleteIdentity", &json!({"identity": id}))
        .assert_problem(404, "unkey/data/identity_not_found");
    assert_eq!(s.count("ratelimits", &format!("identity_id = '{id}'")), 0);
    let events = s.request(
        s.client
            .get(s.url("/v1/audit.listEvents"))
            .query(&[("resourceId", id.as_str())])
            .bearer_auth(&s.root_key),
    );
    let mut kinds: Vec<&str> =
        events.json["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "identity.create",
            "identity.delete",
            "identity.update",
            "identity.update",
            "identity.update",
            "identity.update"
        ]
    );
}

#[test]
fn bad_input_is_400_and_writes_nothing() {
    let s = TestServer::start();
    let many: Vec<Value> =
        (0..51).map(|i| json!({"name": format!("l{i}"), "limit": 1, "duration": 1000})).collect();
    let big_meta: serde_json::Map<String, Value> = (0..101).map(|i| (format!("k{i}"), json!(i))).collect();
    for (body, location) in [
        (json!({}), "body.externalId"),
        (json!({"externalId": ""}), "body.externalId"),
        (json!({"externalId": "has space"}), "body.externalId"),
        (json!({"externalId": "x".repeat(256)}), "body.externalId"),
        (json!({"externalId": "ok", "meta": big_meta}), "body.meta"),
        (json!({"externalId": "ok", "meta": [1]}), "body.meta"),
        (json!({"externalId": "ok", "ratelimits": many}), "body.ratelimits"),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "a", "limit": 1, "duration": 1000}, {"name": "a", "limit": 2, "duration": 1000}]}),
            "body.ratelimits[1].name",
        ),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "a", "limit": 0, "duration": 1000}]}),
            "body.ratelimits[0].limit",
        ),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "a", "limit": 1_000_001, "duration": 1000}]}),
            "body.ratelimits[0].limit",
        ),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "a", "limit": 1, "duration": 999}]}),
            "body.ratelimits[0].duration",
        ),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "a", "limit": 1, "duration": 2_592_000_001_u64}]}),
            "body.ratelimits[0].duration",
        ),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "", "limit": 1, "duration": 1000}]}),
            "body.ratelimits[0].name",
        ),
        (
            json!({"externalId": "ok", "ratelimits": [{"name": "x".repeat(129), "limit": 1, "duration": 1000}]}),
            "body.ratelimits[0].name",
        ),
    ] {
        let r = s.v2("identities.createIdentity", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{}", r.text);
    }
    assert_eq!(s.count("identities", "1 = 1"), 0);
    s.v2("identities.createIdentity", &json!({"externalId": "ok", "meta": {"a": 1}})).data();
    let bad_update = s.v2("identities.updateIdentity", &json!({"identity": "ok", "meta": {"b": 2}, "ratelimits": [{"name": "a", "limit": 0, "duration": 1000}]}));
    bad_update.assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(
        s.v2("identities.getIdentity", &json!({"identity": "ok"})).data()["meta"],
        json!({"a": 1}),
        "nothing written"
    );
    for body in [
        json!({"limit": 0}),
        json!({"limit": 101}),
        json!({"cursor": "nope"}),
        json!({"search": "x".repeat(257)}),
    ] {
        s.v2("identities.listIdentities", &body).assert_problem(400, "unkey/application/invalid_input");
    }
    s.v2("identities.updateIdentity", &json!({"identity": "missing"}))
        .assert_problem(404, "unkey/data/identity_not_found");
}

#[test]
fn keys_link_to_identities_and_show_them_with_their_limits() {
    let s = TestServer::start();
    s.v2("identities.createIdentity", &json!({"externalId": "acme", "meta": {"plan": "pro"}, "ratelimits": [{"name": "shared", "limit": 10, "duration": 1000, "autoApply": true}]})).data();
    let created = s.v2("keys.createKey", &json!({"apiId": "api_ident", "externalId": "acme", "ratelimits": [{"name": "own", "limit": 3, "duration": 1000}]}));
    let key_id = created.data()["keyId"].as_str().unwrap().to_string();
    let secret = created.data()["key"].as_str().unwrap().to_string();
    let key = s.v2("keys.getKey", &json!({"keyId": key_id})).data().clone();
    assert_eq!(key["identity"]["externalId"], "acme");
    assert_eq!(key["identity"]["meta"], json!({"plan": "pro"}));
    assert_eq!(limits(&key["identity"]["ratelimits"]), [("shared".into(), 10, 1000, true)]);
    assert_eq!(limits(&key["ratelimits"]), [("own".into(), 3, 1000, false)]);
    assert_eq!(s.v2("keys.whoami", &json!({"key": secret})).data(), &key);

    // A new externalId creates the identity; the root key needs create_identity for it.
    let other =
        s.v2("keys.createKey", &json!({"apiId": "api_ident", "externalId": "newco"})).data()["keyId"].clone();
    assert_eq!(s.v2("identities.getIdentity", &json!({"identity": "newco"})).data()["meta"], json!({}));
    let no_create = s.root_key_with(&["api.*.create_key"]);
    let before = s.count("keys", "1 = 1");
    let r = s.v2_as(&no_create, "keys.createKey", &json!({"apiId": "api_ident", "externalId": "third"}));
    let detail = r.assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(detail.contains("identity.*.create_identity"), "{detail}");
    assert_eq!(s.count("keys", "1 = 1"), before, "no key");
    assert_eq!(s.count("identities", "external_id = 'third'"), 0, "no identity");
    // An existing identity needs no create_identity.
    s.v2_as(&no_create, "keys.createKey", &json!({"apiId": "api_ident", "externalId": "acme"})).data();

    // listKeys keeps an identity's keys; an unknown externalId keeps none.
    let of = |external: &str| -> Vec<Value> {
        s.v2("apis.listKeys", &json!({"apiId": "api_ident", "externalId": external}))
            .data()
            .as_array()
            .unwrap()
            .clone()
    };
    assert_eq!(of("acme").len(), 2);
    assert_eq!(of("newco").iter().map(|k| k["keyId"].clone()).collect::<Vec<_>>(), [other]);
    assert!(of("nobody").is_empty());

    // Deleting the identity unlinks its keys, which keep working.
    s.v2("identities.deleteIdentity", &json!({"identity": "acme"})).data();
    let key = s.v2("keys.getKey", &json!({"keyId": key_id})).data().clone();
    assert!(key.get("identity").is_none(), "{key}");
    assert_eq!(limits(&key["ratelimits"]), [("own".into(), 3, 1000, false)], "the key's own limits stay");
    assert_eq!(s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"], "VALID");
    // Deleting the key deletes its own limits.
    s.v2("keys.deleteKey", &json!({"keyId": key_id})).data();
    assert_eq!(s.count("ratelimits", &format!("key_id = '{key_id}'")), 0);
}

#[test]
fn each_operation_needs_its_permission_and_other_workspaces_are_missing() {
    let s = TestServer::start();
    s.v2("identities.createIdentity", &json!({"externalId": "mine"})).data();
    let cases = [
        ("identities.createIdentity", json!({"externalId": "x"}), "identity.*.create_identity"),
        ("identities.getIdentity", json!({"identity": "mine"}), "identity.*.read_identity"),
        ("identities.listIdentities", json!({}), "identity.*.read_identity"),
        ("identities.updateIdentity", json!({"identity": "mine"}), "identity.*.update_identity"),
        ("identities.deleteIdentity", json!({"identity": "mine"}), "identity.*.delete_identity"),
    ];
    let everything_else = s.root_key_with(&["api.*.create_key", "api.*.read_key", "rbac.*.read_role"]);
    for (op, body, perm) in &cases {
        let detail = s
            .v2_as(&everything_else, op, body)
            .assert_problem(403, "unkey/authorization/insufficient_permissions");
        assert!(detail.contains(perm), "{op}: {detail}");
    }
    let ws2 = s.create_workspace("elsewhere");
    let stranger = s.root_key_in(&ws2, &["*"]);
    for (op, body, _) in &cases[1..] {
        if *op == "identities.listIdentities" {
            assert_eq!(s.v2_as(&stranger, op, body).data(), &json!([]));
            continue;
        }
        s.v2_as(&stranger, op, body).assert_problem(404, "unkey/data/identity_not_found");
    }
    // The same externalId may exist in another workspace.
    s.v2_as(&stranger, "identities.createIdentity", &json!({"externalId": "mine"})).data();
}
