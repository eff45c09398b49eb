//! Webhook deliveries (issue 76, docs/performance/webhooks.md), on the embedded default
//! and, with `KEYGATE_TEST_POSTGRES_URL`, on PostgreSQL: a server in process with the
//! loopback receiver of the tests (a thread per connection).
//!
//! - **throughput**: `EVENTS` (10,000) events written at once to one endpoint, the time
//!   from their commit until the receiver has them all: deliveries per second;
//! - **latency**: `KEYS` (400) keys created one after another at about 100 a second, each
//!   `key.created` event's time from the creation's answer to its arrival: p50, p99.
//!
//! `cargo bench -p keygate-tests --bench webhooks`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keygate_domain::{Clock, IdPrefix, OutboxEvent, new_id};
use keygate_test_support::TestDb;
use keygate_test_support::bench::report;
use keygate_test_support::receiver::Receiver;
use keygate_tests::TestServer;
use keygate_webhooks::WebhookStore;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let mut backends = vec![("sqlite", TestDb::sqlite())];
    if let Some(base) = TestDb::postgres_url() {
        backends.push(("postgres", TestDb::postgres(&base)));
    }
    for (backend, db) in backends {
        let db = Arc::new(db);
        let mut config = TestServer::config(&db.url);
        config.webhooks_allow_private = true;
        let s = TestServer::start_with(config, db);
        throughput(backend, &s, env("EVENTS", 10_000));
        latency(backend, &s, env("KEYS", 400));
    }
}

fn endpoint(s: &TestServer, rx: &Receiver, events: &[&str]) -> String {
    let r = s.v2("webhooks.createEndpoint", &json!({"url": rx.url, "events": events}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["endpointId"].as_str().unwrap().to_string()
}

fn throughput(backend: &str, s: &TestServer, n: usize) {
    let rx = Receiver::start();
    let endpoint = endpoint(s, &rx, &["key.leaked"]);
    let now = s.clock.now_ms() as i64;
    let store = s.state.rbac.store();
    let started = Instant::now();
    store
        .webhook_transaction(|tx| {
            for i in 0..n {
                let event = OutboxEvent {
                    id: new_id(IdPrefix::WebhookEvent),
                    workspace_id: s.workspace_id.clone(),
                    event_type: "key.leaked",
                    body:
                        json!({"type": "key.leaked", "timestamp": "2026-12-06T00:00:00Z", "data": {"n": i}})
                            .to_string(),
                    created_at: now,
                };
                tx.insert_webhook_event(&event, std::slice::from_ref(&endpoint))?;
            }
            Ok(())
        })
        .unwrap();
    let written = started.elapsed();
    let committed = Instant::now();
    let got = rx.wait_for_within(n, Duration::from_secs(120));
    let took = committed.elapsed();
    assert_eq!(got.len(), n, "every event delivered");
    println!(
        "{backend:8} throughput: {n} events written in one transaction ({:.2} s), all delivered {:.2} s after its commit: {:.0} deliveries/s",
        written.as_secs_f64(),
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    s.v2("webhooks.deleteEndpoint", &json!({"endpointId": endpoint}));
}

fn latency(backend: &str, s: &TestServer, n: usize) {
    let rx = Receiver::start();
    let endpoint = endpoint(s, &rx, &["key.created"]);
    let api =
        s.v2("apis.createApi", &json!({"name": "latency"})).data()["apiId"].as_str().unwrap().to_string();
    let mut answered = Vec::with_capacity(n);
    for _ in 0..n {
        let r = s.v2("keys.createKey", &json!({"apiId": api}));
        answered.push((r.data()["keyId"].as_str().unwrap().to_string(), Instant::now()));
        std::thread::sleep(Duration::from_millis(10));
    }
    let got = rx.wait_for_within(n, Duration::from_secs(60));
    assert_eq!(got.len(), n);
    let samples: Vec<Duration> = got
        .iter()
        .map(|g| {
            let key = g.json()["data"]["keyId"].as_str().unwrap().to_string();
            let at = answered.iter().find(|(k, _)| *k == key).unwrap().1;
            g.at.saturating_duration_since(at)
        })
        .collect();
    report(backend, "key.created: answered to delivered", samples);
    s.v2("webhooks.deleteEndpoint", &json!({"endpointId": endpoint}));
}
