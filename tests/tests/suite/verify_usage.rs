//! Credits and rate limits inside keys.verifyKey (API-v2.md §13): which limits apply, the
//! order of checks, all-or-nothing, refills, the v1 and gateway paths, and exactness under
//! concurrency. Runs on every backend the suite runs on (SQLite; PostgreSQL + Redis).
#![allow(clippy::unwrap_used)]

use keygate_test_support::TestDb;
use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const DAY: u64 = 86_400_000;

fn create(s: &TestServer, body: Value) -> (String, String) {
    let mut body = body;
    body["apiId"] = json!("api_usage");
    let d = s.v2("keys.createKey", &body).data().clone();
    (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
}

fn verify(s: &TestServer, secret: &str, extra: Value) -> Value {
    let mut body = extra;
    body["key"] = json!(secret);
    let r = s.v2("keys.verifyKey", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    r.data().clone()
}

fn code(v: &Value) -> &str {
    v["code"].as_str().unwrap()
}

fn remaining_of(s: &TestServer, key_id: &str) -> Value {
    s.v2("keys.getKey", &json!({"keyId": key_id})).data()["credits"]["remaining"].clone()
}

fn limit(name: &str, limit: u64, auto_apply: bool) -> Value {
    json!({"name": name, "limit": limit, "duration": 60_000, "autoApply": auto_apply})
}

#[test]
fn credits_admit_exactly_their_number_and_cost_counts() {
    let s = TestServer::start();
    let (id, secret) = create(&s, json!({"credits": {"remaining": 3}}));
    for left in [2, 1, 0] {
        let v = verify(&s, &secret, json!({}));
        assert_eq!((code(&v), v["valid"].clone(), v["credits"].clone()), ("VALID", json!(true), json!(left)));
    }
    let v = verify(&s, &secret, json!({}));
    assert_eq!(
        (code(&v), v["valid"].clone(), v["credits"].clone()),
        ("USAGE_EXCEEDED", json!(false), json!(0))
    );
    // Cost 0 needs credits left too; a cost above what is left spends nothing.
    assert_eq!(code(&verify(&s, &secret, json!({"credits": {"cost": 0}}))), "USAGE_EXCEEDED");
    s.v2("keys.updateCredits", &json!({"keyId": id, "operation": "set", "value": 5}));
    let v = verify(&s, &secret, json!({"credits": {"cost": 0}}));
    assert_eq!((code(&v), v["credits"].clone()), ("VALID", json!(5)));
    let v = verify(&s, &secret, json!({"credits": {"cost": 6}}));
    assert_eq!((code(&v), v["credits"].clone()), ("USAGE_EXCEEDED", json!(5)));
    let v = verify(&s, &secret, json!({"credits": {"cost": 5}}));
    assert_eq!((code(&v), v["credits"].clone()), ("VALID", json!(0)));
    assert_eq!(remaining_of(&s, &id), 0, "the spends are in the database");

    // A key without credits ignores the cost and answers no credits.
    let (_, unlimited) = create(&s, json!({}));
    let v = verify(&s, &unlimited, json!({"credits": {"cost": 1000}}));
    assert_eq!(code(&v), "VALID");
    assert!(v.get("credits").is_none(), "{v}");
}

#[test]
fn permissions_come_first_then_limits_then_credits_and_a_refusal_spends_nothing() {
    let s = TestServer::start();
    let (id, secret) = create(
        &s,
        json!({"credits": {"remaining": 10}, "ratelimits": [limit("calls", 2, true)], "permissions": ["a.read"]}),
    );
    // INSUFFICIENT_PERMISSIONS: neither limits nor credits are reached.
    let v = verify(&s, &secret, json!({"permissions": "a.write"}));
    assert_eq!(code(&v), "INSUFFICIENT_PERMISSIONS");
    assert!(v.get("credits").is_none() && v.get("ratelimits").is_none(), "{v}");
    let v = verify(&s, &secret, json!({"permissions": "a.read"}));
    assert_eq!((code(&v), v["credits"].clone()), ("VALID", json!(9)));
    let rl = &v["ratelimits"][0];
    assert_eq!(
        (rl["name"].clone(), rl["limit"].clone(), rl["duration"].clone(), rl["remaining"].clone()),
        (json!("calls"), json!(2), json!(60_000), json!(1))
    );
    assert_eq!((rl["exceeded"].clone(), rl["autoApply"].clone()), (json!(false), json!(true)));
    assert_eq!(rl["reset"], json!(T0 + 60_000));
    assert!(rl["id"].as_str().unwrap().starts_with("rl_"), "{rl}");
    assert_eq!(code(&verify(&s, &secret, json!({}))), "VALID");
    // RATE_LIMITED: no credit spent.
    let v = verify(&s, &secret, json!({}));
    assert_eq!(code(&v), "RATE_LIMITED");
    assert_eq!(
        (v["ratelimits"][0]["exceeded"].clone(), v["ratelimits"][0]["remaining"].clone()),
        (json!(true), json!(0))
    );
    assert!(v.get("credits").is_none(), "credits were not reached: {v}");
    assert_eq!(remaining_of(&s, &id), 8);
    // The next window.
    s.clock.advance(60_000);
    assert_eq!(code(&verify(&s, &secret, json!({}))), "VALID");
    assert_eq!(remaining_of(&s, &id), 7);
}

#[test]
fn usage_exceeded_gives_the_limits_of_the_call_back() {
    let s = TestServer::start();
    let (id, secret) =
        create(&s, json!({"credits": {"remaining": 1}, "ratelimits": [limit("calls", 5, true)]}));
    assert_eq!(verify(&s, &secret, json!({}))["ratelimits"][0]["remaining"], 4);
    let v = verify(&s, &secret, json!({"ratelimits": [{"name": "calls", "cost": 2}]}));
    assert_eq!(code(&v), "USAGE_EXCEEDED");
    assert_eq!(
        (v["ratelimits"][0]["remaining"].clone(), v["ratelimits"][0]["exceeded"].clone()),
        (json!(4), json!(false))
    );
    s.v2("keys.updateCredits", &json!({"keyId": id, "operation": "set", "value": 100}));
    // Still 4 in the window: the USAGE_EXCEEDED call took nothing.
    let v = verify(&s, &secret, json!({"ratelimits": [{"name": "calls", "cost": 4}]}));
    assert_eq!((code(&v), v["ratelimits"][0]["remaining"].clone()), ("VALID", json!(0)));
    assert_eq!(code(&verify(&s, &secret, json!({}))), "RATE_LIMITED");
    assert_eq!(remaining_of(&s, &id), 99);
}

/// A key's own limits and its identity's (kept apart: the identity's are shared by its
/// keys) are taken all or nothing with the credits: a refusal at any step takes nothing,
/// and the answer shows every budget as it is.
#[test]
fn own_and_identity_limits_and_credits_are_taken_all_or_nothing() {
    let s = TestServer::start();
    let r = s.v2(
        "identities.createIdentity",
        &json!({"externalId": "team", "ratelimits": [limit("shared", 3, true)]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let (id, secret) = create(
        &s,
        json!({"externalId": "team", "credits": {"remaining": 2}, "ratelimits": [limit("own", 3, true)]}),
    );
    // (code, credits, [(own remaining, exceeded), (shared remaining, exceeded)])
    let step = |extra: Value| {
        let v = verify(&s, &secret, extra);
        let rl = |name: &str| {
            let l = v["ratelimits"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
            (l["remaining"].as_u64().unwrap(), l["exceeded"].as_bool().unwrap())
        };
        (code(&v).to_string(), v["credits"].clone(), [rl("own"), rl("shared")])
    };
    let ok = |c: u64, own: u64, shared: u64| ("VALID".to_string(), json!(c), [(own, false), (shared, false)]);
    assert_eq!(step(json!({})), ok(1, 2, 2));
    // The key's own limit refuses: the identity's given back, no credit spent.
    let over = step(json!({"ratelimits": [{"name": "own", "cost": 5}]}));
    assert_eq!((over.0.as_str(), over.2), ("RATE_LIMITED", [(2, true), (2, false)]));
    assert_eq!(remaining_of(&s, &id), 1);
    assert_eq!(step(json!({})), ok(0, 1, 1));
    // No credits left: neither limit taken.
    let v = step(json!({}));
    assert_eq!((v.0.as_str(), v.1, v.2), ("USAGE_EXCEEDED", json!(0), [(1, false), (1, false)]));
    s.v2("keys.updateCredits", &json!({"keyId": id, "operation": "set", "value": 10}));
    // Both budgets still had one left: the refusals took nothing.
    assert_eq!(step(json!({})), ok(9, 0, 0));
    // The identity's refuses first; the key's own is shown as it is.
    let v = step(json!({}));
    assert_eq!((v.0.as_str(), v.2), ("RATE_LIMITED", [(0, true), (0, true)]));
    assert_eq!(remaining_of(&s, &id), 9);
}

#[test]
fn limits_are_found_on_the_key_then_its_identity_and_identity_limits_are_shared() {
    let s = TestServer::start();
    let identity = s.v2(
        "identities.createIdentity",
        &json!({"externalId": "acme", "ratelimits": [limit("shared", 3, true), limit("x", 50, true), limit("y", 1, false)]}),
    );
    assert_eq!(identity.status, 200, "{}", identity.text);
    let (_, a) = create(&s, json!({"externalId": "acme", "ratelimits": [limit("x", 1, false)]}));
    let (_, b) = create(&s, json!({"externalId": "acme"}));
    // Auto-applied: the identity's `shared`; its `x` is hidden by the key's `x` (not
    // auto-applied) on key a, applies on key b.
    let v = verify(&s, &a, json!({}));
    let names: Vec<&str> =
        v["ratelimits"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["shared"]);
    assert_eq!(v["identity"]["externalId"], "acme");
    assert_eq!(v["identity"]["ratelimits"].as_array().unwrap().len(), 3);
    let v = verify(&s, &b, json!({}));
    let names: Vec<&str> =
        v["ratelimits"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["shared", "x"], "sorted by name");
    // `shared` counts per identity: a, b, then a is the third; the fourth call is refused.
    assert_eq!(code(&verify(&s, &a, json!({}))), "VALID");
    assert_eq!(code(&verify(&s, &b, json!({}))), "RATE_LIMITED");
    // Naming `x` on key a takes the key's limit (1), not the identity's (50).
    s.clock.advance(60_000);
    let v = verify(&s, &a, json!({"ratelimits": [{"name": "x"}]}));
    assert_eq!(code(&v), "VALID");
    let x = v["ratelimits"].as_array().unwrap().iter().find(|l| l["name"] == "x").unwrap().clone();
    assert_eq!(
        (x["limit"].clone(), x["remaining"].clone(), x["autoApply"].clone()),
        (json!(1), json!(0), json!(false))
    );
    assert_eq!(code(&verify(&s, &a, json!({"ratelimits": [{"name": "x"}]}))), "RATE_LIMITED");
    // The request's limit replaces the stored one for the call; the count stays.
    assert_eq!(code(&verify(&s, &a, json!({"ratelimits": [{"name": "x", "limit": 2}]}))), "VALID");
    // An identity limit that is not auto-applied applies when named.
    let v = verify(&s, &b, json!({"ratelimits": [{"name": "y", "cost": 0}]}));
    assert_eq!(code(&v), "VALID");
    assert!(v["ratelimits"].as_array().unwrap().iter().any(|l| l["name"] == "y"));
}

#[test]
fn ad_hoc_limits_need_limit_and_duration_and_count_per_key() {
    let s = TestServer::start();
    let (_, a) = create(&s, json!({}));
    let (_, b) = create(&s, json!({}));
    let adhoc = json!({"ratelimits": [{"name": "burst", "limit": 1, "duration": 1000}]});
    let v = verify(&s, &a, adhoc.clone());
    assert_eq!((code(&v), v["ratelimits"][0]["id"].clone()), ("VALID", json!("adhoc:burst")));
    assert_eq!(code(&verify(&s, &a, adhoc.clone())), "RATE_LIMITED");
    assert_eq!(code(&verify(&s, &b, adhoc.clone())), "VALID", "another key's own budget");
    for bad in [
        json!({"ratelimits": [{"name": "nowhere"}]}),
        json!({"ratelimits": [{"name": "nowhere", "limit": 5}]}),
    ] {
        let mut body = bad;
        body["key"] = json!(a);
        let r = s.v2("keys.verifyKey", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], "body.ratelimits[0]", "{}", r.text);
    }
    // Malformed entries: 400 even for an unknown key.
    for bad in [
        json!({"ratelimits": [{"name": ""}]}),
        json!({"ratelimits": [{"name": "a", "cost": -1}]}),
        json!({"ratelimits": [{"name": "a", "limit": 0, "duration": 1000}]}),
        json!({"ratelimits": [{"name": "a", "limit": 1, "duration": 999}]}),
        json!({"ratelimits": [{"name": "a"}, {"name": "a"}]}),
        json!({"ratelimits": "a"}),
        json!({"ratelimits": (0..51).map(|i| json!({"name": format!("n{i}")})).collect::<Vec<_>>()}),
        json!({"credits": {"cost": -1}}),
        json!({"credits": {"cost": 9_007_199_254_740_992_u64}}),
        json!({"credits": {"cost": 1.5}}),
    ] {
        let mut body = bad;
        body["key"] = json!("kg_unknown");
        let r = s.v2("keys.verifyKey", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
    }
}

#[test]
fn keys_limits_of_one_name_count_per_key() {
    // In the in-process store every key's own limits share one namespace, told apart by the
    // limits' ids (docs/performance/credits.md): one key's exhausted `calls` is no other's.
    let s = TestServer::start();
    let keys: Vec<(String, String)> =
        (0..3).map(|_| create(&s, json!({"ratelimits": [limit("calls", 2, true)]}))).collect();
    let (_, first) = &keys[0];
    assert_eq!(code(&verify(&s, first, json!({}))), "VALID");
    assert_eq!(code(&verify(&s, first, json!({}))), "VALID");
    assert_eq!(code(&verify(&s, first, json!({}))), "RATE_LIMITED");
    for (id, secret) in &keys[1..] {
        let v = verify(&s, secret, json!({}));
        assert_eq!((code(&v), v["ratelimits"][0]["remaining"].clone()), ("VALID", json!(1)), "{id}");
    }
    // A deleted key's budget is not a new key's.
    let r = s.v2("keys.deleteKey", &json!({"keyId": keys[0].0}));
    assert_eq!(r.status, 200, "{}", r.text);
    let (_, fresh) = create(&s, json!({"ratelimits": [limit("calls", 2, true)]}));
    let v = verify(&s, &fresh, json!({}));
    assert_eq!((code(&v), v["ratelimits"][0]["remaining"].clone()), ("VALID", json!(1)));
}

#[test]
fn a_changed_limit_keeps_its_count() {
    let s = TestServer::start();
    let (id, secret) = create(&s, json!({"ratelimits": [limit("calls", 2, true)]}));
    assert_eq!(code(&verify(&s, &secret, json!({}))), "VALID");
    assert_eq!(code(&verify(&s, &secret, json!({}))), "VALID");
    let r = s.v2("keys.updateKey", &json!({"keyId": id, "ratelimits": [limit("calls", 3, true)]}));
    assert_eq!(r.status, 200, "{}", r.text);
    let v = verify(&s, &secret, json!({}));
    assert_eq!((code(&v), v["ratelimits"][0]["remaining"].clone()), ("VALID", json!(0)), "2 of 3 were used");
    assert_eq!(code(&verify(&s, &secret, json!({}))), "RATE_LIMITED");
}

#[test]
fn refills_set_the_credits_once_per_period() {
    let s = TestServer::start();
    let (id, secret) =
        create(&s, json!({"credits": {"remaining": 1, "refill": {"interval": "daily", "amount": 5}}}));
    assert_eq!(code(&verify(&s, &secret, json!({}))), "VALID");
    assert_eq!(code(&verify(&s, &secret, json!({}))), "USAGE_EXCEEDED");
    // Three idle days: refilled once, to the amount.
    s.clock.set(T0 + 3 * DAY + 5);
    let v = verify(&s, &secret, json!({}));
    assert_eq!((code(&v), v["credits"].clone()), ("VALID", json!(4)));
    let key = s.v2("keys.getKey", &json!({"keyId": id})).data().clone();
    assert_eq!(key["credits"]["refill"]["lastRefillAt"], json!(T0 + 3 * DAY));
    assert_eq!(verify(&s, &secret, json!({}))["credits"], 3, "not refilled again in the same day");

    // Monthly on the 31st: February refills on its last day. 2027-02-10 .. 2027-02-28.
    let feb10 = 1_802_217_600_000_u64;
    s.clock.set(feb10);
    let (_, monthly) = create(
        &s,
        json!({"credits": {"remaining": 1, "refill": {"interval": "monthly", "amount": 2, "refillDay": 31}}}),
    );
    assert_eq!(code(&verify(&s, &monthly, json!({}))), "VALID");
    s.clock.set(feb10 + 17 * DAY + 86_399_000); // 2027-02-27T23:59:59Z
    assert_eq!(code(&verify(&s, &monthly, json!({}))), "USAGE_EXCEEDED");
    s.clock.set(feb10 + 18 * DAY); // 2027-02-28T00:00:00Z
    let v = verify(&s, &monthly, json!({}));
    assert_eq!((code(&v), v["credits"].clone()), ("VALID", json!(1)));
}

#[test]
fn two_instances_racing_a_refill_apply_it_once() {
    let db = Arc::new(TestDb::fresh());
    let a = TestServer::start_on(db.clone());
    let b = TestServer::start_on(db);
    let (id, secret) =
        create(&a, json!({"credits": {"remaining": 0, "refill": {"interval": "daily", "amount": 100}}}));
    a.clock.set(T0 + DAY + 1);
    b.clock.set(T0 + DAY + 1);
    let valid = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for i in 0..20 {
            let (server, secret, valid) = (if i % 2 == 0 { &a } else { &b }, &secret, &valid);
            scope.spawn(move || {
                if code(&verify(server, secret, json!({}))) == "VALID" {
                    valid.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    assert_eq!(valid.load(Ordering::Relaxed), 20);
    assert_eq!(remaining_of(&a, &id), 80, "one refill to 100, then 20 spends");
}

#[test]
fn the_v1_verification_spends_and_answers_unkey_v1_fields() {
    let s = TestServer::start();
    let (_, secret) = create(
        &s,
        json!({"credits": {"remaining": 2}, "ratelimits": [limit("default", 10, true), limit("other", 10, false)]}),
    );
    let r = s.post(
        "/v1/keys.verifyKey",
        &json!({"key": secret, "remaining": {"cost": 1}, "ratelimit": {"cost": 3}}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!((r.json["valid"].clone(), r.json["remaining"].clone()), (json!(true), json!(1)));
    assert_eq!(r.json["ratelimit"]["limit"], 10);
    assert_eq!(r.json["ratelimit"]["remaining"], 7);
    let r = s.post("/v1/keys.verifyKey", &json!({"key": secret, "remaining": {"cost": 2}}));
    assert_eq!((r.json["code"].clone(), r.json["remaining"].clone()), (json!("USAGE_EXCEEDED"), json!(1)));
    let r =
        s.post("/v1/keys.verifyKey", &json!({"key": secret, "ratelimits": [{"name": "other", "cost": 11}]}));
    assert_eq!(r.json["code"], "RATE_LIMITED");
    let r = s.post("/v1/keys.verifyKey", &json!({"key": secret}));
    assert_eq!((r.json["code"].clone(), r.json["remaining"].clone()), (json!("VALID"), json!(0)));
    let r = s.post("/v1/keys.verifyKey", &json!({"key": secret}));
    assert_eq!(r.json["code"], "USAGE_EXCEEDED");
    // `ratelimit.cost` on a key without a `default` limit changes nothing.
    let (_, plain) = create(&s, json!({}));
    let r = s.post("/v1/keys.verifyKey", &json!({"key": plain, "ratelimit": {"cost": 3}}));
    assert_eq!(r.json["code"], "VALID", "{}", r.text);
}

#[test]
fn the_gateway_answers_429_for_limits_and_credits() {
    let s = TestServer::start();
    let (_, secret) =
        create(&s, json!({"credits": {"remaining": 2}, "ratelimits": [limit("calls", 1, true)]}));
    let gate = |secret: &str| {
        s.request(
            s.client
                .get(s.url("/v1/gateway.authorize"))
                .header("x-keygate-root-key", &s.root_key)
                .header("authorization", format!("Bearer {secret}")),
        )
    };
    assert_eq!(gate(&secret).status, 200);
    let r = gate(&secret);
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("60"));
    s.clock.advance(60_000);
    assert_eq!(gate(&secret).status, 200);
    s.clock.advance(60_000);
    let r = gate(&secret);
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.header("retry-after"), None, "credits come back by refill or update only");
    assert!(r.text.contains("credits"), "{}", r.text);
}

#[test]
fn concurrent_updates_and_verifications_lose_nothing() {
    let s = TestServer::start();
    let (id, secret) = create(&s, json!({"credits": {"remaining": 1000}}));
    let valid = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let (s, secret, valid) = (&s, &secret, &valid);
            scope.spawn(move || {
                for _ in 0..25 {
                    if code(&verify(s, secret, json!({}))) == "VALID" {
                        valid.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        for _ in 0..10 {
            let (s, id) = (&s, &id);
            scope.spawn(move || {
                let r =
                    s.v2("keys.updateCredits", &json!({"keyId": id, "operation": "increment", "value": 1}));
                assert_eq!(r.status, 200, "{}", r.text);
            });
        }
    });
    assert_eq!(valid.load(Ordering::Relaxed), 200);
    assert_eq!(remaining_of(&s, &id), 1000 + 10 - 200);
}

/// 500 credits, 900 concurrent verifications through 3 instances: exactly 500 VALID. An
/// identity limit of 300 shared by 3 keys: exactly 300 pass (across instances when they
/// share a Redis store, as the scale-out run does; else through one instance, whose
/// in-process budgets are its own).
#[test]
fn credits_and_shared_limits_are_exact_across_instances() {
    let db = Arc::new(TestDb::fresh());
    let servers: Vec<TestServer> = (0..3).map(|_| TestServer::start_on(db.clone())).collect();
    let (id, secret) = create(&servers[0], json!({"credits": {"remaining": 500}}));
    let count = |servers: &[&TestServer], secrets: &[String], n: usize| {
        let valid = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for t in 0..30 {
                let (server, secret, valid) =
                    (servers[t % servers.len()], &secrets[t % secrets.len()], &valid);
                scope.spawn(move || {
                    for _ in 0..n / 30 {
                        if code(&verify(server, secret, json!({}))) == "VALID" {
                            valid.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        valid.load(Ordering::Relaxed)
    };
    let all: Vec<&TestServer> = servers.iter().collect();
    assert_eq!(count(&all, &[secret], 900), 500);
    assert_eq!(remaining_of(&servers[1], &id), 0);

    let s = &servers[0];
    let r = s.v2(
        "identities.createIdentity",
        &json!({"externalId": "bulk", "ratelimits": [{"name": "month", "limit": 300, "duration": 60_000, "autoApply": true}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let keys: Vec<String> = (0..3).map(|_| create(s, json!({"externalId": "bulk"})).1).collect();
    let through: Vec<&TestServer> = if keygate_test_support::redis_url().is_some() { all } else { vec![s] };
    assert_eq!(count(&through, &keys, 900), 300);
}

/// Many keys spent at once by many clients through one server (two workers): the spends of
/// a moment share commits, whichever worker leads them, and each key admits exactly its
/// credits, as its row says after.
#[test]
fn many_keys_spent_at_once_each_admit_exactly_their_credits() {
    let s = TestServer::start();
    let keys: Vec<(String, String)> =
        (0..40).map(|_| create(&s, json!({"credits": {"remaining": 5}}))).collect();
    let valid: Vec<AtomicU64> = keys.iter().map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|scope| {
        for t in 0..32 {
            let (s, keys, valid) = (&s, &keys, &valid);
            scope.spawn(move || {
                for i in 0..keys.len() {
                    let k = (i + t) % keys.len();
                    if code(&verify(s, &keys[k].1, json!({}))) == "VALID" {
                        valid[k].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    for ((id, _), valid) in keys.iter().zip(&valid) {
        assert_eq!(valid.load(Ordering::Relaxed), 5, "{id}");
        assert_eq!(remaining_of(&s, id), 0, "{id}");
    }
}
