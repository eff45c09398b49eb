//! GitHub's secret scanning partner endpoint (API-v2.md §24, issue 79): a report signed by
//! one of the published keys disables (expires, or only reports) each live key it names,
//! once, with the `key.leaked` audit event and webhook; anything unsigned, signed by
//! another key or over another body is 401 and changes nothing.
#![allow(clippy::unwrap_used)]

use base64::Engine;
use keygate_scanning::LeakAction;
use keygate_test_support::TestDb;
use keygate_tests::{Resp, TestServer, scale_out};
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePublicKey, LineEnding};
use serde_json::{Value, json};
use std::sync::Arc;

const PATH: &str = "/v1/secret-scanning/github";
/// GitHub's example payload (docs.github.com, "Secret scanning partner program").
const GITHUB_EXAMPLE: &str = r#"[{"token":"NMIfyYncKcRALEXAMPLE","type":"mycompany_api_token","url":"https://github.com/octocat/Hello-World/blob/12345600b9cbe38a219f39a9941c9319b600c002/foo/bar.txt","source":"content"}]"#;

struct Scanner {
    key: SigningKey,
    id: &'static str,
    _dir: tempfile::TempDir,
    file: std::path::PathBuf,
}

impl Scanner {
    fn new() -> Self {
        let key = SigningKey::from_slice(&[0x5a; 32]).unwrap();
        let other = SigningKey::from_slice(&[0x17; 32]).unwrap();
        let pem = |k: &SigningKey| k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("github-keys.json");
        let published = json!({"public_keys": [
            {"key_identifier": "90a421169f0a406205f1563a953312f0be898d3c7b6c06b681aa86a874555f4a",
             "key": pem(&other), "is_current": false},
            {"key_identifier": "bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c",
             "key": pem(&key), "is_current": true},
        ]});
        std::fs::write(&file, published.to_string()).unwrap();
        Self { key, id: "bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c", _dir: dir, file }
    }

    fn server(&self, action: LeakAction, db: Arc<TestDb>) -> TestServer {
        let mut config = TestServer::config(&db.url);
        config.github_scanning_keys = Some(self.file.clone());
        config.github_scanning_action = action;
        TestServer::start_with(config, db)
    }

    fn signature(&self, body: &[u8]) -> String {
        let sig: Signature = self.key.sign(body);
        base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
    }

    /// `body` sent with `signature` under `key_id`.
    fn send_as(&self, s: &TestServer, key_id: &str, signature: &str, body: &str) -> Resp {
        let req = s
            .client
            .post(s.url(PATH))
            .header("content-type", "application/json")
            .header("Github-Public-Key-Identifier", key_id)
            .header("Github-Public-Key-Signature", signature)
            .body(body.to_string());
        s.request(req)
    }

    fn send(&self, s: &TestServer, body: &str) -> Resp {
        self.send_as(s, self.id, &self.signature(body.as_bytes()), body)
    }
}

fn report(tokens: &[&str]) -> String {
    let entries: Vec<Value> = tokens
        .iter()
        .map(|t| json!({"token": t, "type": "keygate_key", "url": "https://github.com/acme/app/blob/1/.env", "source": "content"}))
        .collect();
    Value::Array(entries).to_string()
}

fn labels(r: &Resp) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json.as_array().unwrap().iter().map(|v| v["label"].as_str().unwrap().to_string()).collect()
}

