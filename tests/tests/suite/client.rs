//! `keygate-client` against the real server: every v2 operation through its typed method
//! (its answer read back as the types say), and the typed errors: problem details with
//! the request id, field errors, retries of a 503, the timeout.
#![allow(clippy::unwrap_used)]

use keygate_client::analytics::{GetRatelimitsRequest, GetVerificationsRequest, GroupBy};
use keygate_client::apis::{ApiRequest, CreateApiRequest, ListKeysRequest};
use keygate_client::identities::{
    CreateIdentityRequest, IdentityRequest, ListIdentitiesRequest, RatelimitRequest, UpdateIdentityRequest,
};
use keygate_client::keys::{
    CreateKeyRequest, CreditsOperation, CreditsRequest, DeleteKeyRequest, GetKeyRequest,
    KeyPermissionsRequest, KeyRolesRequest, RefillInterval, RefillRequest, RerollKeyRequest,
    UpdateCreditsRequest, UpdateKeyRequest, VerifyCode, VerifyCredits, VerifyKeyRequest, VerifyRatelimit,
    WhoamiRequest,
};
use keygate_client::permissions::{
    CreatePermissionRequest, CreateRoleRequest, ListRequest, PermissionRequest, RoleRequest,
    SetRolePermissionsRequest,
};
use keygate_client::ratelimit::{LimitRequest, ListOverridesRequest, OverrideRequest, SetOverrideRequest};
use keygate_client::{Client, Error};
use keygate_tests::TestServer;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn names<T>(items: &[T], name: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|i| name(i).to_string()).collect()
}

