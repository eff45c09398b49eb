//! Webhook events across a `kill -9` (API-v2.md §23): an event is committed with the change
//! that causes it, so a change answered just before the process died is delivered by the
//! next one, under the event's one id.
#![allow(clippy::unwrap_used)]

use keygate_test_support::receiver::Receiver;
use keygate_test_support::{Proc, TestDb, free_port, keygate_command, start_keygate, try_http};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_webhooks_durability_0123456789";

fn serve(db: &str, port: u16) -> Proc {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY).env("KEYGATE_WEBHOOKS_ALLOW_PRIVATE", "true");
    start_keygate(cmd)
}

fn v2(port: u16, op: &str, body: &Value) -> Value {
    let body = body.to_string();
    let raw = format!(
        "POST /v2/{op} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let out = try_http(port, &raw).unwrap();
    assert_eq!(&out[9..12], "200", "{out}");
    serde_json::from_str::<Value>(out.split("\r\n\r\n").nth(1).unwrap()).unwrap()["data"].clone()
}

#[test]
fn an_event_answered_before_a_kill_9_is_delivered_after_the_restart() {
    let db = TestDb::fresh();
    // The receiver is not up while the first process lives: nothing can be delivered then.
    let hook_port = free_port();
    let port = free_port();
    let first = serve(&db.url, port);
    let url = format!("http://127.0.0.1:{hook_port}/hook");
    let endpoint = v2(port, "webhooks.createEndpoint", &json!({"url": url, "events": ["key.created"]}));
    let api = v2(port, "apis.createApi", &json!({"name": "durable-events"}))["apiId"].clone();
    let key = v2(port, "keys.createKey", &json!({"apiId": api}));
    drop(first); // SIGKILL
    let rx = Receiver::start_on(hook_port);
    let port = free_port();
    let _second = serve(&db.url, port);
    // Due at once; 5 s after a first attempt refused; or, when the killed process had
    // claimed it, once its lease ends (15 s).
    let got = rx.wait_for_within(1, std::time::Duration::from_secs(40));
    assert_eq!(got.len(), 1, "delivered after the restart");
    let body = got[0].json();
    assert_eq!(
        (body["type"].clone(), body["data"]["keyId"].clone()),
        (json!("key.created"), key["keyId"].clone())
    );
    let log = v2(port, "webhooks.listDeliveries", &json!({"endpointId": endpoint["endpointId"]}));
    assert_eq!(log.as_array().unwrap().len(), 1, "{log}");
    assert_eq!(json!(got[0].header("webhook-id")), log[0]["eventId"], "the event's one id");
}

#[test]
fn no_secret_plaintext_or_hash_is_in_a_payload_a_log_line_or_a_metric() {
    use keygate_test_support::receiver::Answer;
    use sha2::Digest;
    let db = TestDb::fresh();
    let rx = Receiver::start();
    rx.answer([Answer { body: "try later".into(), ..Answer::status(500) }]);
    let port = free_port();
    let mut cmd = keygate_command(BIN, &db.url, port);
    cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("KEYGATE_WEBHOOKS_ALLOW_PRIVATE", "true")
        .env("RUST_LOG", "debug,keygate::access=info");
    let mut server = start_keygate(cmd);
    let endpoint = v2(port, "webhooks.createEndpoint", &json!({"url": rx.url, "events": ["*"]}));
    let first = endpoint["secret"].as_str().unwrap().to_string();
    let id = endpoint["endpointId"].clone();
    let second =
        v2(port, "webhooks.rotateSecret", &json!({"endpointId": id}))["secret"].as_str().unwrap().to_string();
    let api = v2(port, "apis.createApi", &json!({"name": "quiet"}))["apiId"].clone();
    let key = v2(port, "keys.createKey", &json!({"apiId": api, "remaining": 2}));
    let plaintext = key["key"].as_str().unwrap().to_string();
    v2(port, "keys.verifyKey", &json!({"key": plaintext}));
    v2(port, "keys.updateKey", &json!({"keyId": key["keyId"], "name": "renamed"}));
    let got = rx.wait_for(2);
    assert_eq!(got.len(), 2, "the created event (answered 500) and the updated one");
    let metrics = try_http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    assert!(metrics.contains("keygate_webhook_deliveries_total"), "{metrics}");
    let logs = server.output(true);
    assert!(logs.contains("webhook") || logs.contains("keygate listening"), "the logs were read");
    let hash: String =
        sha2::Sha256::digest(plaintext.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let payloads: Vec<&str> = got.iter().map(|g| g.body.as_str()).collect();
    for (what, secret) in [
        ("the first secret", first.as_str()),
        ("the first secret's key", first.trim_start_matches("whsec_")),
        ("the second secret", second.as_str()),
        ("the second secret's key", second.trim_start_matches("whsec_")),
        ("the key", plaintext.as_str()),
        ("the key's hash", hash.as_str()),
        ("the root key", ROOT_KEY),
    ] {
        assert!(!logs.contains(secret), "{what} is in a log line");
        assert!(!metrics.contains(secret), "{what} is in a metric");
        assert!(payloads.iter().all(|p| !p.contains(secret)), "{what} is in a payload");
    }
}