fn key(s: &TestServer, api: &str) -> (String, String) {
    let d = s.v2("keys.createKey", &json!({"apiId": api, "prefix": "acme"})).data().clone();
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn code(s: &TestServer, key: &str) -> String {
    s.v2("keys.verifyKey", &json!({"key": key})).data()["code"].as_str().unwrap().to_string()
}

fn checksum_api(s: &TestServer) -> String {
    let r = s.v2("apis.createApi", &json!({"name": "scanned", "keyFormat": "checksum"}));
    r.data()["apiId"].as_str().unwrap().to_string()
}

fn subscribe(s: &TestServer) {
    let body = json!({"url": "https://hooks.example.com/keygate", "events": ["key.leaked"]});
    s.v2("webhooks.createEndpoint", &body).data();
}

#[test]
fn a_live_key_reported_is_disabled_once_with_its_audit_event_and_webhook() {
    let scanner = Scanner::new();
    let s = scanner.server(LeakAction::Disable, Arc::new(TestDb::fresh()));
    subscribe(&s);
    let api = checksum_api(&s);
    let (key_id, leaked) = key(&s, &api);
    let (_, disabled) = key(&s, &api);
    s.v2(
        "keys.updateKey",
        &json!({"keyId": s.v2("keys.whoami", &json!({"key": disabled})).data()["keyId"], "enabled": false}),
    )
    .data();
    let (deleted_id, deleted) = key(&s, &api);
    s.v2("keys.deleteKey", &json!({"keyId": deleted_id})).data();
    let (_, plain) = key(&s, "api_plain");
    assert_eq!(code(&s, &leaked), "VALID");

    // GitHub's own example: no key of ours.
    let r = scanner.send(&s, GITHUB_EXAMPLE);
    assert_eq!(labels(&r), ["false_positive"]);
    assert_eq!(r.json[0]["token_raw"], "NMIfyYncKcRALEXAMPLE");
    assert_eq!(r.json[0]["token_type"], "mycompany_api_token");

    let mut wrong = leaked.clone().into_bytes();
    let last = wrong.len() - 1;
    wrong[last] = if wrong[last] == b'a' { b'b' } else { b'a' };
    let wrong = String::from_utf8(wrong).unwrap();
    let body = report(&[&leaked, &wrong, &disabled, &deleted, "kg_unknown"]);
    let r = scanner.send(&s, &body);
    assert_eq!(
        labels(&r),
        ["true_positive", "false_positive", "false_positive", "false_positive", "false_positive"]
    );
    assert_eq!(r.json[0]["token_raw"], leaked.as_str());
    assert_eq!(code(&s, &leaked), "DISABLED");
    assert_eq!(code(&s, &plain), "VALID");

    let audit = |s: &TestServer| s.count("audit_events", "action = 'key.leaked'");
    let events = |s: &TestServer| s.count("webhook_events", "event_type = 'key.leaked'");
    assert_eq!((audit(&s), events(&s)), (1, 1));
    let detail = s.count(
        "audit_events",
        &format!("action = 'key.leaked' AND key_id = '{key_id}' AND actor_id = 'github_secret_scanning' AND detail LIKE '%https://github.com/acme/app/blob/1/.env%' AND detail LIKE '%content%'"),
    );
    assert_eq!(detail, 1);
    let with_fields = s.count(
        "webhook_events",
        &format!("event_type = 'key.leaked' AND body LIKE '%\"url\":\"https://github.com/acme/app/blob/1/.env\"%' AND body LIKE '%\"source\":\"content\"%' AND body LIKE '%{key_id}%'"),
    );
    assert_eq!(with_fields, 1, "the webhook carries url and source");

    // Reported again (GitHub retries): the same answer, nothing more written.
    assert_eq!(labels(&scanner.send(&s, &report(&[&leaked]))), ["true_positive"]);
    assert_eq!((audit(&s), events(&s)), (1, 1));
}

#[test]
fn an_unsigned_forged_truncated_or_changed_report_is_refused_and_changes_nothing() {
    let scanner = Scanner::new();
    let s = scanner.server(LeakAction::Disable, Arc::new(TestDb::fresh()));
    let api = checksum_api(&s);
    let (_, live) = key(&s, &api);
    let body = report(&[&live]);
    let good = scanner.signature(body.as_bytes());
    let other = SigningKey::from_slice(&[0x17; 32]).unwrap();
    let forged: Signature = other.sign(body.as_bytes());
    let forged = base64::engine::general_purpose::STANDARD.encode(forged.to_der().as_bytes());
    let changed = report(&[&live, "kg_another"]);
    let refusals = [
        scanner.send_as(&s, scanner.id, "", &body),
        scanner.send_as(&s, "", &good, &body),
        scanner.send_as(&s, "unknown-key-id", &good, &body),
        scanner.send_as(&s, scanner.id, &forged, &body),
        scanner.send_as(&s, "90a421169f0a406205f1563a953312f0be898d3c7b6c06b681aa86a874555f4a", &good, &body),
        scanner.send_as(&s, scanner.id, &good, &body[..body.len() - 2]),
        scanner.send_as(&s, scanner.id, &good, &changed),
        scanner.send_as(&s, scanner.id, "not base64!", &body),
        scanner.send_as(&s, scanner.id, &good[..good.len() - 8], &body),
    ];
    for r in &refusals {
        r.assert_error(401, "UNAUTHORIZED");
    }
    assert_eq!(code(&s, &live), "VALID");
    assert_eq!(s.count("audit_events", "action = 'key.leaked'"), 0);

    // Signed, but not a report: 400, nothing done.
    for bad in ["{}", "[{\"type\": \"t\"}]", "[1]"] {
        scanner.send(&s, bad).assert_error(400, "BAD_REQUEST");
    }
    assert_eq!(code(&s, &live), "VALID");

    // No key file configured: every report is refused.
    let bare = TestServer::start();
    scanner.send(&bare, &report(&["kg_x"])).assert_error(401, "UNAUTHORIZED");
}

#[test]
fn the_action_expires_or_only_reports_as_configured() {
    let scanner = Scanner::new();
    let s = scanner.server(LeakAction::Expire, Arc::new(TestDb::fresh()));
    let api = checksum_api(&s);
    let (_, leaked) = key(&s, &api);
    assert_eq!(labels(&scanner.send(&s, &report(&[&leaked]))), ["true_positive"]);
    assert_eq!(code(&s, &leaked), "EXPIRED");

    let s = scanner.server(LeakAction::Report, Arc::new(TestDb::fresh()));
    let api = checksum_api(&s);
    let (key_id, leaked) = key(&s, &api);
    assert_eq!(labels(&scanner.send(&s, &report(&[&leaked]))), ["true_positive"]);
    assert_eq!(code(&s, &leaked), "VALID", "report only: the key keeps working");
    assert_eq!(
        s.count(
            "audit_events",
            &format!("action = 'key.leaked' AND key_id = '{key_id}' AND detail LIKE '%report%'")
        ),
        1
    );
    assert_eq!(labels(&scanner.send(&s, &report(&[&leaked]))), ["true_positive"]);
    assert_eq!(s.count("audit_events", "action = 'key.leaked'"), 1);
}

#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn a_key_disabled_through_one_instance_is_refused_by_the_other_at_once() {
    let url = scale_out();
    let scanner = Scanner::new();
    let db = Arc::new(TestDb::fresh());
    let on_redis = |db: &Arc<TestDb>| {
        let mut config = TestServer::config(&db.url);
        config.redis_url = Some(url.clone());
        config.github_scanning_keys = Some(scanner.file.clone());
        TestServer::start_with(config, db.clone())
    };
    let (a, b) = (on_redis(&db), on_redis(&db));
    let api = checksum_api(&a);
    for _ in 0..10 {
        let (_, leaked) = key(&a, &api);
        assert_eq!(code(&b, &leaked), "VALID");
        assert_eq!(code(&b, &leaked), "VALID", "cached on b");
        assert_eq!(labels(&scanner.send(&a, &report(&[&leaked]))), ["true_positive"]);
        assert_eq!(code(&b, &leaked), "DISABLED");
    }
}
