//! Recoverable keys (API-v2.md §16): created `recoverable` (v1 and v2), revealed by
//! `getKey`/`listKeys` `decrypt` (v1 and v2) to a root key holding `decrypt_key`, one
//! audited event each; 403 without the permissions and 412 without a keyring (nothing
//! created, nothing revealed); the plaintext nowhere in the database; a ciphertext bound to
//! its key; a keyring missing an id refuses to start; rotation under load.
#![allow(clippy::unwrap_used)]

use keygate::ServerConfig;
use keygate_store::copy::TABLES;
use keygate_test_support::TestDb;
use keygate_tests::{TEST_KEYRING, TestServer};
use serde_json::{Value, json};
use std::sync::Arc;

/// A second key (`k2`, 32 bytes of 0x02).
const K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

fn create(s: &TestServer, by: &str, body: Value) -> (String, String) {
    let r = s.v2_as(by, "keys.createKey", &body);
    (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string())
}

fn api(s: &TestServer, name: &str) -> String {
    s.v2("apis.createApi", &json!({"name": name})).data()["apiId"].as_str().unwrap().to_string()
}

fn decrypted(s: &TestServer, by: &str, key_id: &str) -> Option<String> {
    let r = s.v2_as(by, "keys.getKey", &json!({"keyId": key_id, "decrypt": true}));
    r.data()["plaintext"].as_str().map(str::to_string)
}

fn reveals(s: &TestServer) -> i64 {
    s.count("audit_events", "action = 'key.decrypt'")
}

#[test]
fn a_recoverable_key_is_revealed_by_get_key_and_list_keys_on_both_apis() {
    let s = TestServer::start();
    let root = s.root_key.clone();
    let shop = api(&s, "shop");
    let (id, secret) = create(&s, &root, json!({"apiId": shop, "recoverable": true, "name": "r"}));
    let (plain_id, _) = create(&s, &root, json!({"apiId": shop}));
    // v1's createKey too.
    let v1 = s.post("/v1/keys.createKey", &json!({"apiId": shop, "recoverable": true}));
    assert_eq!(v1.status, 200, "{}", v1.text);
    let (v1_id, v1_secret) =
        (v1.json["keyId"].as_str().unwrap().to_string(), v1.json["key"].as_str().unwrap().to_string());

    assert_eq!(decrypted(&s, &root, &id).as_deref(), Some(secret.as_str()));
    assert_eq!(decrypted(&s, &root, &v1_id).as_deref(), Some(v1_secret.as_str()));
    assert_eq!(decrypted(&s, &root, &plain_id), None, "not recoverable: no plaintext");
    assert_eq!(s.v2("keys.verifyKey", &json!({"key": secret})).data()["valid"], true);
    // Without `decrypt`, and in whoami and verifyKey: never.
    assert!(s.v2("keys.getKey", &json!({"keyId": id})).data().get("plaintext").is_none());
    assert!(!s.v2("keys.whoami", &json!({"key": secret})).text.contains(&secret));
    assert!(!s.v2("keys.verifyKey", &json!({"key": secret})).text.contains(&secret));
    assert_eq!(reveals(&s), 2, "one event per key revealed");

    // v2 listKeys: the recoverable keys carry it.
    let page = s.v2("apis.listKeys", &json!({"apiId": shop, "decrypt": true})).data().clone();
    let shown: Vec<(String, Option<String>)> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["keyId"].as_str().unwrap().to_string(), k["plaintext"].as_str().map(str::to_string)))
        .collect();
    assert!(shown.contains(&(id.clone(), Some(secret.clone()))), "{shown:?}");
    assert!(shown.contains(&(v1_id.clone(), Some(v1_secret.clone()))), "{shown:?}");
    assert!(shown.contains(&(plain_id.clone(), None)), "{shown:?}");
    assert_eq!(reveals(&s), 4);
    // v1: getKey ?decrypt=true and apis.listKeys ?decrypt=true.
    let get = s
        .request(s.client.get(s.url(&format!("/v1/keys.getKey?keyId={id}&decrypt=true"))).bearer_auth(&root));
    assert_eq!(get.json["plaintext"], json!(secret));
    let list = s.request(
        s.client.get(s.url(&format!("/v1/apis.listKeys?apiId={shop}&decrypt=true"))).bearer_auth(&root),
    );
    let v1_keys = list.json["keys"].as_array().unwrap();
    assert!(v1_keys.iter().any(|k| k["id"] == json!(v1_id) && k["plaintext"] == json!(v1_secret)));
    assert!(v1_keys.iter().any(|k| k["id"] == json!(plain_id) && k.get("plaintext").is_none()));
    assert_eq!(reveals(&s), 7);
    // The events name the actor and the key, never the plaintext.
    let actor = s.state.rbac.authenticate(&root).unwrap().root_key_id.clone();
    assert_eq!(
        s.count(
            "audit_events",
            &format!("action = 'key.decrypt' AND actor_id = '{actor}' AND resource_id = '{id}'")
        ),
        4
    );
    for secret in [&secret, &v1_secret] {
        assert_eq!(s.count("audit_events", &format!("detail LIKE '%{secret}%'")), 0);
    }

    // updateKey keeps it recoverable; rerollKey makes the successor recoverable.
    s.v2("keys.updateKey", &json!({"keyId": id, "name": "renamed"})).data();
    assert_eq!(decrypted(&s, &root, &id).as_deref(), Some(secret.as_str()));
    let r = s.v2("keys.rerollKey", &json!({"keyId": id, "expiration": 0})).data().clone();
    let (next_id, next) = (r["keyId"].as_str().unwrap(), r["key"].as_str().unwrap());
    assert_eq!(decrypted(&s, &root, next_id).as_deref(), Some(next));
    // migrateKeys: no plaintext is known, so not recoverable.
    let digest = keygate_domain::hash_secret("imported_key_secret_0001");
    let moved = s.v2(
        "keys.migrateKeys",
        &json!({"migrationId": "sha256_hex", "apiId": shop, "keys": [{"hash": digest}]}),
    );
    let moved_id = moved.data()["migrated"][0]["keyId"].as_str().unwrap().to_string();
    assert_eq!(decrypted(&s, &root, &moved_id), None);
}

