//! The customer portal over the API (API-v2.md §17): portals (404 without the permission,
//! one per API and slug), sessions minted with scopes checked against the minting root
//! key, single-use codes, expiring tokens, revocation seen by another instance on the next
//! request, and end users who see, reroll and chart only their own keys.
#![allow(clippy::unwrap_used)]

use keygate_domain::Clock;
use keygate_tests::{Resp, TestServer};
use serde_json::{Value, json};

const MINUTE: u64 = 60_000;

/// An API, and a portal for it: (apiId, portalId).
fn portal(s: &TestServer, slug: &str) -> (String, String) {
    let api = s.v2("apis.createApi", &json!({"name": format!("api-{slug}")})).data()["apiId"]
        .as_str()
        .unwrap()
        .to_string();
    let r =
        s.v2("portal.createPortal", &json!({"slug": slug, "displayName": "Acme keys", "keyspaceId": api}));
    assert_eq!(r.status, 200, "{}", r.text);
    (api, r.data()["portalId"].as_str().unwrap().to_string())
}

/// A key of `external_id` in `api`: (keyId, secret).
fn key_of(s: &TestServer, api: &str, external_id: &str) -> (String, String) {
    let r = s.v2("keys.createKey", &json!({"apiId": api, "externalId": external_id}));
    assert_eq!(r.status, 200, "{}", r.text);
    (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string())
}

/// Mints a session as `by`: (session id, code).
fn mint(s: &TestServer, by: &str, body: Value) -> (String, String) {
    let r = s.v2_as(by, "portal.createSession", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    let url = r.data()["url"].as_str().unwrap();
    let code = url.split_once("?code=").unwrap().1.to_string();
    assert!(url.starts_with(&format!("{}/portal/", s.base)), "{url}");
    (r.data()["id"].as_str().unwrap().to_string(), code)
}

fn exchange(s: &TestServer, code: &str) -> Resp {
    s.post_raw("/v2/portal.exchangeCode", None, json!({"code": code}).to_string())
}

/// An end user's access token for `external_id` with `scopes`.
fn token(s: &TestServer, portal: &str, external_id: &str, scopes: &[&str]) -> String {
    let (_, code) =
        mint(s, &s.root_key, json!({"portal": portal, "externalId": external_id, "scopes": scopes}));
    let r = exchange(s, &code);
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["accessToken"].as_str().unwrap().to_string()
}

/// An end-user operation with the session cookie.
fn as_user(s: &TestServer, token: &str, op: &str, body: Value) -> Resp {
    s.request(
        s.client
            .post(s.url(&format!("/v2/{op}")))
            .header("content-type", "application/json")
            .header("cookie", format!("portal_session={token}"))
            .body(body.to_string()),
    )
}

fn key_ids(r: &Resp) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text);
    r.data().as_array().unwrap().iter().map(|k| k["keyId"].as_str().unwrap().to_string()).collect()
}

