//! keys.verifyKey's cache (issue 18): every change applies to the next verification, on
//! the instance that made it and on every other one.
#![allow(clippy::unwrap_used)]

use keygate_test_support::TestDb;
use keygate_tests::proxy::CuttableProxy;
use keygate_tests::{TestServer, scale_out};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VERIFY: &str = "/v1/keys.verifyKey";

/// The verification of `secret` (asking for `query` when given): (code, permissions, roles).
fn verify(s: &TestServer, secret: &str, query: Option<&str>) -> (String, Vec<String>, Vec<String>) {
    let mut body = json!({"key": secret});
    if let Some(q) = query {
        body["authorization"] = json!({"permissions": q});
    }
    let r = s.request(s.client.post(s.url(VERIFY)).json(&body));
    assert_eq!(r.status, 200, "{}", r.text);
    let names = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect()).unwrap_or_default()
    };
    (r.json["code"].as_str().unwrap().to_string(), names(&r.json["permissions"]), names(&r.json["roles"]))
}

fn ok(s: &TestServer, path: &str, body: Value) -> Value {
    let r = s.post(path, &body);
    assert_eq!(r.status, 200, "{path}: {}", r.text);
    r.json
}

fn create_key(s: &TestServer, body: Value) -> (String, String) {
    let r = ok(s, "/v1/keys.createKey", body);
    (r["keyId"].as_str().unwrap().to_string(), r["key"].as_str().unwrap().to_string())
}

fn role(s: &TestServer, name: &str) -> String {
    ok(s, "/v1/permissions.createRole", json!({"name": name}))["roleId"].as_str().unwrap().to_string()
}

fn permission_id(s: &TestServer, name: &str) -> String {
    let r = s.request(s.client.get(s.url("/v1/permissions.listPermissions")).bearer_auth(&s.root_key));
    let all = r.json.as_array().unwrap().clone();
    all.iter().find(|p| p["name"] == name).unwrap()["id"].as_str().unwrap().to_string()
}

#[test]
fn every_change_applies_to_the_next_verification() {
    let s = TestServer::start();
    let editor = role(&s, "editor");
    ok(
        &s,
        "/v1/permissions.addPermissionsToRole",
        json!({"roleId": editor, "permissions": [{"name": "r.one"}]}),
    );
    let (key, secret) = create_key(&s, json!({"permissions": ["k.one"], "roles": ["editor"]}));
    let strings = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let perms = |s: &TestServer| verify(s, &secret, None).1;
    // Warm: the second answer comes from the cache.
    for _ in 0..2 {
        assert_eq!(
            verify(&s, &secret, None),
            ("VALID".into(), strings(&["k.one", "r.one"]), strings(&["editor"]))
        );
    }

    // A key's own permissions.
    ok(&s, "/v1/keys.addPermissions", json!({"keyId": key, "permissions": [{"name": "k.two"}]}));
    assert_eq!(verify(&s, &secret, Some("k.two")).0, "VALID");
    ok(&s, "/v1/keys.removePermissions", json!({"keyId": key, "permissions": [{"name": "k.two"}]}));
    assert_eq!(verify(&s, &secret, Some("k.two")).0, "INSUFFICIENT_PERMISSIONS");
    ok(&s, "/v1/keys.setPermissions", json!({"keyId": key, "permissions": [{"name": "k.three"}]}));
    assert_eq!(perms(&s), strings(&["k.three", "r.one"]));

    // A role's permissions reach the key through it.
    ok(
        &s,
        "/v1/permissions.addPermissionsToRole",
        json!({"roleId": editor, "permissions": [{"name": "r.two"}]}),
    );
    assert_eq!(perms(&s), strings(&["k.three", "r.one", "r.two"]));
    ok(
        &s,
        "/v1/permissions.setRolePermissions",
        json!({"roleId": editor, "permissions": [{"name": "r.three"}]}),
    );
    assert_eq!(perms(&s), strings(&["k.three", "r.three"]));
    ok(
        &s,
        "/v1/permissions.removePermissionsFromRole",
        json!({"roleId": editor, "permissions": [{"name": "r.three"}]}),
    );
    assert_eq!(perms(&s), strings(&["k.three"]));

    // The key's roles.
    let admin = role(&s, "admin");
    ok(
        &s,
        "/v1/permissions.addPermissionsToRole",
        json!({"roleId": admin, "permissions": [{"name": "a.one"}]}),
    );
    ok(&s, "/v1/keys.addRoles", json!({"keyId": key, "roles": [{"name": "admin"}]}));
    assert_eq!(
        verify(&s, &secret, None),
        ("VALID".into(), strings(&["a.one", "k.three"]), strings(&["admin", "editor"]))
    );
    ok(&s, "/v1/keys.setRoles", json!({"keyId": key, "roles": [{"name": "editor"}]}));
    assert_eq!(verify(&s, &secret, None).2, strings(&["editor"]));
    ok(&s, "/v1/keys.removeRoles", json!({"keyId": key, "roles": [{"name": "editor"}]}));
    assert_eq!(verify(&s, &secret, None).2, Vec::<String>::new());

    // Deleting a permission or a role takes it from every key.
    ok(&s, "/v1/permissions.deletePermission", json!({"permissionId": permission_id(&s, "k.three")}));
    assert_eq!(perms(&s), Vec::<String>::new());
    ok(&s, "/v1/keys.addRoles", json!({"keyId": key, "roles": [{"name": "admin"}]}));
    assert_eq!(perms(&s), strings(&["a.one"]));
    ok(&s, "/v1/permissions.deleteRole", json!({"roleId": admin}));
    assert_eq!(verify(&s, &secret, None), ("VALID".into(), vec![], vec![]));

    // Deleting the key.
    ok(&s, "/v1/keys.deleteKey", json!({"keyId": key}));
    assert_eq!(verify(&s, &secret, None).0, "NOT_FOUND");
    assert_eq!(verify(&s, &secret, None).0, "NOT_FOUND");
}

