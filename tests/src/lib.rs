//! Harness for the black-box HTTP tests: [`TestServer::start`] runs the real server
//! (same `keygate::start` as the binary) on a free port against a fresh SQLite file, with
//! a [`ManualClock`] so that tests move time instead of sleeping.
#![allow(clippy::unwrap_used)]

pub mod postgres_server;
pub mod proxy;
pub mod webdriver;

use actix_web::dev::ServerHandle;
use actix_web::web;
use diesel::prelude::*;
use keygate::{AppState, ServerConfig};
use keygate_domain::ManualClock;
use keygate_test_support::TestDb;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// The keyring every test server seals recoverable keys with: `k1`, 32 bytes of 0x01.
pub const TEST_KEYRING: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

/// 2026-11-22T00:00:00Z, a multiple of every window length the tests use.
pub const T0: u64 = 1_795_305_600_000;

/// An HTTP response, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts an error response with the contract's body; returns its message.
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "status of {}", self.text);
        let err = &self.json["error"];
        assert_eq!(err["code"], code, "code of {}", self.text);
        let obj = err.as_object().unwrap_or_else(|| panic!("error object in {}", self.text));
        assert_eq!(obj.len(), 4, "exactly code, message, docs, requestId: {}", self.text);
        for field in ["code", "message", "docs", "requestId"] {
            assert!(err[field].is_string(), "{field} is a string in {}", self.text);
        }
        assert!(err["docs"].as_str().unwrap().ends_with(&format!("/errors#{code}")));
        assert_eq!(err["requestId"].as_str(), self.header("unkey-request-id"), "requestId equals the header");
        assert!(self.header("content-type").is_some_and(|c| c.starts_with("application/json")));
        err["message"].as_str().unwrap().to_string()
    }

    /// Asserts a v2 problem response (API-v2.md §1.1) whose `type` ends with `kind`;
    /// returns its `detail`.
    pub fn assert_problem(&self, status: u16, kind: &str) -> String {
        assert_eq!(self.status, status, "status of {}", self.text);
        let err = &self.json["error"];
        let obj = err.as_object().unwrap_or_else(|| panic!("error object in {}", self.text));
        assert_eq!(err["status"], status, "status field of {}", self.text);
        assert!(err["title"].is_string() && err["detail"].is_string(), "{}", self.text);
        let ty = err["type"].as_str().unwrap_or_default();
        assert!(ty.ends_with(&format!("/errors/{kind}")), "type {ty} ends with {kind}");
        let allowed = ["title", "detail", "status", "type", "errors"];
        assert!(obj.keys().all(|k| allowed.contains(&k.as_str())), "only the problem fields: {}", self.text);
        assert_eq!(
            obj.contains_key("errors"),
            matches!(status, 400 | 413),
            "errors on 400/413: {}",
            self.text
        );
        assert_eq!(self.json["meta"]["requestId"].as_str(), self.header("unkey-request-id"));
        assert_eq!(self.json.as_object().unwrap().len(), 2, "meta and error only: {}", self.text);
        err["detail"].as_str().unwrap().to_string()
    }

    /// The `data` of a v2 success, after checking the envelope.
    pub fn data(&self) -> &Value {
        assert_eq!(self.status, 200, "{}", self.text);
        assert_eq!(self.json["meta"]["requestId"].as_str(), self.header("unkey-request-id"), "{}", self.text);
        assert!(self.header("content-type").is_some_and(|c| c.starts_with("application/json")));
        &self.json["data"]
    }

    pub fn names(&self) -> Vec<String> {
        assert_eq!(self.status, 200, "{}", self.text);
        self.json.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
    }
}

/// A running keygate server on a free port with a fresh database.
pub struct TestServer {
    pub base: String,
    /// Where `/metrics` listens when the configuration gives it its own address.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The bootstrap root key (holds `*`) of workspace `default`.
    pub root_key: String,
    pub workspace_id: String,
    pub clock: ManualClock,
    pub state: web::Data<AppState>,
    pub client: reqwest::blocking::Client,
    handle: ServerHandle,
    thread: Option<JoinHandle<()>>,
    /// Declared last: dropped after the server has stopped.
    pub db: Arc<TestDb>,
}

impl TestServer {
    /// A server on a fresh database (SQLite, or PostgreSQL when
    /// `KEYGATE_TEST_POSTGRES_URL` is set; see `keygate_test_support`).
    pub fn start() -> Self {
        Self::start_on(Arc::new(TestDb::fresh()))
    }