#[test]
fn every_operation_answers_its_typed_data() {
    let s = TestServer::start();
    let rt = runtime();
    let c = Client::new(&s.base, &s.root_key).unwrap();
    rt.block_on(async {
        assert_eq!(c.liveness().await.unwrap().message, "OK");

        // APIs.
        let api = c.create_api(&CreateApiRequest { name: "client-api".into() }).await.unwrap();
        assert!(!api.request_id.is_empty(), "the envelope's request id is read");
        let api_id = api.api_id.clone();
        let got = c.get_api(&ApiRequest { api_id: api_id.clone() }).await.unwrap();
        assert_eq!((got.id.as_str(), got.name.as_str()), (api_id.as_str(), "client-api"));

        // Permissions and roles.
        let p = c
            .create_permission(&CreatePermissionRequest {
                name: "documents read".into(),
                slug: "documents.read".into(),
                description: Some("read documents".into()),
            })
            .await
            .unwrap();
        let got = c.get_permission(&PermissionRequest { permission: p.permission_id.clone() }).await.unwrap();
        assert_eq!(
            (got.slug.as_str(), got.description.as_deref()),
            ("documents.read", Some("read documents"))
        );
        let role = c
            .create_role(&CreateRoleRequest {
                name: "editor".into(),
                description: None,
                permissions: vec!["documents.write".into()],
            })
            .await
            .unwrap();
        let got = c.get_role(&RoleRequest { role: "editor".into() }).await.unwrap();
        assert_eq!(got.id, role.role_id);
        assert_eq!(names(&got.permissions, |p| &p.slug), ["documents.write"]);
        let perms = c
            .set_role_permissions(&SetRolePermissionsRequest {
                role: "editor".into(),
                permissions: vec!["documents.write".into(), "documents.delete".into()],
            })
            .await
            .unwrap();
        assert_eq!(names(&perms, |p| &p.slug), ["documents.delete", "documents.write"]);
        let listed = c.list_permissions(&ListRequest::default()).await.unwrap();
        assert_eq!(names(&listed, |p| &p.slug), ["documents.delete", "documents.read", "documents.write"]);
        assert!(!listed.pagination.as_ref().unwrap().has_more);
        let page = c.list_permissions(&ListRequest { limit: Some(1), ..Default::default() }).await.unwrap();
        let pagination = page.pagination.clone().unwrap();
        assert!(pagination.has_more && pagination.cursor.is_some(), "{pagination:?}");
        let next = c
            .list_permissions(&ListRequest {
                limit: Some(1),
                cursor: pagination.cursor,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(next.len(), 1);
        assert_ne!(next[0].id, page[0].id, "the cursor moves on");
        let roles = c.list_roles(&ListRequest::default()).await.unwrap();
        assert_eq!(names(&roles, |r| &r.name), ["editor"]);

        // Identities.
        let limit = |name: &str, limit: u64, auto_apply: bool| RatelimitRequest {
            name: name.into(),
            limit,
            duration: 60_000,
            auto_apply,
            algorithm: auto_apply.then(|| "sliding".into()),
        };
        let created = c
            .create_identity(&CreateIdentityRequest {
                external_id: "customer_1".into(),
                meta: Some(serde_json::from_str(r#"{"plan":"pro"}"#).unwrap()),
                ratelimits: vec![limit("customer", 100, true)],
            })
            .await
            .unwrap();
        let identity = c.get_identity(&IdentityRequest { identity: "customer_1".into() }).await.unwrap();
        assert_eq!(identity.id, created.identity_id);
        assert_eq!(identity.meta["plan"], "pro");
        assert_eq!(names(&identity.ratelimits, |r| &r.name), ["customer"]);
        assert_eq!(identity.ratelimits[0].algorithm, "sliding");
        let updated = c
            .update_identity(&UpdateIdentityRequest {
                identity: "customer_1".into(),
                meta: Some(None),
                ratelimits: None,
            })
            .await
            .unwrap();
        assert!(updated.meta.is_empty(), "meta: null clears it");
        assert_eq!(updated.ratelimits.len(), 1, "absent ratelimits stay");
        let listed = c.list_identities(&ListIdentitiesRequest::default()).await.unwrap();
        assert_eq!(names(&listed, |i| &i.external_id), ["customer_1"]);

        // Keys.
        let key = c
            .create_key(&CreateKeyRequest {
                api_id: api_id.clone(),
                prefix: Some("cl".into()),
                name: Some("first".into()),
                external_id: Some("customer_1".into()),
                meta: Some(serde_json::from_str(r#"{"tier":1}"#).unwrap()),
                credits: Some(CreditsRequest {
                    remaining: Some(10),
                    refill: Some(RefillRequest {
                        interval: RefillInterval::Daily,
                        amount: 10,
                        refill_day: None,
                    }),
                }),
                ratelimits: vec![limit("per_key", 5, false)],
                permissions: vec!["documents.read".into()],
                roles: vec!["editor".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(key.key.starts_with("cl_"), "{}", key.key);
        let key_id = key.key_id.clone();
        let got = c.get_key(&GetKeyRequest { key_id: key_id.clone() }).await.unwrap();
        assert_eq!(got.name.as_deref(), Some("first"));
        assert_eq!(got.identity.as_ref().unwrap().external_id, "customer_1");
        assert_eq!(got.credits.as_ref().unwrap().remaining, Some(10));
        assert_eq!(got.credits.as_ref().unwrap().refill.as_ref().unwrap().interval, RefillInterval::Daily);
        assert_eq!(got.roles, ["editor"]);
        assert!(got.permissions.contains(&"documents.read".to_string()), "{:?}", got.permissions);
        assert_eq!(names(&got.ratelimits, |r| &r.name), ["per_key"]);
        let me = c.whoami(&WhoamiRequest { key: key.key.clone() }).await.unwrap();
        assert_eq!(me.key_id, key_id);

        let verified = c
            .verify_key(&VerifyKeyRequest {
                key: key.key.clone(),
                permissions: Some("documents.read AND documents.write".into()),
                credits: Some(VerifyCredits { cost: 2 }),
                ratelimits: vec![VerifyRatelimit { name: "per_key".into(), ..Default::default() }],
                tags: vec!["path=/x".into()],
                ip: Some("192.0.2.1".into()),
            })
            .await
            .unwrap();
        assert!(verified.valid, "{verified:?}");
        assert_eq!(verified.code, VerifyCode::Valid);
        assert_eq!(verified.credits, Some(8));
        assert_eq!(verified.key_id.as_deref(), Some(key_id.as_str()));
        assert_eq!(verified.identity.as_ref().unwrap().external_id, "customer_1");
        let applied = names(&verified.ratelimits, |r| &r.name);
        assert_eq!(applied, ["customer", "per_key"], "the identity's auto-applied limit and the named one");
        let denied = c
            .verify_key(&VerifyKeyRequest {
                key: key.key.clone(),
                permissions: Some("admin".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!((denied.valid, denied.code), (false, VerifyCode::InsufficientPermissions));
        let unknown =
            c.verify_key(&VerifyKeyRequest { key: "cl_nope".into(), ..Default::default() }).await.unwrap();
        assert_eq!(unknown.code, VerifyCode::NotFound);
        assert!(unknown.key_id.is_none());

        let keys =
            c.list_keys(&ListKeysRequest { api_id: api_id.clone(), ..Default::default() }).await.unwrap();
        assert_eq!(names(&keys, |k| &k.key_id), [key_id.as_str()]);

        let req = |perms: &[&str]| KeyPermissionsRequest {
            key_id: key_id.clone(),
            permissions: perms.iter().map(|p| p.to_string()).collect(),
        };
        let now = c.add_permissions(&req(&["documents.share"])).await.unwrap();
        assert_eq!(names(&now, |p| &p.slug), ["documents.read", "documents.share"]);
        let now = c.remove_permissions(&req(&["documents.read"])).await.unwrap();
        assert_eq!(names(&now, |p| &p.slug), ["documents.share"]);
        let now = c.set_permissions(&req(&["documents.read"])).await.unwrap();
        assert_eq!(names(&now, |p| &p.slug), ["documents.read"]);
        c.create_role(&CreateRoleRequest { name: "viewer".into(), ..Default::default() }).await.unwrap();
        let req = |roles: &[&str]| KeyRolesRequest {
            key_id: key_id.clone(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        };
        let now = c.add_roles(&req(&["viewer"])).await.unwrap();
        assert_eq!(names(&now, |r| &r.name), ["editor", "viewer"]);
        let now = c.remove_roles(&req(&["editor"])).await.unwrap();
        assert_eq!(names(&now, |r| &r.name), ["viewer"]);
        let now = c.set_roles(&req(&["editor"])).await.unwrap();
        assert_eq!(names(&now, |r| &r.name), ["editor"]);

        c.update_key(&UpdateKeyRequest {
            key_id: key_id.clone(),
            name: Some(Some("renamed".into())),
            meta: Some(None),
            enabled: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
        let got = c.get_key(&GetKeyRequest { key_id: key_id.clone() }).await.unwrap();
        assert_eq!(got.name.as_deref(), Some("renamed"));
        assert!(got.meta.is_none(), "meta: null clears it");
        let credits = |operation, value| UpdateCreditsRequest { key_id: key_id.clone(), operation, value };
        assert_eq!(
            c.update_credits(&credits(CreditsOperation::Set, Some(3))).await.unwrap().remaining,
            Some(3)
        );
        assert_eq!(
            c.update_credits(&credits(CreditsOperation::Increment, Some(4))).await.unwrap().remaining,
            Some(7)
        );
        assert_eq!(
            c.update_credits(&credits(CreditsOperation::Decrement, Some(10))).await.unwrap().remaining,
            Some(0)
        );
        c.update_credits(&credits(CreditsOperation::Set, Some(5))).await.unwrap();
        let rerolled =
            c.reroll_key(&RerollKeyRequest { key_id: key_id.clone(), expiration: Some(0) }).await.unwrap();
        assert_ne!(rerolled.key_id, key_id);
        let old =
            c.verify_key(&VerifyKeyRequest { key: key.key.clone(), ..Default::default() }).await.unwrap();
        assert_eq!(old.code, VerifyCode::Expired, "expiration 0: the original expires at once");
        let new = c
            .verify_key(&VerifyKeyRequest { key: rerolled.key.clone(), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(
            (new.code, new.credits),
            (VerifyCode::Valid, Some(4)),
            "the copy has the credits left: {new:?}"
        );

        // Rate limits and overrides.
        let ask = |identifier: &str| LimitRequest {
            namespace: "client.ns".into(),
            identifier: identifier.into(),
            limit: 1,
            duration: 60_000,
            cost: None,
        };
        let first = c.limit(&ask("u1")).await.unwrap();
        assert!(first.success && first.remaining == 0, "{first:?}");
        assert!(!c.limit(&ask("u1")).await.unwrap().success);
        let multi = c.multi_limit(&[ask("u2"), ask("u2")]).await.unwrap();
        assert!(!multi.passed, "one budget of 1 taken twice: all or nothing");
        assert_eq!(multi.limits.len(), 2);
        let set = c
            .set_override(&SetOverrideRequest {
                namespace: "client.ns".into(),
                identifier: "vip".into(),
                limit: 50,
                duration: 60_000,
            })
            .await
            .unwrap();
        let ov = OverrideRequest { namespace: "client.ns".into(), identifier: "vip".into() };
        let got = c.get_override(&ov).await.unwrap();
        assert_eq!((got.override_id.as_str(), got.limit), (set.override_id.as_str(), 50));
        let decided = c.limit(&ask("vip")).await.unwrap();
        assert_eq!((decided.limit, decided.override_id.as_deref()), (50, Some(set.override_id.as_str())));
        let listed = c
            .list_overrides(&ListOverridesRequest { namespace: "client.ns".into(), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(names(&listed, |o| &o.identifier), ["vip"]);
        c.delete_override(&ov).await.unwrap();
        assert_eq!(c.get_override(&ov).await.unwrap_err().status(), Some(404));

        // Analytics (written by the server's flush).
        s.state.analytics.flush_analytics().unwrap();
        let rows = c
            .get_verifications(&GetVerificationsRequest {
                api_id: api_id.clone(),
                group_by: vec![GroupBy::Key],
                ..Default::default()
            })
            .await
            .unwrap();
        let first_key = rows.iter().find(|r| r.key_id.as_deref() == Some(key_id.as_str())).unwrap();
        assert_eq!(
            (first_key.valid, first_key.insufficient_permissions, first_key.expired),
            (1, 1, 1),
            "{rows:?}"
        );
        let rows = c
            .get_ratelimits(&GetRatelimitsRequest { namespace: "client.ns".into(), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(rows.iter().map(|r| r.total).sum::<u64>(), 5, "{rows:?}");

        // Deletes.
        c.delete_key(&DeleteKeyRequest { key_id: rerolled.key_id.clone() }).await.unwrap();
        c.delete_role(&RoleRequest { role: "viewer".into() }).await.unwrap();
        c.delete_permission(&PermissionRequest { permission: "documents.share".into() }).await.unwrap();
        c.delete_identity(&IdentityRequest { identity: "customer_1".into() }).await.unwrap();
        c.delete_api(&ApiRequest { api_id: api_id.clone() }).await.unwrap();
        let gone = c.get_api(&ApiRequest { api_id }).await.unwrap_err();
        assert_eq!(gone.api().unwrap().code(), "api_not_found", "{gone}");
    });
}

#[test]
fn errors_are_typed_problem_details() {
    let s = TestServer::start();
    let rt = runtime();
    let c = Client::new(&s.base, &s.root_key).unwrap();
    let reader = Client::new(&s.base, s.root_key_with(&["api.*.read_key"])).unwrap();
    let stranger = Client::new(&s.base, "kg_root_not_a_key_of_this_server_0000").unwrap();
    rt.block_on(async {
        let e = c.get_key(&GetKeyRequest { key_id: "key_missing".into() }).await.unwrap_err();
        let p = e.api().unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!((p.status, p.code()), (404, "key_not_found"), "{p}");
        assert!(p.request_id.starts_with("req_"), "the request id comes with the problem: {p:?}");
        assert!(!e.is_transient());

        let e = c.create_api(&CreateApiRequest { name: "x".into() }).await.unwrap_err();
        let p = e.api().unwrap();
        assert_eq!(p.status, 400, "{p}");
        assert!(p.errors.iter().any(|f| f.location == "body.name"), "{p:?}");

        let e = stranger.get_key(&GetKeyRequest { key_id: "key_missing".into() }).await.unwrap_err();
        assert_eq!(e.status(), Some(401), "{e}");

        let e = reader.create_api(&CreateApiRequest { name: "not-allowed".into() }).await.unwrap_err();
        assert_eq!(e.status(), Some(403), "{e}");

        let body = CreateIdentityRequest { external_id: "twice".into(), ..Default::default() };
        c.create_identity(&body).await.unwrap();
        let e = c.create_identity(&body).await.unwrap_err();
        assert_eq!(e.status(), Some(409), "{e}");

        let e = Client::new("ftp://example.com", "k").unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e:?}");
    });
}

/// A one-connection-at-a-time HTTP server answering `answers` in turn (then the last).
fn scripted_server(answers: Vec<&'static str>) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let answer = answers[n.min(answers.len() - 1)];
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, served)
}

const UNAVAILABLE: &str = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 0\r\nConnection: close\r\nContent-Length: 140\r\n\r\n{\"meta\":{\"requestId\":\"req_1\"},\"error\":{\"title\":\"Service Unavailable\",\"detail\":\"down\",\"status\":503,\"type\":\"x/unkey/application/unavailable\"}}";
const LIVE: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 54\r\n\r\n{\"meta\":{\"requestId\":\"req_2\"},\"data\":{\"message\":\"OK\"}}";

#[test]
fn a_503_is_tried_again_with_backoff_and_a_timeout_is_typed() {
    let rt = runtime();
    rt.block_on(async {
        // Two 503s, then a success: answered with the success.
        let (port, served) = scripted_server(vec![UNAVAILABLE, UNAVAILABLE, LIVE]);
        let c = Client::builder(format!("http://127.0.0.1:{port}"))
            .retries(2)
            .backoff(Duration::from_millis(10))
            .build()
            .unwrap();
        let live = c.liveness().await.unwrap();
        assert_eq!((live.message.as_str(), live.request_id.as_str()), ("OK", "req_2"));
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 3);

        // Retries exhausted: the last 503 is the typed error.
        let (port, served) = scripted_server(vec![UNAVAILABLE]);
        let c = Client::builder(format!("http://127.0.0.1:{port}"))
            .retries(1)
            .backoff(Duration::from_millis(10))
            .build()
            .unwrap();
        let e = c.liveness().await.unwrap_err();
        let p = e.api().unwrap_or_else(|| panic!("{e:?}"));
        assert_eq!((p.status, p.code(), p.request_id.as_str()), (503, "unavailable", "req_1"));
        assert!(e.is_transient());
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2, "one try and one retry");

        // A server that never answers: the timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let c = Client::builder(format!("http://127.0.0.1:{port}"))
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let began = Instant::now();
        let e = c.liveness().await.unwrap_err();
        assert!(matches!(e, Error::Timeout(_)), "{e:?}");
        assert!(began.elapsed() < Duration::from_secs(5));
        drop(silent);

        // Not keygate at all: a decode error, not a panic.
        let (port, _) = scripted_server(vec![
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        ]);
        let c = Client::builder(format!("http://127.0.0.1:{port}")).build().unwrap();
        let e = c.liveness().await.unwrap_err();
        assert!(matches!(e, Error::Decode { status: 200, .. }), "{e:?}");
    });
}
