//! keys.updateKey (API-v2.md §12.3) and keys.rerollKey (§12.5): absent, null and a value
//! for every nullable field; all or nothing; the reroll's full copy.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::{Value, json};

fn create(s: &TestServer, body: Value) -> (String, String) {
    let mut body = body;
    body["apiId"] = json!("api_update");
    let d = s.v2("keys.createKey", &body).data().clone();
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn key(s: &TestServer, id: &str) -> Value {
    s.v2("keys.getKey", &json!({"keyId": id})).data().clone()
}

fn update(s: &TestServer, body: Value) {
    assert_eq!(s.v2("keys.updateKey", &body).data(), &json!({}));
}

fn verify(s: &TestServer, secret: &str) -> String {
    s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"].as_str().unwrap().to_string()
}

#[test]
fn every_nullable_field_is_kept_when_absent_cleared_by_null_and_set_by_a_value() {
    let s = TestServer::start();
    s.v2("permissions.createRole", &json!({"name": "reader"})).data();
    let full = json!({
        "name": "n1", "meta": {"a": 1}, "expires": 4_000_000_000_000_u64, "externalId": "cust",
        "credits": {"remaining": 5, "refill": {"interval": "daily", "amount": 5}},
        "ratelimits": [{"name": "rl", "limit": 3, "duration": 1000}],
    });
    let (id, _) = create(&s, full.clone());
    let before = key(&s, &id);
    assert_eq!(before.get("updatedAt"), None, "never updated");
    // {keyId} alone: a no-op that answers 200 (and leaves the update time alone).
    s.clock.advance(1_000);
    update(&s, json!({"keyId": id}));
    assert_eq!(key(&s, &id), before);
    // A change moves `updatedAt` to the time of the update.
    update(&s, json!({"keyId": id, "name": "renamed"}));
    let created = before["createdAt"].as_i64().unwrap();
    assert_eq!(key(&s, &id)["updatedAt"].as_i64(), Some(created + 1_000));
    update(&s, json!({"keyId": id, "name": "n1"}));
    for (field, value, read, shown) in [
        ("name", json!("n2"), "/name", json!("n2")),
        ("meta", json!({"b": 2}), "/meta", json!({"b": 2})),
        ("expires", json!(4_000_000_000_001_u64), "/expires", json!(4_000_000_000_001_u64)),
        ("externalId", json!("cust2"), "/identity/externalId", json!("cust2")),
        ("credits", json!({"remaining": 9}), "/credits/remaining", json!(9)),
    ] {
        // A value sets it; absent keeps it; null clears it.
        update(&s, json!({"keyId": id, field: value}));
        assert_eq!(key(&s, &id).pointer(read), Some(&shown), "{field} set");
        update(&s, json!({"keyId": id, "enabled": true}));
        assert_eq!(key(&s, &id).pointer(read), Some(&shown), "{field} kept when absent");
        update(&s, json!({"keyId": id, field: null}));
        assert_eq!(key(&s, &id).pointer(read), None, "{field} cleared by null");
    }
    // ratelimits: the whole set; a kept name keeps its id; null and [] clear.
    update(&s, json!({"keyId": id, "ratelimits": [{"name": "a", "limit": 1, "duration": 1000}]}));
    let first = key(&s, &id)["ratelimits"][0]["id"].clone();
    update(
        &s,
        json!({"keyId": id, "ratelimits": [{"name": "a", "limit": 2, "duration": 1000}, {"name": "b", "limit": 1, "duration": 1000}]}),
    );
    let limits = key(&s, &id)["ratelimits"].clone();
    assert_eq!(
        (&limits[0]["id"], &limits[0]["limit"], limits.as_array().unwrap().len()),
        (&first, &json!(2), 2)
    );
    update(&s, json!({"keyId": id, "ratelimits": []}));
    assert!(key(&s, &id).get("ratelimits").is_none());
    // credits {refill} alone keeps the counter; credits null makes the key unlimited.
    update(&s, json!({"keyId": id, "credits": {"remaining": 4}}));
    update(&s, json!({"keyId": id, "credits": {"refill": {"interval": "monthly", "amount": 10}}}));
    assert_eq!(
        key(&s, &id)["credits"],
        json!({"remaining": 4, "refill": {"interval": "monthly", "amount": 10, "refillDay": 1}})
    );
    update(&s, json!({"keyId": id, "credits": null}));
    assert!(key(&s, &id).get("credits").is_none());
    // enabled, roles and permissions replace.
    update(
        &s,
        json!({"keyId": id, "enabled": false, "roles": ["reader"], "permissions": ["p.one", "p.two"]}),
    );
    let k = key(&s, &id);
    assert_eq!(
        (&k["enabled"], &k["roles"], &k["permissions"]),
        (&json!(false), &json!(["reader"]), &json!(["p.one", "p.two"]))
    );
    update(&s, json!({"keyId": id, "roles": [], "permissions": ["p.two"]}));
    let k = key(&s, &id);
    assert_eq!((&k["roles"], &k["permissions"]), (&json!([]), &json!(["p.two"])));
}

#[test]
fn a_call_with_one_bad_part_changes_nothing() {
    let s = TestServer::start();
    let (id, secret) = create(&s, json!({"name": "keep", "permissions": ["p.keep"]}));
    let before = key(&s, &id);
    let permissions_before = s.count("permissions", "1 = 1");
    // An unknown role: 404, and neither the name nor the new permission is written.
    s.v2(
        "keys.updateKey",
        &json!({"keyId": id, "name": "changed", "permissions": ["p.new"], "roles": ["no-such-role"]}),
    )
    .assert_problem(404, "unkey/data/role_not_found");
    // A permission missing for one part: 403, nothing written.
    let no_rbac = s.root_key_with(&["api.*.update_key"]);
    let detail = s
        .v2_as(&no_rbac, "keys.updateKey", &json!({"keyId": id, "name": "changed", "permissions": ["p.new"]}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(detail.contains("add_permission_to_key"), "{detail}");
    let no_identity = s.root_key_with(&["api.*.update_key"]);
    s.v2_as(
        &no_identity,
        "keys.updateKey",
        &json!({"keyId": id, "name": "changed", "externalId": "brand_new"}),
    )
    .assert_problem(403, "unkey/authorization/insufficient_permissions");
    // A refill on a key without credits; bad bounds.
    for (body, location) in [
        (
            json!({"keyId": id, "name": "changed", "credits": {"refill": {"interval": "daily", "amount": 1}}}),
            "body.credits.refill",
        ),
        (json!({"keyId": id, "name": ""}), "body.name"),
        (json!({"keyId": id, "expires": 4_102_444_800_001_u64}), "body.expires"),
        (json!({"keyId": id, "externalId": "bad id"}), "body.externalId"),
        (
            json!({"keyId": id, "ratelimits": [{"name": "x", "limit": 0, "duration": 1000}]}),
            "body.ratelimits[0].limit",
        ),
        (json!({"keyId": id, "credits": [1]}), "body.credits"),
    ] {
        let r = s.v2("keys.updateKey", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{body}: {}", r.text);
    }
    assert_eq!(key(&s, &id), before, "nothing changed");
    assert_eq!(s.count("permissions", "1 = 1"), permissions_before);
    assert_eq!(s.count("identities", "external_id = 'brand_new'"), 0);
    assert_eq!(verify(&s, &secret), "VALID");
    s.v2("keys.updateKey", &json!({"keyId": "key_missing"})).assert_problem(404, "unkey/data/key_not_found");
}

#[test]
fn updates_apply_to_the_next_verification() {
    let s = TestServer::start();
    let (id, secret) = create(&s, json!({"permissions": ["docs.read"]}));
    let check =
        |q: &str| s.v2("keys.verifyKey", &json!({"key": secret, "permissions": q})).data()["code"].clone();
    assert_eq!(check("docs.read"), "VALID");
    update(&s, json!({"keyId": id, "permissions": ["docs.write"]}));
    assert_eq!(check("docs.read"), "INSUFFICIENT_PERMISSIONS");
    assert_eq!(check("docs.write"), "VALID");
    update(&s, json!({"keyId": id, "enabled": false}));
    assert_eq!(verify(&s, &secret), "DISABLED");
    update(&s, json!({"keyId": id, "enabled": true, "expires": 1}));
    assert_eq!(verify(&s, &secret), "EXPIRED");
    update(&s, json!({"keyId": id, "expires": null}));
    assert_eq!(verify(&s, &secret), "VALID");
}

#[test]
fn a_reroll_is_a_full_copy_and_expires_the_original() {
    let s = TestServer::start();
    s.v2("permissions.createRole", &json!({"name": "writer", "permissions": ["docs.write"]})).data();
    let (id, secret) = create(
        &s,
        json!({
            "prefix": "live", "byteLength": 24, "name": "prod", "meta": {"team": "a"}, "externalId": "acme",
            "permissions": ["docs.read"], "roles": ["writer"], "credits": {"remaining": 7},
            "ratelimits": [{"name": "rl", "limit": 3, "duration": 1000, "autoApply": true}],
        }),
    );
    let r = s.v2("keys.rerollKey", &json!({"keyId": id, "expiration": 60_000}));
    let new_id = r.data()["keyId"].as_str().unwrap().to_string();
    let new_secret = r.data()["key"].as_str().unwrap().to_string();
    assert_ne!(new_id, id);
    assert!(new_secret.starts_with("live_") && new_secret.len() > secret.len() - 2, "{new_secret}");
    let (old, new) = (key(&s, &id), key(&s, &new_id));
    for field in ["name", "meta", "enabled", "permissions", "roles", "credits"] {
        assert_eq!(old[field], new[field], "{field} copied");
    }
    assert_eq!(new["identity"]["externalId"], "acme");
    assert_eq!(new["ratelimits"][0]["name"], "rl");
    assert_ne!(new["ratelimits"][0]["id"], old["ratelimits"][0]["id"], "the copy's limits are its own");
    assert_eq!(old["expires"], json!(keygate_tests::T0 + 60_000), "the original expires a minute from now");
    assert!(new.get("expires").is_none(), "the copy keeps the original's (absent) expiry");
    assert_eq!(verify(&s, &new_secret), "VALID");
    assert_eq!(verify(&s, &secret), "VALID");
    // expiration 0: the original verifies EXPIRED at once; null leaves its expiry.
    let r = s.v2("keys.rerollKey", &json!({"keyId": new_id, "expiration": 0}));
    let third = r.data()["key"].as_str().unwrap().to_string();
    assert_eq!(verify(&s, &new_secret), "EXPIRED");
    assert_eq!(verify(&s, &third), "VALID");
    s.v2("keys.rerollKey", &json!({"keyId": id, "expiration": null})).data();
    assert_eq!(key(&s, &id)["expires"], json!(keygate_tests::T0 + 60_000));
    // Permissions and missing keys.
    let only_update = s.root_key_with(&["api.*.update_key"]);
    s.v2_as(&only_update, "keys.rerollKey", &json!({"keyId": id, "expiration": 0}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    s.v2("keys.rerollKey", &json!({"keyId": "key_missing", "expiration": 0}))
        .assert_problem(404, "unkey/data/key_not_found");
    s.v2("keys.rerollKey", &json!({"keyId": id, "expiration": -1}))
        .assert_problem(400, "unkey/application/invalid_input");
}
