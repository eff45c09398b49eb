//! `keygate store copy` (issue 47), through servers: a populated SQLite database (every kind
//! of object, credits part-spent, analytics of several days, audit events) copied to
//! PostgreSQL while a server on the SQLite file keeps verifying; a server on the copy answers
//! every read, verification and credit balance as the source did; the same back to SQLite;
//! a target with rows is refused; `store verify` catches a changed row.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, keygate_command, request, start_keygate};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_store_copy_test_0123456789abcdefgh";

struct Server {
    port: u16,
    proc: Proc,
}

impl Server {
    fn start(url: &str) -> Self {
        let port = free_port();
        let mut cmd = keygate_command(BIN, url, port);
        cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY);
        Self { port, proc: start_keygate(cmd) }
    }

    /// Stopped gracefully: credits and analytics held in memory are written first.
    fn stop(mut self) {
        self.proc.terminate();
        assert_eq!(self.proc.wait_exit(Duration::from_secs(30)), Some(0), "a graceful stop");
    }

    /// A v2 call's `data` (or its whole error), without the request's id.
    fn v2(&self, op: &str, body: &Value) -> Value {
        let auth = format!("Bearer {ROOT_KEY}");
        let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
        let r = request(self.port, "POST", &format!("/v2/{op}"), &headers, &body.to_string());
        let mut answer = r.json();
        answer["meta"].take();
        json!({ "status": r.status, "answer": answer })
    }

    fn ok(&self, op: &str, body: &Value) -> Value {
        let got = self.v2(op, body);
        assert_eq!(got["status"], 200, "{op} {body}: {got}");
        got["answer"]["data"].clone()
    }

    fn v1_get(&self, path: &str) -> Value {
        let auth = format!("Bearer {ROOT_KEY}");
        let r = request(self.port, "GET", path, &[("Authorization", auth.as_str())], "");
        assert_eq!(r.status, 200, "{path}");
        r.json()
    }
}

/// What the copy must carry, made through the API.
struct Made {
    api: String,
    keys: Vec<(String, String)>,
    load_key: String,
}

