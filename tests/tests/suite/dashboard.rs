//! The dashboard over HTTP (docs/dashboard.md): the login and its session cookie, form
//! tokens on every POST, the security headers on every page, sessions ending (idle, logout,
//! the root key revoked), pages a root key may not see, and the root key never in a page.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use reqwest::blocking::Client;
use reqwest::header::HeaderMap;
use serde_json::json;
use std::collections::HashMap;

/// A browser without redirects, keeping its cookies by hand (to read their attributes).
struct Browser<'a> {
    s: &'a TestServer,
    client: Client,
    cookies: HashMap<String, String>,
}

#[derive(Debug)]
struct Page {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn location(&self) -> Option<&str> {
        self.headers.get("location").and_then(|v| v.to_str().ok())
    }

    fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with(&format!("{name}=")))
            .map(str::to_string)
    }

    /// The value of the form's hidden `csrf_token`.
    fn csrf(&self) -> String {
        let marker = r#"name="csrf_token" value=""#;
        let at = self.body.find(marker).expect("a form token") + marker.len();
        self.body[at..].split('"').next().unwrap().to_string()
    }
}

impl<'a> Browser<'a> {
    fn new(s: &'a TestServer) -> Self {
        let client = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Self { s, client, cookies: HashMap::new() }
    }

    fn send(&mut self, req: reqwest::blocking::RequestBuilder) -> Page {
        let cookie: Vec<String> = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let req = if cookie.is_empty() { req } else { req.header("cookie", cookie.join("; ")) };
        let res = req.send().unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        for c in headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
            let (pair, attrs) = c.split_once(';').unwrap_or((c, ""));
            let (name, value) = pair.split_once('=').unwrap();
            match attrs.contains("Max-Age=0") {
                true => drop(self.cookies.remove(name)),
                false => drop(self.cookies.insert(name.to_string(), value.to_string())),
            }
        }
        let body = res.text().unwrap();
        assert!(status < 500 || status == 503, "no 5xx but the store's 503: {status} {body}");
        Page { status, headers, body }
    }

    fn get(&mut self, path: &str) -> Page {
        let req = self.client.get(self.s.url(path));
        self.send(req)
    }

    fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let req = self.client.post(self.s.url(path)).form(form);
        self.send(req)
    }

    /// Logs in with `root_key`: the answer to the form.
    fn login(&mut self, root_key: &str) -> Page {
        let form = self.get("/dashboard/login");
        assert_eq!(form.status, 200, "{}", form.body);
        let token = form.csrf();
        self.post("/dashboard/login", &[("root_key", root_key), ("csrf_token", &token)])
    }
}

/// Every dashboard answer's security headers.
fn assert_secure_headers(p: &Page) {
    let h = |n: &str| p.headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let csp = h("content-security-policy");
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(h("x-content-type-options"), "nosniff");
    assert_eq!(h("referrer-policy"), "same-origin");
}

#[test]
fn a_root_key_logs_in_and_out_and_is_never_shown() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    // Signed out: to the login page.
    let p = b.get("/dashboard");
    assert_eq!((p.status, p.location()), (303, Some("/dashboard/login")));
    assert_secure_headers(&p);

    let form = b.get("/dashboard/login");
    assert_secure_headers(&form);
    assert!(form.body.contains(r#"name="root_key""#) && form.body.contains(r#"<label for="root_key">"#));
    let login_cookie = form.set_cookie("kg_login").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/dashboard"] {
        assert!(login_cookie.contains(attr), "{login_cookie}");
    }

    // A wrong key: 401, the form again with a message, no session.
    let wrong = b.login("kg_root_not_a_real_key_0000000000000000");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.body.contains("not valid") && wrong.set_cookie("kg_session").is_none());
    assert!(!wrong.body.contains("kg_root_not_a_real_key"), "the key typed is not echoed");

    // The right one: a session cookie, and the overview.
    let ok = b.login(&s.root_key);
    assert_eq!((ok.status, ok.location()), (303, Some("/dashboard")), "{}", ok.body);
    let session = ok.set_cookie("kg_session").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/dashboard"] {
        assert!(session.contains(attr), "{session}");
    }
    assert!(!session.contains("Secure"), "plain HTTP: {session}");
    assert!(!session.contains(&s.root_key), "{session}");
    let overview = b.get("/dashboard");
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert_secure_headers(&overview);
    assert!(overview.body.contains("<h1>Overview</h1>"));
    assert_eq!(overview.body.matches("<h1").count(), 1);
    assert!(!overview.body.contains(&s.root_key), "the root key is in no page");
    // Signed in, the login page sends to the overview.
    assert_eq!(b.get("/dashboard/login").location(), Some("/dashboard"));
    assert_eq!(s.count("dashboard_sessions", "1 = 1"), 1);

    // Logout needs the session's token: without it, 403 and still signed in.
    let refused = b.post("/dashboard/logout", &[("csrf_token", "forged")]);
    assert_eq!(refused.status, 403);
    assert_secure_headers(&refused);
    assert_eq!(b.get("/dashboard").status, 200);
    let token = b.get("/dashboard").csrf();
    let out = b.post("/dashboard/logout", &[("csrf_token", &token)]);
    assert_eq!((out.status, out.location()), (303, Some("/dashboard/login")));
    assert_eq!(s.count("dashboard_sessions", "1 = 1"), 0);
    assert_eq!(b.get("/dashboard").status, 303);
}

#[test]
fn forms_without_their_token_change_nothing() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    // A login form's token must match its cookie.
    let _ = b.get("/dashboard/login");
    for form in [
        vec![("root_key", s.root_key.as_str()), ("csrf_token", "forged")],
        vec![("root_key", s.root_key.as_str())],
    ] {
        let p = b.post("/dashboard/login", &form);
        assert_eq!(p.status, 403, "{}", p.body);
        assert_secure_headers(&p);
    }
    // A body that is not a form at all.
    let req = b.client.post(s.url("/dashboard/login")).json(&json!({"root_key": s.root_key}));
    assert_eq!(b.send(req).status, 403);
    assert_eq!(s.count("dashboard_sessions", "1 = 1"), 0, "no session was made");
    // Another browser's login token does not pass either.
    let mut other = Browser::new(&s);
    let theirs = other.get("/dashboard/login").csrf();
    let mut mine = Browser::new(&s);
    let _ = mine.get("/dashboard/login");
    assert_eq!(
        mine.post("/dashboard/login", &[("root_key", &s.root_key), ("csrf_token", &theirs)]).status,
        403
    );
}

#[test]
fn sessions_end_when_idle_or_when_their_root_key_is_revoked() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    // Used within 12 hours: still on (each use counts).
    s.clock.advance(11 * 3_600_000);
    assert_eq!(b.get("/dashboard").status, 200);
    s.clock.advance(11 * 3_600_000);
    assert_eq!(b.get("/dashboard").status, 200);
    // 12 hours without use: ended.
    s.clock.advance(12 * 3_600_000 + 1);
    assert_eq!(b.get("/dashboard").location(), Some("/dashboard/login"));

    // A root key revoked ends its sessions at once.
    let (rk, secret) = s.state.rbac.create_root_key(&s.workspace_id, &["*".to_string()]).unwrap();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(secret.expose()).status, 303);
    assert_eq!(b.get("/dashboard").status, 200);
    s.state.rbac.revoke_root_key(&rk.id).unwrap();
    assert_eq!(b.get("/dashboard").location(), Some("/dashboard/login"));
    assert_eq!(b.login(secret.expose()).status, 401, "nor can it log in again");
}

