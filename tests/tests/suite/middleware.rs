//! `keygate-client`'s middleware in real services: an axum router behind the tower layer
//! and an actix-web app behind the middleware, each with the remote back end (the keygate
//! server over HTTP) and the embedded one (keygate in the test's process, on the server's
//! database and Redis). Missing key 401, unknown 401, lacking permission 403, over the rate
//! limit 429 with its headers, a valid key reaching the handler with the extractor filled,
//! and a permission granted through the server's API seen by the next request. Plus the
//! axum example, built by cargo, run and called.
#![allow(clippy::unwrap_used)]

use keygate_client::embedded::Embedded;
use keygate_client::keys::{CreateKeyRequest, CreditsRequest, VerifyRatelimit};
use keygate_client::{Client, Guard, VerifiedKey, Verifier};
use keygate_tests::TestServer;
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
enum Stack {
    Axum,
    Actix,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Back {
    Remote,
    Embedded,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The guard of `back` for the keygate `s`.
fn guard(s: &TestServer, back: Back) -> Guard {
    let verifier = match back {
        Back::Remote => Verifier::remote(Client::new(&s.base, &s.root_key).unwrap()),
        Back::Embedded => {
            let mut b = Embedded::builder(&s.db.url);
            if let Some(redis) = keygate_test_support::redis_url() {
                b = b
                    .redis_url(redis)
                    .redis_cluster(keygate_test_support::redis_cluster())
                    .redis_key_prefix(keygate_test_support::redis_prefix_for(&s.db.url));
            }
            Verifier::embedded(b.open().unwrap())
        }
    };
    Guard::new(verifier)
}

/// What the protected routes answer: the verified key's id and permissions, and its
/// identity's externalId when it has one. The accessors (which the embedded back end
/// answers from keygate's verification in place) agree with the whole result (built when
/// first read).
fn answer(key: &VerifiedKey) -> String {
    let (id, owner) = (key.key_id().to_string(), key.external_id().map(str::to_string));
    let reads = key.has_permission("documents.read");
    let r = key.result();
    let agree = id == r.key_id.as_deref().unwrap_or_default()
        && owner.as_deref() == r.identity.as_ref().map(|i| i.external_id.as_str())
        && reads == r.permissions.iter().any(|p| p == "documents.read")
        && !key.has_permission("documents")
        && key.permissions == r.permissions;
    let owner = owner.map(|o| format!(" owner={o}")).unwrap_or_default();
    let disagree = if agree { "" } else { " (the accessors disagree with the result)" };
    format!("key={id} permissions={}{owner}{disagree}", key.permissions.join(","))
}

/// `/paid`'s guard: two credits a request, the key in `X-API-Key`, refusals as plain text.
fn paid(guard: &Guard) -> Guard {
    guard.clone().cost(2).key_header("X-API-Key").error_format(keygate_client::ErrorFormat::Text)
}

/// An hour's ad-hoc limit of 2 per key: `/limited`'s.
fn two_per_hour() -> VerifyRatelimit {
    VerifyRatelimit { name: "mw_limit".into(), limit: Some(2), duration: Some(3_600_000), cost: None }
}

/// Serves `/read` (needs `documents.read`), `/limited` (two per hour), `/paid` (two credits,
/// the key in `X-API-Key`, text refusals) and `/whole` (any valid key: the guard on a whole
/// router or scope) behind `guard`;
/// its port.
fn serve(stack: Stack, guard: Guard, rt: &tokio::runtime::Runtime) -> u16 {
    match stack {
        Stack::Axum => {
            use axum::extract::ConnectInfo;
            use axum::routing::get;
            use keygate_client::ClientAddr;
            use keygate_client::tower::KeygateLayer;
            use std::net::SocketAddr;
            let handler = |key: VerifiedKey| async move { answer(&key) };
            // A whole router behind `Router::layer`, and single routes behind `route_layer`.
            let whole =
                axum::Router::new().route("/whole", get(handler)).layer(KeygateLayer::new(guard.clone()));
            let app = axum::Router::new()
                .route("/read", get(handler).route_layer(KeygateLayer::new(guard.require("documents.read"))))
                .route(
                    "/limited",
                    get(handler).route_layer(KeygateLayer::new(guard.clone().ratelimit(two_per_hour()))),
                )
                .route("/paid", get(handler).route_layer(KeygateLayer::new(paid(&guard))))
                .merge(whole)
                // The peer's address for keys' allowedIps: axum's ConnectInfo as ClientAddr.
                .layer(axum::middleware::from_fn(
                    |ConnectInfo(peer): ConnectInfo<SocketAddr>,
                     mut req: axum::extract::Request,
                     next: axum::middleware::Next| async move {
                        req.extensions_mut().insert(ClientAddr(peer.ip()));
                        next.run(req).await
                    },
                ));
            let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            let port = listener.local_addr().unwrap().port();
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
            port
        }
        Stack::Actix => {
            use actix_web::{App, HttpServer, web};
            use keygate_client::actix::KeygateMiddleware;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                actix_web::rt::System::new().block_on(async move {
                    let server = HttpServer::new(move || {
                        let handler = |key: VerifiedKey| async move { answer(&key) };
                        App::new()
                            .service(
                                web::resource("/read")
                                    .wrap(KeygateMiddleware::new(guard.require("documents.read")))
                                    .route(web::get().to(handler)),
                            )
                            .service(
                                web::scope("/whole")
                                    .wrap(KeygateMiddleware::new(guard.clone()))
                                    .route("", web::get().to(handler)),
                            )
                            .service(
                                web::resource("/paid")
                                    .wrap(KeygateMiddleware::new(paid(&guard)))
                                    .route(web::get().to(handler)),
                            )
                            .service(
                                web::resource("/limited")
                                    .wrap(KeygateMiddleware::new(guard.clone().ratelimit(two_per_hour())))
                                    .route(web::get().to(handler)),
                            )
                    })
                    .workers(1)
                    .disable_signals()
                    .bind("127.0.0.1:0")
                    .unwrap();
                    tx.send(server.addrs()[0].port()).unwrap();
                    server.run().await.unwrap();
                })
            });
            rx.recv().unwrap()
        }
    }
}

