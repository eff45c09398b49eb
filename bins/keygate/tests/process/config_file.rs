//! The config file (`--config`, `KEYGATE_CONFIG`; docs/configuration.md): precedence flag >
//! environment > file > default, one test per pair; unknown keys, bad values and a missing
//! file are one-line errors naming the file and the key, exit status 2, nothing started;
//! the shipped example (deploy/keygate.toml) names every setting and is valid.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Proc, TestDb, free_port, keygate_command, start_keygate};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const EXAMPLE: &str = include_str!("../../../../deploy/keygate.toml");

/// A config file in `dir` with `text`; its path.
fn file(dir: &Path, text: &str) -> String {
    let path = dir.join("keygate.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The "listening on" line of a started server.
fn listen_line(server: &Proc) -> String {
    server.lines().iter().find(|l| l.contains("keygate listening on")).unwrap().clone()
}

/// Starts the server; it and the port it says it listens on.
fn listening_port(cmd: Command) -> (Proc, u16) {
    let server = start_keygate(cmd);
    let line = listen_line(&server);
    let port = line.split("127.0.0.1:").nth(1).and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next());
    (server, port.and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line}")))
}

/// keygate on `db` with the environment of [`keygate_command`], less `KEYGATE_LISTEN`.
fn base(db: &TestDb) -> Command {
    let mut cmd = keygate_command(BIN, &db.url, 0);
    cmd.env_remove("KEYGATE_LISTEN");
    cmd
}

fn listen(port: u16) -> String {
    format!("listen = \"127.0.0.1:{port}\"\n")
}

#[test]
fn the_file_beats_the_default() {
    let db = TestDb::sqlite();
    let port = free_port();
    let mut cmd = base(&db);
    cmd.args(["--config", &file(db.dir(), &listen(port))]);
    assert_eq!(listening_port(cmd).1, port);
}

#[test]
fn the_environment_beats_the_file() {
    let db = TestDb::sqlite();
    let (in_file, in_env) = (free_port(), free_port());
    let mut cmd = base(&db);
    cmd.env("KEYGATE_CONFIG", file(db.dir(), &listen(in_file)))
        .env("KEYGATE_LISTEN", format!("127.0.0.1:{in_env}"));
    assert_eq!(listening_port(cmd).1, in_env);
}

#[test]
fn a_flag_beats_the_file() {
    let db = TestDb::sqlite();
    let (in_file, in_flag) = (free_port(), free_port());
    let mut cmd = base(&db);
    cmd.args(["serve", "--config", &file(db.dir(), &listen(in_file))])
        .args(["--listen", &format!("127.0.0.1:{in_flag}")]);
    assert_eq!(listening_port(cmd).1, in_flag);
}

#[test]
fn a_flag_beats_the_environment_with_a_file_too() {
    let db = TestDb::sqlite();
    let (in_file, in_env, in_flag) = (free_port(), free_port(), free_port());
    let mut cmd = base(&db);
    cmd.args(["--config", &file(db.dir(), &listen(in_file))])
        .args(["--listen", &format!("127.0.0.1:{in_flag}")])
        .env("KEYGATE_LISTEN", format!("127.0.0.1:{in_env}"));
    assert_eq!(listening_port(cmd).1, in_flag);
}

#[test]
fn every_kind_of_setting_is_taken_from_the_file() {
    // A boolean flag, a boolish value, a bounded number, a choice, a global setting (the
    // database) and the log settings: the server runs as they say.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("from-file.db");
    let port = free_port();
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\ndatabase_url = \"sqlite://{}\"\nworkers = 1\nverify_cache = false\n\
         ratelimit_fail_open = true\nmetrics = \"off\"\nlog_format = \"json\"\nlog = \"info\"\n",
        db.display()
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["--config", &file(dir.path(), &text)]).env_clear().env("PATH", std::env::var("PATH").unwrap());
    let (mut server, _) = listening_port(cmd);
    assert!(db.exists(), "the file's database_url was used");
    assert!(listen_line(&server).starts_with('{'), "log_format = \"json\": {}", listen_line(&server));
    let metrics = keygate_test_support::request(port, "GET", "/metrics", &[], "");
    assert_eq!(metrics.status, 404, "metrics = \"off\"");
    // `log = "info"` turns the access log on.
    keygate_test_support::request(port, "GET", "/v1/liveness", &[], "");
    assert!(server.wait_for("/v1/liveness", std::time::Duration::from_secs(10)), "{:?}", server.lines());
    // The admin commands take the file's global settings too.
    let out = Command::new(BIN)
        .args(["--config", &dir.path().join("keygate.toml").display().to_string(), "workspaces", "list"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"default\""));
}