#[test]
fn expiry_is_checked_when_the_cached_answer_is_read() {
    let s = TestServer::start();
    let expires = keygate_domain::Clock::now_ms(&s.clock) + 1_000;
    let (_, secret) = create_key(&s, json!({"expires": expires}));
    assert_eq!(verify(&s, &secret, None).0, "VALID");
    assert_eq!(verify(&s, &secret, None).0, "VALID");
    s.clock.advance(1_000);
    assert_eq!(verify(&s, &secret, None).0, "EXPIRED");
    let (_, disabled) = create_key(&s, json!({"enabled": false}));
    assert_eq!(verify(&s, &disabled, None).0, "DISABLED");
}

#[test]
fn the_cache_can_be_turned_off() {
    let db = Arc::new(TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.verify_cache = false;
    let s = TestServer::start_with(config, db);
    let (key, secret) = create_key(&s, json!({"permissions": ["p"]}));
    assert_eq!(verify(&s, &secret, Some("p")).0, "VALID");
    ok(&s, "/v1/keys.setPermissions", json!({"keyId": key, "permissions": []}));
    assert_eq!(verify(&s, &secret, Some("p")).0, "INSUFFICIENT_PERMISSIONS");
}

/// The Redis the scale-out tests use; they need PostgreSQL too.
/// Write through A, verify through B right after A answered: never stale.
fn write_on_a_verify_on_b(a: &TestServer, b: &TestServer, rounds: usize) {
    let (key, secret) = create_key(a, json!({"permissions": ["p.0"]}));
    assert_eq!(verify(b, &secret, Some("p.0")).0, "VALID");
    for i in 1..=rounds {
        ok(a, "/v1/keys.setPermissions", json!({"keyId": key, "permissions": [{"name": format!("p.{i}")}]}));
        let (code, perms, _) = verify(b, &secret, Some(&format!("p.{i}")));
        assert_eq!((code.as_str(), perms), ("VALID", vec![format!("p.{i}")]), "round {i}");
    }
    ok(a, "/v1/keys.deleteKey", json!({"keyId": key}));
    assert_eq!(verify(b, &secret, None).0, "NOT_FOUND");
}

#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn a_change_through_one_instance_applies_to_the_next_verification_on_another() {
    scale_out();
    let db = Arc::new(TestDb::fresh());
    let (a, b) = (TestServer::start_on(db.clone()), TestServer::start_on(db));
    write_on_a_verify_on_b(&a, &b, 100);
    write_on_a_verify_on_b(&b, &a, 20);
}