fn populate(s: &Server) -> Made {
    let api = s.ok("apis.createApi", &json!({"name": "copied"}))["apiId"].as_str().unwrap().to_string();
    let load_api = s.ok("apis.createApi", &json!({"name": "load"}))["apiId"].as_str().unwrap().to_string();
    for p in ["documents.read", "documents.write", "billing.read"] {
        s.ok(
            "permissions.createPermission",
            &json!({"name": p, "slug": p, "description": format!("can {p}")}),
        );
    }
    s.ok("permissions.createRole", &json!({"name": "editor", "description": "edits"}));
    s.ok(
        "permissions.setRolePermissions",
        &json!({"role": "editor", "permissions": ["documents.read", "documents.write"]}),
    );
    s.ok(
        "identities.createIdentity",
        &json!({"externalId": "customer_1", "meta": {"plan": "pro"},
                "ratelimits": [{"name": "per_customer", "limit": 100, "duration": 60000, "autoApply": true}]}),
    );
    let bodies = [
        json!({"apiId": api, "name": "plain", "permissions": ["billing.read"], "roles": ["editor"],
               "meta": {"team": "a", "n": 1}, "externalId": "customer_1"}),
        json!({"apiId": api, "name": "credits", "credits": {"remaining": 10, "refill": {"interval": "daily", "amount": 5}}}),
        json!({"apiId": api, "name": "limited", "ratelimits": [{"name": "calls", "limit": 3, "duration": 60000, "autoApply": true}]}),
        json!({"apiId": api, "name": "expiring", "expires": 4_000_000_000_000_u64}),
        json!({"apiId": api, "name": "disabled", "enabled": false}),
        json!({"apiId": api, "name": "prefixed", "prefix": "sk_live"}),
    ];
    let mut keys: Vec<(String, String)> = bodies
        .iter()
        .map(|b| {
            let d = s.ok("keys.createKey", b);
            (d["keyId"].as_str().unwrap().to_string(), d["key"].as_str().unwrap().to_string())
        })
        .collect();
    let migrated_secret = "sk_migrated_from_elsewhere_0123456789";
    let hash = keygate_domain::digest_hex(&keygate_domain::secret_digest(migrated_secret));
    let m = s.ok(
        "keys.migrateKeys",
        &json!({"migrationId": "sha256_hex", "apiId": api, "keys": [{"hash": hash, "name": "migrated"}]}),
    );
    keys.push((m["migrated"][0]["keyId"].as_str().unwrap().to_string(), migrated_secret.to_string()));
    let load = s.ok("keys.createKey", &json!({"apiId": load_api}));

    // Credits part-spent, limits taken, analytics and last-used times.
    for (_, secret) in &keys {
        for _ in 0..3 {
            s.ok("keys.verifyKey", &json!({"key": secret, "tags": ["path=/copy"]}));
        }
    }
    s.ok("keys.verifyKey", &json!({"key": keys[0].1, "permissions": "documents.write"}));
    s.ok("keys.verifyKey", &json!({"key": keys[0].1, "permissions": "nope.nope"}));
    s.ok("keys.updateKey", &json!({"keyId": keys[5].0, "name": "renamed", "meta": {"v": 2}}));
    // A namespace, its limits taken, an override.
    for _ in 0..4 {
        s.ok(
            "ratelimit.limit",
            &json!({"namespace": "copy_ns", "identifier": "user_1", "limit": 2, "duration": 60000}),
        );
    }
    s.ok(
        "ratelimit.setOverride",
        &json!({"namespace": "copy_ns", "identifier": "vip_*", "limit": 50, "duration": 60000}),
    );
    Made { api, keys, load_key: load["key"].as_str().unwrap().to_string() }
}

/// Every read a server answers about what was made (no writes, no spending).
fn reads(s: &Server, made: &Made) -> Value {
    let mut out = serde_json::Map::new();
    for (id, _) in &made.keys {
        out.insert(format!("getKey {id}"), s.ok("keys.getKey", &json!({"keyId": id})));
    }
    let mut cursor: Option<String> = None;
    for page in 0.. {
        let mut body = json!({"apiId": made.api, "limit": 2});
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let got = s.v2("apis.listKeys", &body);
        cursor = got["answer"]["pagination"]["cursor"].as_str().map(str::to_string);
        out.insert(format!("listKeys page {page}"), got);
        if cursor.is_none() {
            break;
        }
    }
    for (op, body) in [
        ("apis.getApi", json!({"apiId": made.api})),
        ("permissions.listPermissions", json!({})),
        ("permissions.listRoles", json!({})),
        ("permissions.getRole", json!({"role": "editor"})),
        ("identities.listIdentities", json!({})),
        ("identities.getIdentity", json!({"identity": "customer_1"})),
        ("ratelimit.listOverrides", json!({"namespace": "copy_ns"})),
        ("keygate.getVerifications", json!({"apiId": made.api, "groupBy": ["key", "tags"], "start": 0})),
        ("keygate.getVerifications", json!({"apiId": made.api, "groupBy": "day", "start": 0})),
        ("keygate.getRatelimits", json!({"namespace": "copy_ns", "groupBy": "day", "start": 0})),
    ] {
        out.insert(format!("{op} {body}"), s.v2(op, &body));
    }
    out.insert("audit".into(), s.v1_get("/v1/audit.listEvents?limit=100"));
    out.insert("v1 listKeys".into(), s.v1_get(&format!("/v1/apis.listKeys?apiId={}", made.api)));
    Value::Object(out)
}

/// `a == b`, else a panic naming the first read that differs.
fn assert_same(a: &Value, b: &Value, what: &str) {
    for (k, v) in a.as_object().unwrap() {
        assert_eq!(Some(v), b.get(k), "{what}: {k}");
    }
    assert_eq!(a, b, "{what}");
}