#[test]
fn a_page_the_root_key_may_not_see_is_a_readable_403() {
    let s = TestServer::start();
    let (_, secret) = s.state.rbac.create_root_key(&s.workspace_id, &["api.*.read_key".to_string()]).unwrap();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(secret.expose()).status, 303);
    let p = b.get("/dashboard");
    assert_eq!(p.status, 403);
    assert_secure_headers(&p);
    assert!(p.body.contains("api.*.read_analytics") && p.body.contains("<h1>"), "{}", p.body);
    assert!(!p.body.contains(secret.expose()));
    // An unknown page: 404, with the headers too.
    let p = b.get("/dashboard/nowhere");
    assert_eq!(p.status, 404);
    assert_secure_headers(&p);
}

#[test]
fn the_overview_counts_the_workspaces_verifications() {
    let s = TestServer::start();
    let api = s.v2("apis.createApi", &json!({"name": "shop"})).data()["apiId"].as_str().unwrap().to_string();
    let r = s.v2("keys.createKey", &json!({"apiId": api, "externalId": "acme"}));
    let (key_id, secret) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    for _ in 0..3 {
        assert_eq!(s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"], "VALID");
    }
    s.v2("keys.verifyKey", &json!({"key": "not-a-key", "apiId": api}));
    for _ in 0..3 {
        s.limit(json!({"namespace": "email", "identifier": "x", "limit": 2, "duration": 60_000}));
    }
    s.clock.advance(61_000);
    s.state.analytics.flush_analytics().unwrap();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    for range in ["", "?range=7d", "?range=30d", "?range=<b>"] {
        let p = b.get(&format!("/dashboard{range}"));
        assert_eq!(p.status, 200);
        assert!(p.body.contains("<td>VALID</td><td class=\"n\">3</td>"), "{range}: {}", p.body);
        assert!(p.body.contains("<svg class=\"chart\""), "a chart");
        assert!(p.body.contains("role=\"img\" aria-label=\"Verifications per "), "labelled: {}", p.body);
        // The panels: the key, its identity, the namespace's denial.
        assert!(p.body.contains(&format!(">{key_id}</a></td><td class=\"n\">3</td>")), "{range}: {}", p.body);
        assert!(p.body.contains(">acme</a></td><td class=\"n\">3</td>"), "{range}");
        assert!(
            p.body.contains(">email</a></td><td class=\"n\">2</td><td class=\"n\">1</td>"),
            "{range}: {}",
            p.body
        );
    }
    // A key's own usage, on its page.
    let key = b.get(&format!("/dashboard/keys/{key_id}"));
    assert!(key.body.contains("Verifications of this key per day: 3 in all"), "{}", key.body);
    // A root key that may read analytics of APIs but not rate limits: no rate-limit panel.
    let (_, narrow) =
        s.state.rbac.create_root_key(&s.workspace_id, &["api.*.read_analytics".to_string()]).unwrap();
    let mut other = Browser::new(&s);
    assert_eq!(other.login(narrow.expose()).status, 303);
    let p = other.get("/dashboard");
    assert_eq!(p.status, 200);
    assert!(!p.body.contains("Rate-limit decisions"));
    // The stylesheet is served, and is the page's only style.
    let css = b.get("/dashboard/assets/app.css");
    assert_eq!(css.status, 200);
    assert!(css.headers["content-type"].to_str().unwrap().starts_with("text/css"));
}

#[test]
fn a_root_key_reading_some_apis_sees_their_sum_on_the_overview() {
    let s = TestServer::start();
    let mut apis = Vec::new();
    for (name, n) in [("shop", 2), ("blog", 5), ("mail", 7)] {
        let api =
            s.v2("apis.createApi", &json!({"name": name})).data()["apiId"].as_str().unwrap().to_string();
        let r = s.v2("keys.createKey", &json!({"apiId": api, "externalId": name}));
        let secret = r.data()["key"].as_str().unwrap().to_string();
        for _ in 0..n {
            assert_eq!(s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"], "VALID");
        }
        apis.push((api, r.data()["keyId"].as_str().unwrap().to_string()));
    }
    s.clock.advance(61_000);
    s.state.analytics.flush_analytics().unwrap();
    // Two of the three APIs: 2 + 5, their keys and identities, not the third's.
    let perms = [format!("api.{}.read_analytics", apis[0].0), format!("api.{}.read_analytics", apis[1].0)];
    let (_, scoped) = s.state.rbac.create_root_key(&s.workspace_id, &perms).unwrap();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(scoped.expose()).status, 303);
    let p = b.get("/dashboard?range=7d");
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains("<td>VALID</td><td class=\"n\">7</td>"), "{}", p.body);
    assert!(
        p.body.contains(&format!(">{}</a>", apis[0].1)) && p.body.contains(&format!(">{}</a>", apis[1].1))
    );
    assert!(!p.body.contains(&apis[2].1) && !p.body.contains(">mail</a>"), "{}", p.body);
    assert!(
        p.body.contains(&format!("/apis/{}\">{}</a>", apis[1].0, apis[1].0)),
        "the scope named: {}",
        p.body
    );
    // The workspace's root key: all three, no scope line.
    let mut all = Browser::new(&s);
    assert_eq!(all.login(&s.root_key).status, 303);
    let p = all.get("/dashboard?range=7d");
    assert!(p.body.contains("<td>VALID</td><td class=\"n\">14</td>"), "{}", p.body);
    assert!(!p.body.contains("Counted: the APIs"));
}

#[test]
fn login_attempts_are_limited_per_address() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    let mut statuses = Vec::new();
    for _ in 0..11 {
        statuses.push(b.login("kg_root_wrong_0000000000000000000000").status);
    }
    assert_eq!(statuses[..10], [401; 10]);
    assert_eq!(statuses[10], 429);
    // Even the right key waits for the minute to pass.
    assert_eq!(b.login(&s.root_key).status, 429);
    s.clock.advance(60_000);
    assert_eq!(b.login(&s.root_key).status, 303);
}