#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn verifications_stay_current_while_redis_is_down_and_after_it_returns() {
    let url = scale_out();
    let proxy = CuttableProxy::start(keygate_tests::redis_addr(&url)).unwrap();
    let db = Arc::new(TestDb::fresh());
    let on_proxy = |db: &Arc<TestDb>| {
        let mut config = TestServer::config(&db.url);
        config.redis_url = Some(format!("redis://{}", proxy.addr));
        config.redis.connect_timeout = Duration::from_millis(300);
        config.redis.io_timeout = Duration::from_millis(300);
        TestServer::start_with(config, db.clone())
    };
    let (a, b) = (on_proxy(&db), on_proxy(&db));
    write_on_a_verify_on_b(&a, &b, 10);

    // Redis goes away: the database's counters answer.
    proxy.cut();
    write_on_a_verify_on_b(&a, &b, 10);

    // Redis returns: once each instance has reconciled (1 s), they read it again, and what
    // changed meanwhile is there.
    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.state.rbac.reconcile_shared_counters().is_err()
        || b.state.rbac.reconcile_shared_counters().is_err()
    {
        assert!(Instant::now() < deadline, "Redis did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    write_on_a_verify_on_b(&a, &b, 20);
}

/// A root key revoked through A is refused by B at B's very next request: every endpoint,
/// and with Redis the rate-limit hot path too (its decision script checks the root key's
/// counter); without Redis that path sees it at B's next 50 ms poll.
fn revoked_on_a_refused_by_b_next(redis: bool) {
    let db = Arc::new(TestDb::fresh());
    let start = |db: &Arc<TestDb>| {
        let mut config = TestServer::config(&db.url);
        if !redis {
            config.redis_url = None;
        }
        TestServer::start_with(config, db.clone())
    };
    let (a, b) = (start(&db), start(&db));
    let (_, plain) = create_key(&a, json!({}));
    // A key that spends: with one Redis its spend's script checks the root key's counter.
    let spending = json!({"credits": {"remaining": 1_000_000}, "ratelimits": [{"name": "l", "limit": 1_000_000, "duration": 60_000, "autoApply": true}]});
    let (_, spends) = create_key(&a, spending);
    for round in 0..20 {
        let secret = if round % 2 == 0 { &plain } else { &spends };
        let (rk, root) = a.state.rbac.create_root_key("default", &["*".to_string()]).unwrap();
        let root = root.expose().to_string();
        let list = || b.request(b.client.get(b.url("/v1/permissions.listPermissions")).bearer_auth(&root));
        let verify_as =
            || b.request(b.client.post(b.url(VERIFY)).bearer_auth(&root).json(&json!({"key": secret})));
        assert_eq!(verify_as().status, 200, "round {round} (cached)");
        let limit_as = || {
            let body = json!({"identifier": format!("u{round}"), "limit": 1000, "duration": 60_000});
            b.request(b.client.post(b.url("/v1/ratelimits.limit")).bearer_auth(&root).json(&body))
        };
        assert_eq!(list().status, 200, "round {round}");
        assert_eq!(verify_as().status, 200, "round {round}");
        assert_eq!(limit_as().status, 200, "round {round}");
        a.state.rbac.revoke_root_key(&rk.id).unwrap();
        if redis {
            limit_as().assert_error(401, "UNAUTHORIZED");
        }
        list().assert_error(401, "UNAUTHORIZED");
        verify_as().assert_error(401, "UNAUTHORIZED");
    }
}

#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn a_root_key_revoked_on_one_instance_is_refused_by_another_at_its_next_request() {
    scale_out();
    revoked_on_a_refused_by_b_next(true);
    revoked_on_a_refused_by_b_next(false);
}

/// `apis.deleteApi` through A, 50 times: each time the API's keys, verified (and cached) on
/// B just before, verify NOT_FOUND on B right after A answered; a key of another API stays.
fn delete_api_on_a_verify_on_b(a: &TestServer, b: &TestServer, rounds: usize) {
    let (_, kept) = create_key(a, json!({"apiId": "kept_api"}));
    for i in 0..rounds {
        let api = format!("api_round_{i}");
        let (_, secret) = create_key(a, json!({"apiId": api}));
        assert_eq!(verify(b, &secret, None).0, "VALID", "round {i}");
        assert_eq!(verify(b, &secret, None).0, "VALID", "round {i} (cached)");
        assert_eq!(a.v2("apis.deleteApi", &json!({"apiId": api})).data(), &json!({}));
        assert_eq!(verify(b, &secret, None).0, "NOT_FOUND", "round {i}");
    }
    assert_eq!(verify(b, &kept, None).0, "VALID");
}

