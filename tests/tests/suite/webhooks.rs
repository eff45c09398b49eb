//! Webhooks (API-v2.md §23) against a receiver on loopback: endpoints and their secrets,
//! key events written with the change that causes them, signed deliveries (checked here
//! with an HMAC of our own; `tests/webhooks/` checks them with the Standard Webhooks
//! reference library), retries on the clock's schedule, 410, replay, rotation, redirects
//! not followed, and private addresses refused unless allowed.
#![allow(clippy::unwrap_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use keygate_domain::Clock;
use keygate_test_support::TestDb;
use keygate_test_support::receiver::{Answer, Received, Receiver};
use keygate_tests::TestServer;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server whose endpoints may point at loopback (the receiver).
fn server() -> TestServer {
    TestServer::start_hooked()
}

/// An endpoint at `url` for `events`: (endpointId, secret).
fn endpoint(s: &TestServer, url: &str, events: Value) -> (String, String) {
    let r = s.v2("webhooks.createEndpoint", &json!({"url": url, "events": events}));
    assert_eq!(r.status, 200, "{}", r.text);
    (r.data()["endpointId"].as_str().unwrap().to_string(), r.data()["secret"].as_str().unwrap().to_string())
}

/// The signatures a delivery carries that `secret` makes.
fn signed_by(got: &Received, secret: &str) -> bool {
    let key = STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    let signed = format!("{}.{}.{}", got.header("webhook-id"), got.header("webhook-timestamp"), got.body);
    mac.update(signed.as_bytes());
    let want = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    got.header("webhook-signature").split(' ').any(|s| s == want)
}