/// Verifications of every key (and of no key), as a server answers them now.
fn verifications(s: &Server, made: &Made) -> Vec<Value> {
    let mut out: Vec<Value> =
        made.keys.iter().map(|(_, secret)| s.v2("keys.verifyKey", &json!({"key": secret}))).collect();
    out.push(s.v2("keys.verifyKey", &json!({"key": made.keys[0].1, "permissions": "documents.write"})));
    out.push(s.v2("keys.verifyKey", &json!({"key": made.keys[1].1, "credits": {"cost": 2}})));
    out.push(s.v2("keys.verifyKey", &json!({"key": "sk_not_a_key_at_all_0123456789"})));
    out
}

/// The admin CLI: exit code, stdout as JSON (Null if none), stderr.
fn cli(args: &[&str]) -> (i32, Value, String) {
    let out = std::process::Command::new(BIN)
        .env_remove("KEYGATE_CONFIG")
        .env_remove("DATABASE_URL")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), json, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Analytics of the days before today: each count row repeated one, two and three days back.
fn add_past_days(sqlite_url: &str) {
    use diesel::connection::SimpleConnection;
    let store = keygate_store::SqlStore::open(sqlite_url, keygate_store::PoolSettings::default()).unwrap();
    let mut sql = String::new();
    for days in 1..=3 {
        let back = days * 86_400_000;
        sql.push_str(&format!(
            "INSERT INTO verification_counts SELECT workspace_id, width, bucket - {back}, api_id, key_id, \
             identity_id, outcome, tags, count * {days}, spent_credits * {days} FROM verification_counts WHERE bucket > strftime('%s','now') * 1000 - 86400000;
             INSERT INTO api_verification_counts SELECT workspace_id, api_id, width, bucket - {back}, outcome, \
             count * {days}, spent_credits * {days} FROM api_verification_counts WHERE bucket > strftime('%s','now') * 1000 - 86400000;
             INSERT INTO ratelimit_counts SELECT workspace_id, namespace_id, width, bucket - {back}, passed * {days}, \
             denied FROM ratelimit_counts WHERE bucket > strftime('%s','now') * 1000 - 86400000;"
        ));
    }
    sql.push_str(
        "INSERT INTO dashboard_sessions SELECT 'h_copy_session', workspace_id, id, 'csrf_copy', created_at, created_at \
         FROM root_keys LIMIT 1;",
    );
    store.with_conn(|c| c.batch_execute(&sql)).unwrap();
}

