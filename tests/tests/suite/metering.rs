//! The usage export (issue 77, docs/metering.md) against receivers on loopback standing in
//! for OpenMeter (CloudEvents batches) and Stripe (meter events): each closed period's
//! credits and verifications per identity, sent once with ids that stay the same, retried
//! with the same ids, and exported once by two instances sharing a database.
#![allow(clippy::unwrap_used)]

use keygate_domain::Secret;
use keygate_metering::{CloudEventsSink, ExportSettings, StripeSink};
use keygate_test_support::TestDb;
use keygate_test_support::receiver::{Answer, Received, Receiver};
use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const MINUTE: u64 = 60_000;

struct Sinks {
    openmeter: Receiver,
    stripe: Receiver,
}

fn settings(sinks: &Sinks) -> ExportSettings {
    ExportSettings {
        period_ms: MINUTE as i64,
        workspace_id: None,
        cloudevents: Some(CloudEventsSink {
            url: sinks.openmeter.url.replace("/hook", "/api/v1/events"),
            token: Some(Secret::new("om_secret_token")),
            source: "keygate".into(),
            event_type: "keygate.usage".into(),
        }),
        stripe: Some(StripeSink {
            url: sinks.stripe.url.replace("/hook", "/v1/billing/meter_events"),
            key: Secret::new("sk_test_secret"),
            event_name: "api_credits".into(),
            customer_field: "stripeCustomerId".into(),
        }),
    }
}

fn start(db: Arc<TestDb>, sinks: &Sinks) -> TestServer {
    let mut config = TestServer::config(&db.url);
    config.usage_export = Ok(Some(settings(sinks)));
    let s = TestServer::start_with(config, db);
    // The sinks' first round, at T0: their periods start with T0's.
    export(&s);
    s
}

fn sinks() -> Sinks {
    Sinks { openmeter: Receiver::start(), stripe: Receiver::start() }
}