    /// A server on a given database; several servers may share one (scale-out tests).
    pub fn start_on(db: Arc<TestDb>) -> Self {
        Self::start_with(Self::config(&db.url), db)
    }

    /// A fresh server whose webhook endpoints may point at loopback (a test receiver).
    pub fn start_hooked() -> Self {
        let db = Arc::new(TestDb::fresh());
        let mut config = Self::config(&db.url);
        config.webhooks_allow_private = true;
        Self::start_with(config, db)
    }

    /// The configuration the tests use for a database URL.
    pub fn config(url: &str) -> ServerConfig {
        let mut config = ServerConfig::for_database(url);
        config.listen = "127.0.0.1:0".into();
        config.workers = Some(2);
        config.root_key = None;
        // The shared rate-limit store when the run selects it (`.ci/run` does, with
        // PostgreSQL): every HTTP test then runs on the scale-out configuration.
        config.redis_url = keygate_test_support::redis_url();
        config.redis.cluster = config.redis_url.is_some() && keygate_test_support::redis_cluster();
        config.redis.key_prefix = keygate_test_support::redis_prefix_for(url);
        config.handle_signals = false;
        // Recoverable keys (API-v2.md §16) sealed under this test keyring.
        config.encryption_keys = Some(TEST_KEYRING.to_string());
        config
    }

    /// A server whose database waits (pool wait, statement timeout) are 1 s: outage tests.
    pub fn start_with_short_db_timeouts(db: Arc<TestDb>) -> Self {
        let mut config = Self::config(&db.url);
        config.pool.connect_timeout = std::time::Duration::from_millis(1_000);
        config.pool.statement_timeout = std::time::Duration::from_millis(1_000);
        Self::start_with(config, db)
    }

