//! `--listen unix:/PATH` (docs/configuration.md, docs/gateways.md): keygate serves on a Unix
//! domain socket with the configured file mode; a live socket, a path that is not a socket
//! or one that cannot be bound is a clear startup error that creates nothing; a stale socket
//! from a crash is replaced; a graceful stop removes the file.
#![allow(clippy::unwrap_used)]

use keygate_test_support::{Response, TestDb, http_unix, keygate_command, start_keygate};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_keygate");
const LIVENESS: &str = "GET /v1/liveness HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// keygate on `db` listening on the socket `path`.
fn on_socket(db: &TestDb, path: &Path) -> Command {
    let mut cmd = keygate_command(BIN, &db.url, 0);
    cmd.env("KEYGATE_LISTEN", format!("unix:{}", path.display()));
    cmd
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn serves_on_the_socket_with_its_mode_and_removes_it_on_a_graceful_stop() {
    let db = TestDb::sqlite();
    let sock = db.dir().join("keygate.sock");
    let mut server = start_keygate(on_socket(&db, &sock));
    assert!(
        server.lines().iter().any(|l| l.contains(&format!("keygate listening on unix:{}", sock.display())))
    );
    let r = Response::parse(&http_unix(&sock, LIVENESS));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["status"], "ok");
    assert!(r.header("unkey-request-id").is_some());
    assert_eq!(mode(&sock), 0o660, "the default mode");
    // An error body's docs link needs no TCP address.
    let r = Response::parse(&http_unix(
        &sock,
        "GET /v1/keys.getKey?keyId=k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(r.status, 401);
    assert!(
        r.json()["error"]["docs"].as_str().unwrap().starts_with("http://localhost/docs/errors#"),
        "{r:?}"
    );

    server.terminate();
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0), "a clean exit");
    assert!(!sock.exists(), "the socket file is removed");

    // Another mode.
    let mut cmd = on_socket(&db, &sock);
    cmd.args(["--listen-mode", "0600"]);
    let _server = start_keygate(cmd);
    assert_eq!(mode(&sock), 0o600);
}

#[test]
fn a_stale_socket_from_a_crash_is_replaced() {
    let db = TestDb::sqlite();
    let sock = db.dir().join("keygate.sock");
    let mut crashed = start_keygate(on_socket(&db, &sock));
    crashed.output(true); // SIGKILL: nothing removes the file
    assert!(sock.exists(), "a crash leaves the socket file");
    let server = start_keygate(on_socket(&db, &sock));
    assert!(server.lines().iter().any(|l| l.contains("replaced the stale socket")), "{:?}", server.lines());
    assert_eq!(Response::parse(&http_unix(&sock, LIVENESS)).status, 200);
}

/// Runs keygate on `listen`; asserts it fails at once with one line containing `why`,
/// exit status 1, and no database created.
fn refused(listen: &str, why: &str) {
    let db = TestDb::sqlite();
    let out = keygate_command(BIN, &db.url, 0).env("KEYGATE_LISTEN", listen).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{listen}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(why), "{listen}: {stderr}");
    assert!(!db.dir().join("keygate.db").exists(), "nothing started: {listen}");
}

#[test]
fn a_socket_that_cannot_be_bound_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    // Another keygate already serves it: left alone.
    let db = TestDb::sqlite();
    let live = dir.path().join("live.sock");
    let _first = start_keygate(on_socket(&db, &live));
    refused(&format!("unix:{}", live.display()), "another process is listening on this socket");
    assert_eq!(Response::parse(&http_unix(&live, LIVENESS)).status, 200, "the first server is untouched");
    // A regular file is never replaced.
    let file = dir.path().join("data.txt");
    std::fs::write(&file, "keep me").unwrap();
    refused(&format!("unix:{}", file.display()), "the path exists and is not a socket");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // A directory that does not exist, and an empty path.
    refused(&format!("unix:{}/missing/keygate.sock", dir.path().display()), "No such file or directory");
    refused("unix:", "needs a path");
    // A mode that is not octal permissions: the command line's error (exit 2).
    let out = keygate_command(BIN, &db.url, 0).args(["--listen-mode", "0999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("octal"));
}
