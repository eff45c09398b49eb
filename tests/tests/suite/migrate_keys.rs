//! v2 `keys.migrateKeys` (API-v2.md §15): keys issued elsewhere brought in by their hashes,
//! on SQLite and (with KEYGATE_TEST_POSTGRES_URL) PostgreSQL.
#![allow(clippy::unwrap_used)]

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use keygate_domain::secret_digest;
use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::sync::Arc;

fn hex_of(secret: &str) -> String {
    hex::encode(secret_digest(secret))
}

fn migrate(s: &TestServer, migration: &str, keys: Value) -> Value {
    s.v2("keys.migrateKeys", &json!({"migrationId": migration, "apiId": "api_old", "keys": keys}))
        .data()
        .clone()
}

fn verify(s: &TestServer, key: &str, body: Value) -> Value {
    let mut body = body;
    body["key"] = json!(key);
    s.v2("keys.verifyKey", &body).data().clone()
}

fn with_api() -> TestServer {
    let s = TestServer::start();
    s.v2("apis.createApi", &json!({"name": "old"})).data();
    // An API named by the id the imports use (v1 labels are API ids too).
    s.v2("keys.createKey", &json!({"apiId": "api_old"})).data();
    s
}

#[test]
fn both_schemes_in_every_form_bring_keys_that_verify() {
    let s = with_api();
    let secrets: Vec<String> = (0..6).map(|i| format!("sk_live_customer_{i:02}_abcdefghij")).collect();
    let digests: Vec<[u8; 32]> = secrets.iter().map(|k| secret_digest(k)).collect();
    let hex_keys = json!([
        {"hash": hex::encode(digests[0])},
        {"hash": hex::encode(digests[1]).to_uppercase()},
    ]);
    let d = migrate(&s, "sha256_hex", hex_keys);
    assert_eq!(d["failed"], json!([]));
    assert_eq!(d["migrated"].as_array().unwrap().len(), 2);
    assert_eq!(d["migrated"][1]["hash"], json!(hex::encode(digests[1]).to_uppercase()), "the hash as given");
    let b64_keys = json!([
        {"hash": STANDARD.encode(digests[2])},
        {"hash": STANDARD_NO_PAD.encode(digests[3])},
        {"hash": URL_SAFE.encode(digests[4])},
        {"hash": URL_SAFE_NO_PAD.encode(digests[5])},
    ]);
    let d = migrate(&s, "sha256_base64", b64_keys);
    assert_eq!(d["migrated"].as_array().unwrap().len(), 4, "{d}");
    for (i, secret) in secrets.iter().enumerate() {
        let v = verify(&s, secret, json!({}));
        assert_eq!(v["code"], "VALID", "{i}: {v}");
        // v1 too, and a secret one character off is not a key.
        let v1 = s.post("/v1/keys.verifyKey", &json!({"key": secret})).json;
        assert_eq!(v1["valid"], true, "{v1}");
        assert_eq!(verify(&s, &format!("{secret}x"), json!({}))["code"], "NOT_FOUND");
    }
    // Keygate never saw the plaintext: nothing of it is shown.
    let id = d["migrated"][0]["keyId"].as_str().unwrap();
    let key = s.v2("keys.getKey", &json!({"keyId": id})).data().clone();
    assert_eq!(key["start"], "");
}

