//! The customer portal's pages over HTTP (docs/portal.md): a minted link redeemed into an
//! HttpOnly cookie and taken out of the address, the user's keys and charts, rolling a key
//! with the form token (the new key shown once, never cached), the portal's branding and
//! CSP, expired links and ended sessions as readable pages, hostile paths as 4xx pages.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use reqwest::blocking::Client;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

struct Page {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

/// A client that follows no redirect.
fn client() -> Client {
    Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn get(s: &TestServer, path: &str, cookie: Option<&str>) -> Page {
    let mut req = client().get(s.url(path));
    if let Some(c) = cookie {
        req = req.header("cookie", format!("portal_session={c}"));
    }
    send(req)
}

fn send(req: reqwest::blocking::RequestBuilder) -> Page {
    let res = req.send().unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.text().unwrap_or_default();
    assert!(status < 500, "no 5xx: {status} {body}");
    Page { status, headers, body }
}

fn post_form(s: &TestServer, path: &str, cookie: &str, form: &str) -> Page {
    send(
        client()
            .post(s.url(path))
            .header("cookie", format!("portal_session={cookie}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.to_string()),
    )
}

/// A portal `acme` with branding over a new API; a key of `user_a` and one of `user_b`:
/// (apiId, a's key (id, secret), b's key id).
fn setup(s: &TestServer) -> (String, (String, String), String) {
    let api = s.v2("apis.createApi", &json!({"name": "pages"})).data()["apiId"].as_str().unwrap().to_string();
    let body = json!({"slug": "acme", "displayName": "Acme <Keys>", "keyspaceId": api,
                      "logoUrl": "https://cdn.example.com/logo.png", "primaryColor": "#aa3300"});
    assert_eq!(s.v2("portal.createPortal", &body).status, 200);
    let key = |ext: &str| {
        let d = s
            .v2("keys.createKey", &json!({"apiId": api, "externalId": ext, "name": format!("{ext} key")}))
            .data()
            .clone();
        (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
    };
    let (a, b) = (key("user_a"), key("user_b"));
    (api, a, b.0)
}

/// A link for `external_id`: its path and query.
fn link(s: &TestServer, external_id: &str, scopes: Value) -> String {
    let body = json!({"portal": "acme", "externalId": external_id, "scopes": scopes, "returnUrl": "https://app.example.com/settings"});
    let r = s.v2("portal.createSession", &body);
    assert_eq!(r.status, 200, "{}", r.text);
    r.data()["url"].as_str().unwrap().strip_prefix(&s.base).unwrap().to_string()
}

/// Follows a link: the cookie's value.
fn redeem(s: &TestServer, path: &str) -> String {
    let p = get(s, path, None);
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(p.header("location"), "/portal/acme", "the code is gone from the address");
    let cookie = p.header("set-cookie").to_string();
    for part in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=86400"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    cookie.strip_prefix("portal_session=").unwrap().split(';').next().unwrap().to_string()
}

#[test]
fn a_link_becomes_a_cookie_and_the_page_lists_charts_and_rolls_the_user_s_keys() {
    let s = TestServer::start();
    let (_, (a_id, a_secret), b_id) = setup(&s);
    let path = link(&s, "user_a", json!(["keys:read", "keys:reroll", "analytics:read"]));
    let token = redeem(&s, &path);
    // The link works once: then a readable "expired" page.
    let again = get(&s, &path, None);
    assert_eq!(again.status, 401);
    assert!(again.body.contains("This link has expired"), "{}", again.body);

    let p = get(&s, "/portal/acme", Some(&token));
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(p.body.matches("<h1").count(), 1);
    assert!(p.body.contains("Acme &#60;Keys&#62;") || p.body.contains("Acme &lt;Keys&gt;"), "escaped name");
    assert!(p.body.contains(&a_id) && !p.body.contains(&b_id), "only the user's keys");
    assert!(p.body.contains("user_a key") && p.body.contains("<svg class=\"chart\""));
    assert!(p.body.contains("href=\"https://app.example.com/settings\""), "the return link");
    assert!(!p.body.contains(&token), "the token is never in a page");
    assert_eq!(p.header("cache-control"), "no-store");
    assert_eq!(p.header("x-frame-options"), "DENY");
    let csp = p.header("content-security-policy");
    assert!(
        csp.contains("img-src 'self' https://cdn.example.com") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let theme = get(&s, "/portal/acme/theme.css", None);
    assert_eq!(theme.body.trim(), ":root { --accent: #aa3300; }");

    // Rolling: without the form token nothing happens; with it the new key, once.
    let csrf = {
        let marker = "name=\"csrf_token\" value=\"";
        let at = p.body.find(marker).unwrap() + marker.len();
        p.body[at..].split('"').next().unwrap().to_string()
    };
    let roll = format!("/portal/acme/keys/{a_id}/reroll");
    let refused = post_form(&s, &roll, &token, "csrf_token=wrong&expiration=0");
    assert_eq!(refused.status, 403);
    assert_eq!(s.count("keys", "1=1"), 2, "nothing changed");
    let other = post_form(
        &s,
        &format!("/portal/acme/keys/{b_id}/reroll"),
        &token,
        &format!("csrf_token={csrf}&expiration=0"),
    );
    assert_eq!(other.status, 404, "another user's key");
    let bad = post_form(&s, &roll, &token, &format!("csrf_token={csrf}&expiration=5"));
    assert_eq!(bad.status, 400);
    let done = post_form(&s, &roll, &token, &format!("csrf_token={csrf}&expiration=0"));
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.header("cache-control"), "no-store");
    let marker = "id=\"secret\" type=\"text\" readonly value=\"";
    let at = done.body.find(marker).unwrap() + marker.len();
    let new_secret = done.body[at..].split('"').next().unwrap().to_string();
    let verify = |k: &str| s.v2("keys.verifyKey", &json!({"key": k})).data()["code"].clone();
    assert_eq!(verify(&new_secret), json!("VALID"));
    assert_eq!(verify(&a_secret), json!("EXPIRED"));
    // Shown once: the keys page shows where keys start, never a secret.
    let p = get(&s, "/portal/acme", Some(&token));
    assert!(!p.body.contains(&new_secret));

    // A session revoked: the page says it ended.
    s.v2("portal.revokeSession", &json!({"portal": "acme", "externalId": "user_a"})).data();
    let ended = get(&s, "/portal/acme", Some(&token));
    assert_eq!(ended.status, 401);
    assert!(ended.body.contains("Your session has ended"));
}

#[test]
fn a_read_only_or_preview_session_shows_no_roll_form_and_another_portal_s_cookie_is_no_session() {
    let s = TestServer::start();
    setup(&s);
    let token = redeem(&s, &link(&s, "user_a", json!(["keys:read"])));
    let p = get(&s, "/portal/acme", Some(&token));
    assert_eq!(p.status, 200);
    assert!(
        !p.body.contains("Roll this key") && !p.body.contains("<svg"),
        "no form, no chart without their scopes"
    );
    // The same cookie on another portal's pages: no session there.
    let api = s.v2("apis.createApi", &json!({"name": "second"})).data()["apiId"].clone();
    s.v2("portal.createPortal", &json!({"slug": "second", "displayName": "Second", "keyspaceId": api}))
        .data();
    assert_eq!(get(&s, "/portal/second", Some(&token)).status, 401);
    assert_eq!(get(&s, "/portal/second", None).status, 401);
}

#[test]
fn hostile_portal_paths_and_queries_get_4xx_pages() {
    let s = TestServer::start();
    setup(&s);
    for path in [
        "/portal/%00",
        "/portal/%FF%FE",
        "/portal/nope",
        "/portal/acme/../../v2/keys.getKey",
        "/portal/acme?code=%00",
        "/portal/acme?code=%FF",
        "/portal/acme?code=",
        "/portal/acme/keys",
        "/portal/acme/theme.css/x",
    ] {
        let p = get(&s, path, None);
        assert!((400..500).contains(&p.status), "{path}: {} {}", p.status, p.body);
    }
    let long = format!("/portal/{}", "a".repeat(10_000));
    assert!((400..500).contains(&get(&s, &long, None).status));
    let long_code = format!("/portal/acme?code={}", "x".repeat(10_000));
    assert_eq!(get(&s, &long_code, None).status, 401);
    let p = get(&s, "/portal/acme", Some("nonsense"));
    assert_eq!(p.status, 401);
    let r = post_form(&s, "/portal/acme/keys/key_x/reroll", "nonsense", "%%%");
    assert!((400..500).contains(&r.status));
}