fn deliveries(s: &TestServer, endpoint_id: &str) -> Vec<Value> {
    let r = s.v2("webhooks.listDeliveries", &json!({"endpointId": endpoint_id}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.data().as_array().unwrap().clone()
}

/// Waits (up to 10 s) until the endpoint's deliveries satisfy `done`.
fn wait_deliveries(s: &TestServer, endpoint_id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = deliveries(s, endpoint_id);
        if done(&d) || Instant::now() > deadline {
            return d;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create_key(s: &TestServer, body: &Value) -> (String, String) {
    let r = s.v2("keys.createKey", body);
    assert_eq!(r.status, 200, "{}", r.text);
    (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string())
}

fn api(s: &TestServer) -> String {
    s.v2("apis.createApi", &json!({"name": "hooked"})).data()["apiId"].as_str().unwrap().to_string()
}

#[test]
fn endpoints_are_created_read_listed_changed_rotated_and_deleted() {
    let s = server();
    let r = s.v2(
        "webhooks.createEndpoint",
        &json!({"url": "https://hooks.example.com/in", "events": ["key.created", "key.credits.low"],
                "description": "billing", "thresholds": {"creditsLow": [90, 50], "expiringDays": [1, 30]}}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let id = r.data()["endpointId"].as_str().unwrap().to_string();
    let secret = r.data()["secret"].as_str().unwrap();
    assert!(id.starts_with("whep_"), "{id}");
    let raw = STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    assert!((24..=64).contains(&raw.len()), "{secret}");

    let got = s.v2("webhooks.getEndpoint", &json!({"endpointId": id}));
    assert_eq!(got.status, 200, "{}", got.text);
    let e = got.data();
    assert_eq!(e["url"], json!("https://hooks.example.com/in"));
    assert_eq!(e["events"], json!(["key.created", "key.credits.low"]));
    assert_eq!(e["description"], json!("billing"));
    assert_eq!(e["enabled"], json!(true));
    assert_eq!(e["thresholds"], json!({"creditsLow": [50, 90], "expiringDays": [30, 1]}));
    assert!(!got.text.contains(secret), "the secret is shown once");

    let r = s.v2(
        "webhooks.updateEndpoint",
        &json!({"endpointId": id, "events": ["*"], "enabled": false, "description": null}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.data()["events"], json!(["*"]));
    assert_eq!(r.data()["enabled"], json!(false));
    assert!(r.data().get("description").is_none(), "{}", r.text);
    assert_eq!(r.data()["thresholds"]["creditsLow"], json!([50, 90]), "untouched");

    let (second, _) = endpoint(&s, "https://hooks.example.com/two", json!(["key.deleted"]));
    let page = s.v2("webhooks.listEndpoints", &json!({"limit": 1}));
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(page.data()[0]["endpointId"], json!(id));
    assert_eq!(page.json["pagination"]["hasMore"], json!(true));
    let cursor = page.json["pagination"]["cursor"].clone();
    let next = s.v2("webhooks.listEndpoints", &json!({"limit": 1, "cursor": cursor}));
    assert_eq!(next.data()[0]["endpointId"], json!(second));
    assert_eq!(next.json["pagination"]["hasMore"], json!(false));

    let rotated = s.v2("webhooks.rotateSecret", &json!({"endpointId": id}));
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let new_secret = rotated.data()["secret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);

    assert_eq!(s.v2("webhooks.deleteEndpoint", &json!({"endpointId": id})).status, 200);
    s.v2("webhooks.getEndpoint", &json!({"endpointId": id}))
        .assert_problem(404, "keygate/data/webhook_endpoint_not_found");
    s.v2("webhooks.deleteEndpoint", &json!({"endpointId": id}))
        .assert_problem(404, "keygate/data/webhook_endpoint_not_found");
    let audit = s.count("audit_events", "action LIKE 'webhook.%'");
    assert_eq!(audit, 5, "create x2, update, rotate, delete are audited");
}

#[test]
fn bad_endpoints_are_refused_and_change_nothing() {
    let s = server();
    let bad = [
        json!({"url": "ftp://x.example/", "events": ["key.created"]}),
        json!({"url": "https://x.example/", "events": []}),
        json!({"url": "https://x.example/", "events": ["key.nope"]}),
        json!({"url": "https://x.example/", "events": ["*", "key.created"]}),
        json!({"url": "https://x.example/", "events": ["key.created", "key.created"]}),
        json!({"url": "https://x.example/", "events": ["key.created"], "thresholds": {"creditsLow": [100]}}),
        json!({"url": "https://x.example/", "events": ["key.created"], "thresholds": {"creditsLow": [0]}}),
        json!({"url": "https://x.example/", "events": ["key.created"], "thresholds": {"expiringDays": [366]}}),
        json!({"url": "https://x.example/", "events": ["key.created"], "description": "a\u{7}b"}),
        json!({"url": format!("https://x.example/{}", "a".repeat(2048)), "events": ["key.created"]}),
        json!({"url": "https://user:pw@x.example/", "events": ["key.created"]}),
    ];
    for body in bad {
        let r = s.v2("webhooks.createEndpoint", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text);
    }
    assert_eq!(s.count("webhook_endpoints", "1 = 1"), 0);
    let reader = s.root_key_with(&["webhook.*.read_endpoint"]);
    let r =
        s.v2_as(&reader, "webhooks.createEndpoint", &json!({"url": "https://x.example/", "events": ["*"]}));
    assert_eq!(r.status, 403, "{}", r.text);
    let r = s.v2_as(&reader, "webhooks.listEndpoints", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text);
    for op in ["webhooks.getEndpoint", "webhooks.rotateSecret", "webhooks.listDeliveries"] {
        s.v2(op, &json!({"endpointId": "whep_nope"}))
            .assert_problem(404, "keygate/data/webhook_endpoint_not_found");
    }
    s.v2("webhooks.replayDelivery", &json!({"deliveryId": "whdl_nope"}))
        .assert_problem(404, "keygate/data/webhook_delivery_not_found");
    assert_eq!(s.v2("webhooks.listEndpoints", &json!({"cursor": "nope"})).status, 400, "not one of ours");
}

#[test]
fn private_and_loopback_addresses_are_refused_unless_allowed() {
    let s = TestServer::start();
    let refused = [
        "http://127.0.0.1/",
        "http://127.1.2.3:8080/x",
        "http://[::1]/",
        "http://localhost/",
        "http://LOCALHOST./",
        "http://app.localhost/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.0.1/",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:10.1.1.1]/",
        "http://[::ffff:169.254.0.1]/",
    ];
    for url in refused {
        let r = s.v2("webhooks.createEndpoint", &json!({"url": url, "events": ["*"]}));
        let detail = r.assert_problem(400, "unkey/application/invalid_input");
        assert!(detail.contains("private network"), "{url}: {detail}");
        let (id, _) = {
            let ok =
                s.v2("webhooks.createEndpoint", &json!({"url": "https://93.184.216.34/", "events": ["*"]}));
            assert_eq!(ok.status, 200, "{}", ok.text);
            (ok.data()["endpointId"].as_str().unwrap().to_string(), ())
        };
        let r = s.v2("webhooks.updateEndpoint", &json!({"endpointId": id, "url": url}));
        assert_eq!(r.status, 400, "{url}: {}", r.text);
        s.v2("webhooks.deleteEndpoint", &json!({"endpointId": id}));
    }
    // This machine's own name resolves to one of its addresses (loopback or private).
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default().trim().to_string();
    if let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 80)) {
        let addrs: Vec<_> = addrs.collect();
        let local = addrs.iter().any(|a| {
            let ip = a.ip();
            ip.is_loopback()
                || matches!(ip, std::net::IpAddr::V4(v4) if v4.is_private() || v4.is_link_local())
        });
        if local {
            let r = s
                .v2("webhooks.createEndpoint", &json!({"url": format!("http://{host}:9/"), "events": ["*"]}));
            assert_eq!(r.status, 400, "{host} resolves to {addrs:?}: {}", r.text);
        }
    }
    assert_eq!(s.count("webhook_endpoints", "url NOT LIKE 'https://93.%'"), 0);

    let open = server();
    let r = open.v2("webhooks.createEndpoint", &json!({"url": "http://127.0.0.1:9/", "events": ["*"]}));
    assert_eq!(r.status, 200, "allowed by the setting: {}", r.text);
}

#[test]
fn key_changes_are_delivered_signed_with_the_key_as_get_key_shows_it() {
    let s = server();
    let rx = Receiver::start();
    // Not `*`: the reroll below expires the old key, and an expiry scan may announce that.
    let changes = json!(["key.created", "key.updated", "key.deleted", "key.rerolled"]);
    let (endpoint_id, secret) = endpoint(&s, &rx.url, changes);
    let api = api(&s);
    let (key_id, plaintext) = create_key(
        &s,
        &json!({"apiId": api, "name": "first", "permissions": ["docs.read"], "externalId": "acme"}),
    );
    let got = rx.wait_for(1);
    assert_eq!(got.len(), 1, "one event for the creation");
    let created = &got[0];
    assert_eq!(created.header("content-type"), "application/json");
    assert!(created.header("webhook-id").starts_with("msg_"), "{:?}", created.headers);
    let ts: i64 = created.header("webhook-timestamp").parse().unwrap();
    assert_eq!(ts, (s.clock.now_ms() / 1000) as i64, "the server's clock, in seconds");
    assert!(signed_by(created, &secret), "{:?}", created.headers);
    let body = created.json();
    assert_eq!(body["type"], json!("key.created"));
    assert!(body["timestamp"].as_str().unwrap().starts_with("20"), "{body}");
    let shown = s.v2("keys.getKey", &json!({"keyId": key_id})).data().clone();
    for field in ["keyId", "start", "enabled", "createdAt", "name", "permissions", "roles", "identity"] {
        assert_eq!(body["data"][field], shown[field], "{field}: {body}");
    }
    assert!(!created.body.contains(&plaintext), "no secret in a payload");

    assert_eq!(s.v2("keys.updateKey", &json!({"keyId": key_id, "name": "second"})).status, 200);
    let r = s.v2("keys.updateCredits", &json!({"keyId": key_id, "operation": "set", "value": 7}));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        s.v2("keys.addPermissions", &json!({"keyId": key_id, "permissions": ["docs.write"]})).status,
        200
    );
    let reroll = s.v2("keys.rerollKey", &json!({"keyId": key_id, "expiration": 0}));
    assert_eq!(reroll.status, 200, "{}", reroll.text);
    let new_id = reroll.data()["keyId"].as_str().unwrap().to_string();
    assert_eq!(s.v2("keys.deleteKey", &json!({"keyId": new_id})).status, 200);
    let got = rx.wait_for(6);
    let types: Vec<Value> = got.iter().map(|g| g.json()["type"].clone()).collect();
    let mut sorted: Vec<String> = types.iter().map(|t| t.as_str().unwrap().to_string()).collect();
    sorted.sort();
    assert_eq!(
        sorted,
        ["key.created", "key.deleted", "key.rerolled", "key.updated", "key.updated", "key.updated"],
        "{types:?}"
    );
    let of =
        |t: &str| got.iter().filter(|g| g.json()["type"] == json!(t)).map(Received::json).collect::<Vec<_>>();
    assert!(of("key.updated").iter().any(|b| b["data"]["name"] == json!("second")));
    assert!(of("key.updated").iter().any(|b| b["data"]["permissions"].as_array().unwrap().len() == 2));
    assert!(of("key.updated").iter().any(|b| b["data"]["credits"]["remaining"] == json!(7)), "updateCredits");
    assert_eq!(of("key.rerolled")[0]["data"]["keyId"], json!(new_id));
    assert_eq!(of("key.rerolled")[0]["data"]["previousKeyId"], json!(key_id));
    assert_eq!(of("key.deleted")[0]["data"]["keyId"], json!(new_id));
    assert!(got.iter().all(|g| signed_by(g, &secret)));
    let ids: std::collections::HashSet<&str> = got.iter().map(|g| g.header("webhook-id")).collect();
    assert_eq!(ids.len(), 6, "each event its own id");
    let log = wait_deliveries(&s, &endpoint_id, |d| d.iter().all(|x| x["status"] == json!("succeeded")));
    assert_eq!(log.len(), 6, "{log:?}");
    assert!(log.iter().all(|d| d["attempts"] == json!(1) && d["lastStatus"] == json!(200)), "{log:?}");

    // A call that fails writes no event.
    assert_eq!(s.v2("keys.updateKey", &json!({"keyId": "key_missing", "name": "x"})).status, 404);
    assert_eq!(s.count("webhook_events", "1 = 1"), 6);
}

#[test]
fn only_subscribed_enabled_endpoints_get_events() {
    let s = server();
    let (rx_created, rx_deleted, rx_off) = (Receiver::start(), Receiver::start(), Receiver::start());
    endpoint(&s, &rx_created.url, json!(["key.created"]));
    endpoint(&s, &rx_deleted.url, json!(["key.deleted"]));
    let (off, _) = endpoint(&s, &rx_off.url, json!(["*"]));
    assert_eq!(s.v2("webhooks.updateEndpoint", &json!({"endpointId": off, "enabled": false})).status, 200);
    let (key_id, _) = create_key(&s, &json!({"apiId": api(&s)}));
    assert_eq!(s.v2("keys.deleteKey", &json!({"keyId": key_id})).status, 200);
    assert_eq!(rx_created.wait_for(1).len(), 1);
    assert_eq!(rx_deleted.wait_for(1).len(), 1);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(rx_created.received().len(), 1);
    assert_eq!(rx_created.received()[0].json()["type"], json!("key.created"));
    assert_eq!(rx_deleted.received()[0].json()["type"], json!("key.deleted"));
    assert!(rx_off.received().is_empty(), "a disabled endpoint gets nothing");
    // Another workspace's endpoint hears nothing of this one's keys.
    assert_eq!(s.count("webhook_deliveries", "1 = 1"), 2);
}

#[test]
fn failed_deliveries_are_retried_on_schedule_with_the_same_id_and_410_disables() {
    let s = server();
    let rx = Receiver::start();
    rx.answer([Answer::status(500)]);
    let (endpoint_id, _) = endpoint(&s, &rx.url, json!(["key.created"]));
    create_key(&s, &json!({"apiId": api(&s)}));
    let first = rx.wait_for(1);
    let log = wait_deliveries(&s, &endpoint_id, |d| d.first().is_some_and(|x| x["attempts"] == json!(1)));
    let d = &log[0];
    assert_eq!((d["status"].clone(), d["lastStatus"].clone()), (json!("pending"), json!(500)), "{d}");
    let now = s.clock.now_ms() as i64;
    assert_eq!(d["nextAttemptAt"], json!(now + 5_000), "the first retry 5 s on");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rx.received().len(), 1, "not before it is due");
    s.clock.advance(5_000);
    let both = rx.wait_for(2);
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].header("webhook-id"), first[0].header("webhook-id"), "a retry keeps the event's id");
    assert_eq!(both[1].body, first[0].body);
    let log = wait_deliveries(&s, &endpoint_id, |d| d[0]["status"] == json!("succeeded"));
    assert_eq!((log[0]["attempts"].clone(), log[0]["lastStatus"].clone()), (json!(2), json!(200)));
    assert_eq!(log[0]["nextAttemptAt"], Value::Null);
    assert_eq!(s.count("webhook_attempts", "1 = 1"), 2, "the log holds both attempts");

    // Replay: the same event again, same id.
    let delivery_id = log[0]["deliveryId"].as_str().unwrap();
    let r = s.v2("webhooks.replayDelivery", &json!({"deliveryId": delivery_id}));
    assert_eq!(r.status, 200, "{}", r.text);
    let three = rx.wait_for(3);
    assert_eq!(three[2].header("webhook-id"), first[0].header("webhook-id"));
    wait_deliveries(&s, &endpoint_id, |d| d[0]["attempts"] == json!(3));

    // 410 Gone: failed, and the endpoint disabled.
    rx.answer([Answer::status(410)]);
    create_key(&s, &json!({"apiId": api(&s)}));
    rx.wait_for(4);
    let log = wait_deliveries(&s, &endpoint_id, |d| d[0]["status"] == json!("failed"));
    assert_eq!((log[0]["status"].clone(), log[0]["lastStatus"].clone()), (json!("failed"), json!(410)));
    let e = s.v2("webhooks.getEndpoint", &json!({"endpointId": endpoint_id}));
    assert_eq!(e.data()["enabled"], json!(false), "{}", e.text);
    let failed = s.v2("webhooks.listDeliveries", &json!({"endpointId": endpoint_id, "status": "failed"}));
    assert_eq!(failed.data().as_array().unwrap().len(), 1, "{}", failed.text);
}

#[test]
fn deliveries_run_out_of_retries_after_the_documented_schedule() {
    let s = server();
    let rx = Receiver::start();
    rx.answer((0..8).map(|_| Answer::status(503)));
    let (endpoint_id, _) = endpoint(&s, &rx.url, json!(["key.created"]));
    create_key(&s, &json!({"apiId": api(&s)}));
    let mut waits = Vec::new();
    for n in 1..=8 {
        rx.wait_for(n);
        let log = wait_deliveries(&s, &endpoint_id, |d| d[0]["attempts"] == json!(n));
        let d = &log[0];
        if n == 8 {
            assert_eq!(d["status"], json!("failed"), "{d}");
            assert_eq!(d["nextAttemptAt"], Value::Null);
            break;
        }
        let wait = d["nextAttemptAt"].as_i64().unwrap() - s.clock.now_ms() as i64;
        waits.push(wait / 1000);
        s.clock.advance(wait as u64);
    }
    assert_eq!(waits, [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rx.received().len(), 8);
}

#[test]
fn a_rotated_secret_signs_beside_the_old_one_for_a_day() {
    let s = server();
    let rx = Receiver::start();
    let (endpoint_id, old) = endpoint(&s, &rx.url, json!(["key.created"]));
    let new = s.v2("webhooks.rotateSecret", &json!({"endpointId": endpoint_id})).data()["secret"]
        .as_str()
        .unwrap()
        .to_string();
    create_key(&s, &json!({"apiId": api(&s)}));
    let got = rx.wait_for(1);
    assert_eq!(got[0].header("webhook-signature").split(' ').count(), 2, "{:?}", got[0].headers);
    assert!(signed_by(&got[0], &old) && signed_by(&got[0], &new));
    s.clock.advance(24 * 3_600_000);
    create_key(&s, &json!({"apiId": api(&s)}));
    let got = rx.wait_for(2);
    assert_eq!(got[1].header("webhook-signature").split(' ').count(), 1);
    assert!(signed_by(&got[1], &new) && !signed_by(&got[1], &old));
}

#[test]
fn redirects_are_not_followed() {
    let s = server();
    let (rx, elsewhere) = (Receiver::start(), Receiver::start());
    rx.answer([Answer { headers: vec![("location".into(), elsewhere.url.clone())], ..Answer::status(307) }]);
    let (endpoint_id, _) = endpoint(&s, &rx.url, json!(["key.created"]));
    create_key(&s, &json!({"apiId": api(&s)}));
    rx.wait_for(1);
    let log = wait_deliveries(&s, &endpoint_id, |d| d[0]["attempts"] == json!(1));
    assert_eq!((log[0]["status"].clone(), log[0]["lastStatus"].clone()), (json!("pending"), json!(307)));
    std::thread::sleep(Duration::from_millis(500));
    assert!(elsewhere.received().is_empty(), "the redirect's target is never called");
}

#[test]
fn deliveries_to_a_private_address_are_not_sent_when_not_allowed() {
    // Written while allowed, delivered by an instance that does not allow it (the rule
    // holds at delivery, not only at creation).
    let db = Arc::new(TestDb::fresh());
    let mut open = TestServer::config(&db.url);
    open.webhooks_allow_private = true;
    let writer = TestServer::start_with(open, db.clone());
    let rx = Receiver::start();
    let (endpoint_id, _) = endpoint(&writer, &rx.url, json!(["key.created"]));
    drop(writer);
    let s = TestServer::start_on(db);
    create_key(&s, &json!({"apiId": api(&s)}));
    let log = wait_deliveries(&s, &endpoint_id, |d| d.first().is_some_and(|x| x["attempts"] == json!(1)));
    assert_eq!(log[0]["status"], json!("pending"), "retried later: {log:?}");
    assert_eq!(log[0]["lastStatus"], Value::Null, "no answer: never called");
    assert!(rx.received().is_empty());
}

#[test]
fn a_dead_instances_claim_is_taken_over_when_its_lease_ends() {
    use keygate_webhooks::{Attempt, DeliveryStatus, LEASE_MS, WebhookStore};
    let s = server();
    let rx = Receiver::start();
    rx.answer([Answer::status(500)]);
    let (endpoint_id, _) = endpoint(&s, &rx.url, json!(["key.created"]));
    create_key(&s, &json!({"apiId": api(&s)}));
    rx.wait_for(1);
    wait_deliveries(&s, &endpoint_id, |d| d.first().is_some_and(|x| x["attempts"] == json!(1)));
    // Another instance claims the retry when it is due, and dies.
    let due = s.clock.now_ms() as i64 + 5_000;
    let store = s.state.rbac.store();
    let skipped = store
        .webhook_transaction(|tx| {
            Ok(tx.claim_webhook_deliveries("dead", due, due + LEASE_MS, 10, &[s.workspace_id.as_str()])?)
        })
        .unwrap();
    assert!(skipped.is_empty(), "a workspace skipped is not claimed for");
    let claimed = store
        .webhook_transaction(|tx| Ok(tx.claim_webhook_deliveries("dead", due, due + LEASE_MS, 10, &[])?))
        .unwrap();
    assert_eq!(claimed.len(), 1);
    s.clock.advance(5_000);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(rx.received().len(), 1, "held by the dead instance's lease");
    s.clock.advance(LEASE_MS as u64 + 1);
    let got = rx.wait_for(2);
    assert_eq!(got.len(), 2, "taken over once the lease ended");
    wait_deliveries(&s, &endpoint_id, |d| d[0]["status"] == json!("succeeded"));
    // The dead instance's late answer changes nothing.
    let late = Attempt {
        delivery_id: claimed[0].id.clone(),
        attempt: 2,
        at: due,
        status: Some(500),
        error: None,
        response: None,
        duration_ms: 1,
    };
    let late = [(late, DeliveryStatus::Pending, Some(due))];
    let held = store.webhook_transaction(|tx| Ok(tx.finish_webhook_attempts("dead", &late)?)).unwrap();
    assert_eq!(held, [false]);
    let log = deliveries(&s, &endpoint_id);
    assert_eq!((log[0]["status"].clone(), log[0]["attempts"].clone()), (json!("succeeded"), json!(2)));
}

#[test]
#[ignore = "needs PostgreSQL: set KEYGATE_TEST_POSTGRES_URL and run with --include-ignored (.ci/run does)"]
fn three_instances_on_one_database_deliver_each_event_once() {
    let base = TestDb::postgres_url().expect("KEYGATE_TEST_POSTGRES_URL must be set for this test");
    let db = Arc::new(TestDb::postgres(&base));
    let start = || {
        let mut config = TestServer::config(&db.url);
        config.webhooks_allow_private = true;
        TestServer::start_with(config, db.clone())
    };
    let servers = [start(), start(), start()];
    let rx = Receiver::start();
    let (endpoint_id, _) = endpoint(&servers[0], &rx.url, json!(["key.created"]));
    let api = api(&servers[0]);
    std::thread::scope(|scope| {
        for (i, s) in servers.iter().enumerate() {
            let api = &api;
            scope.spawn(move || {
                for _ in 0..20 {
                    create_key(s, &json!({"apiId": api, "name": format!("from-{i}")}));
                }
            });
        }
    });
    let got = rx.wait_for(60);
    std::thread::sleep(Duration::from_millis(1_000));
    let got_all = rx.received();
    assert_eq!(got.len(), 60);
    let ids: std::collections::HashSet<&str> = got_all.iter().map(|g| g.header("webhook-id")).collect();
    assert_eq!((ids.len(), got_all.len()), (60, 60), "each event delivered once");
    let log =
        wait_deliveries(&servers[1], &endpoint_id, |d| d.iter().all(|x| x["status"] == json!("succeeded")));
    assert!(log.iter().all(|d| d["attempts"] == json!(1)), "{log:?}");
}

/// Verifies `secret` once: its code.
fn verify(s: &TestServer, secret: &str) -> String {
    let r = s.v2("keys.verifyKey", &json!({"key": secret}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["code"].as_str().unwrap().to_string()
}

/// The credit events received, as (type, threshold or null, remaining), by type and
/// threshold. (Spends reach the rows in batches, so one write may cross several
/// thresholds: `remaining` is where that write left the credits.)
fn credit_events(rx: &Receiver) -> Vec<(String, Value, Value)> {
    let mut got: Vec<(String, Value, Value)> = rx
        .received()
        .iter()
        .map(Received::json)
        .filter(|b| b["type"].as_str().unwrap().starts_with("key.credits."))
        .map(|b| {
            (
                b["type"].as_str().unwrap().to_string(),
                b["data"]["threshold"].clone(),
                b["data"]["remaining"].clone(),
            )
        })
        .collect();
    got.sort_by_key(|g| (g.0.clone(), g.1.as_u64(), std::cmp::Reverse(g.2.as_u64())));
    got
}

#[test]
fn credits_crossing_a_threshold_and_running_out_fire_once_each_and_an_update_rearms_them() {
    let s = server();
    let rx = Receiver::start();
    let r = s.v2(
        "webhooks.createEndpoint",
        &json!({"url": rx.url, "events": ["key.credits.low", "key.credits.exhausted"],
                "thresholds": {"creditsLow": [50, 80]}}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let (key_id, secret) = create_key(&s, &json!({"apiId": api(&s), "credits": {"remaining": 10}}));
    for _ in 0..10 {
        assert_eq!(verify(&s, &secret), "VALID");
    }
    for _ in 0..3 {
        assert_eq!(verify(&s, &secret), "USAGE_EXCEEDED");
    }
    rx.wait_for(3);
    std::thread::sleep(Duration::from_millis(800));
    let kinds = |events: &[(String, Value, Value)]| -> Vec<(String, Value)> {
        events.iter().map(|e| (e.0.clone(), e.1.clone())).collect()
    };
    let (low, out) = ("key.credits.low".to_string(), "key.credits.exhausted".to_string());
    let events = credit_events(&rx);
    assert_eq!(
        kinds(&events),
        [(out.clone(), Value::Null), (low.clone(), json!(50)), (low.clone(), json!(80))],
        "each crossing once"
    );
    assert!(events[1].2.as_u64().unwrap() <= 5 && events[2].2.as_u64().unwrap() <= 2, "{events:?}");
    let first =
        rx.received().iter().map(Received::json).find(|b| b["type"] == json!("key.credits.low")).unwrap();
    assert_eq!(first["data"]["keyId"], json!(key_id));
    assert_eq!(first["data"]["base"], json!(10));
    assert_eq!(
        first["data"]["credits"]["remaining"], first["data"]["remaining"],
        "the key as the write left it"
    );

    // Credits set again: the thresholds are armed again.
    let r = s.v2("keys.updateCredits", &json!({"keyId": key_id, "operation": "set", "value": 4}));
    assert_eq!(r.status, 200, "{}", r.text);
    for _ in 0..4 {
        assert_eq!(verify(&s, &secret), "VALID");
    }
    rx.wait_for(6);
    std::thread::sleep(Duration::from_millis(800));
    let events = credit_events(&rx);
    let again = [
        (out.clone(), Value::Null),
        (out, Value::Null),
        (low.clone(), json!(50)),
        (low.clone(), json!(50)),
        (low.clone(), json!(80)),
        (low, json!(80)),
    ];
    assert_eq!(kinds(&events), again, "each crossing once more");
}

#[test]
fn concurrent_verifiers_spending_past_a_threshold_fire_it_once() {
    let s = server();
    let rx = Receiver::start();
    let r = s.v2(
        "webhooks.createEndpoint",
        &json!({"url": rx.url, "events": ["key.credits.low", "key.credits.exhausted"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let (_, secret) = create_key(&s, &json!({"apiId": api(&s), "credits": {"remaining": 100}}));
    let valid = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..20 {
            scope.spawn(|| {
                for _ in 0..6 {
                    if verify(&s, &secret) == "VALID" {
                        valid.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(valid.into_inner(), 100);
    rx.wait_for(2);
    std::thread::sleep(Duration::from_millis(800));
    let types: Vec<String> = credit_events(&rx).into_iter().map(|e| e.0).collect();
    assert_eq!(types, ["key.credits.exhausted", "key.credits.low"]);
}

#[test]
#[ignore = "needs PostgreSQL: set KEYGATE_TEST_POSTGRES_URL and run with --include-ignored (.ci/run does)"]
fn three_instances_spending_past_a_threshold_fire_it_once() {
    let base = TestDb::postgres_url().expect("KEYGATE_TEST_POSTGRES_URL must be set for this test");
    let db = Arc::new(TestDb::postgres(&base));
    let start = || {
        let mut config = TestServer::config(&db.url);
        config.webhooks_allow_private = true;
        TestServer::start_with(config, db.clone())
    };
    let servers = [start(), start(), start()];
    let rx = Receiver::start();
    let r = servers[0].v2(
        "webhooks.createEndpoint",
        &json!({"url": rx.url, "events": ["key.credits.low", "key.credits.exhausted"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let (_, secret) =
        create_key(&servers[0], &json!({"apiId": api(&servers[0]), "credits": {"remaining": 100}}));
    let valid = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for i in 0..21 {
            let (s, secret, valid) = (&servers[i % 3], &secret, &valid);
            scope.spawn(move || {
                for _ in 0..6 {
                    if verify(s, secret) == "VALID" {
                        valid.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(valid.into_inner(), 100, "exact across instances");
    // With Redis the counters reach the rows by the write-behind (every second).
    rx.wait_for(2);
    std::thread::sleep(Duration::from_millis(2_500));
    let types: Vec<String> = credit_events(&rx).into_iter().map(|e| e.0).collect();
    assert_eq!(types, ["key.credits.exhausted", "key.credits.low"]);
}

#[test]
fn keys_about_to_expire_and_expired_are_announced_once_per_threshold() {
    const DAY: u64 = 86_400_000;
    let s = server();
    let rx = Receiver::start();
    let (endpoint_id, _) = endpoint(&s, &rx.url, json!(["key.expiring", "key.expired"]));
    let now = s.clock.now_ms();
    let api = api(&s);
    let key = |name: &str, expires: Option<u64>| {
        let mut body = json!({"apiId": api, "name": name});
        if let Some(at) = expires {
            body["expires"] = json!(at);
        }
        create_key(&s, &body).0
    };
    let (a, b, c) =
        (key("a", Some(now + 10 * DAY)), key("b", Some(now + 3 * DAY)), key("c", Some(now + DAY / 2)));
    key("d", None);
    let events = |n: usize| -> Vec<(String, String, Value)> {
        rx.wait_for(n);
        std::thread::sleep(Duration::from_millis(300));
        let mut got: Vec<(String, String, Value)> = rx
            .received()
            .iter()
            .map(Received::json)
            .map(|b| {
                (
                    b["type"].as_str().unwrap().into(),
                    b["data"]["keyId"].as_str().unwrap().into(),
                    b["data"]["daysBefore"].clone(),
                )
            })
            .collect();
        got.sort_by(|x, y| (&x.1, &x.0).cmp(&(&y.1, &y.0)));
        got
    };
    let expiring = |k: &str, d: u64| ("key.expiring".to_string(), k.to_string(), json!(d));
    let expired = |k: &str| ("key.expired".to_string(), k.to_string(), Value::Null);
    s.state.webhooks.scan_expiry().unwrap();
    s.state.webhooks.scan_expiry().unwrap();
    let mut want = vec![expiring(&b, 7), expiring(&c, 1)];
    want.sort_by(|x, y| (&x.1, &x.0).cmp(&(&y.1, &y.0)));
    assert_eq!(events(2), want, "the nearest threshold once; a key 10 days away not yet");

    // Three days on: a enters its week, b and c expired (b's last day passed unseen).
    s.clock.advance(3 * DAY + 1);
    let second = {
        let mut config = TestServer::config(&s.db.url);
        config.webhooks_allow_private = true;
        TestServer::start_with(config, s.db.clone())
    };
    second.clock.set(s.clock.now_ms());
    std::thread::scope(|scope| {
        scope.spawn(|| s.state.webhooks.scan_expiry().unwrap());
        scope.spawn(|| second.state.webhooks.scan_expiry().unwrap());
    });
    want.extend([expiring(&a, 7), expired(&b), expired(&c)]);
    want.sort_by(|x, y| (&x.1, &x.0).cmp(&(&y.1, &y.0)));
    assert_eq!(events(5), want, "two instances scanning: each once");

    // A new expiry is announced afresh.
    let r = s.v2("keys.updateKey", &json!({"keyId": a, "expires": s.clock.now_ms() + 2 * DAY}));
    assert_eq!(r.status, 200, "{}", r.text);
    s.state.webhooks.scan_expiry().unwrap();
    let got = events(6);
    assert_eq!(got.iter().filter(|e| **e == expiring(&a, 7)).count(), 2, "{got:?}");
    assert_eq!(got.len(), 6, "{got:?}");
    assert_eq!(deliveries(&s, &endpoint_id).len(), 6);

    // Long after: the notices of old expiries are pruned, and those keys are not
    // announced again.
    for _ in 0..3 {
        s.clock.advance(20 * DAY);
        second.clock.set(s.clock.now_ms());
        s.state.webhooks.scan_expiry().unwrap();
    }
    s.state.webhooks.scan_expiry().unwrap();
    assert_eq!(s.count("webhook_expiry_notices", "1 = 1"), 0, "pruned");
    let got = events(7);
    assert_eq!(got.iter().filter(|e| **e == expired(&a)).count(), 1, "{got:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(deliveries(&s, &endpoint_id).len(), 7, "b and c are not announced again");
}

#[test]
fn a_receiver_that_hangs_times_out_and_is_retried_without_holding_up_the_others() {
    let s = server();
    let (hangs, quick) = (Receiver::start(), Receiver::start());
    hangs.answer([Answer::hanging(Duration::from_secs(30), 200)]);
    let (slow_id, _) = endpoint(&s, &hangs.url, json!(["key.created"]));
    let (quick_id, _) = endpoint(&s, &quick.url, json!(["key.created"]));
    let started = Instant::now();
    create_key(&s, &json!({"apiId": api(&s)}));
    assert_eq!(hangs.wait_for(1).len(), 1);
    // The other endpoint's delivery is sent and recorded while the first request hangs.
    let log = wait_deliveries(&s, &quick_id, |d| d[0]["status"] == json!("succeeded"));
    assert_eq!(log[0]["status"], json!("succeeded"), "{log:?}");
    assert_eq!(quick.received().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(8), "not held up: {:?}", started.elapsed());
    assert_eq!(deliveries(&s, &slow_id)[0]["attempts"], json!(0), "still open");

    // The hanging request ends at the timeout: a failed attempt, retried 5 s later.
    let deadline = Instant::now() + Duration::from_secs(20);
    let log = loop {
        let log = deliveries(&s, &slow_id);
        if log[0]["attempts"] == json!(1) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((log[0]["status"].clone(), log[0]["lastStatus"].clone()), (json!("pending"), Value::Null));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(10), "not before the timeout: {waited:?}");
    assert_eq!(s.count("webhook_attempts", "error = 'no answer within 10 s' AND status IS NULL"), 1);
    assert_eq!(log[0]["nextAttemptAt"], json!(s.clock.now_ms() as i64 + 5_000));
    s.clock.advance(5_000);
    let got = hangs.wait_for(2);
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].header("webhook-id"), got[0].header("webhook-id"));
    let log = wait_deliveries(&s, &slow_id, |d| d[0]["status"] == json!("succeeded"));
    assert_eq!((log[0]["status"].clone(), log[0]["attempts"].clone()), (json!("succeeded"), json!(2)));
}

#[test]
fn finished_deliveries_are_deleted_after_the_retention_and_pending_ones_kept() {
    const DAY: u64 = 86_400_000;
    let s = server();
    let (ok, failing) = (Receiver::start(), Receiver::start());
    failing.answer((0..20).map(|_| Answer::status(500)));
    let (ok_id, _) = endpoint(&s, &ok.url, json!(["key.created"]));
    let (failing_id, _) = endpoint(&s, &failing.url, json!(["key.created"]));
    create_key(&s, &json!({"apiId": api(&s)}));
    wait_deliveries(&s, &ok_id, |d| d[0]["status"] == json!("succeeded"));
    wait_deliveries(&s, &failing_id, |d| d[0]["attempts"] == json!(1));

    // Within the retention: nothing goes.
    s.clock.advance(29 * DAY);
    assert_eq!(s.state.webhooks.prune_history().unwrap(), (0, 0));
    // Past it: the finished delivery and its attempt go; the pending one and the event it
    // still needs stay.
    s.clock.advance(2 * DAY);
    assert_eq!(s.state.webhooks.prune_history().unwrap(), (1, 0));
    assert!(deliveries(&s, &ok_id).is_empty());
    let pending = deliveries(&s, &failing_id)[0].clone();
    assert_eq!(pending["status"], json!("pending"));
    let kept =
        s.count("webhook_attempts", &format!("delivery_id = '{}'", pending["deliveryId"].as_str().unwrap()));
    assert!(kept >= 1);
    assert_eq!(s.count("webhook_attempts", "1 = 1"), kept, "only the pending delivery's attempts are left");
    assert_eq!(s.count("webhook_events", "1 = 1"), 1);
    // Once its last delivery has gone, the event goes too.
    assert_eq!(s.v2("webhooks.deleteEndpoint", &json!({"endpointId": failing_id})).status, 200);
    assert_eq!(s.state.webhooks.prune_history().unwrap(), (0, 1));
    assert_eq!(s.count("webhook_events", "1 = 1"), 0);
}

#[test]
fn imported_keys_and_the_keys_of_a_deleted_api_are_announced() {
    let s = server();
    let rx = Receiver::start();
    let (endpoint_id, _) = endpoint(&s, &rx.url, json!(["key.created", "key.deleted"]));
    let api = api(&s);
    let hash = |secret: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let keys =
        json!([{"hash": hash("old-key-1"), "name": "first"}, {"hash": hash("old-key-2"), "name": "second"}]);
    let r = s.v2("keys.migrateKeys", &json!({"migrationId": "sha256_hex", "apiId": api, "keys": keys}));
    assert_eq!(r.status, 200, "{}", r.text);
    let created = rx.wait_for(2);
    assert_eq!(created.len(), 2);
    let mut names: Vec<Value> = created.iter().map(|g| g.json()["data"]["name"].clone()).collect();
    names.sort_by_key(|n| n.to_string());
    assert_eq!(names, [json!("first"), json!("second")]);
    assert!(created.iter().all(|g| g.json()["type"] == "key.created"));

    let (own, _) = create_key(&s, &json!({"apiId": api, "name": "third"}));
    assert_eq!(rx.wait_for(3).len(), 3);
    assert_eq!(s.v2("apis.deleteApi", &json!({"apiId": api})).status, 200);
    let all = rx.wait_for(6);
    let deleted: Vec<Value> = all.iter().map(Received::json).filter(|b| b["type"] == "key.deleted").collect();
    assert_eq!(deleted.len(), 3, "each key of the API: {deleted:?}");
    assert!(deleted.iter().any(|b| b["data"]["keyId"] == json!(own) && b["data"]["name"] == "third"));
    let mut names: Vec<String> = deleted.iter().map(|b| b["data"]["name"].as_str().unwrap().into()).collect();
    names.sort();
    assert_eq!(names, ["first", "second", "third"], "as they were");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(deliveries(&s, &endpoint_id).len(), 6);
}

#[test]
fn a_name_that_resolves_to_loopback_only_at_delivery_is_not_called() {
    use keygate_test_support::dns::DnsServer;
    use std::net::Ipv4Addr;
    let public = Ipv4Addr::new(93, 184, 215, 14);
    let dns = DnsServer::start(Ipv4Addr::LOCALHOST);
    let rx = Receiver::start();
    let port = rx.url.rsplit(':').next().unwrap().split('/').next().unwrap().to_string();
    let url = format!("http://hooks.rebind.test:{port}/hook");
    let start = |allow_private: bool| {
        let db = Arc::new(TestDb::fresh());
        let mut config = TestServer::config(&db.url);
        config.webhooks_dns = Some(dns.addr);
        config.webhooks_allow_private = allow_private;
        TestServer::start_with(config, db)
    };
    let s = start(false);
    // While the name points at this machine, the endpoint is refused.
    let r = s.v2("webhooks.createEndpoint", &json!({"url": url, "events": ["key.created"]}));
    r.assert_problem(400, "unkey/application/invalid_input");
    assert!(r.text.contains("resolves to a loopback address"), "{}", r.text);
    assert!(dns.asked().iter().any(|n| n == "hooks.rebind.test"), "looked up: {:?}", dns.asked());
    // Written while it points at a public address; then it is made to point here.
    dns.set(public);
    let (endpoint_id, _) = endpoint(&s, &url, json!(["key.created"]));
    dns.set(Ipv4Addr::LOCALHOST);
    create_key(&s, &json!({"apiId": api(&s)}));
    let log = wait_deliveries(&s, &endpoint_id, |d| d.first().is_some_and(|x| x["attempts"] == json!(1)));
    assert_eq!((log[0]["status"].clone(), log[0]["lastStatus"].clone()), (json!("pending"), Value::Null));
    let refused =
        s.count("webhook_attempts", "error LIKE '%hooks.rebind.test resolves to a loopback address%'");
    assert_eq!(refused, 1, "the attempt says why");
    std::thread::sleep(Duration::from_millis(300));
    assert!(rx.received().is_empty(), "never called");

    // The same name, where private addresses are allowed, leads to the receiver.
    let open = start(true);
    endpoint(&open, &url, json!(["key.created"]));
    create_key(&open, &json!({"apiId": api(&open)}));
    assert_eq!(rx.wait_for(1).len(), 1);
}