/// What a request answered.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The problem's `code`, checking its content type.
    fn code(&self) -> String {
        assert_eq!(self.header("content-type"), Some("application/problem+json"), "{}", self.body);
        let json: Value = serde_json::from_str(&self.body).unwrap();
        assert_eq!(json["status"], self.status);
        json["code"].as_str().unwrap().to_string()
    }
}

fn get(rt: &tokio::runtime::Runtime, port: u16, path: &str, authorization: Option<&str>) -> Answer {
    let headers: Vec<(&str, &str)> = authorization.map(|a| ("authorization", a)).into_iter().collect();
    get_with(rt, port, path, &headers)
}

fn get_with(rt: &tokio::runtime::Runtime, port: u16, path: &str, headers: &[(&str, &str)]) -> Answer {
    rt.block_on(async {
        let mut req = reqwest::Client::new().get(format!("http://127.0.0.1:{port}{path}"));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let res = req.send().await.unwrap();
        let (status, headers) = (res.status().as_u16(), res.headers().clone());
        Answer { status, headers, body: res.text().await.unwrap() }
    })
}

fn protects(stack: Stack, back: Back) {
    let s = TestServer::start();
    // The server's clock at the real time: the windows it reports are the tests' own.
    s.clock.set(now_ms());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let admin = Client::new(&s.base, &s.root_key).unwrap();
    let create_for = |permissions: &[&str], credits: Option<u64>, owner: Option<&str>| {
        let req = CreateKeyRequest {
            api_id: "api_mw".into(),
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
            credits: credits.map(|n| CreditsRequest { remaining: Some(n), refill: None }),
            external_id: owner.map(str::to_string),
            ..Default::default()
        };
        rt.block_on(admin.create_key(&req)).unwrap().into_data()
    };
    let create_with = |permissions: &[&str], credits: Option<u64>| create_for(permissions, credits, None);
    let create = |permissions: &[&str]| {
        let created = create_with(permissions, None);
        (created.key_id, format!("Bearer {}", created.key))
    };
    let (reader_id, reader) = create(&["documents.read"]);
    let owned = create_for(&["documents.read", "documents.write"], None, Some("user_mw"));
    let (plain_id, plain) = create(&[]);
    let with_credits = create_with(&[], Some(3));
    let port = serve(stack, guard(&s, back), &rt);

    let missing = get(&rt, port, "/read", None);
    assert_eq!((missing.status, missing.code().as_str()), (401, "MISSING_KEY"), "{}", missing.body);
    assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
    let unknown = get(&rt, port, "/read", Some("Bearer kg_not_a_key_at_all"));
    assert_eq!((unknown.status, unknown.code().as_str()), (401, "NOT_FOUND"));
    let malformed = get(&rt, port, "/read", Some("Basic dXNlcjpwYXNz"));
    assert_eq!((malformed.status, malformed.code().as_str()), (401, "MALFORMED_KEY"));
    let long = format!("Bearer {}", "k".repeat(10_000));
    assert_eq!(get(&rt, port, "/read", Some(&long)).status, 401, "an oversized key is not sent on");
    let lacking = get(&rt, port, "/read", Some(&plain));
    assert_eq!((lacking.status, lacking.code().as_str()), (403, "INSUFFICIENT_PERMISSIONS"));

    let ok = get(&rt, port, "/read", Some(&reader));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body, format!("key={reader_id} permissions=documents.read"), "the extractor is filled");
    let ok = get(&rt, port, "/read", Some(&format!("Bearer {}", owned.key)));
    assert_eq!(
        ok.body,
        format!("key={} permissions=documents.read,documents.write owner=user_mw", owned.key_id),
        "the identity reaches the extractor"
    );

    // Credits, the key in a header of its own, refusals as text.
    let by_header = [("x-api-key", with_credits.key.as_str())];
    let paid_ok = get_with(&rt, port, "/paid", &by_header);
    assert_eq!(paid_ok.status, 200, "{}", paid_ok.body);
    assert!(paid_ok.body.starts_with(&format!("key={}", with_credits.key_id)), "{}", paid_ok.body);
    let spent = get_with(&rt, port, "/paid", &by_header);
    assert_eq!(spent.status, 429, "one credit left, two asked: {}", spent.body);
    assert_eq!(spent.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(spent.body, "the key has no credits left for this request");
    assert_eq!(spent.header("retry-after"), None, "credits come back by a refill, not by waiting");
    let bearer_only = get(&rt, port, "/paid", Some(&format!("Bearer {}", with_credits.key)));
    assert_eq!((bearer_only.status, bearer_only.body.as_str()), (401, "this route needs an API key"));

    // allowedIps: the request's address (actix: the connection's; axum: ClientAddr).
    let fenced = |allowed: &str| {
        let body = json!({"apiId": "api_mw", "allowedIps": [allowed]});
        format!("Bearer {}", s.v2("keys.createKey", &body).data()["key"].as_str().unwrap())
    };
    let (here, elsewhere) = (fenced("127.0.0.1"), fenced("203.0.113.0/24"));
    assert_eq!(get(&rt, port, "/whole", Some(&here)).status, 200, "from an allowed address");
    let refused = get(&rt, port, "/whole", Some(&elsewhere));
    assert_eq!((refused.status, refused.code().as_str()), (403, "FORBIDDEN"), "{}", refused.body);

    // The guard on a whole router or scope: any valid key.
    assert_eq!(get(&rt, port, "/whole", None).status, 401);
    let whole = get(&rt, port, "/whole", Some(&plain));
    assert_eq!((whole.status, whole.body.as_str()), (200, format!("key={plain_id} permissions=").as_str()));

    for i in 0..2 {
        let ok = get(&rt, port, "/limited", Some(&plain));
        assert_eq!(ok.status, 200, "request {i}: {}", ok.body);
    }
    let limited = get(&rt, port, "/limited", Some(&plain));
    assert_eq!((limited.status, limited.code().as_str()), (429, "RATE_LIMITED"), "{}", limited.body);
    let retry: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3_600).contains(&retry), "Retry-After {retry}");
    assert_eq!(limited.header("ratelimit-limit"), Some("2"));
    assert_eq!(limited.header("ratelimit-remaining"), Some("0"));
    assert_eq!(limited.header("ratelimit-reset"), Some(retry.to_string().as_str()));

    // A permission granted through the server's API: the next request sees it, on every
    // back end (embedded on SQLite: the file's change number moved).
    let granted = s.v2("keys.addPermissions", &json!({"keyId": plain_id, "permissions": ["documents.read"]}));
    assert_eq!(granted.status, 200, "{}", granted.text);
    let now = get(&rt, port, "/read", Some(&plain));
    assert_eq!(now.status, 200, "the change is seen by the next request: {}", now.body);
    assert_eq!(now.body, format!("key={plain_id} permissions=documents.read"));

    // And revoked again.
    let removed =
        s.v2("keys.removePermissions", &json!({"keyId": plain_id, "permissions": ["documents.read"]}));
    assert_eq!(removed.status, 200, "{}", removed.text);
    assert_eq!(get(&rt, port, "/read", Some(&plain)).status, 403);
}