#[test]
fn without_encrypt_key_or_decrypt_key_nothing_is_created_or_revealed() {
    let s = TestServer::start();
    let (shop, other) = (api(&s, "shop"), api(&s, "other"));
    let (id, _) = create(&s, &s.root_key, json!({"apiId": shop, "recoverable": true}));
    let keys = s.count("keys", "1 = 1");
    let creator = s.root_key_with(&["api.*.create_key"]);
    s.v2_as(&creator, "keys.createKey", &json!({"apiId": shop, "recoverable": true}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let v1 = s.post_as(&creator, "/v1/keys.createKey", &json!({"apiId": shop, "recoverable": true}));
    assert_eq!(v1.status, 403, "{}", v1.text);
    let scoped = s.root_key_with(&["api.*.create_key", &format!("api.{other}.encrypt_key")]);
    s.v2_as(&scoped, "keys.createKey", &json!({"apiId": shop, "recoverable": true}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert_eq!(s.count("keys", "1 = 1"), keys, "nothing created");
    create(&s, &scoped, json!({"apiId": other, "recoverable": true}));
    // A reroll of a recoverable key needs encrypt_key too.
    let reroller = s.root_key_with(&["api.*.create_key", "api.*.update_key"]);
    s.v2_as(&reroller, "keys.rerollKey", &json!({"keyId": id, "expiration": null}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");

    let reader = s.root_key_with(&["api.*.read_key", "api.*.read_api"]);
    let wrong_api =
        s.root_key_with(&["api.*.read_key", "api.*.read_api", &format!("api.{other}.decrypt_key")]);
    for by in [&reader, &wrong_api] {
        s.v2_as(by, "keys.getKey", &json!({"keyId": id, "decrypt": true}))
            .assert_problem(403, "unkey/authorization/insufficient_permissions");
        s.v2_as(by, "apis.listKeys", &json!({"apiId": shop, "decrypt": true}))
            .assert_problem(403, "unkey/authorization/insufficient_permissions");
    }
    let v1 = s.request(
        s.client.get(s.url(&format!("/v1/keys.getKey?keyId={id}&decrypt=true"))).bearer_auth(&reader),
    );
    assert_eq!(v1.status, 403, "{}", v1.text);
    assert_eq!(reveals(&s), 0, "nothing revealed");
    let scoped_reader = s.root_key_with(&["api.*.read_key", &format!("api.{shop}.decrypt_key")]);
    assert!(decrypted(&s, &scoped_reader, &id).is_some());
}

#[test]
fn without_a_keyring_recoverable_is_a_412_and_creates_nothing() {
    let db = Arc::new(TestDb::fresh());
    let mut config: ServerConfig = TestServer::config(&db.url);
    config.encryption_keys = None;
    let s = TestServer::start_with(config, db);
    let before = s.count("keys", "1 = 1");
    s.v2("keys.createKey", &json!({"apiId": "api_x1", "recoverable": true}))
        .assert_problem(412, "unkey/application/precondition_failed");
    let v1 = s.post("/v1/keys.createKey", &json!({"recoverable": true}));
    assert_eq!(
        (v1.status, v1.json["error"]["code"].as_str()),
        (412, Some("PRECONDITION_FAILED")),
        "{}",
        v1.text
    );
    assert_eq!(s.count("keys", "1 = 1"), before);
    assert_eq!(s.count("apis", "1 = 1"), 0, "not even its API");
    let (id, _) = create(&s, &s.root_key, json!({"apiId": "api_x1"}));
    assert_eq!(decrypted(&s, &s.root_key, &id), None);
}

/// Which of `needles` the database holds anywhere (PostgreSQL: every row of every table
/// as text; SQLite: the database file and its WAL, byte for byte).
fn stored_anywhere(s: &TestServer, needles: &[&str]) -> Vec<String> {
    if s.db.url.starts_with("postgres") {
        return needles
            .iter()
            .filter(|n| TABLES.iter().any(|t| s.count(t, &format!("CAST({t} AS text) LIKE '%{n}%'")) > 0))
            .map(|n| n.to_string())
            .collect();
    }
    let path = s.db.url.trim_start_matches("sqlite://").to_string();
    let text: String = [path.clone(), format!("{path}-wal")]
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned())
        .collect();
    needles.iter().filter(|n| text.contains(**n)).map(|n| n.to_string()).collect()
}

#[test]
fn the_database_holds_no_plaintext_and_a_ciphertext_opens_for_its_own_key_only() {
    let s = TestServer::start();
    let shop = api(&s, "shop");
    let secrets: Vec<(String, String)> = (0..100)
        .map(|i| {
            create(&s, &s.root_key, json!({"apiId": shop, "recoverable": true, "name": format!("k{i}")}))
        })
        .collect();
    let page = s.v2("apis.listKeys", &json!({"apiId": shop, "decrypt": true})).data().clone();
    assert_eq!(page.as_array().unwrap().iter().filter(|k| k["plaintext"].is_string()).count(), 100);
    let metrics = s.request(s.client.get(s.url("/metrics"))).text;
    let plaintexts: Vec<&str> = secrets.iter().map(|(_, secret)| secret.as_str()).collect();
    assert_eq!(stored_anywhere(&s, &plaintexts), Vec::<String>::new(), "plaintexts stored");
    assert!(!plaintexts.iter().any(|p| metrics.contains(p)));
    assert_eq!(stored_anywhere(&s, &[&secrets[0].0]).len(), 1, "the scan finds what is there");

    // Key 1's ciphertext copied into key 2's row: 412, no plaintext, no event.
    let (a, b) = (&secrets[1].0, &secrets[2].0);
    let events = reveals(&s);
    s.state
        .rbac
        .store()
        .with_conn(|c| {
            use diesel::RunQueryDsl;
            diesel::sql_query(format!(
                "UPDATE keys SET ciphertext = (SELECT ciphertext FROM keys WHERE id = '{a}') WHERE id = '{b}'"
            ))
            .execute(c)
        })
        .unwrap();
    let r = s.v2("keys.getKey", &json!({"keyId": b, "decrypt": true}));
    let detail = r.assert_problem(412, "unkey/application/precondition_failed");
    assert!(detail.contains(b.as_str()) && !detail.contains(&secrets[1].1), "{detail}");
    s.v2("apis.listKeys", &json!({"apiId": shop, "decrypt": true}))
        .assert_problem(412, "unkey/application/precondition_failed");
    assert_eq!(reveals(&s), events, "nothing revealed, nothing audited");
    assert_eq!(decrypted(&s, &s.root_key, a).as_deref(), Some(secrets[1].1.as_str()));
}

#[test]
fn a_keyring_missing_an_id_in_use_refuses_to_start_naming_it() {
    let db = Arc::new(TestDb::fresh());
    let s = TestServer::start_on(db.clone());
    create(&s, &s.root_key, json!({"apiId": "api_x1", "recoverable": true}));
    for keys in [Some(K2.to_string()), None] {
        let mut config = TestServer::config(&db.url);
        config.encryption_keys = keys;
        let e = actix_web::rt::System::new()
            .block_on(async { keygate::start(config, Arc::new(keygate_domain::SystemClock)).err() });
        let e = e.expect("refused");
        assert!(e.downcast_ref::<keygate::server::MissingEncryptionKeys>().is_some(), "{e:#}");
        assert!(format!("{e:#}").contains("k1 (1 keys)"), "{e:#}");
    }
    // With k1 after a new first key, it starts.
    let mut config = TestServer::config(&db.url);
    config.encryption_keys = Some(format!("{K2},{TEST_KEYRING}"));
    TestServer::start_with(config, db);
}

/// `rotate` while keys are created and revealed through two instances: afterwards every
/// key opens under the new key alone, and the old one can go.
#[test]
fn rotation_under_concurrent_creates_and_reveals_leaves_every_key_under_the_new_key() {
    let db = Arc::new(TestDb::fresh());
    let a = TestServer::start_on(db.clone());
    let mut config = TestServer::config(&db.url);
    config.encryption_keys = Some(format!("{K2},{TEST_KEYRING}"));
    let b = TestServer::start_with(config, db.clone());
    let mut keys: Vec<(String, String)> = (0..60)
        .map(|i| {
            create(&a, &a.root_key, json!({"apiId": "api_rot", "recoverable": true, "name": format!("{i}")}))
        })
        .collect();
    let made = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let mut made = Vec::new();
            for i in 0..40 {
                let by = if i % 2 == 0 { &a } else { &b };
                let (id, secret) = create(by, &by.root_key, json!({"apiId": "api_rot", "recoverable": true}));
                // Revealed through b, which holds both keys: the rotation may have resealed
                // the key under k2 already, which a (k1 only) rightly cannot open (412).
                assert_eq!(decrypted(&b, &b.root_key, &id).as_deref(), Some(secret.as_str()));
                made.push((id, secret));
            }
            made
        });
        let mut total = 0;
        let done = b.state.rbac.rotate_vault(7, |n| total = n).unwrap();
        assert_eq!(done.failed, 0);
        assert!(done.resealed >= 60, "{done:?}");
        worker.join().unwrap()
    });
    keys.extend(made);
    // Keys a's instance made after the rotation passed them are still under k1: run again.
    b.state.rbac.rotate_vault(7, |_| {}).unwrap();
    assert_eq!(b.state.rbac.keys_to_rotate().unwrap(), 0);
    let mut config = TestServer::config(&db.url);
    config.encryption_keys = Some(K2.to_string());
    let c = TestServer::start_with(config, db);
    assert!(c.state.rbac.missing_vault_keys().unwrap().is_empty(), "k1 can go");
    for (id, secret) in &keys {
        assert_eq!(decrypted(&c, &c.root_key, id).as_deref(), Some(secret.as_str()), "{id}");
    }
}
