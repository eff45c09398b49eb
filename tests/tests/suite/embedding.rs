//! keygate's API mounted in a service of its own (keygate-http's `mount_api` example, built
//! by cargo with the test targets, run and called): the service's routes and keygate's v1
//! and v2 API answer from one actix-web `App`, keygate's errors in the contract's bodies
//! with their request ids, the service's own routes untouched by keygate's middleware.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port};
use serde_json::{Value, json};
use std::time::Duration;

const ROOT_KEY: &str = "kg_root_mounted_in_a_service_0123456789";

#[test]
fn a_service_mounts_keygates_api_beside_its_own_routes() {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples").join("mount_api");
    assert!(example.exists(), "{} was not built: run `cargo build --examples`", example.display());
    let db = TestDb::fresh();
    let port = free_port();
    let mut cmd = std::process::Command::new(&example);
    cmd.env("DATABASE_URL", &db.url)
        .env("KEYGATE_ROOT_KEY", ROOT_KEY)
        .env("LISTEN", format!("127.0.0.1:{port}"));
    let mut proc = Proc::spawn(cmd);
    assert!(proc.wait_for("listening on", Duration::from_secs(30)), "{}", proc.output(true));
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::blocking::Client::new();

    // The service's own routes, without keygate's request id.
    let own = client.get(format!("{base}/hello/ada")).send().unwrap();
    assert_eq!(own.status(), 200);
    assert!(own.headers().get("unkey-request-id").is_none(), "keygate's middleware wraps only its routes");
    assert_eq!(own.text().unwrap(), "hello, ada");
    assert_eq!(client.get(&base).send().unwrap().text().unwrap(), "the service's own page");

    // keygate's v2 API: a key created with the root key, then verified.
    let post = |path: &str, auth: Option<&str>, body: Value| {
        let mut req = client.post(format!("{base}{path}")).json(&body);
        if let Some(auth) = auth {
            req = req.bearer_auth(auth);
        }
        let res = req.send().unwrap();
        let (status, id) = (res.status().as_u16(), res.headers().get("unkey-request-id").cloned());
        (status, id, res.json::<Value>().unwrap())
    };
    let (status, _, api) = post("/v2/apis.createApi", Some(ROOT_KEY), json!({"name": "service"}));
    assert_eq!(status, 200, "{api}");
    let api_id = api["data"]["apiId"].as_str().unwrap().to_string();
    let (status, _, created) = post(
        "/v2/keys.createKey",
        Some(ROOT_KEY),
        json!({"apiId": api_id, "permissions": ["documents.read"]}),
    );
    assert_eq!(status, 200, "{created}");
    let key = created["data"]["key"].as_str().unwrap().to_string();
    let (status, id, verified) =
        post("/v2/keys.verifyKey", Some(ROOT_KEY), json!({"key": key, "permissions": "documents.read"}));
    assert_eq!(status, 200, "{verified}");
    assert_eq!(verified["data"]["valid"], true, "{verified}");
    assert_eq!(id.unwrap().to_str().unwrap(), verified["meta"]["requestId"].as_str().unwrap());

    // v1 on the same App, and keygate's errors as the contract writes them, ids agreeing.
    let (status, _, v1) = post("/v1/keys.verifyKey", None, json!({"key": key}));
    assert_eq!((status, v1["valid"].as_bool()), (200, Some(true)), "{v1}");
    let (status, id, refused) =
        post("/v2/keys.createKey", Some("kg_root_not_a_key_at_all_0123456789"), json!({}));
    assert_eq!(status, 401, "{refused}");
    assert_eq!(id.unwrap().to_str().unwrap(), refused["meta"]["requestId"].as_str().unwrap());
    assert_eq!(
        (refused["error"]["status"].as_u64(), refused["error"]["title"].as_str()),
        (Some(401), Some("Unauthorized"))
    );
    let (status, _, bad) =
        post("/v1/ratelimits.limit", Some(ROOT_KEY), json!({"identifier": "", "limit": 1}));
    assert_eq!((status, bad["error"]["code"].as_str()), (400, Some("BAD_REQUEST")), "{bad}");
    drop(proc);
}

