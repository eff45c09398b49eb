//! deploy/: the container file and the systemd unit. No container engine runs here, and no
//! systemd as PID 1: what can be checked is. The container's build and run commands are
//! the ones docs/operations.md shows; its runtime stage's command, run with its environment,
//! serves and passes its own health check; the unit verifies cleanly with systemd-analyze
//! and rates as hardened, and its command keeps the database in its state directory.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{free_port, request, start_keygate};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const CONTAINERFILE: &str = include_str!("../../../../deploy/Containerfile");
const UNIT: &str = include_str!("../../../../deploy/keygate.service");
const EXAMPLE: &str = include_str!("../../../../deploy/keygate.toml");
const OPERATIONS: &str = include_str!("../../../../docs/operations.md");

/// The instructions of the Containerfile's last stage (continuation lines joined).
fn runtime_stage() -> Vec<(String, String)> {
    let joined = CONTAINERFILE.replace("\\\n", " ");
    let last = joined.rfind("\nFROM ").unwrap();
    joined[last..]
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' ').map(|(i, rest)| (i.to_string(), rest.trim().to_string())))
        .collect()
}

/// The JSON-array form of an instruction (`["a", "b"]`).
fn exec_form(args: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}"));
    v.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

#[test]
fn the_container_file_is_built_and_run_as_the_docs_show() {
    // The commands in the file's header are the ones docs/operations.md gives.
    let commands: Vec<&str> = CONTAINERFILE
        .lines()
        .filter_map(|l| l.strip_prefix("#   "))
        .filter(|l| l.starts_with("docker "))
        .collect();
    assert_eq!(commands.len(), 3, "build, run, logs: {commands:?}");
    for c in &commands {
        assert!(OPERATIONS.contains(c), "docs/operations.md shows `{c}`");
    }
    assert!(commands[0].contains("-f deploy/Containerfile"), "{commands:?}");
    assert_eq!(CONTAINERFILE.matches("\nFROM ").count(), 2, "two stages: build and runtime");

    let stage = runtime_stage();
    let get = |i: &str| stage.iter().filter(|(k, _)| k == i).map(|(_, v)| v.clone()).collect::<Vec<_>>();
    assert!(get("FROM")[0].ends_with("-slim"), "a small runtime image: {:?}", get("FROM"));
    let user = get("USER");
    assert!(user.len() == 1 && user[0] != "root" && user[0] != "0", "a non-root user: {user:?}");
    let env: Vec<(String, String)> = get("ENV")
        .iter()
        .map(|e| e.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
        .collect();
    let env_of = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
    let volume = exec_form(&get("VOLUME")[0]);
    let database = env_of("DATABASE_URL");
    assert!(
        database.starts_with(&format!("sqlite://{}/", volume[0])),
        "the SQLite file on the volume: {database}"
    );
    let listen = env_of("KEYGATE_LISTEN");
    assert_eq!(
        listen.rsplit(':').next(),
        get("EXPOSE").first().map(String::as_str),
        "EXPOSE is the listen port"
    );
    assert!(listen.starts_with("0.0.0.0:"), "reachable from outside the container: {listen}");
    let health = get("HEALTHCHECK")[0].clone();
    let probe = exec_form(&health[health.find("CMD ").unwrap() + 4..]);
    let url = probe.iter().find(|a| a.starts_with("http://")).unwrap();
    assert!(url.ends_with("/v1/readiness"), "{url}");
    assert_eq!(env_of("KEYGATE_CONFIG"), "/etc/keygate/keygate.toml");
    assert!(get("COPY").iter().any(|c| c == "deploy/keygate.toml /etc/keygate/keygate.toml"));

    // The runtime stage's command, run with its environment (the volume and the config
    // file in a temp dir, the port a free one): it serves, and its health check passes.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let local = |v: &str| {
        v.replace(&volume[0], &dir.path().display().to_string())
            .replace("/etc/keygate", &dir.path().display().to_string())
            .replace(&format!(":{}", get("EXPOSE")[0]), &format!(":{port}"))
            .replace("0.0.0.0:", "127.0.0.1:")
    };
    std::fs::write(dir.path().join("keygate.toml"), EXAMPLE).unwrap();
    let argv: Vec<String> =
        exec_form(&get("ENTRYPOINT")[0]).into_iter().chain(exec_form(&get("CMD")[0])).collect();
    assert_eq!(argv, ["/usr/local/bin/keygate", "serve"]);
    let mut cmd = Command::new(BIN);
    cmd.args(&argv[1..]).env_clear().env("PATH", std::env::var("PATH").unwrap()).current_dir(dir.path());
    for (k, v) in &env {
        cmd.env(k, local(v));
    }
    let _server = start_keygate(cmd);
    let health_path = url.split_once("8080").unwrap().1;
    assert_eq!(request(port, "GET", health_path, &[], "").status, 200, "the health check passes");
    assert!(Path::new(&local(&database).replace("sqlite://", "")).exists(), "the database is on the volume");
}

/// The unit's `Key=value` settings.
fn unit(key: &str) -> Vec<&'static str> {
    UNIT.lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).collect()
}

#[test]
fn the_units_command_keeps_its_database_in_the_state_directory() {
    assert_eq!(unit("DynamicUser"), ["yes"]);
    assert_eq!(unit("StateDirectory"), ["keygate"]);
    assert_eq!(unit("WorkingDirectory"), ["/var/lib/keygate"], "the state directory");
    assert_eq!(unit("Restart"), ["on-failure"]);
    for hardening in ["NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes"] {
        assert!(UNIT.lines().any(|l| l == hardening), "{hardening}");
    }
    // ExecStart with the unit's environment, in a stand-in for the state directory, with
    // the shipped config file: the database lands in the working directory.
    let state = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = state.path().join("keygate.toml");
    std::fs::write(&config, EXAMPLE.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))).unwrap();
    let exec: Vec<&str> = unit("ExecStart")[0].split_whitespace().collect();
    assert_eq!(exec[0], "/usr/local/bin/keygate");
    let mut cmd = Command::new(BIN);
    cmd.args(&exec[1..]).env_clear().env("PATH", std::env::var("PATH").unwrap()).current_dir(state.path());
    for e in unit("Environment") {
        let (k, v) = e.split_once('=').unwrap();
        cmd.env(k, v.replace("/etc/keygate/keygate.toml", &config.display().to_string()));
    }
    let _server = start_keygate(cmd);
    assert_eq!(request(port, "GET", "/v1/readiness", &[], "").status, 200);
    assert!(state.path().join("keygate.db").exists(), "the database is in the state directory");
}

#[test]
#[ignore = "needs systemd-analyze (Debian package systemd; .ci/run makes sure of it) and runs with --include-ignored"]
fn the_unit_verifies_cleanly_and_rates_as_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keygate.service");
    // verify checks that ExecStart's binary exists: the one built for the tests.
    std::fs::write(&path, UNIT.replace("/usr/local/bin/keygate", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", &path.display().to_string()])
        .output()
        .expect("systemd-analyze is not installed: apt-get install systemd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "no error and no warning: {stderr}");
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", &path.display().to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let level: f64 = text
        .split("Overall exposure level for keygate.service: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(level <= 2.0, "exposure {level} (systemd calls up to 2.0 OK): {text}");
}
