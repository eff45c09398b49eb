//! keygate's API served in process, with no socket: `keygate-http`'s [`Keygate`] mounted in
//! an actix-web `App` under `actix_web::test::init_service`, each request handed to the
//! service directly (`test::call_service`). For what needs no real connection (routing,
//! authentication, the contract's bodies and request ids, a key's life), as quick as a unit
//! test; what needs one (connection limits, gateways, restarts) starts the real server.
#![allow(clippy::unwrap_used)]

use actix_web::{App, test};
use keygate_domain::{Secret, SystemClock};
use keygate_http::{HttpSettings, Keygate};
use keygate_runtime::{Runtime, RuntimeSettings};
use keygate_test_support::TestDb;
use serde_json::{Value, json};
use std::sync::Arc;

const ROOT_KEY: &str = "kg_root_in_process_0123456789abcdef";

/// keygate over a fresh database, its workspace and root key made as a first start makes
/// them.
fn keygate(db: &TestDb) -> Keygate {
    let runtime = Runtime::open(&RuntimeSettings::new(db.url.clone()), Arc::new(SystemClock)).unwrap();
    runtime.rbac.bootstrap(Some(Secret::new(ROOT_KEY.to_string()))).unwrap();
    runtime.sync_counters().unwrap();
    Keygate::new(runtime, HttpSettings::default())
}

/// A POST with a JSON body (and a bearer token) to the in-process `$app`: status, the
/// request id header, the body.
macro_rules! post {
    ($app:expr, $path:expr, $auth:expr, $body:expr) => {{
        let mut req = test::TestRequest::post().uri($path).set_json($body);
        if let Some(auth) = $auth {
            req = req.insert_header(("authorization", format!("Bearer {auth}")));
        }
        let res = test::call_service($app, req.to_request()).await;
        let status = res.status().as_u16();
        let id = res.headers().get("unkey-request-id").map(|v| v.to_str().unwrap().to_string());
        let body: Value = test::read_body_json(res).await;
        (status, id, body)
    }};
}

#[actix_web::test]
async fn a_key_is_created_and_verified_without_a_socket() {
    let db = TestDb::fresh();
    let kg = keygate(&db);
    let app = test::init_service(App::new().configure(kg.api_and_not_found())).await;

    let (status, _, api) = post!(&app, "/v2/apis.createApi", Some(ROOT_KEY), json!({"name": "inproc"}));
    assert_eq!(status, 200, "{api}");
    let api_id = api["data"]["apiId"].as_str().unwrap().to_string();
    let (status, _, created) = post!(
        &app,
        "/v2/keys.createKey",
        Some(ROOT_KEY),
        json!({"apiId": api_id, "permissions": ["documents.read"], "credits": {"remaining": 1}})
    );
    assert_eq!(status, 200, "{created}");
    let key = created["data"]["key"].as_str().unwrap().to_string();

    // Verified with its permission, spending its one credit; then out of credits.
    let ask = json!({"key": key, "permissions": "documents.read"});
    let (status, id, verified) = post!(&app, "/v2/keys.verifyKey", Some(ROOT_KEY), ask.clone());
    assert_eq!(status, 200, "{verified}");
    assert_eq!(
        (verified["data"]["valid"].as_bool(), verified["data"]["credits"].as_i64()),
        (Some(true), Some(0))
    );
    assert_eq!(id.as_deref(), verified["meta"]["requestId"].as_str(), "the header and the body agree");
    let (_, _, spent) = post!(&app, "/v2/keys.verifyKey", Some(ROOT_KEY), ask);
    assert_eq!(
        (spent["data"]["valid"].as_bool(), spent["data"]["code"].as_str()),
        (Some(false), Some("USAGE_EXCEEDED"))
    );
    // A permission it lacks.
    let (_, _, denied) = post!(
        &app,
        "/v2/keys.verifyKey",
        Some(ROOT_KEY),
        json!({"key": key, "permissions": "documents.write"})
    );
    assert_eq!(denied["data"]["code"], "INSUFFICIENT_PERMISSIONS", "{denied}");
}

#[actix_web::test]
async fn refusals_carry_the_contract_s_bodies_and_request_ids() {
    let db = TestDb::fresh();
    let kg = keygate(&db);
    let app = test::init_service(App::new().configure(kg.api_and_not_found())).await;

    // v2 without an Authorization header: 400 (API-v2.md §1.1); with a key that is none: 401.
    let (status, _, missing) = post!(&app, "/v2/apis.createApi", None::<&str>, json!({"name": "x"}));
    assert_eq!((status, missing["error"]["status"].as_u64()), (400, Some(400)), "{missing}");
    let (status, id, unknown) =
        post!(&app, "/v2/apis.createApi", Some("kg_root_not_a_key_at_all_0123456789"), json!({"name": "x"}));
    assert_eq!((status, unknown["error"]["title"].as_str()), (401, Some("Unauthorized")), "{unknown}");
    assert_eq!(id.as_deref(), unknown["meta"]["requestId"].as_str());
    // v1's error body: a code and the request id.
    let (status, _, bad) =
        post!(&app, "/v1/ratelimits.limit", Some(ROOT_KEY), json!({"identifier": "", "limit": 1}));
    assert_eq!((status, bad["error"]["code"].as_str()), (400, Some("BAD_REQUEST")), "{bad}");
    // A body that is not JSON, and a path no route serves: the contract's answers, no 5xx.
    let res = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/v2/apis.createApi")
            .insert_header(("authorization", format!("Bearer {ROOT_KEY}")))
            .insert_header(("content-type", "application/json"))
            .set_payload("{not json")
            .to_request(),
    )
    .await;
    assert_eq!(res.status().as_u16(), 400);
    for (path, field, want) in
        [("/v1/no.suchRoute", "code", json!("NOT_FOUND")), ("/v2/no.suchRoute", "status", json!(404))]
    {
        let res = test::call_service(&app, test::TestRequest::get().uri(path).to_request()).await;
        assert_eq!(res.status().as_u16(), 404, "{path}");
        assert!(res.headers().contains_key("unkey-request-id"), "{path}");
        let body: Value = test::read_body_json(res).await;
        assert_eq!(body["error"][field], want, "{path}: {body}");
    }
}