#[test]
fn cookies_are_secure_over_https_and_the_dashboard_can_be_off() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    let form = b.get("/dashboard/login");
    let req = b
        .client
        .post(s.url("/dashboard/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("root_key", s.root_key.as_str()), ("csrf_token", &form.csrf())]);
    let p = b.send(req);
    assert!(p.set_cookie("kg_session").unwrap().contains("; Secure"), "{:?}", p.headers);

    let db = std::sync::Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.dashboard = None;
    let off = TestServer::start_with(config, db);
    let r = off.request(off.client.get(off.url("/dashboard/login")));
    assert_eq!(r.status, 404);
}

/// The form token of a page the browser is signed in to.
fn token(b: &mut Browser<'_>) -> String {
    b.get("/dashboard/apis").csrf()
}

#[test]
fn apis_and_keys_are_managed_from_the_dashboard() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let empty = b.get("/dashboard/apis");
    assert!(empty.body.contains("No APIs yet"), "{}", empty.body);

    // An API: a name too short is a form error, nothing created.
    let t = token(&mut b);
    let short = b.post("/dashboard/apis", &[("csrf_token", &t), ("name", "x")]);
    assert_eq!(short.status, 400);
    assert!(short.body.contains("role=\"alert\""), "{}", short.body);
    // A name the API refuses comes back with the reason, escaped.
    let odd = b.post("/dashboard/apis", &[("csrf_token", &t), ("name", "pay<b>ments")]);
    assert_eq!(odd.status, 400);
    assert!(!odd.body.contains("<b>"), "{}", odd.body);
    let created = b.post("/dashboard/apis", &[("csrf_token", &t), ("name", "payments-api")]);
    assert_eq!(created.status, 303, "{}", created.body);
    let api_path = created.location().unwrap().to_string();
    let api_id = api_path.rsplit('/').next().unwrap().to_string();
    let listed = b.get("/dashboard/apis");
    assert_secure_headers(&listed);
    assert!(
        listed.body.contains(&format!(">payments-api</a></td><td><code>{api_id}</code>")),
        "{}",
        listed.body
    );
    assert!(b.get(&api_path).body.contains("No keys in this API yet"));

    // A key: its secret shown once, and it verifies.
    let new = b.post(
        &format!("{api_path}/keys"),
        &[("csrf_token", &t), ("name", "checkout"), ("externalId", "acme"), ("credits", "5")],
    );
    assert_eq!(new.status, 200, "{}", new.body);
    assert_secure_headers(&new);
    let marker = r#"id="secret" type="text" readonly value=""#;
    let at = new.body.find(marker).unwrap() + marker.len();
    let secret = new.body[at..].split('"').next().unwrap().to_string();
    let verify = |secret: &str| s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"].clone();
    assert_eq!(verify(&secret), "VALID");
    let key_id = s.v2("keys.whoami", &json!({"key": secret})).data()["keyId"].as_str().unwrap().to_string();
    let key_page = b.get(&format!("/dashboard/keys/{key_id}"));
    assert_secure_headers(&key_page);
    assert_secure_headers(&b.get(&api_path));
    assert_eq!(key_page.status, 200);
    assert!(key_page.body.contains("acme") && key_page.body.contains("<td>4</td>"), "{}", key_page.body);
    assert!(!key_page.body.contains(&secret), "the secret is shown only once");
    // Listed, and found by its identity.
    assert!(b.get(&api_path).body.contains(&key_id));
    assert!(b.get(&format!("{api_path}?externalId=acme")).body.contains(&key_id));
    assert!(b.get(&format!("{api_path}?externalId=nobody")).body.contains("No keys of this identity"));
    // Searched by part of its name, or by its id; `%` is a character, not a wildcard.
    assert!(b.get(&format!("{api_path}?search=heck")).body.contains(&key_id));
    assert!(b.get(&format!("{api_path}?search={key_id}")).body.contains(&key_id));
    assert!(b.get(&format!("{api_path}?search=%25")).body.contains("No key matches"));
    // Bad credits: a form error, no key.
    let bad = b.post(&format!("{api_path}/keys"), &[("csrf_token", &t), ("credits", "-3")]);
    assert_eq!(bad.status, 400);

    // Disabled from the dashboard: the API answers DISABLED at once; enabled again.
    let off =
        b.post(&format!("/dashboard/keys/{key_id}/enabled"), &[("csrf_token", &t), ("enabled", "false")]);
    assert_eq!(off.status, 303);
    assert_eq!(verify(&secret), "DISABLED");
    b.post(&format!("/dashboard/keys/{key_id}/enabled"), &[("csrf_token", &t), ("enabled", "true")]);
    assert_eq!(verify(&secret), "VALID");
    // The audit log names the session's root key as the actor.
    let actor = s.state.rbac.authenticate(&s.root_key).unwrap().root_key_id.clone();
    assert!(s.count("audit_events", &format!("action = 'key.update' AND actor_id = '{actor}'")) >= 2);
    // Deleted: NOT_FOUND, and back to the API.
    let gone = b.post(&format!("/dashboard/keys/{key_id}/delete"), &[("csrf_token", &t)]);
    assert_eq!((gone.status, gone.location()), (303, Some(api_path.as_str())));
    assert_eq!(verify(&secret), "NOT_FOUND");
    assert_eq!(b.get(&format!("/dashboard/keys/{key_id}")).status, 404);
    assert_eq!(b.get("/dashboard/apis/api_nowhere").status, 404);
}