/// A key of `api` for `external_id` with `credits`: the key's secret.
fn key(s: &TestServer, api: &str, external_id: Option<&str>, credits: u64) -> String {
    let mut body = json!({"apiId": api, "credits": {"remaining": credits}});
    if let Some(x) = external_id {
        body["externalId"] = json!(x);
    }
    let r = s.v2("keys.createKey", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["key"].as_str().unwrap().to_string()
}

fn verify(s: &TestServer, key: &str, cost: u64) -> String {
    let r = s.v2("keys.verifyKey", &json!({"key": key, "credits": {"cost": cost}}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["code"].as_str().unwrap().to_string()
}

fn identity_id(s: &TestServer, external_id: &str) -> String {
    let r = s.v2("identities.getIdentity", &json!({"identity": external_id}));
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["id"].as_str().unwrap().to_string()
}

fn export(s: &TestServer) -> usize {
    s.state.runtime.metering.as_ref().unwrap().export_due().unwrap()
}

/// The usage of the minute at T0: `acme` (a Stripe customer, two keys) spends 10 credits
/// in 3 verifications, `beta` (no customer id) 5 in 2 (one refused), a key without an
/// identity 1; then the counts are flushed and the clock is past the period's export delay.
fn use_the_first_minute(s: &TestServer) {
    let r = s.v2(
        "identities.createIdentity",
        &json!({"externalId": "acme", "meta": {"stripeCustomerId": "cus_acme", "plan": "pro"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let api =
        s.v2("apis.createApi", &json!({"name": "metered"})).data()["apiId"].as_str().unwrap().to_string();
    let (a1, a2) = (key(s, &api, Some("acme"), 100), key(s, &api, Some("acme"), 100));
    let b = key(s, &api, Some("beta"), 10);
    let lone = key(s, &api, None, 10);
    assert_eq!(verify(s, &a1, 3), "VALID");
    assert_eq!(verify(s, &a1, 3), "VALID");
    assert_eq!(verify(s, &a2, 4), "VALID");
    assert_eq!(verify(s, &b, 20), "USAGE_EXCEEDED");
    assert_eq!(verify(s, &b, 5), "VALID");
    assert_eq!(verify(s, &lone, 1), "VALID");
    s.state.runtime.analytics.flush_analytics().unwrap();
}

/// Waits (up to 10 s) until the worker has recorded `n` attempts in all: before the clock
/// jumps, so that no lease taken before the jump ends under an answer not yet recorded.
fn recorded(s: &TestServer, n: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.count("webhook_attempts", "1 = 1") < n {
        assert!(std::time::Instant::now() < deadline, "the attempts were not recorded");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn form(r: &Received) -> HashMap<String, String> {
    url::form_urlencoded::parse(r.body.as_bytes()).into_owned().collect()
}

#[test]
fn a_closed_period_goes_to_openmeter_and_stripe_once() {
    let sinks = sinks();
    let s = start(Arc::new(TestDb::fresh()), &sinks);
    use_the_first_minute(&s);
    // Not closed yet: the minute ends at T0 + 60 s, and is exported 15 s after.
    s.clock.advance(MINUTE + 14_000);
    export(&s);
    std::thread::sleep(Duration::from_millis(500));
    assert!(sinks.openmeter.received().is_empty() && sinks.stripe.received().is_empty());
    s.clock.advance(1_000);
    export(&s);

    let got = sinks.openmeter.wait_for(1);
    assert_eq!(got.len(), 1, "one batch for the period");
    let batch = &got[0];
    assert_eq!(batch.path, "/api/v1/events");
    assert_eq!(batch.header("content-type"), "application/cloudevents-batch+json");
    assert_eq!(batch.header("authorization"), "Bearer om_secret_token");
    let events = batch.json();
    let (acme, beta) = (identity_id(&s, "acme"), identity_id(&s, "beta"));
    let source = format!("keygate/{}", s.workspace_id);
    assert_eq!(
        events,
        json!([
            {"specversion": "1.0", "id": format!("{acme}-{T0}"), "source": source, "type": "keygate.usage",
             "subject": "acme", "time": "2026-11-22T00:00:00Z", "datacontenttype": "application/json",
             "data": {"credits": 10, "verifications": 3}},
            {"specversion": "1.0", "id": format!("{beta}-{T0}"), "source": source, "type": "keygate.usage",
             "subject": "beta", "time": "2026-11-22T00:00:00Z", "datacontenttype": "application/json",
             "data": {"credits": 5, "verifications": 2}},
        ])
    );

    let got = sinks.stripe.wait_for(1);
    assert_eq!(got.len(), 1, "acme alone has a Stripe customer");
    let meter = &got[0];
    assert_eq!(meter.path, "/v1/billing/meter_events");
    assert_eq!(meter.header("content-type"), "application/x-www-form-urlencoded");
    assert_eq!(meter.header("authorization"), "Bearer sk_test_secret");
    let f = form(meter);
    assert_eq!(f["event_name"], "api_credits");
    assert_eq!(f["payload[stripe_customer_id]"], "cus_acme");
    assert_eq!(f["payload[value]"], "10");
    assert_eq!(f["identifier"], format!("keygate-{acme}-{T0}"));
    assert_eq!(f["timestamp"], (T0 / 1000).to_string());
    assert_eq!(f.len(), 5, "{f:?}");

    // Exported once: later rounds, over later (empty) periods, send nothing more.
    recorded(&s, 2);
    for _ in 0..3 {
        s.clock.advance(MINUTE);
        export(&s);
    }
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(sinks.openmeter.received().len(), 1);
    assert_eq!(sinks.stripe.received().len(), 1);
}

#[test]
fn a_failed_export_is_sent_again_with_the_same_ids() {
    let sinks = sinks();
    sinks.openmeter.answer([Answer::status(500)]);
    sinks.stripe.answer([Answer::status(503)]);
    let s = start(Arc::new(TestDb::fresh()), &sinks);
    use_the_first_minute(&s);
    s.clock.advance(MINUTE + 15_000);
    export(&s);
    let (first_om, first_st) = (sinks.openmeter.wait_for(1), sinks.stripe.wait_for(1));
    // The first retry is due 5 s after the failed attempt is recorded.
    recorded(&s, 2);
    s.clock.advance(5_000);
    let (om, st) = (sinks.openmeter.wait_for(2), sinks.stripe.wait_for(2));
    assert_eq!((om.len(), st.len()), (2, 2));
    for (first, again) in [(&first_om[0], &om[1]), (&first_st[0], &st[1])] {
        assert_eq!(first.body, again.body);
        assert_eq!(first.header("idempotency-key"), again.header("idempotency-key"));
        assert!(first.header("idempotency-key").starts_with("usage_"));
    }
    // Answered 2xx: not sent again.
    recorded(&s, 4);
    s.clock.advance(3_600_000);
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!((sinks.openmeter.received().len(), sinks.stripe.received().len()), (2, 2));
}

#[test]
fn two_instances_on_one_database_export_each_period_once() {
    let sinks = sinks();
    let db = Arc::new(TestDb::fresh());
    let a = start(db.clone(), &sinks);
    let mut config = TestServer::config(&db.url);
    config.usage_export = Ok(Some(settings(&sinks)));
    let b = TestServer::start_with(config, db);
    use_the_first_minute(&a);
    // The same workspace's key used on the other instance too.
    let api =
        a.v2("apis.createApi", &json!({"name": "second"})).data()["apiId"].as_str().unwrap().to_string();
    let k = key(&a, &api, Some("acme"), 100);
    for _ in 0..4 {
        let r = b.v2_as(&a.root_key, "keys.verifyKey", &json!({"key": k, "credits": {"cost": 2}}));
        assert_eq!(r.data()["code"], "VALID", "{}", r.text);
    }
    b.state.runtime.analytics.flush_analytics().unwrap();
    a.clock.advance(MINUTE + 15_000);
    b.clock.advance(MINUTE + 15_000);
    std::thread::scope(|scope| {
        for s in [&a, &b] {
            scope.spawn(move || {
                for _ in 0..5 {
                    export(s);
                }
            });
        }
    });
    let got = sinks.openmeter.wait_for(1);
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(sinks.openmeter.received().len(), 1, "one batch, whichever instance wrote it");
    let events: Value = got[0].json();
    assert_eq!(events[0]["subject"], "acme");
    assert_eq!(events[0]["data"], json!({"credits": 18, "verifications": 7}), "both instances' counts");
    assert_eq!(sinks.stripe.received().len(), 1);
    assert_eq!(form(&sinks.stripe.received()[0])["payload[value]"], "18");
}

#[test]
fn settings_that_cannot_run_stop_the_start() {
    let sinks = sinks();
    let db = Arc::new(TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.usage_export = Ok(Some(ExportSettings { period_ms: 90_000, ..settings(&sinks) }));
    let e = keygate::start(config, Arc::new(keygate_domain::ManualClock::new(T0))).err().unwrap();
    assert!(e.to_string().contains("usage_export_period"), "{e}");
}

/// In workspace `ws` (as `root`): an identity `external_id` whose key spends `cost` once.
fn spend_in(s: &TestServer, root: &str, external_id: &str, cost: u64) {
    let api = s.v2_as(root, "apis.createApi", &json!({"name": "billed"})).data()["apiId"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.v2_as(
        root,
        "keys.createKey",
        &json!({"apiId": api, "externalId": external_id, "credits": {"remaining": 100}}),
    );
    let key = r.data()["key"].as_str().unwrap().to_string();
    let r = s.v2_as(root, "keys.verifyKey", &json!({"key": key, "credits": {"cost": cost}}));
    assert_eq!(r.data()["code"], "VALID", "{}", r.text);
}

#[test]
fn each_workspace_gets_batches_of_its_own_and_a_filter_keeps_one() {
    let sinks = sinks();
    let db = Arc::new(TestDb::fresh());
    let s = start(db.clone(), &sinks);
    let b = s.create_workspace("tenant-b");
    let b_root = s.root_key_in(&b, &["*"]);
    spend_in(&s, &s.root_key, "same-name", 3);
    spend_in(&s, &b_root, "same-name", 4);
    s.state.runtime.analytics.flush_analytics().unwrap();
    s.clock.advance(MINUTE + 15_000);
    export(&s);
    let got = sinks.openmeter.wait_for(2);
    assert_eq!(got.len(), 2, "a batch per workspace");
    let mut by_source: Vec<(String, Value)> = got
        .iter()
        .map(|r| (r.json()[0]["source"].as_str().unwrap().to_string(), r.json()[0]["data"].clone()))
        .collect();
    by_source.sort_by(|x, y| x.0.cmp(&y.0));
    let mut want = vec![
        (format!("keygate/{}", s.workspace_id), json!({"credits": 3, "verifications": 1})),
        (format!("keygate/{b}"), json!({"credits": 4, "verifications": 1})),
    ];
    want.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(by_source, want, "the same externalId in two workspaces stays apart");

    // Another database, whose export is kept to workspace B (its usage written by an
    // instance without the export).
    let sinks = self::sinks();
    let db = Arc::new(TestDb::fresh());
    let plain = TestServer::start_on(db.clone());
    let b = plain.create_workspace("tenant-b");
    let b_root = plain.root_key_in(&b, &["*"]);
    let mut config = TestServer::config(&db.url);
    config.usage_export = Ok(Some(ExportSettings { workspace_id: Some(b.clone()), ..settings(&sinks) }));
    let only_b = TestServer::start_with(config, db);
    export(&only_b);
    spend_in(&plain, &plain.root_key, "a-customer", 5);
    spend_in(&plain, &b_root, "b-customer", 6);
    plain.state.runtime.analytics.flush_analytics().unwrap();
    only_b.clock.advance(MINUTE + 15_000);
    export(&only_b);
    let got = sinks.openmeter.wait_for(1);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sinks.openmeter.received().len(), 1);
    let events = got[0].json();
    assert_eq!(events.as_array().unwrap().len(), 1, "{events}");
    assert_eq!(events[0]["subject"], "b-customer");
    assert_eq!(events[0]["source"], format!("keygate/{b}"));
}

#[test]
fn a_sink_a_day_behind_skips_what_analytics_no_longer_hold_and_catches_up() {
    let sinks = sinks();
    let s = start(Arc::new(TestDb::fresh()), &sinks);
    let api = s.v2("apis.createApi", &json!({"name": "late"})).data()["apiId"].as_str().unwrap().to_string();
    let k = key(&s, &api, Some("late-customer"), 100);
    assert_eq!(verify(&s, &k, 2), "VALID");
    s.state.runtime.analytics.flush_analytics().unwrap();
    // Every instance down for 30 hours: the minute of T0 is older than the minute rows kept.
    s.clock.advance(30 * 3_600_000);
    assert_eq!(verify(&s, &k, 5), "VALID");
    s.state.runtime.analytics.flush_analytics().unwrap();
    s.clock.advance(MINUTE + 15_000);
    // 23 hours of minutes to catch up, 60 a round.
    for _ in 0..30 {
        export(&s);
    }
    let got = sinks.openmeter.wait_for(1);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sinks.openmeter.received().len(), 1, "only the last minute had usage still held");
    let events = got[0].json();
    assert_eq!(events[0]["data"], json!({"credits": 5, "verifications": 1}));
    assert_eq!(events[0]["time"], keygate_metering::render::rfc3339((T0 + 30 * 3_600_000) as i64));
}