#[test]
fn axum_remote() {
    protects(Stack::Axum, Back::Remote);
}

#[test]
fn axum_embedded() {
    protects(Stack::Axum, Back::Embedded);
}

#[test]
fn actix_remote() {
    protects(Stack::Actix, Back::Remote);
}

#[test]
fn actix_embedded() {
    protects(Stack::Actix, Back::Embedded);
}

#[test]
fn a_verifier_that_cannot_reach_keygate_answers_503_and_fails_closed() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let client = Client::builder(dead).root_key("kg_root_x").retries(0).build().unwrap();
    let port = serve(Stack::Axum, Guard::new(Verifier::remote(client)), &rt);
    let refused = get(&rt, port, "/read", Some("Bearer some_key"));
    assert_eq!((refused.status, refused.code().as_str()), (503, "UNAVAILABLE"), "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
}

#[test]
fn the_axum_example_runs_and_protects_its_routes() {
    let s = TestServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let admin = Client::new(&s.base, &s.root_key).unwrap();
    let req = CreateKeyRequest {
        api_id: "api_example".into(),
        permissions: vec!["documents.read".into()],
        ..Default::default()
    };
    let key = rt.block_on(admin.create_key(&req)).unwrap().into_data();
    // Built by cargo with the test targets (the client's examples need its features, which
    // this crate enables).
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples").join("axum_protect");
    assert!(
        example.exists(),
        "{} was not built: run `cargo build --examples --all-features`",
        example.display()
    );
    let port = keygate_test_support::free_port();
    let mut cmd = std::process::Command::new(&example);
    cmd.env("KEYGATE_URL", &s.base)
        .env("KEYGATE_ROOT_KEY", &s.root_key)
        .env("KEYGATE_EXAMPLE_LIMIT", "1")
        .env("LISTEN", format!("127.0.0.1:{port}"));
    let mut proc = keygate_test_support::Proc::spawn(cmd);
    assert!(proc.wait_for("listening on", Duration::from_secs(20)), "{}", proc.output(true));

    assert_eq!(get(&rt, port, "/", None).status, 200, "the public route");
    assert_eq!(get(&rt, port, "/documents", None).status, 401);
    let bearer = format!("Bearer {}", key.key);
    let ok = get(&rt, port, "/documents", Some(&bearer));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains(&key.key_id), "{}", ok.body);
    let write = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/documents"))
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(write, 403, "documents.write is not held");
    assert_eq!(get(&rt, port, "/documents", Some(&bearer)).status, 429, "KEYGATE_EXAMPLE_LIMIT=1 per minute");
}

#[test]
fn a_guard_keygate_refuses_answers_500_never_a_pass() {
    let s = TestServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let admin = Client::new(&s.base, &s.root_key).unwrap();
    let req = CreateKeyRequest { api_id: "api_mw".into(), ..Default::default() };
    let key = format!("Bearer {}", rt.block_on(admin.create_key(&req)).unwrap().key);
    // A permission query that does not parse, on both back ends; a root key without
    // api.*.verify_key on the remote one.
    for back in [Back::Remote, Back::Embedded] {
        let port = serve(Stack::Axum, guard(&s, back).permissions("documents.read AND ("), &rt);
        let refused = get(&rt, port, "/limited", Some(&key));
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (500, "MISCONFIGURED"),
            "{back:?}: {}",
            refused.body
        );
    }
    let weak = Client::new(&s.base, s.root_key_with(&["api.*.read_key"])).unwrap();
    let port = serve(Stack::Actix, Guard::new(Verifier::remote(weak)), &rt);
    let refused = get(&rt, port, "/limited", Some(&key));
    assert_eq!((refused.status, refused.code().as_str()), (500, "MISCONFIGURED"), "{}", refused.body);
}