/// Runs keygate (no subcommand) with the config file `text` and `DATABASE_URL` in its
/// directory; asserts a one-line error, exit status 2 and no database created; the line.
fn refused(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db");
    let path = file(dir.path(), &format!("database_url = \"sqlite://{}\"\n{text}", db.display()));
    let out = keygate_command(BIN, "sqlite://unused.db", free_port())
        .env_remove("DATABASE_URL")
        .args(["--config", &path])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("keygate: "), "{stderr}");
    assert!(stderr.contains(&path), "names the file: {stderr}");
    assert!(!db.exists() && !dir.path().join("unused.db").exists(), "nothing started: {stderr}");
    stderr
}

#[test]
fn an_unknown_key_is_refused_naming_it_and_the_file() {
    let e = refused("listen = \"127.0.0.1:0\"\nlisten_adress = \"127.0.0.1:0\"\n");
    assert!(e.contains("unknown key `listen_adress`") && e.contains("listen,"), "{e}");
    let e = refused("[server]\nlisten = \"127.0.0.1:0\"\n");
    assert!(e.contains("`server`"), "a table is an unknown key too: {e}");
    let e = refused("config = \"other.toml\"\n");
    assert!(e.contains("unknown key `config`"), "{e}");
}

#[test]
fn a_bad_value_is_refused_naming_the_key_and_the_file() {
    for (text, key, why) in [
        ("workers = 0\n", "workers", "at least 1"),
        ("redis_pool_size = 1.5\n", "redis_pool_size", "found float"),
        ("redis_pool_size = \"many\"\n", "redis_pool_size", "invalid value"),
        ("keep_alive_ms = 0\n", "keep_alive_ms", "not in 1..="),
        ("metrics = \"maybe\"\n", "metrics", "invalid value 'maybe'"),
        ("verify_cache = \"perhaps\"\n", "verify_cache", "invalid value"),
        ("ratelimit_fail_open = \"yes\"\n", "ratelimit_fail_open", "true or false"),
        ("ratelimit_algorithm = \"leaky\"\n", "ratelimit_algorithm", "invalid value 'leaky'"),
        ("ratelimit_persist = \"maybe\"\n", "ratelimit_persist", "invalid value"),
        ("listen = [\"a\", \"b\"]\n", "listen", "found array"),
        ("log_format = \"xml\"\n", "log_format", "invalid value 'xml'"),
    ] {
        let e = refused(text);
        assert!(e.contains(&format!("key `{key}`")) && e.contains(why), "{text}: {e}");
    }
    // Not TOML at all: the parser's position, and never the line itself (it may hold a
    // secret).
    let e = refused("listen = \n");
    assert!(e.contains("not valid TOML at line 2"), "{e}");
    let e = refused("database_url = \"postgres://u:TOPSECRET@db/k\n");
    assert!(e.contains("line 2") && !e.contains("TOPSECRET"), "{e}");
}

#[test]
fn a_missing_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    for cmd in [
        {
            let mut c = keygate_command(BIN, "sqlite://x.db", free_port());
            c.args(["--config", &path.display().to_string()]);
            c
        },
        {
            let mut c = keygate_command(BIN, "sqlite://x.db", free_port());
            c.env("KEYGATE_CONFIG", &path);
            c
        },
    ] {
        let mut cmd = cmd;
        let out = cmd.current_dir(dir.path()).output().unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot read the config file") && stderr.contains("absent.toml"), "{stderr}");
        assert!(!dir.path().join("x.db").exists(), "nothing started");
    }
}