#[test]
#[ignore = "needs PostgreSQL: set KEYGATE_TEST_POSTGRES_URL and run with --include-ignored (.ci/run does)"]
fn sqlite_to_postgres_and_back_while_serving_answers_the_same() {
    let base = TestDb::postgres_url().expect("KEYGATE_TEST_POSTGRES_URL must be set for this test");
    let sqlite = TestDb::sqlite();
    let pg = TestDb::postgres(&base);
    let server = Server::start(&sqlite.url);
    let made = populate(&server);
    server.stop();
    add_past_days(&sqlite.url);
    // Rate-limit budgets are the in-process store's, kept beside the SQLite file, not rows
    // of the database: a copy carries none (docs/operations.md), so the source starts
    // without them too, to answer as the copy will.
    std::fs::remove_dir_all(sqlite.dir().join("keygate.db-ratelimits")).unwrap();

    // The source's answers, from a fresh start on it.
    let source = Server::start(&sqlite.url);
    let expected = reads(&source, &made);
    assert!(expected.to_string().contains("documents.write"));

    // The copy, while the source keeps verifying a key of another API.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, served, port, secret) = (stop.clone(), served.clone(), source.port, made.load_key.clone());
        std::thread::spawn(move || {
            let auth = format!("Bearer {ROOT_KEY}");
            let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
            while !stop.load(Ordering::Relaxed) {
                let r = request(
                    port,
                    "POST",
                    "/v2/keys.verifyKey",
                    &headers,
                    &json!({"key": secret}).to_string(),
                );
                assert_eq!(r.json()["data"]["valid"], json!(true));
                served.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (code, summary, err) = cli(&["store", "copy", "--from", &sqlite.url, "--to", &pg.url]);
    let during = served.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    assert_eq!(code, 0, "{summary} {err}");
    assert!(during > 0 && served.load(Ordering::Relaxed) > during, "the source served during the copy");
    assert_eq!(summary["verified"], json!(true));
    assert_eq!(summary["tables"]["keys"]["rows"], json!(made.keys.len() + 1));
    assert!(summary["tables"]["verification_counts"]["rows"].as_u64().unwrap() > 0);
    assert_eq!(summary["tables"]["dashboard_sessions"]["rows"], json!(1));
    assert!(!summary.to_string().contains("postgres@"), "no credentials: {summary}");

    // A server on the copy answers as the source did.
    let copy = Server::start(&pg.url);
    assert_same(&reads(&copy, &made), &expected, "the copy against the source");
    let on_copy = verifications(&copy, &made);
    assert_eq!(on_copy, verifications(&source, &made), "the same codes and balances");
    assert_eq!(
        on_copy[1]["answer"]["data"]["credits"],
        json!(6),
        "10, 3 spent before, 1 now: {}",
        on_copy[1]
    );
    assert_eq!(on_copy[on_copy.len() - 2]["answer"]["data"]["credits"], json!(4), "{on_copy:?}");
    let codes: Vec<&Value> = on_copy.iter().map(|v| &v["answer"]["data"]["code"]).collect();
    assert_eq!(
        codes,
        ["VALID", "VALID", "VALID", "VALID", "DISABLED", "VALID", "VALID", "VALID", "VALID", "NOT_FOUND"]
            .iter()
            .map(|c| json!(c))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    drop(source);

    // A target with rows is refused, naming a table.
    let (code, _, err) = cli(&["store", "copy", "--from", &sqlite.url, "--to", &pg.url]);
    assert_eq!(code, 1);
    assert!(err.contains("table workspaces") && err.contains("--replace"), "{err}");

    // And back to SQLite, from the copy as it is now (its verifications' counts written
    // by its graceful stop).
    copy.stop();
    let copy = Server::start(&pg.url);
    let now_on_copy = reads(&copy, &made);
    copy.stop();
    let back = TestDb::sqlite();
    let (code, summary, err) = cli(&["store", "copy", "--from", &pg.url, "--to", &back.url]);
    assert_eq!(code, 0, "{summary} {err}");
    assert_eq!(summary["changedAfterSnapshot"], json!([]), "nothing wrote to the copy");
    let (code, same, err) = cli(&["store", "verify", "--from", &pg.url, "--to", &back.url]);
    assert_eq!((code, &same["same"]), (0, &json!(true)), "{err}");
    assert_eq!(same["tables"], summary["tables"]);
    let restored = Server::start(&back.url);
    assert_same(&reads(&restored, &made), &now_on_copy, "back on SQLite against the copy");
    drop(restored);

    // A row changed in one of them: `store verify` names its table.
    let (code, _, _) = cli(&["store", "copy", "--from", &pg.url, "--to", &back.url, "--replace"]);
    assert_eq!(code, 0);
    {
        use diesel::connection::SimpleConnection;
        let store = keygate_store::SqlStore::open(&back.url, keygate_store::PoolSettings::default()).unwrap();
        store
            .with_conn(|c| {
                c.batch_execute(
                    "UPDATE keys SET credits_remaining = 1000 WHERE credits_remaining IS NOT NULL",
                )
            })
            .unwrap();
    }
    let (code, _, err) = cli(&["store", "verify", "--from", &pg.url, "--to", &back.url]);
    assert_eq!(code, 1);
    assert!(err.contains("table keys differs"), "{err}");
}
