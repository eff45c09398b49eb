//! The dashboard in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
//! which `.ci/run` installs): a user, with the keyboard only (Enter on buttons and links,
//! Space on checkboxes), logs in, creates an API and a key, disables it (a verification
//! then answers DISABLED), sets its credits, rerolls it, sets an override, reveals a
//! recoverable key, creates a root key and reads the audit log. On every page: no console
//! error (CSP violations included), one `h1`, a label for every form control; a screenshot
//! of each main page (written to `KEYGATE_SCREENSHOTS`, e.g. `docs/screenshots`, when set).
//! `#[ignore]`d without a browser: `cargo test -p keygate-tests --test suite -- dashboard_browser::
//! --include-ignored` runs it.
#![allow(clippy::unwrap_used)]

use keygate_domain::Clock;
use keygate_tests::TestServer;
use keygate_tests::webdriver::{Browser, ENTER};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Run<'a> {
    s: &'a TestServer,
    b: Browser,
    shots: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    /// Page changes waited for so far (`new_page`'s marks).
    waits: std::cell::Cell<u64>,
}

impl<'a> Run<'a> {
    /// A browser on `s`; screenshots go to `KEYGATE_SCREENSHOTS` when set.
    fn start(s: &'a TestServer) -> Self {
        let (shots, tmp) = match std::env::var("KEYGATE_SCREENSHOTS") {
            Ok(dir) => (PathBuf::from(dir), None),
            Err(_) => {
                let t = tempfile::tempdir().unwrap();
                (t.path().to_path_buf(), Some(t))
            }
        };
        std::fs::create_dir_all(&shots).unwrap();
        Run { s, b: Browser::start(), shots, _tmp: tmp, waits: Default::default() }
    }

    fn url(&self, path: &str) -> String {
        self.s.url(&format!("/dashboard{path}"))
    }

