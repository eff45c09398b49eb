//! Where a key may be used from (API-v2.md §25, issue 79): `allowedIps` on APIs,
//! identities and keys; a verification passes only from an address inside every list that
//! is set, FORBIDDEN otherwise (and without an address); forward auth takes the
//! connection's address, or `X-Forwarded-For` only from a trusted proxy.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::{Value, json};

fn code(s: &TestServer, key: &str, ip: Option<&str>) -> String {
    let mut body = json!({"key": key});
    if let Some(ip) = ip {
        body["ip"] = json!(ip);
    }
    s.v2("keys.verifyKey", &body).data()["code"].as_str().unwrap().to_string()
}

fn v1_code(s: &TestServer, key: &str, ip: Option<&str>) -> String {
    let mut body = json!({"key": key});
    if let Some(ip) = ip {
        body["ip"] = json!(ip);
    }
    let r = s.post("/v1/keys.verifyKey", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["code"].as_str().unwrap().to_string()
}

fn create(s: &TestServer, body: Value) -> (String, String) {
    let d = s.v2("keys.createKey", &body).data().clone();
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn api(s: &TestServer, allowed: Value) -> String {
    let r = s.v2("apis.createApi", &json!({"name": "fenced", "allowedIps": allowed}));
    r.data()["apiId"].as_str().unwrap().to_string()
}

#[test]
fn the_lists_of_key_identity_and_api_all_apply() {
    let s = TestServer::start();
    let fenced = api(&s, json!(["10.0.0.0/8", "2001:db8::/32"]));
    assert_eq!(
        s.v2("apis.getApi", &json!({"apiId": fenced})).data()["allowedIps"],
        json!(["10.0.0.0/8", "2001:db8::/32"])
    );
    let body = json!({"externalId": "acme", "allowedIps": ["10.1.0.0/16", "2001:db8:1::/48"]});
    s.v2("identities.createIdentity", &body).data();
    let got = s.v2("identities.getIdentity", &json!({"identity": "acme"})).data().clone();
    assert_eq!(got["allowedIps"], json!(["10.1.0.0/16", "2001:db8:1::/48"]), "{got}");
    let (key_id, key) = create(
        &s,
        json!({"apiId": fenced, "externalId": "acme", "allowedIps": ["10.1.2.0/24", "2001:db8:1:2::/64", "10.1.2.9"]}),
    );
    let shown = s.v2("keys.getKey", &json!({"keyId": key_id})).data().clone();
    assert_eq!(shown["allowedIps"], json!(["10.1.2.0/24", "2001:db8:1:2::/64", "10.1.2.9"]), "{shown}");

    for (ip, want) in [
        ("10.1.2.3", "VALID"),
        ("2001:db8:1:2::5", "VALID"),
        ("::ffff:10.1.2.3", "VALID"),
        ("10.1.3.1", "FORBIDDEN"),
        ("10.2.0.1", "FORBIDDEN"),
        ("192.168.1.1", "FORBIDDEN"),
        ("2001:db8:1:3::1", "FORBIDDEN"),
        ("2001:db9::1", "FORBIDDEN"),
    ] {
        assert_eq!(code(&s, &key, Some(ip)), want, "{ip}");
        assert_eq!(v1_code(&s, &key, Some(ip)), want, "v1 {ip}");
    }
    assert_eq!(code(&s, &key, None), "FORBIDDEN", "no ip while a list applies");
    assert_eq!(v1_code(&s, &key, None), "FORBIDDEN");

    // A key of the fenced API alone: the API's list.
    let (_, plain_in_api) = create(&s, json!({"apiId": fenced}));
    assert_eq!(code(&s, &plain_in_api, Some("10.9.9.9")), "VALID");
    assert_eq!(code(&s, &plain_in_api, Some("192.168.1.1")), "FORBIDDEN");
    // No list anywhere: any address, or none.
    let (_, open) = create(&s, json!({"apiId": "api_open"}));
    assert_eq!(code(&s, &open, None), "VALID");
    assert_eq!(code(&s, &open, Some("192.168.1.1")), "VALID");

    // Changes apply at the next verification (the answer is cached meanwhile).
    assert_eq!(code(&s, &key, Some("10.1.3.1")), "FORBIDDEN");
    s.v2("keys.updateKey", &json!({"keyId": key_id, "allowedIps": null})).data();
    assert_eq!(code(&s, &key, Some("10.1.3.1")), "VALID", "the key's own list cleared");
    assert!(s.v2("keys.getKey", &json!({"keyId": key_id})).data().get("allowedIps").is_none());
    s.v2("identities.updateIdentity", &json!({"identity": "acme", "allowedIps": ["10.1.3.0/24"]})).data();
    assert_eq!(code(&s, &key, Some("10.1.3.1")), "VALID");
    assert_eq!(code(&s, &key, Some("10.1.2.3")), "FORBIDDEN", "the identity's new list");
    s.v2("keys.updateKey", &json!({"keyId": key_id, "allowedIps": ["10.1.3.7"]})).data();
    assert_eq!(code(&s, &key, Some("10.1.3.1")), "FORBIDDEN");
    assert_eq!(code(&s, &key, Some("10.1.3.7")), "VALID");
    s.v2("identities.updateIdentity", &json!({"identity": "acme", "allowedIps": []})).data();
    s.v2("keys.updateKey", &json!({"keyId": key_id, "allowedIps": []})).data();
    assert_eq!(code(&s, &key, Some("10.200.0.1")), "VALID", "only the API's list is left");
}

#[test]
fn bad_lists_and_addresses_are_refused_naming_the_field_and_change_nothing() {
    let s = TestServer::start();
    let too_many: Vec<String> = (0..101).map(|i| format!("10.0.{i}.0/24")).collect();
    let keys = s.count("keys", "1 = 1");
    for (body, field) in [
        (json!({"apiId": "api_x", "allowedIps": too_many}), "allowedIps"),
        (json!({"apiId": "api_x", "allowedIps": ["10.0.0.1", "10.0.0.0/33"]}), "allowedIps.1"),
        (json!({"apiId": "api_x", "allowedIps": ["example.com"]}), "allowedIps.0"),
        (json!({"apiId": "api_x", "allowedIps": "10.0.0.1"}), "allowedIps"),
    ] {
        let r = s.v2("keys.createKey", &body);
        let detail = r.assert_problem(400, "unkey/application/invalid_input");
        assert!(detail.contains(field), "{field}: {}", r.text);
    }
    assert_eq!(s.count("keys", "1 = 1"), keys);
    let apis = s.count("apis", "1 = 1");
    let r = s.v2("apis.createApi", &json!({"name": "fenced", "allowedIps": ["::/129"]}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("allowedIps.0"));
    assert_eq!(s.count("apis", "1 = 1"), apis);
    let r = s.v2("identities.createIdentity", &json!({"externalId": "x", "allowedIps": ["1.2.3"]}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("allowedIps.0"));
    assert_eq!(s.count("identities", "1 = 1"), 0);
    let (key_id, key) = create(&s, json!({"apiId": "api_x", "allowedIps": ["10.0.0.0/8"]}));
    let r = s.v2("keys.updateKey", &json!({"keyId": key_id, "allowedIps": ["10.0.0.0/8", "bad"]}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("allowedIps.1"));
    assert_eq!(code(&s, &key, Some("10.0.0.1")), "VALID", "the failed update changed nothing");
    let r = s.v2("keys.verifyKey", &json!({"key": key, "ip": "10.0.0.256"}));
    assert!(r.assert_problem(400, "unkey/application/invalid_input").contains("ip"), "{}", r.text);
    let r = s.post("/v1/keys.verifyKey", &json!({"key": key, "ip": "nope"}));
    assert!(r.assert_error(400, "BAD_REQUEST").contains("ip"), "{}", r.text);
}

/// Forward auth of `key` with `forwarded` as X-Forwarded-For: the status.
fn authorize(s: &TestServer, key: &str, forwarded: Option<&str>) -> u16 {
    let mut req = s
        .client
        .get(s.url("/v1/gateway.authorize/orders"))
        .header("X-Keygate-Root-Key", &s.root_key)
        .bearer_auth(key);
    if let Some(f) = forwarded {
        req = req.header("X-Forwarded-For", f);
    }
    s.request(req).status
}

#[test]
fn forward_auth_takes_the_connection_or_a_trusted_proxys_forwarded_address() {
    let s = TestServer::start();
    let (_, local) = create(&s, json!({"apiId": "api_gw", "allowedIps": ["127.0.0.1", "::1"]}));
    let (_, office) = create(&s, json!({"apiId": "api_gw", "allowedIps": ["203.0.113.0/24"]}));
    assert_eq!(authorize(&s, &local, None), 200, "the connection's address");
    assert_eq!(authorize(&s, &office, None), 403);
    // No trusted proxy configured: a client's X-Forwarded-For is ignored.
    assert_eq!(authorize(&s, &office, Some("203.0.113.5")), 403, "a forged X-Forwarded-For");
    assert_eq!(authorize(&s, &local, Some("203.0.113.5")), 200);

    let db = s.db.clone();
    let mut config = TestServer::config(&db.url);
    config.trusted_proxies = vec!["127.0.0.1".into(), "::1".into(), "198.51.100.0/24".into()];
    let proxied = TestServer::start_with(config, db);
    assert_eq!(authorize(&proxied, &office, Some("203.0.113.5")), 200, "from a trusted proxy");
    assert_eq!(authorize(&proxied, &office, Some("203.0.113.5, 198.51.100.7")), 200, "through two proxies");
    assert_eq!(authorize(&proxied, &office, Some("192.0.2.1")), 403);
    // What the client put first is not what the proxy appended: the nearest untrusted
    // address decides.
    assert_eq!(authorize(&proxied, &office, Some("203.0.113.5, 192.0.2.1")), 403, "forged first entry");
    assert_eq!(authorize(&proxied, &office, Some("not-an-address")), 403);
    assert_eq!(authorize(&proxied, &local, None), 200, "the proxy's own address when it forwards none");
}