#[test]
fn every_post_without_its_token_is_refused_and_changes_nothing() {
    let s = TestServer::start();
    let api =
        s.v2("apis.createApi", &json!({"name": "guarded"})).data()["apiId"].as_str().unwrap().to_string();
    let r = s.v2("keys.createKey", &json!({"apiId": api}));
    let (key_id, secret) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    // (The token is checked before anything is looked up.)
    let identity = "id_not_there";
    let other_root = s.state.rbac.create_root_key("default", &["api.*.read_key".to_string()]).unwrap().0.id;
    let root_keys = s.count("root_keys", "revoked_at IS NULL AND enabled");
    let portal = json!({"slug": "guarded", "displayName": "Guarded", "keyspaceId": api});
    let portal_id = s.v2("portal.createPortal", &portal).data()["portalId"].as_str().unwrap().to_string();
    let hook = json!({"url": "https://93.184.215.14/in", "events": ["key.deleted"]});
    let hook = s.v2("webhooks.createEndpoint", &hook).data()["endpointId"].as_str().unwrap().to_string();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let routes = [
        ("/dashboard/webhooks".to_string(), vec![("url", "https://93.184.215.14/x"), ("key.created", "on")]),
        (format!("/dashboard/webhooks/{hook}"), vec![("url", "https://93.184.215.14/y")]),
        (format!("/dashboard/webhooks/{hook}/enabled"), vec![("enabled", "false")]),
        (format!("/dashboard/webhooks/{hook}/rotate"), vec![]),
        (format!("/dashboard/webhooks/{hook}/delete"), vec![]),
        ("/dashboard/deliveries/whdl_not_there/replay".to_string(), vec![]),
        (
            "/dashboard/portals".to_string(),
            vec![("slug", "forged"), ("display_name", "x"), ("api_id", api.as_str())],
        ),
        (format!("/dashboard/portals/{portal_id}"), vec![("display_name", "forged")]),
        ("/dashboard/apis".to_string(), vec![("name", "forged api")]),
        (format!("/dashboard/apis/{api}/keys"), vec![("name", "forged key")]),
        (format!("/dashboard/keys/{key_id}/enabled"), vec![("enabled", "false")]),
        (format!("/dashboard/keys/{key_id}/delete"), vec![]),
        (format!("/dashboard/keys/{key_id}/credits"), vec![("remaining", "1")]),
        (format!("/dashboard/keys/{key_id}/access"), vec![("permissions", "forged"), ("roles", "")]),
        (format!("/dashboard/keys/{key_id}/reroll"), vec![]),
        (format!("/dashboard/keys/{key_id}/reveal"), vec![]),
        ("/dashboard/permissions".to_string(), vec![("name", "forged.perm")]),
        ("/dashboard/roles".to_string(), vec![("name", "forged-role")]),
        ("/dashboard/identities".to_string(), vec![("externalId", "forged")]),
        (format!("/dashboard/identities/{identity}"), vec![("meta", "{}")]),
        (
            "/dashboard/ratelimits".to_string(),
            vec![("namespace", "ns"), ("identifier", "x"), ("limit", "1"), ("duration", "1000")],
        ),
        ("/dashboard/ratelimits/delete".to_string(), vec![("namespace", "ns"), ("identifier", "x")]),
        ("/dashboard/ratelimits/algorithm".to_string(), vec![("namespace", "ns"), ("algorithm", "sliding")]),
        ("/dashboard/root-keys".to_string(), vec![("*", "on")]),
        (format!("/dashboard/root-keys/{other_root}/enabled"), vec![("enabled", "false")]),
        (format!("/dashboard/root-keys/{other_root}/reroll"), vec![]),
        (format!("/dashboard/root-keys/{other_root}/delete"), vec![]),
        ("/dashboard/logout".to_string(), vec![]),
    ];
    for (path, fields) in &routes {
        for token in [None, Some("forged")] {
            let mut form = fields.clone();
            if let Some(t) = token {
                form.push(("csrf_token", t));
            }
            let p = b.post(path, &form);
            assert_eq!(p.status, 403, "{path} {token:?}: {}", p.body);
            assert_secure_headers(&p);
        }
    }
    assert_eq!(
        s.v2("keys.verifyKey", &json!({"key": secret})).data()["code"],
        "VALID",
        "not disabled nor deleted"
    );
    assert_eq!(s.count("apis", "1 = 1"), 1, "no API created");
    assert_eq!(s.count("keys", "1 = 1"), 1, "no key created");
    for table in ["permissions", "roles", "identities", "ratelimit_overrides"] {
        assert_eq!(s.count(table, "1 = 1"), 0, "nothing in {table}");
    }
    assert_eq!(
        s.count("root_keys", "revoked_at IS NULL AND enabled"),
        root_keys,
        "no root key made or changed"
    );
    assert_eq!(s.count("portals", "display_name = 'Guarded' AND enabled"), 1, "no portal made or changed");
    assert_eq!(
        s.count("webhook_endpoints", "url = 'https://93.184.215.14/in' AND enabled"),
        1,
        "no endpoint made or changed"
    );
    assert_eq!(s.count("audit_events", "action LIKE 'webhook.%'"), 1, "only the API's create");
    assert_eq!(b.get("/dashboard").status, 200, "still signed in");
}

#[test]
fn portals_are_created_and_edited_from_the_dashboard() {
    let s = TestServer::start();
    let api =
        s.v2("apis.createApi", &json!({"name": "storefront"})).data()["apiId"].as_str().unwrap().to_string();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let page = b.get("/dashboard/portals");
    assert_eq!(page.status, 200);
    assert_secure_headers(&page);
    assert!(page.body.contains(&format!("<option value=\"{api}\">")), "the API to choose");
    let csrf = page.csrf();
    let form = [
        ("csrf_token", csrf.as_str()),
        ("slug", "acme"),
        ("display_name", "Acme keys"),
        ("api_id", api.as_str()),
        ("primary_color", "#123456"),
    ];
    let created = b.post("/dashboard/portals", &form);
    assert_eq!(created.status, 303, "{}", created.body);
    let got = s.v2("portal.getPortal", &json!({"portal": "acme"})).data().clone();
    assert_eq!(
        (got["displayName"].as_str(), got["branding"]["primaryColor"].as_str()),
        (Some("Acme keys"), Some("#123456"))
    );
    // A second portal of the same API: a readable 409, nothing made.
    let again =
        [("csrf_token", csrf.as_str()), ("slug", "other"), ("display_name", "x"), ("api_id", api.as_str())];
    let refused = b.post("/dashboard/portals", &again);
    assert!(refused.status == 400 || refused.status == 409, "{}", refused.status);
    assert_eq!(s.count("portals", "1=1"), 1);
    // Edited: renamed, colour cleared, disabled.
    let id = got["id"].as_str().unwrap();
    let edit =
        [("csrf_token", csrf.as_str()), ("display_name", "Acme"), ("logo_url", ""), ("primary_color", "")];
    assert_eq!(b.post(&format!("/dashboard/portals/{id}"), &edit).status, 303);
    let got = s.v2("portal.getPortal", &json!({"portal": id})).data().clone();
    assert_eq!((got["displayName"].as_str(), got["enabled"].as_bool()), (Some("Acme"), Some(false)));
    assert!(got.get("branding").is_none(), "{got}");
    let listed = b.get("/dashboard/portals");
    assert!(listed.body.contains("/portal/acme") && listed.body.contains("disabled"));
    // A bad colour: a readable 400, nothing changed.
    let bad = [
        ("csrf_token", csrf.as_str()),
        ("display_name", "Acme"),
        ("primary_color", "red"),
        ("enabled", "on"),
    ];
    assert_eq!(b.post(&format!("/dashboard/portals/{id}"), &bad).status, 400);
    assert_eq!(s.v2("portal.getPortal", &json!({"portal": id})).data()["enabled"], json!(false));
}

/// The secret in a "created" page.
fn shown_secret(page: &Page) -> String {
    let marker = r#"id="secret" type="text" readonly value=""#;
    let at = page.body.find(marker).expect("a secret") + marker.len();
    page.body[at..].split('"').next().unwrap().to_string()
}

