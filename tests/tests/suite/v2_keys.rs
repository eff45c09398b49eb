//! v2 `keys.*` (API-v2.md §2, §3): create, read, delete, verify, and the key's permissions
//! and roles by plain strings, over the same data as v1.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};

fn create(s: &TestServer, body: Value) -> (String, String) {
    let r = s.v2("keys.createKey", &body);
    let d = r.data();
    assert_eq!(d.as_object().unwrap().len(), 2, "exactly keyId and key: {}", r.text);
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn verify(s: &TestServer, key: &str, query: Option<&str>) -> Value {
    let mut body = json!({ "key": key });
    if let Some(q) = query {
        body["permissions"] = json!(q);
    }
    s.v2("keys.verifyKey", &body).data().clone()
}

#[test]
fn create_get_whoami_and_delete_through_v2_and_v1() {
    let s = TestServer::start();
    let (id, key) = create(
        &s,
        json!({"apiId": "api_main", "prefix": "sk_live", "name": "checkout", "byteLength": 32,
               "meta": {"team": "pay"}, "expires": T0 + 86_400_000, "permissions": ["docs.read"],
               "ownerIdIsUnknown": "ignored"}),
    );
    assert!(id.starts_with("key_"));
    let body = key.strip_prefix("sk_live_").unwrap();
    assert!(body.chars().all(|c| c.is_ascii_alphanumeric() && !"0OIl".contains(c)), "base58: {key}");
    assert!(body.len() >= 43, "32 bytes in base58: {key}");

    let got = s.v2("keys.getKey", &json!({"keyId": id}));
    let k = got.data();
    assert_eq!(k["keyId"], id.as_str());
    assert_eq!(k["start"], &key[.."sk_live_".len() + 4]);
    assert_eq!(
        (&k["name"], &k["enabled"], &k["meta"]),
        (&json!("checkout"), &json!(true), &json!({"team": "pay"}))
    );
    assert_eq!(k["expires"], T0 + 86_400_000);
    assert_eq!(k["permissions"], json!(["docs.read"]));
    assert_eq!(k["roles"], json!([]));
    assert!(k["createdAt"].is_i64());
    for absent in ["credits", "identity", "ratelimits", "plaintext", "lastUsedAt", "updatedAt"] {
        assert!(k.get(absent).is_none(), "{absent} is never shown: {}", got.text);
    }
    assert!(!got.text.contains(&key), "the secret is shown once");
    let me = s.v2("keys.whoami", &json!({"key": key}));
    assert_eq!(me.data()["keyId"], id.as_str());
    // The same key through v1.
    assert_eq!(s.get_key(&id).json["name"], "checkout");

    // Defaults: no prefix gives the bare base58 part, start its first 4 characters.
    let (plain_id, plain) = create(&s, json!({"apiId": "api_main"}));
    assert!(!plain.contains('_') && plain.len() >= 21, "16 bytes of base58: {plain}");
    assert_eq!(s.v2("keys.getKey", &json!({"keyId": plain_id})).data()["start"], &plain[..4]);

    let gone = s.v2("keys.deleteKey", &json!({"keyId": id, "permanent": false}));
    assert_eq!(gone.data(), &json!({}));
    assert_eq!(verify(&s, &key, None), json!({"valid": false, "code": "NOT_FOUND"}));
    s.v2("keys.getKey", &json!({"keyId": id})).assert_problem(404, "unkey/data/key_not_found");
    s.v2("keys.deleteKey", &json!({"keyId": id})).assert_problem(404, "unkey/data/key_not_found");
    s.v2("keys.whoami", &json!({"key": key})).assert_problem(404, "unkey/data/key_not_found");
    s.get_key(&id).assert_error(404, "NOT_FOUND");
    // A v1 key reads through v2.
    let v1 = s.post("/v1/keys.createKey", &json!({"apiId": "api_v1", "roles": []}));
    let v1_id = v1.json["keyId"].as_str().unwrap();
    assert_eq!(s.v2("keys.getKey", &json!({"keyId": v1_id})).data()["keyId"], v1_id);
}

#[test]
fn create_refuses_bad_fields_and_unsupported_features_and_writes_nothing() {
    let s = TestServer::start();
    let before = s.count("keys", "1 = 1");
    for (body, location) in [
        (json!({}), "body.apiId"),
        (json!({"apiId": "ab"}), "body.apiId"),
        (json!({"apiId": "api-dash"}), "body.apiId"),
        (json!({"apiId": "api_1", "prefix": "x".repeat(17)}), "body.prefix"),
        (json!({"apiId": "api_1", "byteLength": 15}), "body.byteLength"),
        (json!({"apiId": "api_1", "byteLength": 256}), "body.byteLength"),
        (json!({"apiId": "api_1", "byteLength": 16.5}), "body.byteLength"),
        (json!({"apiId": "api_1", "expires": 4_102_444_800_001u64}), "body.expires"),
        (json!({"apiId": "api_1", "name": ""}), "body.name"),
        (json!({"apiId": "api_1", "roles": vec!["x"; 101]}), "body.roles"),
        (json!({"apiId": 7}), "body.apiId"),
    ] {
        let r = s.v2("keys.createKey", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{body}: {}", r.text);
    }
    for field in ["externalId", "ratelimits"] {
        let r = s.v2("keys.createKey", &json!({"apiId": "api_1", field: {"remaining": 1}}));
        r.assert_problem(400, "unkey/application/invalid_input");
    }
    let refill = json!({"interval": "daily", "amount": 5});
    for (credits, location) in [
        (json!({"remaining": -1}), "body.credits.remaining"),
        (json!({"remaining": 1.5}), "body.credits.remaining"),
        (json!({"remaining": null, "refill": refill}), "body.credits.refill"),
        (json!({"refill": refill}), "body.credits.refill"),
        (
            json!({"remaining": 1, "refill": {"interval": "weekly", "amount": 5}}),
            "body.credits.refill.interval",
        ),
        (json!({"remaining": 1, "refill": {"interval": "daily", "amount": 0}}), "body.credits.refill.amount"),
        (
            json!({"remaining": 1, "refill": {"interval": "daily", "amount": 5, "refillDay": 3}}),
            "body.credits.refill.refillDay",
        ),
        (
            json!({"remaining": 1, "refill": {"interval": "monthly", "amount": 5, "refillDay": 32}}),
            "body.credits.refill.refillDay",
        ),
    ] {
        let r = s.v2("keys.createKey", &json!({"apiId": "api_1", "credits": credits}));
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{credits}: {}", r.text);
    }
    // null means absent.
    create(&s, json!({"apiId": "api_1", "externalId": null, "credits": null}));
    // (`recoverable`: tests/tests/suite/recoverable.rs.)
    // A missing role: 404, and neither the key nor the new permission exists.
    s.v2("keys.createKey", &json!({"apiId": "api_1", "permissions": ["fresh.perm"], "roles": ["nope"]}))
        .assert_problem(404, "unkey/data/role_not_found");
    assert_eq!(s.count("keys", "1 = 1"), before + 1);
    assert_eq!(s.count("permissions", "name = 'fresh.perm'"), 0);
}

#[test]
fn verify_answers_its_four_outcomes_and_not_found_alone() {
    let s = TestServer::start();
    s.v2("permissions.createRole", &json!({"name": "reader", "permissions": ["docs.read"]})).data();
    let (_, key) = create(
        &s,
        json!({"apiId": "api_1", "permissions": ["docs.write"], "roles": ["reader"],
                                      "name": "k", "meta": {"a": 1}}),
    );
    let v = verify(&s, &key, Some("docs.read AND (docs.write OR admin)"));
    assert_eq!((&v["valid"], &v["code"]), (&json!(true), &json!("VALID")));
    assert_eq!(v["permissions"], json!(["docs.read", "docs.write"]));
    assert_eq!(v["roles"], json!(["reader"]));
    assert_eq!((&v["name"], &v["meta"], &v["enabled"]), (&json!("k"), &json!({"a": 1}), &json!(true)));
    assert!(v["keyId"].is_string());
    let v = verify(&s, &key, Some("admin OR docs.delete"));
    assert_eq!((&v["valid"], &v["code"]), (&json!(false), &json!("INSUFFICIENT_PERMISSIONS")));
    assert_eq!(verify(&s, "sk_unknown_0000", None), json!({"valid": false, "code": "NOT_FOUND"}));

    let (_, disabled) = create(&s, json!({"apiId": "api_1", "enabled": false}));
    assert_eq!(verify(&s, &disabled, None)["code"], "DISABLED");
    let (_, expired) = create(&s, json!({"apiId": "api_1", "expires": T0 - 1}));
    assert_eq!(verify(&s, &expired, None)["code"], "EXPIRED");
    let (_, later) = create(&s, json!({"apiId": "api_1", "expires": T0 + 1_000}));
    assert_eq!(verify(&s, &later, None)["code"], "VALID");
    s.clock.advance(1_000);
    assert_eq!(verify(&s, &later, None)["code"], "EXPIRED");
}

#[test]
fn verify_needs_a_verify_permission_and_an_api_scoped_one_sees_only_its_api() {
    let s = TestServer::start();
    let (_, a) = create(&s, json!({"apiId": "api_a"}));
    let (_, b) = create(&s, json!({"apiId": "api_b"}));
    let none = s.root_key_with(&["api.*.read_key"]);
    let r = s.v2_as(&none, "keys.verifyKey", &json!({"key": a}));
    let detail = r.assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(detail.contains("api.*.verify_key"), "{detail}");
    // Even for an unknown key: checked before the lookup.
    s.v2_as(&none, "keys.verifyKey", &json!({"key": "nope"}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let scoped = s.root_key_with(&["api.api_a.verify_key"]);
    assert_eq!(s.v2_as(&scoped, "keys.verifyKey", &json!({"key": a})).data()["code"], "VALID");
    assert_eq!(
        s.v2_as(&scoped, "keys.verifyKey", &json!({"key": b})).data(),
        &json!({"valid": false, "code": "NOT_FOUND"})
    );
    let all = s.root_key_with(&["api.*.verify_key"]);
    assert_eq!(s.v2_as(&all, "keys.verifyKey", &json!({"key": b})).data()["code"], "VALID");
    // Another workspace's root key never finds them.
    let other = s.create_workspace("other");
    let foreign = s.root_key_in(&other, &["*"]);
    assert_eq!(s.v2_as(&foreign, "keys.verifyKey", &json!({"key": a})).data()["code"], "NOT_FOUND");
}

#[test]
fn verify_refuses_a_bad_query_with_its_position_before_the_lookup() {
    let s = TestServer::start();
    for (query, position) in
        [("a AND", 5), ("(a OR b", 7), ("a b", 2), ("()", 1), ("a AND OR b", 6), ("a $ b", 2), ("", 0)]
    {
        let r = s.v2("keys.verifyKey", &json!({"key": "unknown_key", "permissions": query}));
        r.assert_problem(400, "user/bad_request/permissions_query_syntax_error");
        let e = &r.json["error"]["errors"][0];
        assert_eq!(e["location"], "body.permissions", "{}", r.text);
        if !query.is_empty() {
            assert!(
                e["message"].as_str().unwrap().contains(&format!("position {position}")),
                "{query:?}: {}",
                r.text
            );
        }
    }
    // v1's object form is a type error here.
    s.v2("keys.verifyKey", &json!({"key": "k", "permissions": {"and": ["a"]}}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("keys.verifyKey", &json!({"key": "k", "keyspaces": "x"}))
        .assert_problem(400, "keygate/application/not_supported");
    // A migration id must name a migration (legacy imports: tests/suite/legacy.rs).
    s.v2("keys.verifyKey", &json!({"key": "k", "migrationId": "x"}))
        .assert_problem(404, "unkey/data/migration_not_found");
    s.v2("keys.verifyKey", &json!({"key": "k", "tags": vec!["x"; 21]}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("keys.verifyKey", &json!({"key": "k", "credits": {"cost": -1}}))
        .assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(
        s.v2("keys.verifyKey", &json!({"key": "k", "tags": ["a"], "credits": {"cost": 3}})).data()["code"],
        "NOT_FOUND"
    );
}

fn slugs(r: &keygate_tests::Resp) -> Vec<String> {
    r.data().as_array().unwrap().iter().map(|p| p["slug"].as_str().unwrap().to_string()).collect()
}

#[test]
fn key_permission_calls_answer_every_direct_permission_and_take_slugs_or_ids() {
    let s = TestServer::start();
    let (id, key) = create(&s, json!({"apiId": "api_1"}));
    let made = s.v2(
        "permissions.createPermission",
        &json!({"name": "Read docs", "slug": "docs.read", "description": "d"}),
    );
    let perm_id = made.data()["permissionId"].as_str().unwrap().to_string();
    let r = s.v2("keys.addPermissions", &json!({"keyId": id, "permissions": [perm_id, "b.new", "b.new"]}));
    assert_eq!(slugs(&r), ["b.new", "docs.read"]);
    let read = &r.data()[1];
    assert_eq!(read, &json!({"id": perm_id, "name": "Read docs", "slug": "docs.read", "description": "d"}));
    assert_eq!(r.data()[0]["name"], "b.new", "a created permission's name is its slug");
    let r = s.v2("keys.addPermissions", &json!({"keyId": id, "permissions": ["c"]}));
    assert_eq!(slugs(&r), ["b.new", "c", "docs.read"], "add answers all, not just the new one");
    let r = s.v2("keys.removePermissions", &json!({"keyId": id, "permissions": ["c", "docs.read"]}));
    assert_eq!(slugs(&r), ["b.new"]);
    s.v2("keys.removePermissions", &json!({"keyId": id, "permissions": ["never.made"]}))
        .assert_problem(404, "unkey/data/permission_not_found");
    let r = s.v2("keys.setPermissions", &json!({"keyId": id, "permissions": ["x", "y"]}));
    assert_eq!(slugs(&r), ["x", "y"]);
    assert_eq!(verify(&s, &key, Some("x AND y"))["code"], "VALID");
    assert_eq!(s.v2("keys.setPermissions", &json!({"keyId": id, "permissions": []})).data(), &json!([]));
    s.v2("keys.addPermissions", &json!({"keyId": id, "permissions": []}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("keys.setPermissions", &json!({"keyId": "key_nope", "permissions": []}))
        .assert_problem(404, "unkey/data/key_not_found");
    let r = s.v2("keys.setPermissions", &json!({"keyId": id, "permissions": ["ok", "bad slug"]}));
    r.assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(r.json["error"]["errors"][0]["location"], "body.permissions[1]");
    assert_eq!(s.count("permissions", "name = 'ok'"), 0, "a failed call creates nothing");
}

#[test]
fn key_role_calls_answer_every_role_with_its_permissions_and_never_create_roles() {
    let s = TestServer::start();
    let (id, key) = create(&s, json!({"apiId": "api_1"}));
    let role = s.v2(
        "permissions.createRole",
        &json!({"name": "editor", "description": "edits", "permissions": ["w", "r"]}),
    );
    let role_id = role.data()["roleId"].as_str().unwrap().to_string();
    s.v2("permissions.createRole", &json!({"name": "viewer"})).data();
    let r = s.v2("keys.addRoles", &json!({"keyId": id, "roles": [role_id]}));
    let roles = r.data().as_array().unwrap();
    assert_eq!(roles.len(), 1);
    assert_eq!(roles[0]["name"], "editor");
    assert_eq!(roles[0]["description"], "edits");
    let perms: Vec<&str> =
        roles[0]["permissions"].as_array().unwrap().iter().map(|p| p["slug"].as_str().unwrap()).collect();
    assert_eq!(perms, ["r", "w"]);
    let r = s.v2("keys.setRoles", &json!({"keyId": id, "roles": ["viewer", "editor"]}));
    let names: Vec<&str> = r.data().as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["editor", "viewer"]);
    s.v2("keys.addRoles", &json!({"keyId": id, "roles": ["ghost"]}))
        .assert_problem(404, "unkey/data/role_not_found");
    assert_eq!(s.count("roles", "name = 'ghost'"), 0);
    let r = s.v2("keys.removeRoles", &json!({"keyId": id, "roles": ["viewer"]}));
    assert_eq!(r.data().as_array().unwrap().len(), 1);
    assert_eq!(verify(&s, &key, Some("r AND w"))["code"], "VALID");
    assert_eq!(s.v2("keys.setRoles", &json!({"keyId": id, "roles": []})).data(), &json!([]));
    assert_eq!(verify(&s, &key, Some("r"))["code"], "INSUFFICIENT_PERMISSIONS");
}

#[test]
fn key_calls_need_update_key_for_the_keys_api_besides_the_rbac_permissions() {
    let s = TestServer::start();
    let (a, _) = create(&s, json!({"apiId": "api_a"}));
    let (b, _) = create(&s, json!({"apiId": "api_b"}));
    let body = |k: &str| json!({"keyId": k, "permissions": ["p"]});
    let rbac_only = s.root_key_with(&["rbac.*.add_permission_to_key", "rbac.*.create_permission"]);
    let d = s
        .v2_as(&rbac_only, "keys.addPermissions", &body(&a))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(d.contains("api.*.update_key"), "{d}");
    let scoped = s.root_key_with(&[
        "api.api_a.update_key",
        "rbac.*.add_permission_to_key",
        "rbac.*.create_permission",
    ]);
    s.v2_as(&scoped, "keys.addPermissions", &body(&a)).data();
    let d = s
        .v2_as(&scoped, "keys.addPermissions", &body(&b))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(d.contains("api.api_b.update_key"), "{d}");
    // setPermissions needs both the add and the remove permission.
    let d = s
        .v2_as(&scoped, "keys.setPermissions", &body(&a))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(d.contains("rbac.*.remove_permission_from_key") && !d.contains("add_permission"), "{d}");
    // Creating a permission needs create_permission.
    let no_create = s.root_key_with(&["api.*.update_key", "rbac.*.add_permission_to_key"]);
    let d = s
        .v2_as(&no_create, "keys.addPermissions", &json!({"keyId": a, "permissions": ["brand.new"]}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(d.contains("rbac.*.create_permission"), "{d}");
    assert_eq!(s.count("permissions", "name = 'brand.new'"), 0);
    // createKey needs create_key alone to start a key with permissions and roles (and
    // create_permission for a new slug).
    s.v2("permissions.createRole", &json!({"name": "starter"})).data();
    let creator = s.root_key_with(&["api.*.create_key", "rbac.*.create_permission"]);
    let body = json!({"apiId": "api_a", "permissions": ["fresh.slug"], "roles": ["starter"]});
    s.v2_as(&creator, "keys.createKey", &body).data();
    let no_create = s.root_key_with(&["api.api_a.create_key"]);
    let d = s
        .v2_as(&no_create, "keys.createKey", &json!({"apiId": "api_a", "permissions": ["another.slug"]}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(d.contains("rbac.*.create_permission"), "{d}");
    s.v2_as(&no_create, "keys.createKey", &json!({"apiId": "api_a", "permissions": ["fresh.slug"]})).data();
    s.v2_as(&no_create, "keys.createKey", &json!({"apiId": "api_b"}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    // Reading and deleting alike.
    let reader = s.root_key_with(&["api.api_a.read_key", "api.api_a.delete_key"]);
    s.v2_as(&reader, "keys.getKey", &json!({"keyId": a})).data();
    s.v2_as(&reader, "keys.getKey", &json!({"keyId": b}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    s.v2_as(&reader, "keys.deleteKey", &json!({"keyId": b}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    s.v2_as(&reader, "keys.deleteKey", &json!({"keyId": a})).data();
}