    /// Waits until the browser is at `path` (after a form's redirect).
    fn arrived(&self, path: &str) {
        let want = self.url(path);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.b.url() != want {
            assert!(Instant::now() < deadline, "at {} instead of {want}", self.b.url());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The checks every page passes, and its screenshot when `name` is given.
    fn check(&self, name: Option<&str>) {
        let page = self.b.url();
        assert_eq!(self.b.find_all("h1").len(), 1, "{page}: one h1");
        let unlabelled = self.b.script(
            "return Array.from(document.querySelectorAll('input:not([type=hidden]),textarea,select'))\
             .filter(e => !(e.id && document.querySelector('label[for=\"' + e.id + '\"]')) && !e.getAttribute('aria-label'))\
             .map(e => e.name);",
        );
        assert_eq!(unlabelled, json!([]), "{page}: form controls without a label");
        let errors: Vec<(String, String)> = self
            .b
            .console()
            .into_iter()
            .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
            .collect();
        assert!(errors.is_empty(), "{page}: console errors {errors:?}");
        assert!(!self.b.source().contains(&self.s.root_key), "{page}: the root key is in the page");
        if let Some(name) = name {
            let png = self.b.screenshot();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}: a PNG");
            std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
        }
    }

    fn fill(&self, css: &str, text: &str) {
        let e = self.b.find(css);
        self.b.type_into(&e, text);
    }

    /// Presses Enter on a form's button (or a link), as a keyboard user does, and waits for
    /// the page it leads to (a new document, even when its address is the same).
    fn press(&self, css: &str) {
        let e = self.b.find(css);
        self.new_page(|| self.b.type_into(&e, ENTER));
    }

    /// Does `act` and waits until it has led to another document, loaded (one the back/forward
    /// cache restores included: each wait marks the document it leaves with its own number).
    fn new_page(&self, act: impl FnOnce()) {
        let mark = self.waits.get() + 1;
        self.waits.set(mark);
        self.b.script(&format!("window.__kgMark = {mark}; return null;"));
        act();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.b.script(&format!("return window.__kgMark === {mark};")) == json!(true)
            || self.b.script("return document.readyState;") != json!("complete")
        {
            assert!(Instant::now() < deadline, "no new page: {}", self.b.url());
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

#[test]
#[ignore = "needs chromium and chromium-driver (Debian packages; .ci/run installs them) and runs with --include-ignored"]
fn a_user_runs_keygate_from_the_browser() {
    let s = TestServer::start();
    let r = Run::start(&s);
    let verify = |secret: &str| s.v2("keys.verifyKey", &json!({"key": secret})).data().clone();

    // Signed out: the login page, its field focused; the keyboard alone logs in.
    r.b.goto(&r.url(""));
    r.arrived("/login");
    r.check(Some("login"));
    let focused = r.b.active();
    assert_eq!(r.b.attribute(&focused, "id").as_deref(), Some("root_key"));
    r.b.type_into(&focused, &format!("{}{ENTER}", s.root_key));
    r.arrived("");
    r.check(None);

    // An API, then a key in it: its secret shown once, with a working copy button.
    r.b.goto(&r.url("/apis"));
    r.check(Some("apis"));
    r.fill("#name", "storefront");
    r.press("form[action$='/apis'] button[type=submit]");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !r.b.url().contains("/dashboard/apis/api_") {
        assert!(Instant::now() < deadline, "no API page: {}", r.b.url());
        std::thread::sleep(Duration::from_millis(50));
    }
    let api_page = r.b.url();
    r.fill("#key_name", "checkout");
    r.fill("#key_external", "acme");
    r.press("form[action$='/keys'] button[type=submit]");
    let secret_field = r.b.find("#secret");
    let secret = r.b.attribute(&secret_field, "value").unwrap();
    assert_eq!(verify(&secret)["code"], "VALID");
    assert_eq!(
        r.b.script("return document.querySelector('button[data-copy-target]').hidden;"),
        json!(false),
        "app.js ran"
    );
    r.check(Some("key-created"));

    // Listed in its API; its page.
    r.b.goto(&api_page);
    r.check(Some("api"));
    let key_id = s.v2("keys.whoami", &json!({"key": secret})).data()["keyId"].as_str().unwrap().to_string();
    assert!(r.b.source().contains(&key_id));
    r.press(&format!("a[href$='/keys/{key_id}']"));
    r.arrived(&format!("/keys/{key_id}"));
    r.check(Some("key"));

    // Disabled: the API answers DISABLED at once.
    r.press("form[action$='/enabled'] button");
    r.arrived(&format!("/keys/{key_id}"));
    assert_eq!(verify(&secret)["code"], "DISABLED");
    r.press("form[action$='/enabled'] button");
    r.arrived(&format!("/keys/{key_id}"));
    assert_eq!(verify(&secret)["code"], "VALID");

    // Credits.
    r.fill("#remaining", "5");
    r.press("form[action$='/credits'] button");
    r.arrived(&format!("/keys/{key_id}"));
    assert_eq!(verify(&secret)["credits"], 4);

    // Reroll: a new secret; the old one stops working.
    r.press("form[action$='/reroll'] button");
    let fresh = r.b.attribute(&r.b.find("#secret"), "value").unwrap();
    assert_ne!(fresh, secret);
    assert_eq!(verify(&fresh)["code"], "VALID");
    assert_eq!(verify(&secret)["code"], "EXPIRED");
    r.check(None);

    // An override in a namespace.
    s.limit(json!({"namespace": "email", "identifier": "vip", "limit": 1, "duration": 60_000}));
    r.b.goto(&r.url("/ratelimits?namespace=email"));
    r.fill("#identifier", "vip");
    r.fill("#limit", "100");
    r.press("form[action$='/ratelimits'][method=post] button");
    r.arrived("/ratelimits?namespace=email");
    r.check(Some("ratelimits"));
    assert_eq!(
        s.limit(json!({"namespace": "email", "identifier": "vip", "limit": 1, "duration": 60_000})).json["limit"],
        100
    );

    // The other pages, and the audit log of all this.
    for (path, name) in [("/identities", "identities"), ("/permissions", "permissions"), ("/roles", "roles")]
    {
        r.b.goto(&r.url(path));
        r.check(Some(name));
    }
    // A recoverable key revealed from its page (a POST), not in the page once left.
    let sealed = s.v2("keys.createKey", &json!({"apiId": "api_vault1", "recoverable": true})).data().clone();
    let (sealed_id, sealed_key) = (sealed["keyId"].as_str().unwrap(), sealed["key"].as_str().unwrap());
    r.b.goto(&r.url(&format!("/keys/{sealed_id}")));
    r.press("form[action$='/reveal'] button");
    assert_eq!(r.b.attribute(&r.b.find("#secret"), "value").as_deref(), Some(sealed_key));
    r.check(Some("key-revealed"));
    // Back to the key's page (not cached: `no-store`), and reloaded: it is not there.
    r.new_page(|| drop(r.b.script("history.back(); return null;")));
    r.arrived(&format!("/keys/{sealed_id}"));
    r.new_page(|| drop(r.b.script("location.reload(); return null;")));
    r.arrived(&format!("/keys/{sealed_id}"));
    assert!(!r.b.source().contains(sealed_key), "the revealed key is not in the page again");

    // A root key with a permission picked and one written out: shown once, it works.
    r.b.goto(&r.url("/root-keys"));
    r.check(Some("root-keys"));
    r.fill("#name", "ci-bot");
    // Space ticks a checkbox.
    r.b.type_into(&r.b.find("input[type=checkbox][name='rootkey.*.read_key']"), " ");
    r.fill("#more", "api.*.read_key");
    r.press("form[action$='/root-keys'] button[type=submit]");
    let root_secret = r.b.attribute(&r.b.find("#secret"), "value").unwrap();
    r.check(Some("root-key-created"));
    let listed = s.v2_as(&root_secret, "rootKeys.listKeys", &json!({})).data().clone();
    let bot = listed.as_array().unwrap().iter().find(|k| k["name"] == "ci-bot").unwrap().clone();
    assert_eq!(bot["permissions"], json!(["rootkey.*.read_key", "api.*.read_key"]));
    r.b.goto(&r.url("/root-keys"));
    assert!(r.b.source().contains(bot["keyId"].as_str().unwrap()));
    assert!(!r.b.source().contains(&root_secret), "the new root key is shown once only");
    r.b.goto(&r.url("/audit"));
    r.check(Some("audit"));
    let log = r.b.source();
    for action in ["api.create", "key.create", "key.update", "ratelimit_override.set", "rootkey.create"] {
        assert!(log.contains(action), "the audit log shows {action}");
    }

    // The overview, once the verifications above are written: a chart, and counts.
    s.state.analytics.flush_analytics().unwrap();
    r.b.goto(&r.url(""));
    assert!(r.b.find_all("svg.chart rect").len() >= 2, "a chart");
    r.check(Some("overview"));
}

/// Waits until the browser is at `url`.
fn at(b: &Browser, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.url() != url {
        assert!(Instant::now() < deadline, "at {} instead of {url}", b.url());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs chromium and chromium-driver (Debian packages; .ci/run installs them) and runs with --include-ignored"]
fn an_end_user_manages_their_keys_in_the_customer_portal() {
    let s = TestServer::start();
    let r = Run::start(&s);
    let verify = |secret: &str| s.v2("keys.verifyKey", &json!({"key": secret})).data().clone();
    // The team's side: an API, its portal, a key of one of its users, a session's link.
    let api = s.v2("apis.createApi", &json!({"name": "storefront"})).data()["apiId"].clone();
    let portal =
        json!({"slug": "acme", "displayName": "Acme API", "keyspaceId": api, "primaryColor": "#7a1f5c"});
    assert_eq!(s.v2("portal.createPortal", &portal).status, 200);
    let key = s
        .v2("keys.createKey", &json!({"apiId": api, "externalId": "user_a", "name": "production"}))
        .data()
        .clone();
    let (key_id, secret) =
        (key["keyId"].as_str().unwrap().to_string(), key["key"].as_str().unwrap().to_string());
    assert_eq!(verify(&secret)["code"], "VALID");
    s.state.analytics.flush_analytics().unwrap();
    let back = s.url("/v2/liveness");
    let body = json!({"portal": "acme", "externalId": "user_a", "scopes": ["keys:read", "keys:reroll", "analytics:read"], "returnUrl": back});
    let link = s.v2("portal.createSession", &body).data()["url"].as_str().unwrap().to_string();

    // The link: the code redeemed into an HttpOnly cookie, gone from the address bar.
    r.b.goto(&link);
    at(&r.b, &s.url("/portal/acme"));
    r.check(Some("portal"));
    assert_eq!(r.b.script("return document.cookie;"), json!(""), "the session cookie is HttpOnly");
    assert!(r.b.source().contains(&key_id) && r.b.source().contains("production"));
    assert!(r.b.find_all("svg.chart").len() >= 2, "a chart in total and one per key");
    let drawn = r.b.script("return Array.from(document.querySelectorAll('svg.chart rect.valid')).filter(e => e.getAttribute('height') !== '0').length;");
    assert_eq!(drawn, json!(2), "the verification is drawn in the total and in the key's chart");

    // Rolled with the keyboard: the new key shown once, verifying; the old one expires in 24 h.
    r.press("form[action$='/reroll'] button");
    let fresh = r.b.attribute(&r.b.find("#secret"), "value").unwrap();
    r.check(Some("portal-key-rolled"));
    assert_eq!(verify(&fresh)["code"], "VALID");
    assert_eq!(verify(&secret)["code"], "VALID", "the old key works until its expiry");
    let old = s.v2("keys.getKey", &json!({"keyId": key_id})).data()["expires"].as_i64().unwrap();
    let now = s.clock.now_ms() as i64;
    assert!((now + 86_400_000 - 5_000..=now + 86_400_000 + 5_000).contains(&old), "{old}");
    r.b.goto(&s.url("/portal/acme"));
    assert!(!r.b.source().contains(&fresh), "the new key is not in the page again");
    r.check(None);

    // The return link, with the keyboard.
    r.press("nav a");
    at(&r.b, &back);

    // The link again: a clear "expired" page.
    r.b.goto(&link);
    assert_eq!(r.b.find_all("h1").len(), 1);
    assert!(r.b.source().contains("This link has expired"));
}

#[test]
#[ignore = "needs chromium and chromium-driver (Debian packages; .ci/run installs them) and runs with --include-ignored"]
fn webhooks_are_managed_and_their_deliveries_read_from_the_browser() {
    use keygate_test_support::receiver::{Answer, Receiver};
    let s = TestServer::start_hooked();
    let receiver = Receiver::start();
    let hostile = "<img src=x onerror=\"document.title='owned'\"><script>document.title='owned'</script>";
    receiver.answer([Answer { body: hostile.into(), ..Answer::status(500) }, Answer::status(204)]);
    let r = Run::start(&s);
    r.b.goto(&r.url("/login"));
    r.b.type_into(&r.b.active(), &format!("{}{ENTER}", s.root_key));
    r.arrived("");

    // An endpoint, with the keyboard: its secret shown once.
    r.b.goto(&r.url("/webhooks"));
    r.check(Some("webhooks"));
    r.fill("#url", &receiver.url);
    r.fill("#description", "billing");
    r.b.type_into(&r.b.find("input[type=checkbox][name='key.created']"), " ");
    r.fill("#credits_low", "90");
    r.press("form[action$='/webhooks'] button[type=submit]");
    let secret = r.b.attribute(&r.b.find("#secret"), "value").unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    r.check(Some("webhook-created"));
    let e = s.v2("webhooks.listEndpoints", &json!({})).data()[0].clone();
    let id = e["endpointId"].as_str().unwrap().to_string();
    assert_eq!(e["events"], json!(["key.created"]));
    assert_eq!(e["thresholds"]["creditsLow"], json!([90]));

    // A key created: the delivery fails (500, a hostile answer) and its page shows the
    // answer as text: nothing in it runs.
    let api = s.v2("apis.createApi", &json!({"name": "hooked"})).data()["apiId"].clone();
    s.v2("keys.createKey", &json!({"apiId": api}));
    let first = receiver.wait_for(1);
    assert_eq!(first.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    let delivery = loop {
        let d = s.v2("webhooks.listDeliveries", &json!({"endpointId": id})).data()[0].clone();
        if d["attempts"] == 1 {
            break d;
        }
        assert!(Instant::now() < deadline, "no attempt recorded: {d}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let delivery_id = delivery["deliveryId"].as_str().unwrap().to_string();
    r.b.goto(&r.url(&format!("/webhooks/{id}")));
    r.check(Some("webhook"));
    r.press(&format!("a[href$='/deliveries/{delivery_id}']"));
    r.arrived(&format!("/deliveries/{delivery_id}"));
    r.check(Some("delivery"));
    assert_eq!(r.b.script("return document.querySelector('pre').textContent;"), json!(hostile));
    assert!(r.b.find_all("pre *").is_empty(), "the answer is text, not markup");
    assert_ne!(r.b.script("return document.title;"), json!("owned"));

    // Replayed: sent again with the same id; the page shows the new attempt.
    r.press("form[action$='/replay'] button");
    r.arrived(&format!("/deliveries/{delivery_id}"));
    let both = receiver.wait_for(2);
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].header("webhook-id"), first[0].header("webhook-id"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !r.b.source().contains("HTTP 204") {
        assert!(Instant::now() < deadline, "the replay's answer is not shown");
        std::thread::sleep(Duration::from_millis(100));
        r.new_page(|| drop(r.b.script("location.reload(); return null;")));
    }

    // Rotated (the new secret shown once), disabled, deleted.
    r.b.goto(&r.url(&format!("/webhooks/{id}")));
    r.press("form[action$='/rotate'] button");
    let rotated = r.b.attribute(&r.b.find("#secret"), "value").unwrap();
    assert!(rotated.starts_with("whsec_") && rotated != secret);
    r.check(Some("webhook-rotated"));
    r.b.goto(&r.url(&format!("/webhooks/{id}")));
    r.press("form[action$='/enabled'] button");
    r.arrived(&format!("/webhooks/{id}"));
    assert_eq!(s.v2("webhooks.getEndpoint", &json!({"endpointId": id})).data()["enabled"], false);
    r.press("form[action$='/delete'] button");
    r.arrived("/webhooks");
    s.v2("webhooks.getEndpoint", &json!({"endpointId": id}))
        .assert_problem(404, "keygate/data/webhook_endpoint_not_found");
    r.check(None);
}