#[test]
fn deleting_an_api_applies_to_the_next_verification() {
    let s = TestServer::start();
    delete_api_on_a_verify_on_b(&s, &s, 5);
}

#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn an_api_deleted_through_one_instance_is_gone_for_the_next_verification_on_another() {
    scale_out();
    let db = Arc::new(TestDb::fresh());
    let (a, b) = (TestServer::start_on(db.clone()), TestServer::start_on(db));
    delete_api_on_a_verify_on_b(&a, &b, 50);
}

/// keys.updateKey and keys.rerollKey through A, 50 times each: B's next verification, right
/// after A answered, sees the change (disabled, permissions replaced, the original expired).
/// `spending`: the key has credits and a limit (with one Redis, its spend's script checks
/// the change counters in place of a read).
fn update_on_a_verify_on_b(a: &TestServer, b: &TestServer, rounds: usize, spending: bool) {
    let v2_verify = |s: &TestServer, secret: &str, q: Option<&str>| -> String {
        let mut body = json!({"key": secret});
        if let Some(q) = q {
            body["permissions"] = json!(q);
        }
        s.v2("keys.verifyKey", &body).data()["code"].as_str().unwrap().to_string()
    };
    let mut body = json!({"apiId": "api_fresh", "permissions": ["p.0"]});
    if spending {
        body["credits"] = json!({"remaining": 1_000_000});
        body["ratelimits"] =
            json!([{"name": "l", "limit": 1_000_000, "duration": 60_000, "autoApply": true}]);
    }
    let created = a.v2("keys.createKey", &body).data().clone();
    let (key, mut secret) =
        (created["keyId"].as_str().unwrap().to_string(), created["key"].as_str().unwrap().to_string());
    let mut key = key;
    for i in 1..=rounds {
        assert_eq!(v2_verify(b, &secret, Some(&format!("p.{}", i - 1))), "VALID", "round {i} (cached)");
        a.v2("keys.updateKey", &json!({"keyId": key, "enabled": false})).data();
        assert_eq!(v2_verify(b, &secret, None), "DISABLED", "round {i}: disabled");
        a.v2("keys.updateKey", &json!({"keyId": key, "enabled": true, "permissions": [format!("p.{i}")]}))
            .data();
        assert_eq!(v2_verify(b, &secret, Some(&format!("p.{i}"))), "VALID", "round {i}: permissions");
        assert_eq!(
            v2_verify(b, &secret, Some(&format!("p.{}", i - 1))),
            "INSUFFICIENT_PERMISSIONS",
            "round {i}"
        );
        // Reroll with expiration 0: the original is expired for B's next verification.
        let r = a.v2("keys.rerollKey", &json!({"keyId": key, "expiration": 0})).data().clone();
        assert_eq!(v2_verify(b, &secret, None), "EXPIRED", "round {i}: rerolled");
        key = r["keyId"].as_str().unwrap().to_string();
        secret = r["key"].as_str().unwrap().to_string();
        assert_eq!(v2_verify(b, &secret, Some(&format!("p.{i}"))), "VALID", "round {i}: the copy");
        // An identity deleted through A: B shows the key unlinked, and it keeps verifying.
        let external = format!("customer_{i}");
        a.v2("keys.updateKey", &json!({"keyId": key, "externalId": external})).data();
        assert_eq!(
            b.v2("keys.getKey", &json!({"keyId": key})).data()["identity"]["externalId"],
            json!(external)
        );
        a.v2("identities.deleteIdentity", &json!({"identity": external})).data();
        assert!(b.v2("keys.getKey", &json!({"keyId": key})).data().get("identity").is_none(), "round {i}");
        assert_eq!(v2_verify(b, &secret, None), "VALID", "round {i}: unlinked");
    }
}

#[test]
fn key_updates_and_rerolls_apply_to_the_next_verification() {
    let s = TestServer::start();
    update_on_a_verify_on_b(&s, &s, 5, false);
    update_on_a_verify_on_b(&s, &s, 5, true);
}

#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn key_updates_and_rerolls_through_one_instance_apply_to_the_next_verification_on_another() {
    scale_out();
    let db = Arc::new(TestDb::fresh());
    let (a, b) = (TestServer::start_on(db.clone()), TestServer::start_on(db));
    update_on_a_verify_on_b(&a, &b, 50, false);
    update_on_a_verify_on_b(&a, &b, 30, true);
}

