//! `GET /metrics` (Prometheus text, docs/operations.md): what a known sequence of requests
//! counts, labels from bounded sets only, and the access settings. One test function: the
//! `metrics` facade is process-wide, so the counts are read as differences, alone.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// `name{labels} value` lines of the text format, by `name{labels}`.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(k, v)| (k.to_string(), v.parse().unwrap())))
        .collect()
}

fn scrape(s: &TestServer) -> (String, HashMap<String, f64>) {
    let r = s.request(s.client.get(s.url("/metrics")));
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let all = samples(&r.text);
    (r.text, all)
}

fn get(all: &HashMap<String, f64>, key: &str) -> f64 {
    all.get(key).copied().unwrap_or(0.0)
}

#[test]
fn metrics_count_a_known_sequence_with_bounded_labels_and_follow_their_settings() {
    let s = TestServer::start();
    let store = s.state.limiter.kind();
    let passed = format!("keygate_ratelimit_decisions_total{{outcome=\"passed\",store=\"{store}\"}}");
    let denied = format!("keygate_ratelimit_decisions_total{{outcome=\"denied\",store=\"{store}\"}}");
    let limit_ok = "keygate_http_requests_total{route=\"/v1/ratelimits.limit\",status=\"200\"}";
    let valid = "keygate_verifications_total{code=\"VALID\"}";
    let (_, before) = scrape(&s);

    let secret_identifier = "user-secret-identifier-1234";
    let body = json!({"namespace": "tenant-namespace-x", "identifier": secret_identifier, "limit": 5, "duration": 60_000});
    for _ in 0..7 {
        s.limit(body.clone());
    }
    let key = s.post("/v1/keys.createKey", &json!({"apiId": "api_metrics"}));
    let (key_id, secret) = (key.json["keyId"].as_str().unwrap(), key.json["key"].as_str().unwrap());
    for _ in 0..3 {
        s.post("/v1/keys.verifyKey", &json!({"key": secret}));
    }
    s.post("/v1/keys.getKey", &json!({"keyId": "key_missing"}));

    let (text, after) = scrape(&s);
    assert_eq!(get(&after, &passed) - get(&before, &passed), 5.0, "{text}");
    assert_eq!(get(&after, &denied) - get(&before, &denied), 2.0, "{text}");
    assert!(get(&after, limit_ok) - get(&before, limit_ok) >= 7.0, "{text}");
    assert!(get(&after, valid) - get(&before, valid) >= 3.0, "{text}");
    let not_found = "keygate_http_requests_total{route=\"/v1/keys.getKey\",status=\"404\"}";
    assert!(get(&after, not_found) >= 1.0, "{text}");
    let latency = "keygate_http_request_duration_seconds_count{route=\"/v1/ratelimits.limit\"}";
    assert!(get(&after, latency) - get(&before, latency) >= 7.0, "{text}");
    assert!(text.contains(
        "keygate_http_request_duration_seconds_bucket{route=\"/v1/ratelimits.limit\",le=\"0.001\"}"
    ));
    for cache in ["root_keys", "namespaces", "overrides", "verifications"] {
        let hit = format!("keygate_cache_requests_total{{cache=\"{cache}\",result=\"hit\"}}");
        assert!(after.contains_key(&hit), "{hit} in {text}");
    }
    assert!(after.contains_key("keygate_db_pool_connections{state=\"idle\"}"), "{text}");
    // Analytics held in memory until their flush (every few seconds): what the soak watches.
    for kind in ["verifications", "ratelimits"] {
        assert!(after.contains_key(&format!("keygate_analytics_held{{kind=\"{kind}\"}}")), "{text}");
    }
    // The first verification of the key loaded it on the blocking pool: its wait counted.
    let waits = "keygate_blocking_wait_seconds_count";
    assert!(get(&after, waits) > get(&before, waits), "{text}");
    assert!(text.contains("keygate_blocking_wait_seconds_bucket{le=\"+Inf\"}"), "{text}");
    // The soonest root-key expiry ahead (none: 0); an expired or disabled one does not count.
    let expiry = "keygate_root_key_next_expiry_timestamp_seconds";
    assert_eq!(get(&after, expiry), 0.0, "{text}");
    let now = keygate_domain::Clock::now_ms(&s.clock) as i64;
    for (days, enabled) in [(10, true), (2, true), (1, false)] {
        let body = json!({"permissions": ["api.*.read_key"], "expires": now + days * 86_400_000});
        let r = s.v2("rootKeys.createKey", &body);
        assert_eq!(r.status, 200, "{}", r.text);
        if !enabled {
            let id = r.data()["keyId"].clone();
            let r = s.v2("rootKeys.updateKey", &json!({"keyId": id, "enabled": false}));
            assert_eq!(r.status, 200, "{}", r.text);
        }
    }
    let (text, all) = scrape(&s);
    assert_eq!(get(&all, expiry), (now + 2 * 86_400_000) as f64 / 1000.0, "{text}");
    // Redis's write-behind is not running here (or set from the start): never in the future.
    let written = get(&all, "keygate_credit_writebehind_last_success_timestamp_seconds");
    assert!(written == 0.0 || written <= (now as f64 / 1000.0) + 1.0, "{written}");
    // The namespace's own series (one of the first 20 decided on here).
    let of_namespace = |text: &str, namespace: &str, outcome: &str| -> Vec<f64> {
        let labels = format!("namespace=\"{namespace}\",outcome=\"{outcome}\"}}");
        text.lines()
            .filter(|l| l.starts_with("keygate_ratelimit_namespace_decisions_total{") && l.contains(&labels))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect()
    };
    assert_eq!(of_namespace(&text, "tenant-namespace-x", "passed"), [5.0], "{text}");
    assert_eq!(of_namespace(&text, "tenant-namespace-x", "denied"), [2.0], "{text}");
    let workspace = format!("workspace=\"{}\",namespace=\"tenant-namespace-x\"", s.workspace_id);
    assert!(text.contains(&workspace), "{workspace} in {text}");
    // Unknown paths share one label; no identifier, key id or secret is a label.
    s.request(s.client.get(s.url("/no/such/path/user-secret-identifier-1234")));
    let (text, _) = scrape(&s);
    assert!(text.contains("route=\"unmatched\""), "{text}");
    for private in [secret_identifier, key_id, secret, &s.root_key, "api_metrics"] {
        assert!(!text.contains(private), "{private} must not appear in /metrics");
    }
    for line in text.lines().filter(|l| l.starts_with("keygate_http_requests_total")) {
        let route = line.split("route=\"").nth(1).unwrap().split('"').next().unwrap();
        assert!(route == "unmatched" || keygate::routes::ROUTES.iter().any(|(p, _)| *p == route), "{line}");
    }

    // Namespaces beyond KEYGATE_METRICS_NAMESPACES count as `other`; a name is escaped
    // as the text format wants; 0 keeps every name out.
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.metrics_namespaces = 2;
    let two = TestServer::start_with(config, db);
    let hostile = "quote\"back\\slash\nline}";
    for namespace in [hostile, "second", "third", "fourth", "third"] {
        let body = json!({"namespace": namespace, "identifier": "u", "limit": 5, "duration": 60_000});
        assert_eq!(two.limit(body).status, 200);
    }
    let (text, _) = scrape(&two);
    assert_eq!(of_namespace(&text, "quote\\\"back\\\\slash\\nline}", "passed"), [1.0], "{text}");
    assert_eq!(of_namespace(&text, "second", "passed"), [1.0], "{text}");
    assert_eq!(of_namespace(&text, "other", "passed"), [3.0], "{text}");
    assert_eq!(of_namespace(&text, "other", "denied"), [0.0], "{text}");
    assert!(!text.contains("third") && !text.contains("fourth"), "{text}");
    let lines = text.lines().filter(|l| l.starts_with("keygate_ratelimit_namespace_decisions_total{"));
    assert_eq!(lines.count(), 6, "2 namespaces and other, each passed and denied: {text}");

    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.metrics_namespaces = 0;
    let none = TestServer::start_with(config, db);
    none.limit(json!({"namespace": "tenant-namespace-y", "identifier": "u", "limit": 5, "duration": 60_000}));
    let (text, _) = scrape(&none);
    assert!(!text.contains("tenant-namespace-y"), "{text}");
    assert_eq!(of_namespace(&text, "other", "passed"), [1.0], "{text}");

    // Settings: a root key with metrics.read; off; its own listener.
    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.metrics = keygate::config::MetricsSetting::RootKey;
    let guarded = TestServer::start_with(config, db);
    guarded.request(guarded.client.get(guarded.url("/metrics"))).assert_error(401, "UNAUTHORIZED");
    let without = guarded.root_key_with(&["ratelimit.*.limit"]);
    let r = guarded.request(guarded.client.get(guarded.url("/metrics")).bearer_auth(&without));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("metrics.read"));
    let reader = guarded.root_key_with(&["metrics.read"]);
    assert_eq!(guarded.request(guarded.client.get(guarded.url("/metrics")).bearer_auth(&reader)).status, 200);

    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.metrics = keygate::config::MetricsSetting::Off;
    let off = TestServer::start_with(config, db);
    off.request(off.client.get(off.url("/metrics"))).assert_error(404, "NOT_FOUND");

    let db = Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.metrics_listen = Some("127.0.0.1:0".into());
    let apart = TestServer::start_with(config, db);
    apart.request(apart.client.get(apart.url("/metrics"))).assert_error(404, "NOT_FOUND");
    let addr = apart.metrics_addr.unwrap();
    let r = apart.request(apart.client.get(format!("http://{addr}/metrics")));
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("keygate_http_requests_total"), "{}", r.text);
}
