//! The `keygate` binary: admin subcommands (exact JSON on stdout, one-line errors) and the
//! server process itself (bootstrap, startup line, `KEYGATE_ROOT_KEY`).
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, http, keygate_command, start_keygate};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keygate");

fn keygate(db: &str, args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(BIN).args(args).env("DATABASE_URL", db).env("RUST_LOG", "error").output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let json = if out.status.success() {
        assert_eq!(stdout.trim().lines().count(), 1, "exactly one JSON object: {stdout}");
        serde_json::from_str(stdout.trim()).unwrap()
    } else {
        assert!(stdout.is_empty(), "nothing on stdout on failure: {stdout}");
        Value::Null
    };
    (out.status.success(), json, stderr)
}

fn ok(db: &str, args: &[&str]) -> Value {
    let (success, json, stderr) = keygate(db, args);
    assert!(success, "{args:?}: {stderr}");
    json
}

fn fail(db: &str, args: &[&str]) -> String {
    let (success, _, stderr) = keygate(db, args);
    assert!(!success, "{args:?} should fail");
    assert_eq!(stderr.trim().lines().count(), 1, "one-line error: {stderr}");
    stderr
}

#[test]
fn admin_subcommands_print_exact_json() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let ws = ok(&db, &["workspaces", "create", "--name", "acme"]);
    let ws_id = ws["id"].as_str().unwrap();
    assert!(ws_id.starts_with("ws_"));
    assert_eq!(ws.as_object().unwrap().len(), 2);
    assert_eq!(ws["name"], "acme");

    let rk = ok(
        &db,
        &[
            "root-keys",
            "create",
            "--workspace",
            "acme",
            "--permission",
            "rbac.*.create_role",
            "--permission",
            "api.*.read_key",
        ],
    );
    assert_eq!(rk["workspaceId"], ws_id);
    assert_eq!(rk["permissions"], serde_json::json!(["rbac.*.create_role", "api.*.read_key"]));
    let secret = rk["key"].as_str().unwrap();
    assert!(secret.len() > 40);
    let bare = ok(&db, &["root-keys", "create", "--workspace", ws_id]);
    assert_eq!(bare["permissions"], serde_json::json!([]));

    let listed = ok(&db, &["root-keys", "list", "--workspace", ws_id]);
    let keys = listed["rootKeys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    for k in keys {
        let obj = k.as_object().unwrap();
        let mut fields: Vec<&str> = obj.keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(
            fields,
            ["createdAt", "enabled", "end", "expires", "id", "lastUsedAt", "name", "permissions", "prefix"]
        );
        if k["id"] == rk["id"] {
            assert!(secret.starts_with(k["prefix"].as_str().unwrap()));
            assert!(secret.ends_with(k["end"].as_str().unwrap()) && k["end"].as_str().unwrap().len() == 4);
        }
    }
    assert!(!listed.to_string().contains(secret), "list never shows secrets");

    let revoked = ok(&db, &["root-keys", "revoke", "--id", rk["id"].as_str().unwrap()]);
    assert_eq!(revoked, serde_json::json!({"id": rk["id"], "revoked": true}));
    assert_eq!(
        ok(&db, &["root-keys", "list", "--workspace", "acme"])["rootKeys"].as_array().unwrap().len(),
        1
    );

    let key = ok(&db, &["keys", "create", "--workspace", "acme", "--name", "first"]);
    assert!(key["keyId"].as_str().unwrap().starts_with("key_"));
    assert!(key["key"].as_str().unwrap().len() > 40);
    assert_eq!(key.as_object().unwrap().len(), 2);

    // Bad arguments: one line on stderr, non-zero exit, nothing on stdout.
    fail(&db, &["workspaces", "create", "--name", "acme"]);
    fail(&db, &["workspaces", "create", "--name", ""]);
    fail(&db, &["root-keys", "create", "--workspace", "nope"]);
    fail(&db, &["root-keys", "create", "--workspace", "acme", "--permission", "bad perm"]);
    fail(&db, &["root-keys", "revoke", "--id", rk["id"].as_str().unwrap()]);
    fail(&db, &["keys", "create", "--workspace", "ws_missing"]);
    fail("mysql://localhost/x", &["workspaces", "create", "--name", "x"]);
    // Bad arguments, as clap finds them: one line too, without clap's usage block.
    for args in [
        &["root-keys", "frobnicate"][..],
        &["root-keys", "create"],
        &["workspaces", "create", "--name"],
        &["keys", "create", "--workspace", "default", "--bogus"],
        &["--workers", "many"],
        &["serve", "--workers", "0"],
        &["serve", "--db-pool-size", "0"],
        &["serve", "--redis-pool-size", "0"],
        &["serve", "--max-connections", "0"],
        &["serve", "--body-timeout-ms", "0"],
        // A deadline past any clock's range would overflow inside the HTTP layer: at most a day.
        &["serve", "--header-timeout-ms", "18446744073709551615"],
        &["serve", "--body-timeout-ms", "86400001"],
        &["serve", "--keep-alive-ms", "99999999999"],
    ] {
        let msg = fail(&db, args);
        assert!(msg.starts_with("keygate: ") && !msg.contains("Usage"), "{args:?}: {msg}");
    }
    assert!(fail(&db, &["root-keys", "create"]).contains("--workspace"));
}