#[test]
fn portals_are_created_read_changed_and_deleted_one_per_api_and_slug() {
    let s = TestServer::start();
    let (api, id) = portal(&s, "acme");
    let r = s.v2("portal.getPortal", &json!({"portal": "acme"}));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.data()["id"], json!(id));
    assert_eq!(r.data()["keyspaceId"], json!(api));
    assert_eq!(r.data()["enabled"], json!(true));
    assert_eq!(s.v2("portal.getPortal", &json!({"keyspaceId": api})).data()["slug"], json!("acme"));
    // Exactly one of portal and keyspaceId.
    s.v2("portal.getPortal", &json!({"portal": "acme", "keyspaceId": api}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("portal.getPortal", &json!({})).assert_problem(400, "unkey/application/invalid_input");
    // One portal per API, one per slug.
    let again = json!({"slug": "acme-2", "displayName": "x", "keyspaceId": api});
    s.v2("portal.createPortal", &again).assert_problem(409, "unkey/data/portal_already_exists");
    let (other_api, _) = portal(&s, "other");
    let taken = json!({"slug": "acme", "displayName": "x", "keyspaceId": other_api});
    s.v2("portal.createPortal", &taken).assert_problem(409, "unkey/data/portal_already_exists");
    // Bad input: 400, nothing created.
    for (field, value) in [
        ("slug", json!("Acme!")),
        ("slug", json!("ab")),
        ("logoUrl", json!("http://cdn.example.com/logo.png")),
        ("logoUrl", json!("https://cdn.example.com/\"><script>")),
        ("primaryColor", json!("red")),
        ("appId", json!("app_1")),
    ] {
        let mut body = json!({"slug": "fresh", "displayName": "x", "keyspaceId": "api_none"});
        body[field] = value;
        let r = s.v2("portal.createPortal", &body);
        assert_eq!(r.status, 400, "{field}: {}", r.text);
    }
    let missing_api = json!({"slug": "fresh", "displayName": "x", "keyspaceId": "api_none"});
    s.v2("portal.createPortal", &missing_api).assert_problem(404, "unkey/data/api_not_found");
    assert_eq!(s.count("portals", "1=1"), 2);
    // Branding set, then cleared with null.
    let r = s.v2(
        "portal.updatePortal",
        &json!({"portal": id, "logoUrl": "https://cdn.example.com/l.png", "primaryColor": "#112233", "displayName": "Acme"}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.data()["branding"],
        json!({"logoUrl": "https://cdn.example.com/l.png", "primaryColor": "#112233"})
    );
    assert!(r.data()["updatedAt"].is_i64());
    let r = s.v2("portal.updatePortal", &json!({"portal": id, "logoUrl": null}));
    assert_eq!(r.data()["branding"], json!({"primaryColor": "#112233"}));
    assert_eq!(r.data()["displayName"], json!("Acme"));
    // Without the permission: 404, as if it did not exist.
    let reader = s.root_key_with(&["api.*.read_key"]);
    s.v2_as(&reader, "portal.getPortal", &json!({"portal": id}))
        .assert_problem(404, "unkey/data/portal_not_found");
    s.v2_as(&reader, "portal.deletePortal", &json!({"portal": id}))
        .assert_problem(404, "unkey/data/portal_not_found");
    let scoped = s.root_key_with(&[&format!("portal.{id}.read_portal")]);
    assert_eq!(s.v2_as(&scoped, "portal.getPortal", &json!({"portal": id})).status, 200);
    s.v2_as(&scoped, "portal.updatePortal", &json!({"portal": id, "enabled": false}))
        .assert_problem(404, "unkey/data/portal_not_found");
    // Deleted: gone, audited.
    assert_eq!(s.v2("portal.deletePortal", &json!({"portal": "acme"})).status, 200);
    s.v2("portal.getPortal", &json!({"portal": id})).assert_problem(404, "unkey/data/portal_not_found");
    assert_eq!(s.count("audit_events", "action LIKE 'portal.%'"), 5);
}

#[test]
fn a_session_s_scopes_are_checked_against_the_minting_root_key_and_its_code_works_once() {
    let s = TestServer::start();
    let (api, id) = portal(&s, "acme");
    let minter = s.root_key_with(&[
        "portal.*.create_portal_session",
        &format!("api.{api}.read_key"),
        &format!("api.{api}.read_api"),
    ]);
    // keys:reroll needs create_key on the API: 403 for the whole call, nothing minted.
    let body = json!({"portal": id, "externalId": "user_a", "scopes": ["keys:read", "keys:reroll"]});
    s.v2_as(&minter, "portal.createSession", &body)
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert_eq!(s.count("portal_sessions", "1=1"), 0);
    // Without create_portal_session: 404.
    let other = s.root_key_with(&["api.*.read_key", "api.*.read_api"]);
    let body = json!({"portal": id, "externalId": "user_a", "scopes": ["keys:read"]});
    s.v2_as(&other, "portal.createSession", &body).assert_problem(404, "unkey/data/portal_not_found");
    for bad in [json!([]), json!(["keys:read", "keys:read"]), json!(["keys:write"])] {
        let body = json!({"portal": id, "externalId": "user_a", "scopes": bad});
        s.v2_as(&minter, "portal.createSession", &body)
            .assert_problem(400, "unkey/application/invalid_input");
    }
    let body =
        json!({"portal": id, "externalId": "user_a", "scopes": ["keys:read"], "returnUrl": "javascript:x"});
    s.v2_as(&minter, "portal.createSession", &body).assert_problem(400, "unkey/application/invalid_input");

    // An API holding recoverable keys: rerolling there seals the successor, so the minter
    // needs encrypt_key as well.
    let roller_perms = ["portal.*.create_portal_session".to_string(), format!("api.{api}.create_key")];
    let roller = s.root_key_with(&roller_perms.iter().map(String::as_str).collect::<Vec<_>>());
    let reroll = json!({"portal": id, "externalId": "user_a", "scopes": ["keys:reroll"]});
    assert_eq!(s.v2_as(&roller, "portal.createSession", &reroll).status, 200, "no recoverable key yet");
    let r = s.v2("keys.createKey", &json!({"apiId": api, "recoverable": true}));
    assert_eq!(r.status, 200, "{}", r.text);
    let detail = s
        .v2_as(&roller, "portal.createSession", &reroll)
        .assert_problem(403, "unkey/authorization/insufficient_permissions");
    assert!(detail.contains("encrypt_key"), "{detail}");
    let sealer = s.root_key_with(&[&roller_perms[0], &roller_perms[1], &format!("api.{api}.encrypt_key")]);
    assert_eq!(s.v2_as(&sealer, "portal.createSession", &reroll).status, 200);

    let (session_id, code) =
        mint(&s, &minter, json!({"portal": id, "externalId": "user_a", "scopes": ["keys:read"]}));
    assert!(session_id.starts_with("ps_"));
    assert_eq!(s.count("portal_sessions", &format!("code_hash = '{code}'")), 0, "stored hashed");
    // Two exchanges at once: exactly one wins.
    let (a, b) = std::thread::scope(|t| {
        let a = t.spawn(|| exchange(&s, &code).status);
        let b = t.spawn(|| exchange(&s, &code).status);
        (a.join().unwrap(), b.join().unwrap())
    });
    let mut statuses = [a, b];
    statuses.sort();
    assert_eq!(statuses, [200, 401]);
    exchange(&s, &code).assert_problem(401, "unkey/authentication/key_not_found");
    exchange(&s, "kgpc_unknown").assert_problem(401, "unkey/authentication/key_not_found");

    // A code expires after 15 minutes; a token after 24 hours.
    let (_, late) = mint(&s, &minter, json!({"portal": id, "externalId": "user_b", "scopes": ["keys:read"]}));
    s.clock.advance(15 * MINUTE);
    exchange(&s, &late).assert_problem(401, "unkey/authentication/key_not_found");
    let t = token(&s, &id, "user_b", &["keys:read"]);
    assert_eq!(as_user(&s, &t, "portal.listKeys", json!({})).status, 200);
    s.clock.advance(24 * 60 * MINUTE);
    as_user(&s, &t, "portal.listKeys", json!({})).assert_problem(401, "unkey/authentication/key_not_found");
    as_user(&s, "nonsense", "portal.listKeys", json!({}))
        .assert_problem(401, "unkey/authentication/key_not_found");
    s.v2("portal.listKeys", &json!({})).assert_problem(401, "unkey/authentication/key_not_found");
}

#[test]
fn end_users_see_reroll_and_chart_only_their_own_keys_in_the_portal_s_api() {
    let s = TestServer::start();
    let (api, id) = portal(&s, "acme");
    let (other_api, _) = portal(&s, "other");
    let (a1, _) = key_of(&s, &api, "user_a");
    let (a2, a2_secret) = key_of(&s, &api, "user_a");
    let (b1, b1_secret) = key_of(&s, &api, "user_b");
    let (a_elsewhere, _) = key_of(&s, &other_api, "user_a");
    let t = token(&s, &id, "user_a", &["keys:read", "keys:reroll", "analytics:read"]);

    let mut listed = key_ids(&as_user(&s, &t, "portal.listKeys", json!({})));
    listed.sort();
    let mut mine = vec![a1.clone(), a2.clone()];
    mine.sort();
    assert_eq!(listed, mine);
    let page = as_user(&s, &t, "portal.listKeys", json!({"limit": 1}));
    assert_eq!(key_ids(&page).len(), 1);
    assert_eq!(page.json["pagination"]["hasMore"], json!(true));

    // Another user's key, or their own in another API: 404, nothing changed.
    for other in [&b1, &a_elsewhere, &"key_doesnotexist".to_string()] {
        as_user(&s, &t, "portal.rerollKey", json!({"keyId": other, "expiration": 0}))
            .assert_problem(404, "unkey/data/key_not_found");
        let body = json!({"startTime": 0, "endTime": 3_600_000, "keyId": other});
        as_user(&s, &t, "portal.getVerifications", body).assert_problem(404, "unkey/data/key_not_found");
    }
    // Their own: a new key, verifying; the old one expires as asked; audited as the session.
    let r = as_user(&s, &t, "portal.rerollKey", json!({"keyId": a2, "expiration": 60_000}));
    assert_eq!(r.status, 200, "{}", r.text);
    let new_secret = r.data()["key"].as_str().unwrap().to_string();
    let verify = |secret: &str| s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"].clone();
    assert_eq!(verify(&new_secret), json!("VALID"));
    assert_eq!(verify(&a2_secret), json!("VALID"));
    assert_eq!(s.count("audit_events", "action = 'key.reroll' AND actor_id LIKE 'portal:ps_%'"), 1);
    s.clock.advance(61_000);
    assert_eq!(verify(&a2_secret), json!("EXPIRED"));
    assert_eq!(key_ids(&as_user(&s, &t, "portal.listKeys", json!({}))).len(), 3);

    // Verifications of their keys only (user_b's are not theirs), per key and in total.
    for secret in [&new_secret, &new_secret, &b1_secret] {
        assert_eq!(verify(secret), json!("VALID"));
    }
    let at = s.clock.now_ms() as i64;
    s.clock.advance(61_000);
    let window = json!({"startTime": at - 60_000, "endTime": at + 60_000});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let r = loop {
        let r = as_user(&s, &t, "portal.getVerifications", window.clone());
        assert_eq!(r.status, 200, "{}", r.text);
        let total: u64 =
            r.json["data"].as_array().unwrap().iter().map(|p| p["total"].as_u64().unwrap()).sum();
        if total >= 4 || std::time::Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let sum = |points: &Value, field: &str| -> u64 {
        points.as_array().unwrap().iter().map(|p| p[field].as_u64().unwrap()).sum()
    };
    // Two of the new key and the old one's two VALID and one EXPIRED above.
    assert_eq!(sum(&r.json["data"], "valid"), 4, "{}", r.text);
    assert_eq!(sum(&r.json["data"], "expired"), 1, "{}", r.text);
    let series = r.json["keys"].as_array().unwrap();
    assert!(series.iter().all(|k| k["keyId"] != json!(b1)), "{}", r.text);
    assert_eq!(series.len(), 2, "{}", r.text);

    // Zero-filled per minute over an hour.
    let start = s.clock.now_ms() as i64 - 30 * 60_000;
    let body = json!({"startTime": start, "endTime": start + 3_600_000});
    let r = as_user(&s, &t, "portal.getVerifications", body);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["bucketMillis"], json!(60_000));
    let points = r.json["data"].as_array().unwrap();
    assert!((60..=61).contains(&points.len()), "{}", points.len());
    assert!(points.windows(2).all(|w| w[0]["time"].as_i64() < w[1]["time"].as_i64()));
    let week = json!({"startTime": start, "endTime": start + 7 * 86_400_000});
    assert_eq!(as_user(&s, &t, "portal.getVerifications", week).json["bucketMillis"], json!(3_600_000));
    let long = json!({"startTime": start, "endTime": start + 91 * 86_400_000});
    as_user(&s, &t, "portal.getVerifications", long).assert_problem(400, "unkey/application/invalid_input");

    // Scopes: a session without keys:reroll cannot reroll (403); a preview session neither.
    let read_only = token(&s, &id, "user_a", &["keys:read"]);
    let body = json!({"keyId": a1, "expiration": 0});
    as_user(&s, &read_only, "portal.rerollKey", body.clone())
        .assert_problem(403, "unkey/authorization/forbidden");
    as_user(&s, &read_only, "portal.getVerifications", json!({"startTime": 0, "endTime": 1}))
        .assert_problem(403, "unkey/authorization/forbidden");
    let (_, code) = mint(
        &s,
        &s.root_key,
        json!({"portal": id, "externalId": "user_a", "scopes": ["keys:read", "keys:reroll"], "preview": true}),
    );
    let preview = exchange(&s, &code).data()["accessToken"].as_str().unwrap().to_string();
    as_user(&s, &preview, "portal.rerollKey", body).assert_problem(403, "unkey/authorization/forbidden");
}

#[test]
fn sessions_end_with_revocation_their_portal_or_their_root_key_on_another_instance_too() {
    let s = TestServer::start();
    let second = TestServer::start_on(s.db.clone());
    let (api, id) = portal(&s, "acme");
    key_of(&s, &api, "user_a");
    let listed = |t: &str| as_user(&second, t, "portal.listKeys", json!({})).status;

    // revokeSession: pending and active ones; repeating it revokes none.
    let active = token(&s, &id, "user_a", &["keys:read"]);
    let (_, pending) =
        mint(&s, &s.root_key, json!({"portal": id, "externalId": "user_a", "scopes": ["keys:read"]}));
    let other = token(&s, &id, "user_b", &["keys:read"]);
    let r = s.v2("portal.listSessions", &json!({"portal": id}));
    assert_eq!(r.status, 200, "{}", r.text);
    let groups = r.data().as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["externalId"], json!("user_a"));
    let statuses: Vec<&str> =
        groups[0]["sessions"].as_array().unwrap().iter().map(|x| x["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["active", "pending"]);
    let r = s.v2("portal.listSessions", &json!({"portal": id, "search": "user_b", "limit": 1}));
    assert_eq!(r.data().as_array().unwrap().len(), 1);
    assert_eq!(listed(&active), 200);
    let r = s.v2("portal.revokeSession", &json!({"portal": id, "externalId": "user_a"}));
    assert_eq!(r.data()["sessionsRevoked"], json!(2), "{}", r.text);
    assert_eq!(
        s.v2("portal.revokeSession", &json!({"portal": id, "externalId": "user_a"})).data()["sessionsRevoked"],
        json!(0)
    );
    assert_eq!(listed(&active), 401);
    exchange(&second, &pending).assert_problem(401, "unkey/authentication/key_not_found");
    assert_eq!(listed(&other), 200);

    // Disabling the portal: its sessions answer 401 and it mints none; enabling it again.
    assert_eq!(s.v2("portal.updatePortal", &json!({"portal": id, "enabled": false})).status, 200);
    assert_eq!(listed(&other), 401);
    let body = json!({"portal": id, "externalId": "user_b", "scopes": ["keys:read"]});
    assert_eq!(s.v2("portal.createSession", &body).status, 412);
    assert_eq!(s.v2("portal.updatePortal", &json!({"portal": id, "enabled": true})).status, 200);
    assert_eq!(listed(&other), 200);

    // A session does no more than its minting root key may now: narrowed, its listing is
    // refused; restored, it works again.
    let r = s.v2(
        "rootKeys.createKey",
        &json!({"permissions": ["portal.*.create_portal_session", "api.*.read_key", "api.*.read_api"]}),
    );
    let (narrowed_id, narrowed) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    let (_, code) =
        mint(&s, &narrowed, json!({"portal": id, "externalId": "user_c", "scopes": ["keys:read"]}));
    let t = exchange(&s, &code).data()["accessToken"].as_str().unwrap().to_string();
    assert_eq!(listed(&t), 200);
    let change = |perms: Value| {
        s.v2("rootKeys.updateKey", &json!({"keyId": narrowed_id, "permissions": perms})).status
    };
    assert_eq!(change(json!(["portal.*.create_portal_session", "api.*.read_api"])), 200);
    assert_eq!(listed(&t), 403);
    assert_eq!(change(json!(["portal.*.create_portal_session", "api.*.read_key", "api.*.read_api"])), 200);
    assert_eq!(listed(&t), 200);

    // The minting root key deleted: its sessions end.
    let r = s.v2(
        "rootKeys.createKey",
        &json!({"permissions": ["portal.*.create_portal_session", "api.*.read_key", "api.*.read_api"]}),
    );
    let (minter_id, minter) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    let (_, code) = mint(&s, &minter, json!({"portal": id, "externalId": "user_c", "scopes": ["keys:read"]}));
    let t = exchange(&s, &code).data()["accessToken"].as_str().unwrap().to_string();
    assert_eq!(listed(&t), 200);
    assert_eq!(s.v2("rootKeys.deleteKey", &json!({"keyId": minter_id})).status, 200);
    assert_eq!(listed(&t), 401);

    // Counted: sessions minted, exchanged, revoked, and refused exchanges.
    let metrics = s.request(s.client.get(s.url("/metrics"))).text;
    for event in ["created", "exchanged", "revoked", "refused"] {
        assert!(metrics.contains(&format!("keygate_portal_sessions_total{{event=\"{event}\"}}")), "{event}");
    }

    // The portal deleted: its sessions go with it.
    assert_eq!(s.v2("portal.deletePortal", &json!({"portal": id})).status, 200);
    assert_eq!(listed(&other), 401);
    assert_eq!(s.count("portal_sessions", "1=1"), 0);
}

#[test]
fn portal_routes_authenticate_first_each_with_its_own_credential() {
    let s = TestServer::start();
    for op in [
        "createPortal",
        "getPortal",
        "updatePortal",
        "deletePortal",
        "createSession",
        "listSessions",
        "revokeSession",
    ] {
        let r = s.post_raw(&format!("/v2/portal.{op}"), None, "not json");
        r.assert_problem(400, "unkey/authentication/missing");
    }
    // The end user's: the cookie only (a root key is no session).
    for op in ["listKeys", "rerollKey", "getVerifications"] {
        s.post_raw(&format!("/v2/portal.{op}"), Some(&s.root_key), "{}")
            .assert_problem(401, "unkey/authentication/key_not_found");
    }
    // exchangeCode: none; its body is read.
    s.post_raw("/v2/portal.exchangeCode", None, "{nope")
        .assert_problem(400, "user/bad_request/request_body_unreadable");
}
