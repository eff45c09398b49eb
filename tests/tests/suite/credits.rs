//! Credits (API-v2.md §12.1, §12.4): a key's remaining uses and refill, set at creation,
//! shown by the Key object, changed by keys.updateCredits on the key's counter.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::{Value, json};

fn create(s: &TestServer, credits: Value) -> String {
    s.v2("keys.createKey", &json!({"apiId": "api_credits", "credits": credits})).data()["keyId"]
        .as_str()
        .unwrap()
        .to_string()
}

fn credits_of(s: &TestServer, key: &str) -> Value {
    s.v2("keys.getKey", &json!({"keyId": key})).data().get("credits").cloned().unwrap_or(Value::Null)
}

fn update(s: &TestServer, key: &str, operation: &str, value: Value) -> Value {
    s.v2("keys.updateCredits", &json!({"keyId": key, "operation": operation, "value": value})).data().clone()
}

#[test]
fn credits_are_set_at_creation_shown_and_changed_on_the_counter() {
    let s = TestServer::start();
    let monthly = create(
        &s,
        json!({"remaining": 100, "refill": {"interval": "monthly", "amount": 100, "refillDay": 15}}),
    );
    assert_eq!(
        credits_of(&s, &monthly),
        json!({"remaining": 100, "refill": {"interval": "monthly", "amount": 100, "refillDay": 15}})
    );
    let daily = create(&s, json!({"remaining": 5, "refill": {"interval": "daily", "amount": 5}}));
    assert_eq!(credits_of(&s, &daily), json!({"remaining": 5, "refill": {"interval": "daily", "amount": 5}}));
    let monthly_default = create(&s, json!({"remaining": 1, "refill": {"interval": "monthly", "amount": 9}}));
    assert_eq!(
        credits_of(&s, &monthly_default)["refill"]["refillDay"],
        1,
        "monthly refills default to day 1"
    );
    // Unlimited: no credit setting on the Key object.
    for unlimited in [json!(null), json!({}), json!({"remaining": null})] {
        let key = create(&s, unlimited);
        assert_eq!(credits_of(&s, &key), Value::Null);
    }

    // set keeps the refill; increment and decrement act on the counter; decrement floors at 0.
    assert_eq!(update(&s, &monthly, "set", json!(40))["remaining"], 40);
    assert_eq!(
        update(&s, &monthly, "increment", json!(2)),
        json!({"remaining": 42, "refill": {"interval": "monthly", "amount": 100, "refillDay": 15}})
    );
    assert_eq!(update(&s, &monthly, "decrement", json!(50))["remaining"], 0);
    // set null: unlimited, the refill cleared.
    assert_eq!(update(&s, &monthly, "set", json!(null)), json!({"remaining": null}));
    assert_eq!(credits_of(&s, &monthly), Value::Null);
    // Unlimited keys cannot be incremented or decremented; set gives them credits.
    let r = s.v2("keys.updateCredits", &json!({"keyId": monthly, "operation": "increment", "value": 1}));
    let detail = r.assert_problem(400, "unkey/application/invalid_input");
    assert!(detail.contains("unlimited"), "{detail}");
    assert_eq!(update(&s, &monthly, "set", json!(7)), json!({"remaining": 7}));
}

#[test]
fn bad_updates_are_400_or_404_and_change_nothing() {
    let s = TestServer::start();
    let key = create(&s, json!({"remaining": 10}));
    for (body, location) in [
        (json!({"keyId": key, "operation": "multiply", "value": 1}), "body.operation"),
        (json!({"keyId": key, "operation": "increment"}), "body.value"),
        (json!({"keyId": key, "operation": "decrement", "value": null}), "body.value"),
        (json!({"keyId": key, "operation": "set"}), "body.value"),
        (json!({"keyId": key, "operation": "set", "value": -1}), "body.value"),
        (json!({"keyId": key, "operation": "set", "value": 9_007_199_254_740_992_u64}), "body.value"),
        (json!({"keyId": "k", "operation": "set", "value": 1}), "body.keyId"),
    ] {
        let r = s.v2("keys.updateCredits", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{body}: {}", r.text);
    }
    assert_eq!(credits_of(&s, &key)["remaining"], 10, "nothing changed");
    s.v2("keys.updateCredits", &json!({"keyId": "key_missing", "operation": "set", "value": 1}))
        .assert_problem(404, "unkey/data/key_not_found");
    let scoped = s.root_key_with(&["api.other_api.update_key"]);
    s.v2_as(&scoped, "keys.updateCredits", &json!({"keyId": key, "operation": "set", "value": 1}))
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    let allowed = s.root_key_with(&["api.api_credits.update_key"]);
    assert_eq!(
        s.v2_as(&allowed, "keys.updateCredits", &json!({"keyId": key, "operation": "set", "value": 3}))
            .data()["remaining"],
        3
    );
}

#[test]
fn parallel_increments_are_never_lost() {
    let s = TestServer::start();
    let key = create(&s, json!({"remaining": 0}));
    std::thread::scope(|scope| {
        for _ in 0..10 {
            scope.spawn(|| update(&s, &key, "increment", json!(1)));
        }
    });
    assert_eq!(credits_of(&s, &key)["remaining"], 10);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| update(&s, &key, "decrement", json!(3)));
        }
    });
    assert_eq!(credits_of(&s, &key)["remaining"], 0, "10 - 12 floors at 0");
    // Increments stop at 2^53 - 1: the counter stays a JSON-safe integer, and never
    // overflows into a database error.
    let max = 9_007_199_254_740_991_u64;
    for _ in 0..3 {
        assert_eq!(update(&s, &key, "increment", json!(max))["remaining"], max);
    }
    assert_eq!(update(&s, &key, "decrement", json!(1))["remaining"], max - 1);
}
