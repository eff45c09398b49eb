//! Checksummed keys (API-v2.md §24, issue 79): an API of `keyFormat: "checksum"` issues
//! keys in GitHub's token shape whose last six characters are a CRC32 of the rest, and a
//! string of that shape whose checksum does not match answers NOT_FOUND without a store
//! read and without a place in the cache.
#![allow(clippy::unwrap_used)]

use keygate_domain::checksum::{self, Checksum};
use keygate_rbac::{VerifyCode, VerifyScope};
use keygate_tests::TestServer;
use rand::Rng;
use serde_json::{Value, json};

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn checksum_api(s: &TestServer) -> String {
    let r = s.v2("apis.createApi", &json!({"name": "scanned", "keyFormat": "checksum"}));
    r.data()["apiId"].as_str().unwrap().to_string()
}

fn create(s: &TestServer, body: Value) -> (String, String) {
    let d = s.v2("keys.createKey", &body).data().clone();
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn code(s: &TestServer, key: &str) -> String {
    s.v2("keys.verifyKey", &json!({"key": key})).data()["code"].as_str().unwrap().to_string()
}

/// `<prefix>_` and 36 random base-62 characters: almost never a valid checksum.
fn random_shaped(rng: &mut impl Rng, prefix: &str) -> String {
    let body: String = (0..36).map(|_| BASE62[rng.random_range(0..62)] as char).collect();
    format!("{prefix}_{body}")
}

#[test]
fn a_checksum_api_issues_checksummed_keys_and_a_changed_character_is_no_key() {
    let s = TestServer::start();
    let api = checksum_api(&s);
    let got = s.v2("apis.getApi", &json!({"apiId": api})).data().clone();
    assert_eq!(got["keyFormat"], "checksum", "{got}");

    let (key_id, key) = create(&s, json!({"apiId": api, "prefix": "acme_live"}));
    assert!(key.starts_with("acme_live_") && key.len() == "acme_live_".len() + 36, "{key}");
    assert_eq!(checksum::check(&key), Checksum::Valid, "{key}");
    assert_eq!(code(&s, &key), "VALID");
    let (_, unprefixed) = create(&s, json!({"apiId": api}));
    assert!(unprefixed.starts_with("kg_") && checksum::check(&unprefixed) == Checksum::Valid, "{unprefixed}");
    // v1's createKey into the same API makes the same shape.
    let v1 = s.post("/v1/keys.createKey", &json!({"apiId": api, "prefix": "v1"}));
    assert_eq!(checksum::check(v1.json["key"].as_str().unwrap()), Checksum::Valid, "{}", v1.text);

    // Every one-character change of the key answers NOT_FOUND, unread.
    let loads = s.state.rbac.verify_loads();
    let start = "acme_live_".len();
    for i in start..key.len() {
        let mut changed = key.clone().into_bytes();
        changed[i] = if changed[i] == b'a' { b'b' } else { b'a' };
        let changed = String::from_utf8(changed).unwrap();
        assert_eq!(checksum::check(&changed), Checksum::Invalid, "{changed}");
        assert_eq!(code(&s, &changed), "NOT_FOUND", "{changed}");
        assert!(!s.state.rbac.is_cached(&changed), "{changed} took a place in the cache");
    }
    assert_eq!(s.state.rbac.verify_loads(), loads, "a checksum-invalid key read the store");

    // A reroll keeps the format; a plain API's keys stay plain.
    let rerolled = s.v2("keys.rerollKey", &json!({"keyId": key_id, "expiration": 0})).data().clone();
    let new_key = rerolled["key"].as_str().unwrap();
    assert!(new_key.starts_with("acme_live_") && checksum::check(new_key) == Checksum::Valid, "{rerolled}");
    let plain =
        s.v2("apis.createApi", &json!({"name": "plain"})).data()["apiId"].as_str().unwrap().to_string();
    assert_eq!(s.v2("apis.getApi", &json!({"apiId": plain})).data()["keyFormat"], "plain");
    let (_, plain_key) = create(&s, json!({"apiId": plain, "prefix": "acme"}));
    assert_eq!(checksum::check(&plain_key), Checksum::NotOfTheShape, "{plain_key}");

    // An unknown format is a 400 naming the field, and makes no API.
    let before = s.count("apis", "1 = 1");
    let r = s.v2("apis.createApi", &json!({"name": "bad", "keyFormat": "crc64"}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("keyFormat"), "{}", r.text);
    assert_eq!(s.count("apis", "1 = 1"), before);
}

#[test]
fn a_plain_key_is_never_drawn_in_the_shape_with_a_wrong_checksum() {
    // 26 random bytes encode to 36 base58 characters most of the time: such draws are
    // drawn again, so no plain key could be refused unread.
    let s = TestServer::start();
    for _ in 0..200 {
        let (_, key) = create(&s, json!({"apiId": "api_plain", "prefix": "acme", "byteLength": 26}));
        assert_ne!(checksum::check(&key), Checksum::Invalid, "{key}");
        assert_eq!(code(&s, &key), "VALID", "{key}");
    }
}

#[test]
fn a_flood_of_random_checksum_shaped_strings_costs_no_read_and_no_cache() {
    let s = TestServer::start();
    let rbac = &s.state.rbac;
    let mut rng = rand::rng();
    let scope = VerifyScope::default();
    // A control: an unknown string of another shape is read once and cached as unknown.
    let other = "acme_notchecksummed";
    let loads = rbac.verify_loads();
    assert_eq!(rbac.check_key(other, &scope, None).unwrap().code, VerifyCode::NotFound);
    assert_eq!(rbac.verify_loads(), loads + 1);
    assert!(rbac.is_cached(other));

    let loads = rbac.verify_loads();
    let mut sample = Vec::new();
    let mut invalid = 0;
    for i in 0..100_000 {
        let shaped = random_shaped(&mut rng, "acme");
        if checksum::check(&shaped) != Checksum::Invalid {
            continue; // one in 62^6
        }
        invalid += 1;
        assert_eq!(rbac.check_key(&shaped, &scope, None).unwrap().code, VerifyCode::NotFound);
        if i % 100 == 0 {
            sample.push(shaped);
        }
    }
    assert!(invalid > 99_990);
    assert_eq!(rbac.verify_loads(), loads, "no store read for a checksum-invalid string");
    assert!(sample.iter().all(|k| !rbac.is_cached(k)), "the negative cache grew");

    // And over HTTP, v1 and v2 alike.
    for _ in 0..200 {
        let shaped = random_shaped(&mut rng, "kg");
        assert_eq!(code(&s, &shaped), "NOT_FOUND");
        let r = s.post("/v1/keys.verifyKey", &json!({"key": shaped}));
        assert_eq!(r.json["code"], "NOT_FOUND", "{}", r.text);
    }
    assert_eq!(rbac.verify_loads(), loads);
}