#[test]
fn root_keys_are_managed_from_the_dashboard() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let list = b.get("/dashboard/root-keys");
    assert_eq!(list.status, 200);
    assert_secure_headers(&list);
    assert!(list.body.contains("the key you signed in with"), "no actions on its own row");
    let t = list.csrf();

    // Created with the picker and a permission written out: the secret shown once, and it works.
    let made = b.post(
        "/dashboard/root-keys",
        &[
            ("csrf_token", &t),
            ("name", "ci-bot"),
            ("rootkey.*.read_key", "on"),
            ("more", "api.api_1.read_key"),
        ],
    );
    assert_eq!(made.status, 200, "{}", made.body);
    assert_secure_headers(&made);
    let secret = shown_secret(&made);
    let listed = s.v2_as(&secret, "rootKeys.listKeys", &json!({})).data().clone();
    let mine = listed.as_array().unwrap().iter().find(|k| k["name"] == "ci-bot").unwrap().clone();
    let id = mine["keyId"].as_str().unwrap().to_string();
    assert_eq!(mine["permissions"], json!(["rootkey.*.read_key", "api.api_1.read_key"]));
    let page = b.get("/dashboard/root-keys");
    assert!(page.body.contains(&id) && page.body.contains("ci-bot"), "{}", page.body);
    assert!(!page.body.contains(&secret), "the secret is shown only once");

    // Disabled (refused at once), enabled, rerolled (the old one stops, the new one works).
    let off =
        b.post(&format!("/dashboard/root-keys/{id}/enabled"), &[("csrf_token", &t), ("enabled", "false")]);
    assert_eq!(off.status, 303);
    s.v2_as(&secret, "rootKeys.listKeys", &json!({})).assert_problem(403, "unkey/authorization/forbidden");
    assert!(b.get("/dashboard/root-keys").body.contains("(disabled)"));
    b.post(&format!("/dashboard/root-keys/{id}/enabled"), &[("csrf_token", &t), ("enabled", "true")]);
    s.v2_as(&secret, "rootKeys.listKeys", &json!({})).data();
    let rerolled = b.post(&format!("/dashboard/root-keys/{id}/reroll"), &[("csrf_token", &t)]);
    assert_eq!(rerolled.status, 200, "{}", rerolled.body);
    let new_secret = shown_secret(&rerolled);
    s.v2_as(&secret, "rootKeys.listKeys", &json!({})).assert_problem(403, "unkey/authorization/forbidden");
    let new_id = s.v2_as(&new_secret, "rootKeys.listKeys", &json!({})).data().as_array().unwrap().len();
    assert!(new_id >= 2);

    // A root key that may read only: the page shows, creating is refused with the reason.
    let mut reader = Browser::new(&s);
    assert_eq!(reader.login(&new_secret).status, 303);
    let rt = reader.get("/dashboard/root-keys").csrf();
    let refused = reader.post("/dashboard/root-keys", &[("csrf_token", &rt), ("*", "on")]);
    assert_eq!(refused.status, 403, "{}", refused.body);
    // Deleted from the first session: refused from then on.
    let new_key_id = s
        .v2("rootKeys.listKeys", &json!({}))
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "ci-bot" && k["expires"].is_null())
        .unwrap()["keyId"]
        .as_str()
        .unwrap()
        .to_string();
    let gone = b.post(&format!("/dashboard/root-keys/{new_key_id}/delete"), &[("csrf_token", &t)]);
    assert_eq!(gone.status, 303);
    s.v2_as(&new_secret, "rootKeys.listKeys", &json!({}))
        .assert_problem(401, "unkey/authentication/key_not_found");
    let events = s.count("audit_events", "action LIKE 'rootkey.%'");
    assert_eq!(events, 5, "create, update twice, reroll, delete");
}

#[test]
fn a_recoverable_key_is_revealed_once_by_a_post_and_audited() {
    let s = TestServer::start();
    let r = s.v2("keys.createKey", &json!({"apiId": "api_shop1", "recoverable": true}));
    let (id, secret) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    let plain =
        s.v2("keys.createKey", &json!({"apiId": "api_shop1"})).data()["keyId"].as_str().unwrap().to_string();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let page = b.get(&format!("/dashboard/keys/{id}"));
    assert!(!page.body.contains(&secret), "not before it is asked for");
    let t = page.csrf();
    let shown = b.post(&format!("/dashboard/keys/{id}/reveal"), &[("csrf_token", &t)]);
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_secure_headers(&shown);
    assert_eq!(shown.headers.get("cache-control").unwrap(), "no-store");
    assert_eq!(shown_secret(&shown), secret);
    assert_eq!(s.count("audit_events", &format!("action = 'key.decrypt' AND resource_id = '{id}'")), 1);
    assert!(!b.get(&format!("/dashboard/keys/{id}")).body.contains(&secret), "not on the page again");
    let none = b.post(&format!("/dashboard/keys/{plain}/reveal"), &[("csrf_token", &t)]);
    assert!(none.status == 200 && none.body.contains("not recoverable"), "{}", none.body);
    // A root key without decrypt_key: refused, nothing revealed or audited.
    let mut reader = Browser::new(&s);
    assert_eq!(reader.login(&s.root_key_with(&["api.*.read_key", "api.*.read_api"])).status, 303);
    let rt = reader.get(&format!("/dashboard/keys/{id}")).csrf();
    let refused = reader.post(&format!("/dashboard/keys/{id}/reveal"), &[("csrf_token", &rt)]);
    assert_eq!(refused.status, 403);
    assert!(!refused.body.contains(&secret));
    assert_eq!(s.count("audit_events", "action = 'key.decrypt'"), 1);
}

#[test]
fn a_read_only_root_key_sees_but_may_not_change() {
    let s = TestServer::start();
    let api =
        s.v2("apis.createApi", &json!({"name": "watched"})).data()["apiId"].as_str().unwrap().to_string();
    let key_id = s.v2("keys.createKey", &json!({"apiId": api})).data()["keyId"].as_str().unwrap().to_string();
    let perms = ["api.*.read_api", "api.*.read_key"].map(String::from);
    let (_, secret) = s.state.rbac.create_root_key(&s.workspace_id, &perms).unwrap();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(secret.expose()).status, 303);
    assert_eq!(b.get(&format!("/dashboard/apis/{api}")).status, 200);
    assert_eq!(b.get(&format!("/dashboard/keys/{key_id}")).status, 200);
    let t = token(&mut b);
    let p = b.post(&format!("/dashboard/keys/{key_id}/enabled"), &[("csrf_token", &t), ("enabled", "false")]);
    assert_eq!(p.status, 403);
    assert!(p.body.contains("api.*.update_key"), "{}", p.body);
    let p = b.post("/dashboard/apis", &[("csrf_token", &t), ("name", "another")]);
    assert_eq!(p.status, 403);
    assert!(p.body.contains("api.*.create_api"), "{}", p.body);
    assert!(!p.body.contains(secret.expose()));
}