#[test]
fn every_create_key_field_is_honoured() {
    let s = with_api();
    s.v2("permissions.createRole", &json!({"name": "reader"})).data();
    let secret = "legacy_key_with_everything";
    let d = migrate(
        &s,
        "sha256_hex",
        json!([{
            "hash": hex_of(secret), "name": "imported", "externalId": "cust_9", "meta": {"plan": "pro"},
            "roles": ["reader"], "permissions": ["documents.read", "documents.write"],
            "expires": T0 + 86_400_000, "enabled": true,
            "credits": {"remaining": 2, "refill": {"interval": "daily", "amount": 5}},
            "ratelimits": [{"name": "calls", "limit": 1, "duration": 60_000, "autoApply": true}],
        }]),
    );
    let id = d["migrated"][0]["keyId"].as_str().unwrap().to_string();
    let key = s.v2("keys.getKey", &json!({"keyId": id})).data().clone();
    assert_eq!(key["name"], "imported");
    assert_eq!(key["meta"], json!({"plan": "pro"}));
    assert_eq!(key["roles"], json!(["reader"]));
    assert_eq!(key["permissions"], json!(["documents.read", "documents.write"]));
    assert_eq!(key["expires"], json!(T0 + 86_400_000));
    assert_eq!(key["identity"]["externalId"], "cust_9");
    assert_eq!(key["credits"]["remaining"], 2);
    assert_eq!(key["credits"]["refill"]["amount"], 5);
    assert_eq!(key["ratelimits"][0]["name"], "calls");
    // It verifies with its permissions, spends its credits and its limit.
    let v = verify(&s, secret, json!({"permissions": "documents.read AND documents.write"}));
    assert_eq!((v["code"].clone(), v["credits"].clone()), (json!("VALID"), json!(1)), "{v}");
    assert_eq!(verify(&s, secret, json!({}))["code"], "RATE_LIMITED", "the auto-applied limit of 1");
    assert_eq!(verify(&s, secret, json!({"permissions": "admin"}))["code"], "INSUFFICIENT_PERMISSIONS");
    // Disabled and expired entries too.
    let d = migrate(
        &s,
        "sha256_hex",
        json!([{"hash": hex_of("off_key"), "enabled": false}, {"hash": hex_of("old_key"), "expires": 1}]),
    );
    assert_eq!(d["migrated"].as_array().unwrap().len(), 2);
    assert_eq!(verify(&s, "off_key", json!({}))["code"], "DISABLED");
    assert_eq!(verify(&s, "old_key", json!({}))["code"], "EXPIRED");
    // One key.create audit event per key, naming the migration.
    let query = [("event", "key.create"), ("resourceId", id.as_str())];
    let events =
        s.request(s.client.get(s.url("/v1/audit.listEvents")).query(&query).bearer_auth(&s.root_key)).json;
    assert_eq!(events["events"][0]["detail"], "migration sha256_hex", "{events}");
}

#[test]
fn duplicates_fail_alone_and_a_rerun_doubles_nothing() {
    let s = with_api();
    let hashes: Vec<String> = (0..5).map(|i| hex_of(&format!("dup_key_{i}"))).collect();
    let d = migrate(&s, "sha256_hex", json!([{"hash": hashes[0]}, {"hash": hashes[1]}]));
    assert_eq!(d["migrated"].as_array().unwrap().len(), 2);
    // Present already, repeated within the call (the same digest in another case), and new.
    let upper = hashes[2].to_uppercase();
    let keys = json!([{"hash": hashes[0]}, {"hash": hashes[2]}, {"hash": upper}, {"hash": hashes[3]}, {"hash": hashes[1]}]);
    let d = migrate(&s, "sha256_hex", keys);
    assert_eq!(d["failed"], json!([hashes[0], upper, hashes[1]]));
    let migrated: Vec<&str> =
        d["migrated"].as_array().unwrap().iter().map(|m| m["hash"].as_str().unwrap()).collect();
    assert_eq!(migrated, [hashes[2].as_str(), hashes[3].as_str()], "in request order");
    assert_eq!(s.count("keys", "api_id = 'api_old'"), 1 + 4, "nothing doubled");
    // A key of another workspace with the same hash is skipped too (a hash is one key).
    let other = s.create_workspace("other");
    let rk = s.root_key_in(&other, &["*"]);
    s.v2_as(&rk, "apis.createApi", &json!({"name": "other_api"})).data();
    s.v2_as(&rk, "keys.createKey", &json!({"apiId": "api_old"})).data();
    let body = json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": [{"hash": hashes[4]}, {"hash": hashes[3]}]});
    let d = s.v2_as(&rk, "keys.migrateKeys", &body).data().clone();
    assert_eq!(d["failed"], json!([hashes[3]]));
}