/// Starts `keygate` (no subcommand) and returns it with its output lines up to the
/// "listening" line.
fn serve(db: &str, port: u16, root_key: Option<&str>) -> (Proc, Vec<String>) {
    let mut cmd = keygate_command(BIN, db, port);
    cmd.env("RUST_LOG", "info");
    if let Some(k) = root_key {
        cmd.env("KEYGATE_ROOT_KEY", k);
    }
    start(cmd)
}

/// Starts a server command; its output lines up to the "listening" line.
fn start(cmd: Command) -> (Proc, Vec<String>) {
    let server = start_keygate(cmd);
    let lines = server.lines().to_vec();
    (server, lines)
}

#[test]
fn server_bootstraps_once_prints_the_key_and_logs_where_it_listens() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let port = free_port();
    let (server, lines) = serve(&db, port, None);
    let all = lines.join("\n");
    let key_line = lines.iter().find(|l| l.contains("ROOT KEY")).unwrap_or_else(|| panic!("{all}"));
    let key = key_line.rsplit(' ').next().unwrap().to_string();
    assert!(key.starts_with("kg_root_"), "{key_line}");
    let listen = lines.iter().find(|l| l.contains("keygate listening on")).unwrap();
    assert!(
        listen.contains(&format!("127.0.0.1:{port}"))
            && listen.contains("sqlite")
            && listen.contains("memory"),
        "{listen}"
    );

    let body = r#"{"identifier":"cli","limit":1,"duration":60000}"#;
    let req = format!(
        "POST /v1/ratelimits.limit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let res = http(port, &req);
    assert!(res.starts_with("HTTP/1.1 200"), "{res}");
    assert!(res.contains("\"success\":true"), "{res}");
    drop(server);

    // Second start on the same database: no new bootstrap, the old key still works.
    let port = free_port();
    let (_server, lines) = serve(&db, port, None);
    assert!(!lines.iter().any(|l| l.contains("ROOT KEY")), "{lines:?}");
    let res = http(port, &req.replace("\"limit\":1", "\"limit\":2"));
    assert!(res.starts_with("HTTP/1.1 200"), "{res}");
}

#[test]
fn sigterm_stops_the_server_gracefully() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let port = free_port();
    let (mut server, _) = serve(&db, port, None);
    // Serving means the server future runs, and with it actix's signal handlers.
    let res = http(port, "GET /v1/liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(res.starts_with("HTTP/1.1 200"), "{res}");
    server.terminate();
    let code = server.wait_exit(Duration::from_secs(10));
    assert!(code.is_some(), "still running 10 s after SIGTERM");
    let status = code;
    assert_eq!(status, Some(0), "exits cleanly");
}

#[test]
fn keygate_root_key_sets_the_bootstrap_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("plain-path.db").display().to_string();
    let port = free_port();
    let (_server, lines) = serve(&db, port, Some("my-chosen-root-key-1234567"));
    assert!(lines.iter().any(|l| l.contains("first start")), "{lines:?}");
    let req = "GET /v1/keys.getKey?keyId=key_x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer my-chosen-root-key-1234567\r\nConnection: close\r\n\r\n";
    let res = http(port, req);
    assert!(res.starts_with("HTTP/1.1 404"), "authenticated, key not found: {res}");
}