#[test]
fn the_shipped_example_names_every_setting_and_is_valid_with_every_key_set() {
    let help = Command::new(BIN).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let flags: Vec<String> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|f| f.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-').to_string())
        .filter(|f| !f.is_empty() && !["help", "version", "config"].contains(&f.as_str()))
        .collect();
    assert!(flags.len() > 20, "{help}");
    for flag in &flags {
        let key = flag.replace('-', "_");
        let named = EXAMPLE.lines().any(|l| {
            let l = l.trim_start_matches('#').trim_start();
            l.starts_with(&format!("{key} = "))
        });
        assert!(named, "deploy/keygate.toml names `{key}`");
    }
    // Every commented key uncommented: still a valid file (the server takes every value).
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let all: String = EXAMPLE
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if rest
                    .split_once(" = ")
                    .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_')) =>
            {
                rest
            }
            _ => l,
        })
        .map(|l| {
            l.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
                .replace("sqlite://keygate.db", &format!("sqlite://{}/k.db", dir.path().display()))
                .replace("\"/etc/keygate/policies.json\"", "\"\"")
                .replace("127.0.0.1:9100", &format!("127.0.0.1:{}", free_port()))
        })
        .map(|l| l + "\n")
        .collect();
    let all = all.replace("gateway_policies = \"\"\n", "");
    assert!(all.contains("redis_url = ") && all.contains("root_key = "), "{all}");
    let path = file(dir.path(), &all);
    // An admin command validates the whole file (the server's keys too) before it runs.
    let out = Command::new(BIN)
        .args(["--config", &path, "workspaces", "list"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_ne!(out.status.code(), Some(2), "{stderr}");
    // As shipped (defaults only), it starts a server.
    let shipped = file(
        dir.path(),
        &EXAMPLE
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
            .replace("sqlite://keygate.db", &format!("sqlite://{}/k.db", dir.path().display())),
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--config", &shipped]).env_clear().env("PATH", std::env::var("PATH").unwrap());
    assert_eq!(listening_port(cmd).1, port);
}

/// `ratelimit_algorithm` in the file: namespaces created from then on decide by it (API-v2.md
/// §26); one changed through the API keeps what it was given.
#[test]
fn the_file_sets_the_algorithm_of_new_namespaces() {
    const ROOT: &str = "kg_root_config_file_algorithm_0123456789";
    let db = TestDb::sqlite();
    let port = free_port();
    let mut cmd = base(&db);
    cmd.env("KEYGATE_ROOT_KEY", ROOT).args([
        "--config",
        &file(db.dir(), &format!("{}ratelimit_algorithm = \"token_bucket\"\n", listen(port))),
    ]);
    let _server = start_keygate(cmd);
    let v2 = |op: &str, body: &str| {
        let raw = format!(
            "POST /v2/{op} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ROOT}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let out = keygate_test_support::try_http(port, &raw).unwrap();
        serde_json::from_str::<serde_json::Value>(out.split("\r\n\r\n").nth(1).unwrap()).unwrap()["data"]
            .clone()
    };
    let limit = r#"{"namespace":"api","identifier":"u","limit":2,"duration":60000}"#;
    let passed: Vec<bool> =
        (0..3).map(|_| v2("ratelimit.limit", limit)["success"].as_bool().unwrap()).collect();
    assert_eq!(passed, [true, true, false]);
    assert_eq!(v2("ratelimit.getNamespace", r#"{"namespace":"api"}"#)["algorithm"], "token_bucket");
    v2("ratelimit.updateNamespace", r#"{"namespace":"api","algorithm":"fixed"}"#);
    assert_eq!(v2("ratelimit.getNamespace", r#"{"namespace":"api"}"#)["algorithm"], "fixed");
}