#[test]
fn bad_input_fails_the_whole_call_and_writes_nothing() {
    let s = with_api();
    let before = s.count("keys", "1 = 1");
    let good = json!({"hash": hex_of("fine_key")});
    let call = |body: Value| s.v2("keys.migrateKeys", &body);
    // A hash that does not decode, anywhere in the call.
    let r = call(json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": [good, {"hash": "xyz"}]}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("keys.1.hash"));
    let r =
        call(json!({"migrationId": "sha256_base64", "apiId": "api_old", "keys": [{"hash": hex_of("a")}]}));
    r.assert_problem(400, "unkey/application/invalid_input");
    // Unknown migration, unknown API, a role that does not exist.
    call(json!({"migrationId": "nobody", "apiId": "api_old", "keys": [good]}))
        .assert_problem(404, "unkey/data/migration_not_found");
    call(json!({"migrationId": "sha256_hex", "apiId": "api_none", "keys": [good]}))
        .assert_problem(404, "unkey/data/api_not_found");
    let with_role = json!({"hash": hex_of("other"), "roles": ["missing"]});
    call(json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": [good, with_role]}))
        .assert_problem(404, "unkey/data/role_not_found");
    // Bounds: no entries, too many, an entry's own fields.
    call(json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": []}))
        .assert_problem(400, "unkey/application/invalid_input");
    let many: Vec<Value> = (0..1_001).map(|i| json!({"hash": hex_of(&format!("m{i}"))})).collect();
    call(json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": many}))
        .assert_problem(400, "unkey/application/invalid_input");
    let bad_credits = json!({"hash": hex_of("c"), "credits": {"remaining": null, "refill": {"interval": "daily", "amount": 1}}});
    let r = call(json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": [good, bad_credits]}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("keys.1.credits"));
    assert_eq!(s.count("keys", "1 = 1"), before, "nothing written");
    assert_eq!(s.count("permissions", "1 = 1"), 0, "nor any permission");
}

#[test]
fn root_key_permissions() {
    let s = with_api();
    let good =
        || json!({"migrationId": "sha256_hex", "apiId": "api_old", "keys": [{"hash": hex_of("p_key")}]});
    let none = s.root_key_with(&["api.*.read_key"]);
    s.v2_as(&none, "keys.migrateKeys", &good())
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let scoped = s.root_key_with(&["api.api_old.create_key"]);
    assert_eq!(s.v2_as(&scoped, "keys.migrateKeys", &good()).data()["migrated"].as_array().unwrap().len(), 1);
    // Creating a permission needs create_permission; an identity, create_identity.
    let with_new = json!({"migrationId": "sha256_hex", "apiId": "api_old",
                          "keys": [{"hash": hex_of("q_key"), "permissions": ["brand.new"]}]});
    s.v2_as(&scoped, "keys.migrateKeys", &with_new)
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let with_identity = json!({"migrationId": "sha256_hex", "apiId": "api_old",
                               "keys": [{"hash": hex_of("r_key"), "externalId": "someone"}]});
    s.v2_as(&scoped, "keys.migrateKeys", &with_identity)
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let full =
        s.root_key_with(&["api.*.create_key", "rbac.*.create_permission", "identity.*.create_identity"]);
    assert_eq!(s.v2_as(&full, "keys.migrateKeys", &with_new).data()["failed"], json!([]));
    assert_eq!(s.v2_as(&full, "keys.migrateKeys", &with_identity).data()["failed"], json!([]));
}

#[test]
fn a_configured_migration_id_names_a_scheme() {
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.migrations = vec!["acme_legacy=sha256_base64".into()];
    let s = TestServer::start_with(config, db);
    s.v2("keys.createKey", &json!({"apiId": "api_old"})).data();
    let hash = STANDARD.encode(secret_digest("acme_customer_key"));
    let d = migrate(&s, "acme_legacy", json!([{"hash": hash}]));
    assert_eq!(d["migrated"].as_array().unwrap().len(), 1);
    assert_eq!(verify(&s, "acme_customer_key", json!({}))["code"], "VALID");
}

#[test]
fn a_migrated_key_passes_forward_auth_and_the_middlewares_verifiers() {
    let s = with_api();
    let secret = "sk_live_from_the_old_service_0123456789";
    let d = migrate(
        &s,
        "sha256_hex",
        json!([{"hash": hex_of(secret), "name": "old", "permissions": ["docs.read"]}]),
    );
    let key_id = d["migrated"][0]["keyId"].as_str().unwrap().to_string();

    // Forward auth, as a gateway calls it.
    let bearer = format!("Bearer {secret}");
    let call = |permission: &str| {
        s.request(
            s.client
                .get(s.url("/v1/gateway.authorize"))
                .header("x-keygate-root-key", &s.root_key)
                .header("authorization", &bearer)
                .header("x-keygate-permissions", permission),
        )
    };
    let r = call("docs.read");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-keygate-key-id"), Some(key_id.as_str()));
    assert_eq!(call("docs.write").status, 403);

    // keygate-client's verifiers (what its axum and actix middlewares call), both back ends.
    use keygate_client::keys::VerifyKeyRequest;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = keygate_client::Verifier::remote(keygate_client::Client::new(&s.base, &s.root_key).unwrap());
    let mut builder = keygate_client::embedded::Embedded::builder(&s.db.url);
    if let Some(redis) = keygate_test_support::redis_url() {
        builder = builder
            .redis_url(redis)
            .redis_cluster(keygate_test_support::redis_cluster())
            .redis_key_prefix(keygate_test_support::redis_prefix_for(&s.db.url));
    }
    let embedded = keygate_client::Verifier::embedded(builder.open().unwrap());
    for verifier in [remote, embedded] {
        let req = VerifyKeyRequest {
            key: secret.into(),
            permissions: Some("docs.read".into()),
            ..Default::default()
        };
        let got = rt.block_on(verifier.verify(&req)).unwrap();
        assert!(got.valid, "{got:?}");
        assert_eq!(got.key_id.as_deref(), Some(key_id.as_str()));
    }
}