/// The embedded client (keygate-client's `Embedded`) rate-limits in process through the
/// server's decision path: the workspace's namespaces and overrides, and with Redis the very
/// budgets the server counts in (without it, the process counts its own: docs/embedding.md).
#[test]
fn the_embedded_client_rate_limits_in_process_under_the_servers_overrides() {
    use keygate_client::embedded::Embedded;
    use keygate_client::ratelimit::LimitRequest;
    use keygate_tests::TestServer;

    let s = TestServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let builder = |ws: Option<&str>| {
        // The server's manual clock: both count in the same windows.
        let mut b = Embedded::builder(&s.db.url).clock(std::sync::Arc::new(s.clock.clone()));
        if let Some(ws) = ws {
            b = b.workspace_id(ws);
        }
        if let Some(redis) = keygate_test_support::redis_url() {
            b = b
                .redis_url(redis)
                .redis_cluster(keygate_test_support::redis_cluster())
                .redis_key_prefix(keygate_test_support::redis_prefix_for(&s.db.url));
        }
        b.open().unwrap()
    };
    let embedded = builder(Some(&s.workspace_id));
    let ask = |identifier: &str| LimitRequest {
        namespace: "checkout".into(),
        identifier: identifier.into(),
        limit: 3,
        duration: 60_000,
        cost: None,
    };
    // On a runtime's worker (the future is Send, as a tower service needs).
    let limit = |req: LimitRequest| {
        let e = embedded.clone();
        rt.block_on(rt.spawn(async move { e.limit(&req).await })).unwrap()
    };
    let shared = keygate_test_support::redis_url().is_some();

    let first = s.limit(json!({"namespace": "checkout", "identifier": "u1", "limit": 3, "duration": 60_000}));
    assert_eq!(first.json["remaining"], 2, "{}", first.text);
    let passed: Vec<(bool, u64)> =
        (0..4).map(|_| limit(ask("u1")).map(|r| (r.success, r.remaining)).unwrap()).collect();
    let expected = match shared {
        // One budget for both: the server took one of three.
        true => [(true, 1), (true, 0), (false, 0), (false, 0)],
        false => [(true, 2), (true, 1), (true, 0), (false, 0)],
    };
    assert_eq!(passed, expected, "shared budgets: {shared}");
    let after = s.limit(json!({"namespace": "checkout", "identifier": "u1", "limit": 3, "duration": 60_000}));
    assert_eq!(after.json["success"], !shared, "{}", after.text);

    // An override set through the server's API applies in process (in a namespace this
    // process has not read yet: one it has is read again within a second without Redis,
    // at once with it: docs/embedding.md).
    let created =
        s.limit(json!({"namespace": "premium", "identifier": "u1", "limit": 3, "duration": 60_000}));
    assert_eq!(created.status, 200, "{}", created.text);
    let set = s.post(
        "/v1/ratelimits.setOverride",
        &json!({"namespaceName": "premium", "identifier": "vip", "limit": 100, "duration": 60_000}),
    );
    assert_eq!(set.status, 200, "{}", set.text);
    let vip = limit(LimitRequest { namespace: "premium".into(), ..ask("vip") }).unwrap();
    assert_eq!((vip.success, vip.limit, vip.remaining), (true, 100, 99));
    assert_eq!(vip.override_id.as_deref(), set.json["overrideId"].as_str());

    // Bad input is refused as the API refuses it, and counts nothing.
    for (bad, field) in [
        (LimitRequest { identifier: String::new(), ..ask("x") }, "identifier"),
        (LimitRequest { namespace: String::new(), ..ask("x") }, "namespace"),
        (LimitRequest { duration: 999, ..ask("x") }, "duration"),
        (LimitRequest { limit: 0, ..ask("x") }, "limit"),
        (LimitRequest { cost: Some(1 << 53), ..ask("x") }, "cost"),
    ] {
        match limit(bad) {
            Err(keygate_client::Error::Embedded { code, message }) => {
                assert_eq!(code, "BAD_REQUEST", "{message}");
                assert!(message.starts_with(field), "{message}");
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    let untouched = limit(ask("x")).unwrap();
    assert_eq!((untouched.success, untouched.remaining), (true, 2), "the refused asks counted nothing");
    // Without a workspace there is no namespace to count in.
    let unscoped = builder(None);
    let refused = rt.block_on(unscoped.limit(&ask("u1"))).unwrap_err();
    assert!(matches!(refused, keygate_client::Error::Embedded { code: "BAD_REQUEST", .. }), "{refused:?}");
    // A workspace that does not exist: NOT_FOUND, as the API answers an unknown one.
    let elsewhere = builder(Some("ws_no_such_workspace"));
    let refused = rt.block_on(elsewhere.limit(&ask("u1"))).unwrap_err();
    assert!(matches!(refused, keygate_client::Error::Embedded { code: "NOT_FOUND", .. }), "{refused:?}");
}