#[test]
fn server_flags_work_with_and_without_serve_and_not_before_another_subcommand() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    for subcommand in [None, Some("serve")] {
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(subcommand)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--database-url", &db, "--workers", "1"])
            .args(["--root-key", "flag-root-key-123456789012"])
            .env("RUST_LOG", "info")
            .env_remove("DATABASE_URL")
            .env_remove("KEYGATE_LISTEN")
            .env_remove("KEYGATE_ROOT_KEY")
            .env_remove("REDIS_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let (_server, lines) = start(cmd);
        let listen = lines.iter().find(|l| l.contains("keygate listening on"));
        assert!(
            listen.is_some_and(|l| l.contains(&format!("127.0.0.1:{port}"))),
            "{subcommand:?}: {lines:?}"
        );
        let req = "GET /v1/keys.getKey?keyId=key_x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer flag-root-key-123456789012\r\nConnection: close\r\n\r\n";
        let res = http(port, req);
        assert!(res.starts_with("HTTP/1.1 404"), "{subcommand:?}: the flags' root key and database: {res}");
    }
    // --database-url may come before any subcommand; it wins over DATABASE_URL.
    let other = format!("sqlite://{}", temp.dir().join("other.db").display());
    ok(&other, &["--database-url", &db, "workspaces", "create", "--name", "by-flag"]);
    ok(&db, &["root-keys", "list", "--workspace", "by-flag"]);
    fail(&other, &["root-keys", "list", "--workspace", "by-flag"]);
    // Another server flag before a subcommand would be ignored: refused instead.
    for args in
        [&["--listen", "127.0.0.1:1", "serve"][..], &["--workers", "2", "keys", "create", "--workspace", "x"]]
    {
        let msg = fail(&db, args);
        assert!(msg.contains("is a server flag"), "{args:?}: {msg}");
    }
}

#[test]
fn bad_configuration_fails_with_a_clear_message() {
    let out = Command::new(BIN)
        .env("DATABASE_URL", "mysql://h/db")
        .env("KEYGATE_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("postgres://") && stderr.contains("sqlite://"), "{stderr}");
}

#[test]
fn a_start_that_cannot_listen_leaves_the_database_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for listen in [format!("127.0.0.1:{port}"), "not-an-address".to_string()] {
        let out = Command::new(BIN)
            .env("DATABASE_URL", path.display().to_string())
            .env("KEYGATE_LISTEN", &listen)
            .env_remove("KEYGATE_ROOT_KEY")
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("binding"), "{stderr}");
        assert!(!stderr.contains("ROOT KEY"), "no one-time key printed by a failed start: {stderr}");
        assert!(!path.exists(), "the database was not created");
    }
}

#[test]
fn an_ignored_keygate_root_key_is_reported() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let (server, lines) = serve(&db, free_port(), None);
    drop(server);
    assert!(!lines.iter().any(|l| l.contains("is ignored")), "{lines:?}");
    let (_server, lines) = serve(&db, free_port(), Some("kg_root_chosen_too_late_0123456789"));
    assert!(lines.iter().any(|l| l.contains("KEYGATE_ROOT_KEY is ignored")), "{lines:?}");
}

#[test]
fn an_unreachable_database_is_one_line_and_exit_status_1_within_the_connect_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = Instant::now();
    let out = Command::new(BIN)
        .env("DATABASE_URL", format!("postgres://postgres@127.0.0.1:{port}/test"))
        .env("KEYGATE_LISTEN", "127.0.0.1:0")
        .env("KEYGATE_DB_CONNECT_TIMEOUT_MS", "1000")
        .env("RUST_LOG", "info")
        .env_remove("KEYGATE_ROOT_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("opening the database") && stderr.contains(&format!("127.0.0.1:{port}")),
        "{stderr}"
    );
}