#[test]
fn a_keys_credits_access_and_secret_change_from_its_page_and_the_audit_log_shows_it() {
    let s = TestServer::start();
    let api =
        s.v2("apis.createApi", &json!({"name": "billing"})).data()["apiId"].as_str().unwrap().to_string();
    let r = s.v2(
        "keys.createKey",
        &json!({"apiId": api, "credits": {"remaining": 2, "refill": {"interval": "daily", "amount": 2}},
                "ratelimits": [{"name": "requests", "limit": 10, "duration": 60_000, "autoApply": true}]}),
    );
    let (key_id, secret) =
        (r.data()["keyId"].as_str().unwrap().to_string(), r.data()["key"].as_str().unwrap().to_string());
    let verify = |secret: &str, perm: Option<&str>| {
        let mut body = json!({"key": secret});
        if let Some(p) = perm {
            body["permissions"] = json!(p);
        }
        s.v2("keys.verifyKey", &body).data().clone()
    };
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let key_path = format!("/dashboard/keys/{key_id}");
    let shown = b.get(&key_path);
    assert!(
        shown.body.contains("refilled to 2 every day")
            && shown.body.contains("requests: 10 per 60000 ms, auto"),
        "{}",
        shown.body
    );
    let t = shown.csrf();

    // Credits: set, then unlimited; a bad value changes nothing.
    assert_eq!(b.post(&format!("{key_path}/credits"), &[("csrf_token", &t), ("remaining", "7")]).status, 303);
    assert_eq!(verify(&secret, None)["credits"], 6);
    assert_eq!(
        b.post(&format!("{key_path}/credits"), &[("csrf_token", &t), ("remaining", "lots")]).status,
        400
    );
    assert_eq!(b.post(&format!("{key_path}/credits"), &[("csrf_token", &t), ("remaining", "")]).status, 303);
    assert!(verify(&secret, None).get("credits").is_none(), "unlimited");

    // Permissions and roles, one per line.
    s.v2("permissions.createRole", &json!({"name": "reader"}));
    let p = b.post(
        &format!("{key_path}/access"),
        &[("csrf_token", &t), ("permissions", "documents.read\ndocuments.write"), ("roles", "reader")],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(verify(&secret, Some("documents.write"))["code"], "VALID");
    let page = b.get(&key_path);
    assert!(page.body.contains("documents.read\ndocuments.write</textarea>"), "{}", page.body);
    assert!(page.body.contains(">reader</textarea>"));

    // Reroll: a new secret shown once; the old one is gone at once.
    let rolled = b.post(&format!("{key_path}/reroll"), &[("csrf_token", &t)]);
    assert_eq!(rolled.status, 200, "{}", rolled.body);
    let marker = r#"id="secret" type="text" readonly value=""#;
    let at = rolled.body.find(marker).unwrap() + marker.len();
    let fresh = rolled.body[at..].split('"').next().unwrap().to_string();
    assert_eq!(verify(&fresh, None)["code"], "VALID");
    assert_eq!(verify(&secret, None)["code"], "EXPIRED");

    // The audit log: every change, newest first, filterable.
    let log = b.get("/dashboard/audit");
    assert_eq!(log.status, 200);
    assert_secure_headers(&log);
    assert!(log.body.contains("key.update") && log.body.contains(&key_id), "{}", log.body);
    let filtered = b.get("/dashboard/audit?action=api.create");
    assert!(filtered.body.contains(&api) && !filtered.body.contains("key.update"), "{}", filtered.body);
    assert!(b.get("/dashboard/audit?action=nothing.like.this").body.contains("No events match"));
}

#[test]
fn permissions_roles_identities_and_overrides_are_managed_from_the_dashboard() {
    let s = TestServer::start();
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let t = token(&mut b);
    assert!(b.get("/dashboard/permissions").body.contains("No permissions yet"));

    // Permissions: created, listed, deleted; a bad name is a 400 page.
    let p = b.post(
        "/dashboard/permissions",
        &[("csrf_token", &t), ("name", "documents.read"), ("description", "Read <docs>")],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    let listed = b.get("/dashboard/permissions");
    assert!(listed.body.contains("documents.read") && !listed.body.contains("<docs>"), "{}", listed.body);
    assert_eq!(b.post("/dashboard/permissions", &[("csrf_token", &t), ("name", "has space")]).status, 400);
    let perm_id = s.v2("permissions.getPermission", &json!({"permission": "documents.read"})).data()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        b.post(&format!("/dashboard/permissions/{perm_id}/delete"), &[("csrf_token", &t)]).status,
        303
    );
    assert_eq!(s.count("permissions", "1 = 1"), 0);

    // Roles: created with permissions (created too), edited, deleted.
    let r = b.post(
        "/dashboard/roles",
        &[("csrf_token", &t), ("name", "editor"), ("permissions", "docs.read\ndocs.write")],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let role = s.v2("permissions.getRole", &json!({"role": "editor"}));
    assert_eq!(role.data()["permissions"].as_array().unwrap().len(), 2, "{}", role.text);
    let role_id = role.data()["id"].as_str().unwrap().to_string();
    assert_eq!(
        b.post(
            &format!("/dashboard/roles/{role_id}/permissions"),
            &[("csrf_token", &t), ("permissions", "docs.read")]
        )
        .status,
        303
    );
    assert_eq!(
        s.v2("permissions.getRole", &json!({"role": "editor"})).data()["permissions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(b.get("/dashboard/roles").body.contains(">docs.read</textarea>"));
    assert_eq!(b.post(&format!("/dashboard/roles/{role_id}/delete"), &[("csrf_token", &t)]).status, 303);
    assert_eq!(s.count("roles", "1 = 1"), 0);

    // Identities: created (meta must be a JSON object), searched.
    assert_eq!(
        b.post(
            "/dashboard/identities",
            &[("csrf_token", &t), ("externalId", "acme"), ("meta", "{\"plan\":\"pro\"}")]
        )
        .status,
        303
    );
    assert_eq!(
        b.post("/dashboard/identities", &[("csrf_token", &t), ("externalId", "beta"), ("meta", "[1]")])
            .status,
        400
    );
    assert_eq!(s.v2("identities.getIdentity", &json!({"identity": "acme"})).data()["meta"]["plan"], "pro");
    assert!(b.get("/dashboard/identities").body.contains("acme"));
    // A search no id can match (ids are base58: no '-'), whatever their random letters.
    let none = b.get("/dashboard/identities?search=no-such");
    assert!(none.body.contains("No identities match"), "{}: {}", none.status, none.body);
    // An identity's meta and limits, edited.
    let acme = s.v2("identities.getIdentity", &json!({"identity": "acme"})).data()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let edit = format!("/dashboard/identities/{acme}");
    assert_secure_headers(&b.get(&edit));
    assert!(b.get(&edit).body.contains("plan"));
    let saved = b.post(
        &edit,
        &[
            ("csrf_token", &t),
            ("meta", "{\"plan\":\"team\"}"),
            ("ratelimits", "tokens 100 60000 auto\nsearch 5 1000 token_bucket"),
        ],
    );
    assert_eq!((saved.status, saved.location()), (303, Some(edit.as_str())), "{}", saved.body);
    let got = s.v2("identities.getIdentity", &json!({"identity": "acme"}));
    assert_eq!(got.data()["meta"]["plan"], "team");
    assert_eq!(got.data()["ratelimits"].as_array().unwrap().len(), 2, "{}", got.text);
    assert_eq!(got.data()["ratelimits"][0]["algorithm"], "token_bucket", "search: {}", got.text);
    assert_eq!(got.data()["ratelimits"][1]["algorithm"], "fixed", "tokens: {}", got.text);
    assert!(
        b.get(&edit).body.contains("search 5 1000 token_bucket\ntokens 100 60000 auto</textarea>"),
        "{}",
        b.get(&edit).body
    );
    for bad in ["tokens lots", "tokens 1 1000 leaky", "tokens 1 1000 sliding sliding"] {
        assert_eq!(b.post(&edit, &[("csrf_token", &t), ("ratelimits", bad)]).status, 400, "{bad}");
    }
    assert_eq!(
        s.v2("identities.getIdentity", &json!({"identity": "acme"})).data()["ratelimits"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "unchanged"
    );

    // Overrides: set in a namespace, applied by the next decision, deleted.
    assert_eq!(
        s.limit(json!({"namespace": "email", "identifier": "vip", "limit": 1, "duration": 60_000})).status,
        200
    );
    let set = b.post(
        "/dashboard/ratelimits",
        &[
            ("csrf_token", &t),
            ("namespace", "email"),
            ("identifier", "vip"),
            ("limit", "100"),
            ("duration", "60000"),
        ],
    );
    assert_eq!(
        (set.status, set.location()),
        (303, Some("/dashboard/ratelimits?namespace=email")),
        "{}",
        set.body
    );
    let d = s.limit(json!({"namespace": "email", "identifier": "vip", "limit": 1, "duration": 60_000}));
    assert_eq!(d.json["limit"], 100, "{}", d.text);
    let page = b.get("/dashboard/ratelimits?namespace=email");
    assert!(page.body.contains("<code>vip</code>"), "{}", page.body);
    assert_eq!(
        b.post(
            "/dashboard/ratelimits",
            &[
                ("csrf_token", &t),
                ("namespace", "email"),
                ("identifier", "x"),
                ("limit", "1"),
                ("duration", "5")
            ]
        )
        .status,
        400
    );
    assert_eq!(
        b.post(
            "/dashboard/ratelimits/delete",
            &[("csrf_token", &t), ("namespace", "email"), ("identifier", "vip")]
        )
        .status,
        303
    );
    let listed = b.get("/dashboard/ratelimits?namespace=email");
    assert!(listed.body.contains("No overrides"));
    assert!(
        listed.body.contains("/dashboard/ratelimits?namespace=email\">email</a>"),
        "the namespaces are listed"
    );
    assert_eq!(b.get("/dashboard/ratelimits?namespace=nowhere").status, 404);

    // The namespace's algorithm (API-v2.md §26): shown, changed, applied by the next
    // decision; an unknown one is a 400 that changes nothing.
    assert!(listed.body.contains("decided by <strong>fixed</strong>"), "{}", listed.body);
    let mut algorithm = |name: &str| {
        b.post(
            "/dashboard/ratelimits/algorithm",
            &[("csrf_token", &t), ("namespace", "email"), ("algorithm", name)],
        )
    };
    assert_eq!(algorithm("leaky").status, 400);
    let changed = algorithm("token_bucket");
    assert_eq!((changed.status, changed.location()), (303, Some("/dashboard/ratelimits?namespace=email")));
    let shown = b.get("/dashboard/ratelimits?namespace=email");
    assert!(shown.body.contains("decided by <strong>token_bucket</strong>"), "{}", shown.body);
    assert!(shown.body.contains(r#"<option value="token_bucket" selected>"#), "{}", shown.body);
    let ns = s.v2("ratelimit.getNamespace", &json!({"namespace": "email"}));
    assert_eq!(ns.data()["algorithm"], "token_bucket");
    for page in [
        "/dashboard/permissions",
        "/dashboard/roles",
        "/dashboard/identities",
        "/dashboard/ratelimits",
        "/dashboard/audit",
    ] {
        let p = b.get(page);
        assert_eq!(p.status, 200, "{page}");
        assert_secure_headers(&p);
        assert_eq!(p.body.matches("<h1").count(), 1, "{page}: one h1");
    }
}

#[test]
fn behind_a_proxy_prefix_links_and_cookies_use_it() {
    let db = std::sync::Arc::new(keygate_test_support::TestDb::fresh());
    let mut config = TestServer::config(&db.url);
    config.dashboard =
        Some(keygate_http::DashboardSettings { base: "/admin/keygate".into(), secure_cookies: true });
    let s = TestServer::start_with(config, db);
    let mut b = Browser::new(&s);
    // keygate still serves /dashboard; what it writes names the proxy's path.
    let p = b.get("/dashboard");
    assert_eq!(p.location(), Some("/admin/keygate/login"));
    let form = b.get("/dashboard/login");
    assert!(form.body.contains(r#"action="/admin/keygate/login""#), "{}", form.body);
    assert!(form.body.contains(r#"href="/admin/keygate/assets/app.css""#));
    let cookie = form.set_cookie("kg_login").unwrap();
    assert!(cookie.contains("Path=/admin/keygate") && cookie.contains("; Secure"), "{cookie}");
    let ok = b.post("/dashboard/login", &[("root_key", &s.root_key), ("csrf_token", &form.csrf())]);
    assert_eq!(ok.location(), Some("/admin/keygate"));
    assert!(ok.set_cookie("kg_session").unwrap().contains("Path=/admin/keygate; Secure"));
    assert!(b.get("/dashboard").body.contains(r#"href="/admin/keygate/apis""#));
    for missing in ["/dashboard/nowhere", "/dashboard/keys/key_missing"] {
        let p = b.get(missing);
        assert_eq!(p.status, 404);
        assert!(p.body.contains(r#"href="/admin/keygate""#), "{missing}: {}", p.body);
    }
    // A form that does not parse (a field given twice): refused, its page under the prefix.
    let bad = b.post("/dashboard/apis", &[("name", "one"), ("name", "two"), ("csrf_token", "x")]);
    assert_eq!(bad.status, 403);
    assert!(bad.body.contains(r#"href="/admin/keygate/assets/app.css""#), "{}", bad.body);
}

#[test]
#[ignore = "needs PostgreSQL: set KEYGATE_TEST_POSTGRES_URL and run with --include-ignored (.ci/run does)"]
fn the_store_unreachable_is_a_503_page_under_the_proxy_prefix() {
    let base = keygate_test_support::TestDb::postgres_url()
        .expect("KEYGATE_TEST_POSTGRES_URL must be set for this (ignored by default) test");
    let (proxy, url) = keygate_tests::proxy::proxied_postgres(&base);
    let db = std::sync::Arc::new(keygate_test_support::TestDb::postgres(&url));
    let mut config = TestServer::config(&db.url);
    config.pool.connect_timeout = std::time::Duration::from_millis(1_000);
    config.pool.statement_timeout = std::time::Duration::from_millis(1_000);
    config.dashboard =
        Some(keygate_http::DashboardSettings { base: "/admin/keygate".into(), secure_cookies: false });
    let s = TestServer::start_with(config, db);
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).location(), Some("/admin/keygate"));
    assert_eq!(b.get("/dashboard/apis").status, 200);
    proxy.cut();
    let p = b.get("/dashboard/apis");
    assert_eq!(p.status, 503, "{}", p.body);
    assert!(p.body.contains("could not be reached"), "{}", p.body);
    assert!(p.body.contains(r#"href="/admin/keygate/assets/app.css""#), "links under the prefix: {}", p.body);
    assert_secure_headers(&p);
    proxy.restore();
}

/// Waits (up to 10 s) until the endpoint's first delivery satisfies `done`; the delivery.
fn first_delivery(
    s: &TestServer,
    endpoint: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = s.v2("webhooks.listDeliveries", &json!({"endpointId": endpoint}));
        let d = r.data()[0].clone();
        if done(&d) || std::time::Instant::now() > deadline {
            return d;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn webhooks_are_managed_from_the_dashboard_and_their_deliveries_shown_escaped() {
    use keygate_test_support::receiver::{Answer, Receiver};
    let s = TestServer::start_hooked();
    let receiver = Receiver::start();
    let hostile = "<script>alert('answer')</script>";
    receiver.answer([Answer { body: hostile.into(), ..Answer::status(500) }, Answer::status(200)]);
    let mut b = Browser::new(&s);
    assert_eq!(b.login(&s.root_key).status, 303);
    let list = b.get("/dashboard/webhooks");
    assert_eq!(list.status, 200, "{}", list.body);
    assert_secure_headers(&list);
    let t = list.csrf();

    // Refused forms change nothing and say why.
    for (url, credits) in [("ftp://hooks.example.com/in", ""), (receiver.url.as_str(), "ninety")] {
        let form =
            [("csrf_token", t.as_str()), ("url", url), ("key.created", "on"), ("credits_low", credits)];
        let p = b.post("/dashboard/webhooks", &form);
        assert_eq!(p.status, 400, "{}", p.body);
    }
    assert_eq!(s.count("webhook_endpoints", "1 = 1"), 0, "nothing created");

    // Created: the secret shown once; listed with what the form said (escaped).
    let made = b.post(
        "/dashboard/webhooks",
        &[
            ("csrf_token", &t),
            ("url", &receiver.url),
            ("description", "<b>billing</b>"),
            ("key.created", "on"),
            ("key.deleted", "on"),
            ("credits_low", "90, 50"),
        ],
    );
    assert_eq!(made.status, 200, "{}", made.body);
    assert_secure_headers(&made);
    let secret = shown_secret(&made);
    assert!(secret.starts_with("whsec_"), "{secret}");
    let listed = s.v2("webhooks.listEndpoints", &json!({})).data()[0].clone();
    let id = listed["endpointId"].as_str().unwrap().to_string();
    assert_eq!(listed["events"], json!(["key.created", "key.deleted"]));
    assert_eq!(listed["description"], json!("<b>billing</b>"));
    assert_eq!(listed["thresholds"], json!({"creditsLow": [50, 90], "expiringDays": [7, 1]}));
    let page = b.get("/dashboard/webhooks");
    assert!(page.body.contains(&id) && page.body.contains("&#60;b&#62;billing&#60;/b&#62;"), "{}", page.body);
    assert!(!page.body.contains("<b>billing") && !page.body.contains(&secret));

    // A key created: delivered, answered 500 with a hostile body, shown escaped on the
    // delivery's page; replayed from there, delivered again with the same id.
    let api = s.v2("apis.createApi", &json!({"name": "hooked"})).data()["apiId"].clone();
    s.v2("keys.createKey", &json!({"apiId": api}));
    let first = receiver.wait_for(1);
    assert_eq!(first.len(), 1);
    let delivery = first_delivery(&s, &id, |d| d["attempts"] == 1);
    let delivery_id = delivery["deliveryId"].as_str().unwrap().to_string();
    let endpoint_page = b.get(&format!("/dashboard/webhooks/{id}"));
    assert_eq!(endpoint_page.status, 200);
    assert!(endpoint_page.body.contains(&delivery_id) && endpoint_page.body.contains("key.created"));
    let failed_only = b.get(&format!("/dashboard/webhooks/{id}?status=succeeded"));
    assert!(!failed_only.body.contains(&delivery_id), "the status filter applies");
    let shown = b.get(&format!("/dashboard/deliveries/{delivery_id}"));
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_secure_headers(&shown);
    assert!(shown.body.contains("HTTP 500"), "{}", shown.body);
    assert!(shown.body.contains("&#60;script&#62;alert("), "{}", shown.body);
    assert!(!shown.body.contains(hostile), "the receiver's answer is escaped");
    let replayed = b.post(&format!("/dashboard/deliveries/{delivery_id}/replay"), &[("csrf_token", &t)]);
    assert_eq!(replayed.status, 303);
    let both = receiver.wait_for(2);
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].header("webhook-id"), first[0].header("webhook-id"));
    assert_eq!(both[1].body, first[0].body);
    assert_eq!(first_delivery(&s, &id, |d| d["status"] == "succeeded")["status"], "succeeded");
    assert!(b.get(&format!("/dashboard/deliveries/{delivery_id}")).body.contains("HTTP 200"));

    // Edited (an emptied threshold field keeps its values), disabled, rotated, deleted.
    let p = b.post(
        &format!("/dashboard/webhooks/{id}"),
        &[
            ("csrf_token", &t),
            ("url", &receiver.url),
            ("description", ""),
            ("key.rerolled", "on"),
            ("expiring_days", "3"),
        ],
    );
    assert_eq!(p.status, 303, "{}", p.body);
    let e = s.v2("webhooks.getEndpoint", &json!({"endpointId": id})).data().clone();
    assert_eq!(e["events"], json!(["key.rerolled"]));
    assert!(e.get("description").is_none(), "{e}");
    assert_eq!(e["thresholds"], json!({"creditsLow": [50, 90], "expiringDays": [3]}));
    let off =
        b.post(&format!("/dashboard/webhooks/{id}/enabled"), &[("csrf_token", &t), ("enabled", "false")]);
    assert_eq!(off.status, 303);
    assert_eq!(s.v2("webhooks.getEndpoint", &json!({"endpointId": id})).data()["enabled"], false);
    assert!(b.get(&format!("/dashboard/webhooks/{id}")).body.contains("Disabled"));
    let rotated = b.post(&format!("/dashboard/webhooks/{id}/rotate"), &[("csrf_token", &t)]);
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new_secret = shown_secret(&rotated);
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    assert!(!b.get(&format!("/dashboard/webhooks/{id}")).body.contains(&new_secret));

    // A root key that may only read endpoints sees them, and may not change them.
    let perms = ["webhook.*.read_endpoint".to_string()];
    let (_, reader_key) = s.state.rbac.create_root_key(&s.workspace_id, &perms).unwrap();
    let mut reader = Browser::new(&s);
    assert_eq!(reader.login(reader_key.expose()).status, 303);
    assert_eq!(reader.get(&format!("/dashboard/webhooks/{id}")).status, 200);
    let rt = token(&mut reader);
    let refused = reader.post(&format!("/dashboard/webhooks/{id}/delete"), &[("csrf_token", &rt)]);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("webhook.*.delete_endpoint"), "{}", refused.body);

    let gone = b.post(&format!("/dashboard/webhooks/{id}/delete"), &[("csrf_token", &t)]);
    assert_eq!(gone.status, 303);
    s.v2("webhooks.getEndpoint", &json!({"endpointId": id}))
        .assert_problem(404, "keygate/data/webhook_endpoint_not_found");
    assert_eq!(b.get(&format!("/dashboard/webhooks/{id}")).status, 404);
    assert_eq!(b.get(&format!("/dashboard/deliveries/{delivery_id}")).status, 404);
    let audited = s.count("audit_events", "action LIKE 'webhook.%'");
    assert_eq!(audited, 6, "create, replay, update twice, rotate, delete");
}