    pub fn start_with(config: ServerConfig, db: Arc<TestDb>) -> Self {
        let clock = ManualClock::new(T0);
        let server_clock = Arc::new(clock.clone());
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                match keygate::start(config, server_clock) {
                    Ok(running) => {
                        let info = (
                            running.addr.tcp().expect("the tests listen on TCP"),
                            running.handle.clone(),
                            running.state.clone(),
                            running.bootstrap_root_key,
                            running.metrics_addr,
                        );
                        tx.send(Ok(info)).unwrap();
                        let _ = running.server.await;
                    }
                    Err(e) => tx.send(Err(format!("{e:#}"))).unwrap(),
                }
            })
        });
        let (addr, handle, state, root_key, metrics_addr) = rx.recv().unwrap().unwrap();
        // A second server on a shared database finds it bootstrapped: use a new `*` key.
        let root_key = match root_key {
            Some(k) => k.expose().to_string(),
            None => state.rbac.create_root_key("default", &["*".to_string()]).unwrap().1.expose().to_string(),
        };
        let principal = state.rbac.authenticate(&root_key).unwrap();
        let client = reqwest::blocking::Client::builder().pool_max_idle_per_host(32).build().unwrap();
        Self {
            base: format!("http://{addr}"),
            metrics_addr,
            root_key,
            workspace_id: principal.workspace_id.clone(),
            clock,
            state,
            client,
            handle,
            thread: Some(thread),
            db,
        }
    }

    fn send(&self, req: reqwest::blocking::RequestBuilder) -> Resp {
        let res = req.send().unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let text = res.text().unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(headers.contains_key("unkey-request-id"), "every response has Unkey-Request-Id");
        assert!(status < 500 || status == 503, "no 5xx for any input: {status} {text}");
        Resp { status, headers, text, json }
    }

    /// POST a raw body with `Content-Type: application/json` and `Bearer token`.
    pub fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        body: impl Into<reqwest::blocking::Body>,
    ) -> Resp {
        let mut req =
            self.client.post(format!("{}{path}", self.base)).header("content-type", "application/json");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req.body(body))
    }

    pub fn post_as(&self, token: &str, path: &str, body: &Value) -> Resp {
        self.post_raw(path, Some(token), body.to_string())
    }

    /// POST as the bootstrap root key.
    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.post_as(&self.root_key, path, body)
    }

    pub fn request(&self, req: reqwest::blocking::RequestBuilder) -> Resp {
        self.send(req)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get_key(&self, key_id: &str) -> Resp {
        self.send(
            self.client
                .get(self.url("/v1/keys.getKey"))
                .query(&[("keyId", key_id)])
                .bearer_auth(&self.root_key),
        )
    }

    /// Names of the key's direct permissions, read back through `keys.getKey`.
    pub fn key_permissions(&self, key_id: &str) -> Vec<String> {
        let r = self.get_key(key_id);
        assert_eq!(r.status, 200, "{}", r.text);
        r.json["permissions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    }

    pub fn key_roles(&self, key_id: &str) -> Vec<String> {
        let r = self.get_key(key_id);
        assert_eq!(r.status, 200, "{}", r.text);
        r.json["roles"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect()
    }

    /// A new key in workspace `default` (as `keygate keys create` does).
    pub fn create_key(&self) -> String {
        self.create_key_in(&self.workspace_id)
    }

    pub fn create_key_in(&self, workspace_id: &str) -> String {
        self.state.rbac.create_key(workspace_id, None).unwrap().0.id
    }

    /// A root key of workspace `default` holding exactly `permissions`.
    pub fn root_key_with(&self, permissions: &[&str]) -> String {
        self.root_key_in(&self.workspace_id, permissions)
    }

    pub fn root_key_in(&self, workspace: &str, permissions: &[&str]) -> String {
        let perms: Vec<String> = permissions.iter().map(|p| p.to_string()).collect();
        self.state.rbac.create_root_key(workspace, &perms).unwrap().1.expose().to_string()
    }

    pub fn create_workspace(&self, name: &str) -> String {
        self.state.rbac.create_workspace(name).unwrap().id
    }

    /// Names of every permission (or role) of a workspace, read from the database.
    pub fn workspace_names(&self, table: &str, workspace_id: &str) -> Vec<String> {
        #[derive(QueryableByName)]
        struct N {
            #[diesel(sql_type = diesel::sql_types::Text)]
            name: String,
        }
        let sql = format!("SELECT name FROM {table} WHERE workspace_id = '{workspace_id}' ORDER BY name");
        let rows: Vec<N> = self.state.rbac.store().with_conn(|c| diesel::sql_query(sql).load(c)).unwrap();
        rows.into_iter().map(|n| n.name).collect()
    }

    /// Number of rows matching a SQL condition.
    pub fn count(&self, table: &str, condition: &str) -> i64 {
        #[derive(QueryableByName)]
        struct C {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE {condition}");
        self.state.rbac.store().with_conn(|c| diesel::sql_query(sql).get_result::<C>(c)).unwrap().n
    }

    /// POST `/v2/<op>` as the bootstrap root key.
    pub fn v2(&self, op: &str, body: &Value) -> Resp {
        self.post(&format!("/v2/{op}"), body)
    }

    /// POST `/v2/<op>` as `token`.
    pub fn v2_as(&self, token: &str, op: &str, body: &Value) -> Resp {
        self.post_as(token, &format!("/v2/{op}"), body)
    }

    /// `ratelimits.limit` as the bootstrap root key.
    pub fn limit(&self, body: Value) -> Resp {
        self.post("/v1/ratelimits.limit", &body)
    }
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        actix_web::rt::System::new().block_on(handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `{"keyId": key, "permissions": [...]}`.
pub fn set_body(key: &str, permissions: Value) -> Value {
    json!({ "keyId": key, "permissions": permissions })
}

/// `{"keyId": key, "roles": [...]}`.
pub fn roles_body(key: &str, roles: Value) -> Value {
    json!({ "keyId": key, "roles": roles })
}

/// The socket address a `redis://[user:password@]host:port[/db]` URL points at (to put a
/// proxy in front of it).
pub fn redis_addr(url: &str) -> std::net::SocketAddr {
    use std::net::ToSocketAddrs;
    let host = url.trim_start_matches("redis://").split('/').next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or_default();
    host.to_socket_addrs().ok().and_then(|mut a| a.next()).unwrap_or_else(|| panic!("no address in {url}"))
}

/// The scale-out configuration's URLs are set (PostgreSQL and Redis), for a test that needs
/// them: fails loudly when they are not. Returns the Redis URL.
pub fn scale_out() -> String {
    let pg = std::env::var(keygate_test_support::POSTGRES_ENV).ok();
    let redis = keygate_test_support::redis_url();
    assert!(pg.is_some(), "set {} (PostgreSQL) for this test", keygate_test_support::POSTGRES_ENV);
    redis.expect("set KEYGATE_TEST_REDIS_URL (Redis) for this test")
}