#[test]
fn list_and_delete_commands_and_no_database_created_by_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let db = format!("sqlite://{}", path.display());
    // Run where there is no database: nothing is created, and the message says what to do.
    for args in [
        &["workspaces", "list"][..],
        &["root-keys", "list", "--workspace", "default"],
        &["keys", "create", "--workspace", "default"],
        &["keys", "list", "--workspace", "default"],
        &["keys", "delete", "--id", "key_x"],
    ] {
        let msg = fail(&db, args);
        assert!(msg.contains("no database at") && msg.contains("--database-url"), "{args:?}: {msg}");
        assert!(!path.exists(), "{args:?} created the database");
    }
    let ws = ok(&db, &["workspaces", "create", "--name", "acme"]);
    ok(&db, &["workspaces", "create", "--name", "beta"]);
    let list = ok(&db, &["workspaces", "list"]);
    let names: Vec<&str> =
        list["workspaces"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["acme", "beta"]);
    assert_eq!(list["workspaces"][0]["id"], ws["id"]);

    let a = ok(&db, &["keys", "create", "--workspace", "acme", "--name", "first"]);
    let b = ok(&db, &["keys", "create", "--workspace", "acme"]);
    let keys = ok(&db, &["keys", "list", "--workspace", "acme"]);
    let listed = keys["keys"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!((&listed[0]["keyId"], &listed[0]["name"]), (&a["keyId"], &Value::from("first")));
    assert!(!keys.to_string().contains(a["key"].as_str().unwrap()), "never a secret");
    assert!(a["key"].as_str().unwrap().starts_with(listed[0]["start"].as_str().unwrap()));
    assert_eq!(ok(&db, &["keys", "list", "--workspace", "beta"])["keys"], serde_json::json!([]));

    let deleted = ok(&db, &["keys", "delete", "--id", a["keyId"].as_str().unwrap()]);
    assert_eq!(deleted, serde_json::json!({"keyId": a["keyId"], "deleted": true}));
    let keys = ok(&db, &["keys", "list", "--workspace", "acme"]);
    assert_eq!(keys["keys"].as_array().unwrap().len(), 1);
    assert_eq!(keys["keys"][0]["keyId"], b["keyId"]);
    assert!(fail(&db, &["keys", "delete", "--id", a["keyId"].as_str().unwrap()]).contains("not found"));
    assert!(fail(&db, &["keys", "delete", "--id", "nope"]).contains("not found"));
}

#[test]
fn every_flag_has_help() {
    for sub in [
        &["workspaces", "create"][..],
        &["root-keys", "list"],
        &["root-keys", "revoke"],
        &["keys", "create"],
        &["keys", "delete"],
    ] {
        let out = Command::new(BIN).args(sub).arg("--help").output().unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        for line in help.lines().filter(|l| l.trim_start().starts_with("--") && !l.contains("--help")) {
            let (flag, text) = line.trim().split_once("  ").unwrap_or((line, ""));
            assert!(!text.trim().is_empty(), "{sub:?}: {flag} has no help text:\n{help}");
        }
    }
}

#[test]
fn an_invalid_rust_log_is_reported_and_the_default_used() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let mut cmd = Command::new(BIN);
    cmd.env("DATABASE_URL", &db)
        .env("KEYGATE_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("KEYGATE_WORKERS", "1")
        .env("RUST_LOG", "blah blah")
        .env_remove("KEYGATE_ROOT_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (_server, lines) = start(cmd);
    assert!(lines.iter().any(|l| l.contains("RUST_LOG=\"blah blah\" is not valid")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("keygate listening on")), "the default level logs: {lines:?}");
}

#[test]
fn a_command_group_without_its_subcommand_names_them() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    for (group, subs) in [
        ("keys", "create, list, delete"),
        ("root-keys", "create, list, revoke"),
        ("workspaces", "create, list"),
    ] {
        let msg = fail(&db, &[group]);
        assert!(msg.contains(&format!("`keygate {group}` needs a subcommand: {subs}")), "{msg}");
    }
}

