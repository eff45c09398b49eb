//! Keys from other systems (API-v2.md §25, issue 79): imported under a legacy migration
//! with their old system's hash (bcrypt, argon2, Django's PBKDF2) and a lookup part, found
//! by the lookup and checked on their first use, stored under keygate's hash then (the
//! second verification runs no old-hash check: counted), bounded so that wrong secrets for
//! one lookup run one check at a time. The hashes made by the real libraries of the systems
//! teams come from (PyPI bcrypt, argon2-cffi, Django; npm prefixed-api-key) are checked by
//! tests/legacy/run.sh.
#![allow(clippy::unwrap_used)]

use base64::Engine;
use keygate_tests::TestServer;
use serde_json::{Value, json};
use std::sync::Arc;

/// A server with legacy migrations `pk` (`prefix_lookup_secret` keys, as npm
/// prefixed-api-key makes them) and `drf` (`lookup.secret`, as Django REST Framework API
/// Key does), and an API `api_old`.
fn server() -> TestServer {
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.migrations = vec!["pk=legacy:_:1".into(), "drf=legacy:.:0".into()];
    let s = TestServer::start_with(config, db);
    s.v2("keys.createKey", &json!({"apiId": "api_old"})).data();
    s
}

fn bcrypt_of(key: &str) -> String {
    bcrypt::hash_with_salt(key, 4, *b"sixteen byte slt").unwrap().format_for_version(bcrypt::Version::TwoB)
}

fn django_of(key: &str, iterations: u32) -> String {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(key.as_bytes(), b"NaCl2024", iterations, &mut out);
    format!("pbkdf2_sha256${iterations}$NaCl2024${}", base64::engine::general_purpose::STANDARD.encode(out))
}

fn migrate(s: &TestServer, migration: &str, keys: Value) -> keygate_tests::Resp {
    s.v2("keys.migrateKeys", &json!({"migrationId": migration, "apiId": "api_old", "keys": keys}))
}

fn code(s: &TestServer, body: Value) -> String {
    s.v2("keys.verifyKey", &body).data()["code"].as_str().unwrap().to_string()
}

/// Whether `key` verifies VALID within 30 s: a cool-down lasts four times the failed
/// check's time, which a loaded machine stretches.
fn valid_once_cooled(s: &TestServer, key: &str) -> bool {
    (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        code(s, json!({"key": key})) == "VALID"
    })
}

