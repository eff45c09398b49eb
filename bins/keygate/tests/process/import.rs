//! `keygate keys import` (issue 47): 100,000 keys from a file of JSON lines, the import
//! killed part way and run again (nothing doubles, the rest comes in, the keys verify on a
//! running server); a line that is not an entry stops the import there with the lines
//! before it imported; an unknown API writes nothing. On SQLite, and on PostgreSQL with
//! KEYGATE_TEST_POSTGRES_URL.
#![allow(clippy::unwrap_used)]

use keygate_domain::{digest_hex, secret_digest};
use keygate_test_support::{Proc, TestDb, free_port, keygate_command, request, start_keygate};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const ROOT_KEY: &str = "kg_root_import_test_0123456789abcdefghij";

struct Server {
    port: u16,
    _proc: Proc,
}

impl Server {
    fn start(db: &TestDb) -> Self {
        let port = free_port();
        let mut cmd = keygate_command(BIN, &db.url, port);
        cmd.env("KEYGATE_ROOT_KEY", ROOT_KEY);
        Self { port, _proc: start_keygate(cmd) }
    }

    fn call(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let auth = format!("Bearer {ROOT_KEY}");
        let headers = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
        let body = if method == "GET" { String::new() } else { body.to_string() };
        let r = request(self.port, method, path, &headers, &body);
        (r.status, r.json())
    }

    fn v2(&self, op: &str, body: &Value) -> Value {
        let (status, answer) = self.call("POST", &format!("/v2/{op}"), body);
        assert_eq!(status, 200, "{op}: {answer}");
        answer["data"].clone()
    }

    fn create_api(&self) -> String {
        self.v2("apis.createApi", &json!({"name": "imported"}))["apiId"].as_str().unwrap().to_string()
    }

    /// How many keys the API holds.
    fn count(&self, api: &str) -> u64 {
        let (status, answer) =
            self.call("GET", &format!("/v1/apis.listKeys?apiId={api}&limit=1"), &json!({}));
        assert_eq!(status, 200, "{answer}");
        answer["total"].as_u64().unwrap()
    }
}

fn secret(i: usize) -> String {
    format!("sk_live_imported_{i:06}_abcdefghijklmnop")
}

/// Entry `i`: its hash, and on some entries a name, an identity, a permission, meta,
/// credits.
fn entry(i: usize) -> Value {
    let mut e = json!({"hash": digest_hex(&secret_digest(&secret(i)))});
    if i.is_multiple_of(10) {
        e["externalId"] = json!(format!("customer_{}", i % 1000));
    }
    if i.is_multiple_of(7) {
        e["permissions"] = json!(["documents.read"]);
        e["name"] = json!(format!("key {i}"));
    }
    if i.is_multiple_of(13) {
        e["meta"] = json!({"plan": "pro", "i": i});
        e["credits"] = json!({"remaining": 100});
    }
    e
}

fn write_lines(path: &Path, lines: impl Iterator<Item = String>) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for line in lines {
        writeln!(file, "{line}").unwrap();
    }
    file.flush().unwrap();
}

fn import_command(db: &TestDb, api: &str, file: &Path) -> Command {
    import_as(db, api, "sha256_hex", file)
}

fn import_as(db: &TestDb, api: &str, migration: &str, file: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("DATABASE_URL", &db.url).env_remove("KEYGATE_CONFIG").env_remove("KEYGATE_MIGRATIONS").args([
        "keys",
        "import",
        "--api",
        api,
        "--migration",
        migration,
        file.to_str().unwrap(),
    ]);
    cmd
}

/// `keys import` run to its end: exit code, the summary on stdout, stderr.
fn import(db: &TestDb, api: &str, file: &Path) -> (i32, Value, String) {
    let out = import_command(db, api, file).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let summary = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), summary, stderr)
}

fn verify(s: &Server, i: usize) -> Value {
    s.v2("keys.verifyKey", &json!({"key": secret(i)}))
}