/// The verification of `key` by the server on `port`: its `code`.
fn verify_code(port: u16, key: &str) -> String {
    let body = format!(r#"{{"key":"{key}"}}"#);
    let req = format!(
        "POST /v1/keys.verifyKey HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let res = http(port, &req);
    let json: Value = serde_json::from_str(res.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap();
    json["code"].as_str().unwrap().to_string()
}

/// Asks until `want` is the answer (the server polls the database every 50 ms; the bound
/// documented is 100 ms), for at most 5 s; returns how long it took.
fn verify_until(port: u16, key: &str, want: &str) -> Duration {
    let start = Instant::now();
    while verify_code(port, key) != want {
        assert!(start.elapsed() < Duration::from_secs(5), "{key} never verified {want}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

#[test]
fn keys_the_cli_creates_and_deletes_reach_a_running_server() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let port = free_port();
    let (_server, _) = serve(&db, port, Some("cli-and-server-root-key-0001"));
    // A secret the server answered NOT_FOUND for (cached) until the CLI created it: no
    // such secret can be known before; a key created by the CLI is verified at once.
    let key = ok(&db, &["keys", "create", "--workspace", "default"]);
    let (id, secret) = (key["keyId"].as_str().unwrap(), key["key"].as_str().unwrap());
    verify_until(port, secret, "VALID");
    assert_eq!(verify_code(port, secret), "VALID", "cached");
    ok(&db, &["keys", "delete", "--id", id]);
    verify_until(port, secret, "NOT_FOUND");
}

/// The status of a ratelimits.limit call with `root_key` on the server on `port`.
fn limit_status(port: u16, root_key: &str) -> String {
    let body = r#"{"identifier":"cli","limit":100,"duration":60000}"#;
    let req = format!(
        "POST /v1/ratelimits.limit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {root_key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    http(port, &req).split(' ').nth(1).unwrap_or_default().to_string()
}

#[test]
fn a_root_key_the_cli_revokes_is_rejected_by_a_running_server() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let port = free_port();
    let (_server, _) = serve(&db, port, Some("cli-and-server-root-key-0002"));
    let perms = ["--permission", "ratelimit.*.limit", "--permission", "ratelimit.*.create_namespace"];
    let rk = ok(&db, &[&["root-keys", "create", "--workspace", "default"][..], &perms].concat());
    let (id, secret) = (rk["id"].as_str().unwrap(), rk["key"].as_str().unwrap());
    assert_eq!(limit_status(port, secret), "200");
    assert_eq!(limit_status(port, secret), "200", "cached");
    ok(&db, &["root-keys", "revoke", "--id", id]);
    // The server notices within its poll (every 50 ms), long before the 10 s cache lifetime.
    let start = Instant::now();
    while limit_status(port, secret) != "401" {
        assert!(start.elapsed() < Duration::from_secs(5), "the revoked root key is still accepted");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn root_keys_from_the_cli_carry_v2_permissions() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let ws = ok(&db, &["workspaces", "create", "--name", "acme"]);
    let ws_id = ws["id"].as_str().unwrap();
    let key = ok(&db, &["keys", "create", "--workspace", ws_id]);
    let created = ok(&db, &["root-keys", "create", "--workspace", ws_id, "--permission", "api.*.verify_key"]);
    let verifier = created["key"].as_str().unwrap().to_string();
    let created = ok(&db, &["root-keys", "create", "--workspace", ws_id, "--permission", "api.*.read_key"]);
    let reader = created["key"].as_str().unwrap().to_string();
    let port = free_port();
    let (_server, _) = serve(&db, port, Some("kg_root_cli_v2_bootstrap_0000000000"));
    let call = |token: &str, body: String| {
        http(
            port,
            &format!(
                "POST /v2/keys.verifyKey HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let body = format!(r#"{{"key":"{}"}}"#, key["key"].as_str().unwrap());
    let res = call(&verifier, body.clone());
    assert!(res.starts_with("HTTP/1.1 200") && res.contains(r#""code":"VALID""#), "{res}");
    let res = call(&reader, body);
    assert!(res.starts_with("HTTP/1.1 403") && res.contains("api.*.verify_key"), "{res}");
}

#[test]
fn audit_list_prints_the_workspaces_events_as_json_lines() {
    let temp = TestDb::sqlite();
    let db = temp.url.clone();
    let root = "kg_root_cli_audit_bootstrap_000000000";
    let port = free_port();
    let (_server, _) = serve(&db, port, Some(root));
    for name in ["a", "b", "c"] {
        let body = format!(r#"{{"name":"{name}"}}"#);
        let res = http(
            port,
            &format!(
                "POST /v1/permissions.createPermission HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {root}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        );
        assert!(res.starts_with("HTTP/1.1 200"), "{res}");
    }
    let run = |args: &[&str]| {
        let out =
            Command::new(BIN).args(args).env("DATABASE_URL", &db).env("RUST_LOG", "error").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines
    };
    let all = run(&["audit", "list", "--workspace", "default"]);
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(
        all.iter()
            .all(|e| e["event"] == "permission.create" && e["actorId"].as_str().unwrap().starts_with("rk_"))
    );
    assert_eq!(run(&["audit", "list", "--workspace", "default", "--limit", "2"]).len(), 2);
    assert!(run(&["audit", "list", "--workspace", "default", "--event", "key.delete"]).is_empty());
    fail(&db, &["audit", "list", "--workspace", "nope"]);
}

/// `keygate openapi v1|v2` prints the committed documents (needing no database: it is run
/// in a directory without one), and refuses any other argument with exit code 2.
#[test]
fn openapi_prints_the_committed_documents_without_a_database() {
    let dir = tempfile::tempdir().unwrap();
    for (api, file) in [("v1", "openapi.json"), ("v2", "openapi-v2.json")] {
        let out = Command::new(BIN).args(["openapi", api]).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let committed = std::fs::read(format!("{}/../../docs/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(out.stdout == committed, "keygate openapi {api} differs from docs/{file}");
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "no database file was created");
    let out = Command::new(BIN).args(["openapi", "v3"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

/// The vault's keyring from the shell: `encryption new-key`, a server sealing a key with it,
/// `encryption rotate` to a new first key, and a server refusing to start (exit 2, naming
/// the id) with a keyring that lacks the id a key is sealed under.
#[test]
fn encryption_new_key_rotate_and_a_keyring_missing_an_id_in_use() {
    const ROOT: &str = "kg_root_cli_vault_0000000000000000";
    let temp = TestDb::sqlite();
    let db = temp.url.as_str();
    let entry = |id: &str| {
        let out = ok(db, &["encryption", "new-key", "--id", id]);
        assert_eq!(out["id"], id);
        out["entry"].as_str().unwrap().to_string()
    };
    let (k1, k2) = (entry("k1"), entry("k2"));
    assert_ne!(k1, k2);

    let port = free_port();
    let mut cmd = keygate_command(BIN, db, port);
    // Every log line on, the access log included: none may hold the plaintext.
    cmd.env("KEYGATE_ROOT_KEY", ROOT).env("KEYGATE_ENCRYPTION_KEYS", &k1).env("RUST_LOG", "debug");
    let (mut server, _) = start(cmd);
    let post = |op: &str, body: &str| {
        let answer = http(
            port,
            &format!(
                "POST /v2/{op} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let json = answer.split_once("\r\n\r\n").unwrap().1;
        serde_json::from_str::<Value>(json).unwrap()["data"].clone()
    };
    let created = post("keys.createKey", r#"{"apiId":"api_vault","recoverable":true}"#);
    let (key_id, secret) = (created["keyId"].as_str().unwrap(), created["key"].as_str().unwrap());
    let revealed = post("keys.getKey", &format!(r#"{{"keyId":"{key_id}","decrypt":true}}"#));
    assert_eq!(revealed["plaintext"], secret);
    let logged = server.output(true);
    assert!(logged.contains("/v2/keys.getKey"), "the access log was on:\n{logged}");
    assert!(!logged.contains(secret), "the plaintext in a log line:\n{logged}");
    drop(server);

    let run = |keys: &str, args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", db)
            .env("KEYGATE_LISTEN", "127.0.0.1:0")
            .env("KEYGATE_ENCRYPTION_KEYS", keys)
            .env("RUST_LOG", "error")
            .output()
            .unwrap()
    };
    // The new key first, the old one still there: every key sealed again under k2.
    let rotated = run(&format!("{k2},{k1}"), &["encryption", "rotate"]);
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    let summary: Value = serde_json::from_slice(&rotated.stdout).unwrap();
    assert_eq!((summary["sealedUnder"].as_str(), summary["resealed"].as_u64()), (Some("k2"), Some(1)));
    let again: Value =
        serde_json::from_slice(&run(&format!("{k2},{k1}"), &["encryption", "rotate"]).stdout).unwrap();
    assert_eq!(again["resealed"], 0, "resumable: nothing left to do");
    // Now k1 alone is missing k2: no start, exit 2, the id named, the keys not shown.
    let refused = run(&k1, &[]);
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("encryption key k2") && !stderr.contains(&k1[3..]), "{stderr}");
    // k2 alone starts.
    let mut cmd = keygate_command(BIN, db, free_port());
    cmd.env("KEYGATE_ENCRYPTION_KEYS", &k2);
    start(cmd);
}

#[test]
fn a_portal_session_s_code_and_token_are_in_no_log_line() {
    const ROOT: &str = "kg_root_cli_portal_000000000000000";
    let temp = TestDb::sqlite();
    let port = free_port();
    let mut cmd = keygate_command(BIN, temp.url.as_str(), port);
    // Every log line on, the access log included.
    cmd.env("KEYGATE_ROOT_KEY", ROOT).env("RUST_LOG", "debug");
    let (mut server, _) = start(cmd);
    let send = |request: String| http(port, &request);
    let post = |op: &str, body: &str| {
        let answer = send(format!(
            "POST /v2/{op} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        serde_json::from_str::<Value>(answer.split_once("\r\n\r\n").unwrap().1).unwrap()["data"].clone()
    };
    let api = post("apis.createApi", r#"{"name":"logged"}"#)["apiId"].as_str().unwrap().to_string();
    post("portal.createPortal", &format!(r#"{{"slug":"logged","displayName":"L","keyspaceId":"{api}"}}"#));
    let session =
        post("portal.createSession", r#"{"portal":"logged","externalId":"u","scopes":["keys:read"]}"#);
    let url = session["url"].as_str().unwrap();
    let path = &url[url.find("/portal/").unwrap()..];
    let code = path.split_once("code=").unwrap().1.to_string();
    let redirect = send(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert!(redirect.starts_with("HTTP/1.1 303"), "{redirect}");
    let token = redirect
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().starts_with("set-cookie: portal_session=").then(|| l[27..].to_string())
        })
        .unwrap();
    let token = token.split(';').next().unwrap().to_string();
    let page = send(format!(
        "GET /portal/logged HTTP/1.1\r\nHost: x\r\nCookie: portal_session={token}\r\nConnection: close\r\n\r\n"
    ));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(!page.contains(&token), "the token in the page");
    let logged = server.output(true);
    assert!(logged.contains("/v2/portal.createSession"), "the access log was on:\n{logged}");
    assert!(!logged.contains(&token) && !logged.contains(&code), "a secret in a log line:\n{logged}");
}

#[test]
fn keys_check_passes_checksummed_keys_and_fails_any_one_character_change() {
    use keygate_domain::checksum::checksum_token;
    // No database is opened (nor created) for it.
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("none.db").display());
    let keys: Vec<String> = (0..10_000).map(|i| checksum_token(["kg", "sk_live", "acme"][i % 3])).collect();
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, format!("{}\n\n", keys.join("\n"))).unwrap();
    let checked = ok(&db, &["keys", "check", file.to_str().unwrap()]);
    assert_eq!(checked, serde_json::json!({"checked": 10_000, "valid": 10_000}));
    assert!(!dir.path().join("none.db").exists(), "no database");

    // Every one-character change of a key, each on its line: every line refused, by number.
    let key = &keys[0];
    let mut changed = Vec::new();
    for i in 3..key.len() {
        let mut bytes = key.clone().into_bytes();
        bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
        changed.push(String::from_utf8(bytes).unwrap());
    }
    let file = dir.path().join("changed.txt");
    std::fs::write(&file, changed.join("\n")).unwrap();
    let err = fail(&db, &["keys", "check", file.to_str().unwrap()]);
    assert!(err.contains(&format!("{n} of {n} keys are not valid", n = changed.len())), "{err}");
    assert!(!changed.iter().any(|c| err.contains(c.as_str())), "no key's text in the error");

    // Standard input, and a line that is no checksummed key at all.
    let mut child = Command::new(BIN)
        .args(["keys", "check", "-"])
        .env("DATABASE_URL", &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(format!("{}\nkg_notakey\n", keys[1]).as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("-:2 (not a checksummed key)"), "{err}");
}