/// Changes through A, each followed by one verification on B while 16 clients keep B's
/// confirmations and spends in shared round trips (verifying other keys of the workspace,
/// plain and spending): every one of the 300 verifications sees its change (issue 75).
/// Each round changes one thing a cached answer holds under: the key's permissions (its
/// counter), its role's permissions (the workspace's), the key disabled and enabled again.
#[test]
#[ignore = "needs PostgreSQL and Redis: set KEYGATE_TEST_POSTGRES_URL and KEYGATE_TEST_REDIS_URL, run with --include-ignored (.ci/run does)"]
fn changes_apply_to_the_next_verification_on_another_instance_under_load() {
    scale_out();
    let db = Arc::new(TestDb::fresh());
    let (a, b) = (TestServer::start_on(db.clone()), TestServer::start_on(db));
    let editor = role(&a, "editor");
    let spending = json!({"credits": {"remaining": 1_000_000_000}, "ratelimits":
        [{"name": "l", "limit": 1_000_000_000, "duration": 60_000, "autoApply": true}]});
    let (plain, paying) = (create_key(&a, json!({"roles": ["editor"]})), create_key(&a, spending.clone()));
    let (key, secret) = create_key(&a, json!({"roles": ["editor"]}));
    let mut body = spending;
    body["roles"] = json!(["editor"]);
    let (paid_key, paid_secret) = create_key(&a, body);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let v2 = |secret: &str, query: &str| {
        let body = if query.is_empty() {
            json!({"key": secret})
        } else {
            json!({"key": secret, "permissions": query})
        };
        let r = b.v2("keys.verifyKey", &body);
        assert_eq!(r.status, 200, "{}", r.text);
        r.data()["code"].as_str().unwrap().to_string()
    };
    let (mut stale, mut load) = (Vec::new(), 0u64);
    std::thread::scope(|scope| {
        let busy: Vec<_> = (0..16)
            .map(|i| {
                let (secret, stop) = (if i % 2 == 0 { &plain.1 } else { &paying.1 }, &stop);
                scope.spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        assert_eq!(v2(secret, ""), "VALID");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for round in 0..300 {
            let (id, secret) = if round % 2 == 0 { (&key, &secret) } else { (&paid_key, &paid_secret) };
            let name = format!("p.{round}");
            let (expected, query) = match round % 3 {
                0 => {
                    ok(&a, "/v1/keys.setPermissions", json!({"keyId": id, "permissions": [{"name": name}]}));
                    ("VALID", name)
                }
                1 => {
                    ok(
                        &a,
                        "/v1/permissions.setRolePermissions",
                        json!({"roleId": editor, "permissions": [{"name": name}]}),
                    );
                    ("VALID", name)
                }
                _ => {
                    a.v2("keys.updateKey", &json!({"keyId": id, "enabled": false})).data();
                    let disabled = v2(secret, "");
                    a.v2("keys.updateKey", &json!({"keyId": id, "enabled": true})).data();
                    if disabled != "DISABLED" {
                        stale.push(format!("round {round}: {disabled} for a disabled key"));
                    }
                    ("VALID", String::new())
                }
            };
            let code = v2(secret, &query);
            if code != expected {
                stale.push(format!("round {round}: {code}, not {expected} ({query})"));
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        load = busy.into_iter().map(|t| t.join().unwrap()).sum();
    });
    assert!(stale.is_empty(), "stale answers on B: {stale:#?}");
    assert!(load > 300, "the verifications around them ran ({load})");
    let metrics = b.request(b.client.get(b.url("/metrics")).bearer_auth(&b.root_key)).text;
    let counter = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let confirmations = counter("keygate_redis_confirmations_total");
    assert!(confirmations > 300.0, "B's cached verifications were confirmed in batches: {confirmations}");
    // A's changes were announced to B, which then knew some answers stale without a read
    // (the fast path; freshness never waits for it: the counters above did the rest).
    let (pushed, known) =
        (counter("keygate_redis_pushed_changes_total"), counter("keygate_redis_pushed_stale_total"));
    eprintln!(
        "B: {confirmations} confirmations, {pushed} announcements heard, {known} answers known stale by them"
    );
    assert!(pushed >= 300.0, "B heard A's changes: {pushed}");
    assert!(known > 0.0, "announcements answered some stale confirmations: {known}");
}