#[test]
fn a_large_import_killed_part_way_completes_when_run_again() {
    const KEYS: usize = 100_000;
    let db = TestDb::fresh();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&db);
    let api = server.create_api();
    let file: PathBuf = dir.path().join("keys.jsonl");
    write_lines(&file, (0..KEYS).map(|i| entry(i).to_string()));

    // Killed (SIGKILL: no chance to finish a batch) once some keys are in.
    let mut child =
        import_command(&db, &api, &file).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    while server.count(&api) < 5_000 {
        assert!(started.elapsed() < Duration::from_secs(120), "the import does not progress");
        assert!(child.try_wait().unwrap().is_none(), "the import ended before it was killed");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = server.count(&api);
    assert!((5_000..KEYS as u64).contains(&before), "killed part way: {before}");
    assert_eq!(before % 1_000, 0, "whole transactions of 1,000 only: {before}");

    // Run again: what is there is failed, the rest migrated, nothing doubles.
    let (code, summary, stderr) = import(&db, &api, &file);
    assert_eq!(code, 0, "{summary} {stderr}");
    assert_eq!(stderr, "", "no progress bar when stderr is not a terminal");
    assert_eq!(summary["failed"], json!(before), "{summary}");
    assert_eq!(summary["migrated"], json!(KEYS as u64 - before), "{summary}");
    assert!(summary["seconds"].as_f64().unwrap() > 0.0, "{summary}");
    assert_eq!(server.count(&api), KEYS as u64);

    // The keys verify on the running server, with what their entries gave them.
    for i in (0..KEYS).step_by(997).chain([1, KEYS - 1]) {
        let v = verify(&server, i);
        assert_eq!(v["valid"], json!(true), "key {i}: {v}");
        if i.is_multiple_of(10) {
            assert_eq!(v["identity"]["externalId"], json!(format!("customer_{}", i % 1000)), "{v}");
        }
        if i.is_multiple_of(13) {
            assert_eq!(v["meta"]["plan"], json!("pro"), "{v}");
            assert_eq!(v["credits"], json!(99), "{v}");
        }
    }
    let v = server.v2("keys.verifyKey", &json!({"key": secret(7), "permissions": "documents.read"}));
    assert_eq!(v["code"], "VALID", "{v}");
    let v = server.v2("keys.verifyKey", &json!({"key": secret(8), "permissions": "documents.read"}));
    assert_eq!(v["code"], "INSUFFICIENT_PERMISSIONS", "{v}");
    let v = server.v2("keys.verifyKey", &json!({"key": secret(KEYS)}));
    assert_eq!(v["code"], "NOT_FOUND", "{v}");

    // A third run changes nothing.
    let (code, summary, _) = import(&db, &api, &file);
    assert_eq!(code, 0);
    assert_eq!(summary["migrated"], json!(0), "{summary}");
    assert_eq!(summary["failed"], json!(KEYS), "{summary}");
    assert_eq!(server.count(&api), KEYS as u64);
}

#[test]
fn a_line_that_is_not_an_entry_stops_the_import_after_the_lines_before_it() {
    let db = TestDb::fresh();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&db);
    let api = server.create_api();

    // Broken JSON on line 1,531: the 1,530 before it are in (two calls), none after.
    let file = dir.path().join("broken.jsonl");
    let lines = (0..2_000).map(|i| if i == 1_530 { "{\"hash\": ".to_string() } else { entry(i).to_string() });
    write_lines(&file, lines);
    let (code, summary, stderr) = import(&db, &api, &file);
    assert_eq!(code, 1, "{summary}");
    assert_eq!(summary["migrated"], json!(1_530), "the partial summary on stdout: {summary}");
    assert!(stderr.starts_with("keygate: line 1531: "), "{stderr}");
    assert_eq!(server.count(&api), 1_530);
    assert_eq!(verify(&server, 1_529)["valid"], json!(true));
    assert_eq!(verify(&server, 1_531)["code"], json!("NOT_FOUND"));

    // A field out of bounds names its line and field; a hash the scheme cannot read (found
    // by the service, mid-call) too: the entries of that call before it are in.
    let file = dir.path().join("bounds.jsonl");
    let lines = (3_000..3_010).map(|i| {
        let mut e = entry(i);
        if i == 3_004 {
            e["credits"] = json!({"remaining": -1});
        }
        e.to_string()
    });
    write_lines(&file, lines);
    let (code, summary, stderr) = import(&db, &api, &file);
    assert_eq!(code, 1);
    assert_eq!(summary["migrated"], json!(4), "{summary}");
    assert!(stderr.contains("line 5: credits.remaining"), "{stderr}");

    let file = dir.path().join("hash.jsonl");
    let lines = (4_000..4_010).map(|i| {
        let mut e = entry(i);
        if i == 4_006 {
            e["hash"] = json!("not-hex");
        }
        e.to_string()
    });
    write_lines(&file, lines);
    let (code, summary, stderr) = import(&db, &api, &file);
    assert_eq!(code, 1);
    assert_eq!(summary["migrated"], json!(6), "{summary}");
    assert!(stderr.contains("line 7: hash"), "{stderr}");
    assert_eq!(verify(&server, 4_005)["valid"], json!(true));
    assert_eq!(verify(&server, 4_006)["code"], json!("NOT_FOUND"));
    assert_eq!(server.count(&api), 1_530 + 4 + 6);

    // Blank lines are skipped; an array is not an entry.
    let file = dir.path().join("shapes.jsonl");
    write_lines(&file, [entry(5_000).to_string(), String::new(), "[1]".into()].into_iter());
    let (code, summary, stderr) = import(&db, &api, &file);
    assert_eq!((code, summary["migrated"].clone()), (1, json!(1)), "{stderr}");
    assert!(stderr.contains("line 3: not an entry"), "{stderr}");
}

#[test]
fn an_unknown_api_or_migration_writes_nothing() {
    let db = TestDb::fresh();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&db);
    let api = server.create_api();
    let file = dir.path().join("keys.jsonl");
    write_lines(&file, (0..10).map(|i| entry(i).to_string()));

    let (code, summary, stderr) = import(&db, "api_missing", &file);
    assert_eq!((code, summary), (1, Value::Null));
    assert!(stderr.contains("api_missing"), "{stderr}");

    let out = import_as(&db, &api, "legacy_v1", &file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("migration legacy_v1 not found"), "{stderr}");
    assert_eq!(server.count(&api), 0);

    // A migration id the setting names works as its scheme.
    let out = import_as(&db, &api, "legacy_v1", &file)
        .env("KEYGATE_MIGRATIONS", "legacy_v1=sha256_hex")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.count(&api), 10);
}