#[test]
fn a_legacy_key_verifies_on_first_use_and_is_a_plain_key_from_then_on() {
    let s = server();
    let key = "acme_BRTRKFsL_51FwqftsmMDHHbJAMEXXHCgG";
    let drf = "Xb3Fe1Qz.s3cr3tpartofthekey0123456789";
    let d = migrate(
        &s,
        "pk",
        json!([{"hash": bcrypt_of(key), "lookup": "BRTRKFsL", "name": "old", "permissions": ["docs.read"]}]),
    )
    .data()
    .clone();
    let key_id = d["migrated"][0]["keyId"].as_str().unwrap().to_string();
    migrate(&s, "drf", json!([{"hash": django_of(drf, 1000), "lookup": "Xb3Fe1Qz"}])).data();
    let checks = || s.state.rbac.legacy_checks();

    // First use: found by its lookup, its old hash checked, the answer a plain key's.
    let v = s.v2("keys.verifyKey", &json!({"key": key, "permissions": "docs.read"})).data().clone();
    assert_eq!((v["code"].as_str(), v["keyId"].as_str()), (Some("VALID"), Some(key_id.as_str())), "{v}");
    assert_eq!(checks(), 1);
    // From then on a plain key: no old-hash check, on every path.
    assert_eq!(code(&s, json!({"key": key})), "VALID");
    let r = s.request(
        s.client
            .get(s.url("/v1/gateway.authorize"))
            .header("x-keygate-root-key", &s.root_key)
            .header("authorization", format!("Bearer {key}")),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(checks(), 1, "the second verification ran no old-hash check");
    assert_eq!(s.count("legacy_keys", &format!("key_id = '{key_id}'")), 0, "its old hash is forgotten");
    assert_eq!(s.count("keys", &format!("id = '{key_id}' AND hash NOT LIKE 'legacy:%'")), 1);

    // Django's PBKDF2 under the other migration's cut.
    assert_eq!(code(&s, json!({"key": drf})), "VALID");
    assert_eq!(checks(), 2);

    // A wrong secret for a waiting key's lookup: one check, NOT_FOUND, remembered.
    migrate(&s, "pk", json!([{"hash": bcrypt_of("acme_LOOKUP02_right"), "lookup": "LOOKUP02"}])).data();
    assert_eq!(code(&s, json!({"key": "acme_LOOKUP02_wrong"})), "NOT_FOUND");
    assert_eq!(checks(), 3);
    assert_eq!(code(&s, json!({"key": "acme_LOOKUP02_wrong"})), "NOT_FOUND");
    assert_eq!(checks(), 3, "a wrong secret seen before costs no second hash");
    // A lookup that matches nothing, or a key with no lookup part, costs no hash.
    assert_eq!(code(&s, json!({"key": "acme_NOSUCHLK_secret"})), "NOT_FOUND");
    assert_eq!(code(&s, json!({"key": "plainkeywithoutparts"})), "NOT_FOUND");
    assert_eq!(checks(), 3);
    // The failed check cooled LOOKUP02 down (a second at least): refused, not remembered.
    assert_eq!(code(&s, json!({"key": "acme_LOOKUP02_right"})), "NOT_FOUND");
    assert_eq!(checks(), 3);
    assert!(valid_once_cooled(&s, "acme_LOOKUP02_right"));
}

#[test]
fn a_key_verified_before_its_import_is_found_after_it() {
    let s = server();
    let key = "acme_EARLYONE_secretsecret";
    assert_eq!(code(&s, json!({"key": key})), "NOT_FOUND");
    assert_eq!(code(&s, json!({"key": key})), "NOT_FOUND", "remembered as no key");
    migrate(&s, "pk", json!([{"hash": bcrypt_of(key), "lookup": "EARLYONE"}])).data();
    assert_eq!(code(&s, json!({"key": key})), "VALID", "the import forgets every remembered miss");
}

#[test]
fn migration_id_in_verify_key_narrows_the_search_and_must_exist() {
    let s = server();
    let key = "LKUP.secret_of_a_drf_key";
    migrate(&s, "drf", json!([{"hash": bcrypt_of(key), "lookup": "LKUP"}])).data();
    s.v2("keys.verifyKey", &json!({"key": key, "migrationId": "nobody"}))
        .assert_problem(404, "unkey/data/migration_not_found");
    s.v2("keys.verifyKey", &json!({"key": key, "migrationId": ""}))
        .assert_problem(400, "unkey/application/invalid_input");
    assert_eq!(code(&s, json!({"key": key, "migrationId": "pk"})), "NOT_FOUND");
    assert_eq!(s.state.rbac.legacy_checks(), 0, "pk's cut finds no lookup in it");
    let other = "LKU2.another_drf_key";
    migrate(&s, "drf", json!([{"hash": bcrypt_of(other), "lookup": "LKU2"}])).data();
    assert_eq!(code(&s, json!({"key": other, "migrationId": "drf"})), "VALID");
}

#[test]
fn bad_legacy_imports_are_400_naming_the_field_and_write_nothing() {
    let s = server();
    let before = s.count("keys", "1 = 1");
    let good = json!({"hash": bcrypt_of("acme_GOODGOOD_x"), "lookup": "GOODGOOD"});
    let bad = |entry: Value, field: &str| {
        let r = migrate(&s, "pk", json!([good, entry]));
        let detail = r.assert_problem(400, "unkey/application/invalid_input");
        assert!(detail.contains(field), "{detail}");
    };
    bad(json!({"hash": bcrypt_of("k")}), "keys.1.lookup");
    bad(json!({"hash": "sha1$abc$def", "lookup": "L"}), "keys.1.hash");
    bad(json!({"hash": bcrypt_of("k").replace("$04$", "$15$"), "lookup": "L"}), "keys.1.hash");
    let costly = django_of("k", 1000).replace("$1000$", "$9000000$");
    bad(json!({"hash": costly, "lookup": "L"}), "keys.1.hash");
    bad(json!({"hash": bcrypt_of("k"), "lookup": "x".repeat(256)}), "keys.1.lookup");
    // A lookup under a digest migration is a mistake, not ignored.
    let hex = hex::encode(keygate_domain::secret_digest("k"));
    let r = migrate(&s, "sha256_hex", json!([{"hash": hex, "lookup": "L"}]));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("keys.0.lookup"));
    assert_eq!(s.count("keys", "1 = 1"), before, "nothing written");
    assert_eq!(s.count("legacy_keys", "1 = 1"), 0);

    // The same old hash twice, or again later, is skipped and listed.
    let d = migrate(&s, "pk", json!([good, good])).data().clone();
    assert_eq!(d["failed"], json!([good["hash"]]), "{d}");
    let d = migrate(&s, "pk", json!([good])).data().clone();
    assert_eq!((d["migrated"].as_array().unwrap().len(), &d["failed"]), (0, &json!([good["hash"]])));
}

#[test]
fn a_deleted_waiting_key_is_gone_with_its_old_hash() {
    let s = server();
    let key = "acme_DELETEME_secret";
    let d = migrate(&s, "pk", json!([{"hash": bcrypt_of(key), "lookup": "DELETEME"}])).data().clone();
    let key_id = d["migrated"][0]["keyId"].as_str().unwrap();
    s.v2("keys.deleteKey", &json!({"keyId": key_id, "permanent": true})).data();
    assert_eq!(s.count("legacy_keys", "1 = 1"), 0);
    assert_eq!(code(&s, json!({"key": key})), "NOT_FOUND");
    assert_eq!(s.state.rbac.legacy_checks(), 0);
}

#[test]
fn a_flood_of_wrong_secrets_for_one_lookup_runs_one_check_at_a_time_and_then_none() {
    let s = server();
    // Cost 8: each check takes a few milliseconds, so the flood's calls overlap.
    let right = "acme_FLOODED1_the_right_secret";
    let hash = bcrypt::hash_with_salt(right, 8, *b"sixteen byte slt").unwrap().to_string();
    migrate(&s, "pk", json!([{"hash": hash, "lookup": "FLOODED1"}])).data();
    let other = "acme_BYSTANDR_secret";
    migrate(&s, "pk", json!([{"hash": bcrypt_of(other), "lookup": "BYSTANDR"}])).data();

    let flood = 400;
    let codes: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..16)
            .map(|t| {
                let s = &s;
                scope.spawn(move || {
                    (0..flood / 16)
                        .map(|i| code(s, json!({"key": format!("acme_FLOODED1_wrong_{t}_{i}")})))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        // Another lookup's key, meanwhile, verifies: at once, or (when the flood's one
        // check holds the only place) refused unremembered and VALID a moment later.
        let verified = (0..200).any(|_| {
            let valid = code(&s, json!({"key": other})) == "VALID";
            if !valid {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            valid
        });
        assert!(verified, "the other lookup's key was refused through the whole flood");
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert!(codes.iter().all(|c| c == "NOT_FOUND"), "{codes:?}");
    let checks = s.state.rbac.legacy_checks();
    assert!(checks <= 3, "{checks} checks for {flood} wrong secrets: one, then a cool-down");
    // A refused check is not remembered: once the cool-down after the last failed check
    // has passed (a second at these checks' cost), the right secret verifies.
    assert!(valid_once_cooled(&s, right));
}
