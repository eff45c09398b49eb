//! The local PostgreSQL server itself, stopped and started by the tests that run alone
//! (`postgres_restart.rs`, and `faults.rs`'s restart under load): `.ci/run` runs them after
//! the suites, since every other test shares this server.

use std::process::Command;
use std::time::{Duration, Instant};

fn cluster_version() -> String {
    let entries = std::fs::read_dir("/etc/postgresql").expect("a local PostgreSQL cluster (/etc/postgresql)");
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max()
        .unwrap_or_default()
}

/// `pg_ctlcluster <version> main <action>` (a fast shutdown for `stop`); panics when it fails.
pub fn pg_ctl(action: &str) {
    let status = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &cluster_version(), "main", action, "-m", "fast"])
        .status()
        .unwrap_or_else(|e| panic!("pg_ctlcluster: {e}"));
    assert!(status.success(), "pg_ctlcluster {action} failed");
}

/// Whether the server accepts connections.
pub fn pg_ready() -> bool {
    Command::new("pg_isready").args(["-h", "127.0.0.1", "-q"]).status().is_ok_and(|s| s.success())
}

/// Starts the server and waits (30 s at most) until it accepts connections.
pub fn start_and_wait() {
    pg_ctl("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pg_ready() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts PostgreSQL again when dropped, whatever happened to the test.
#[derive(Debug)]
pub struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        if !pg_ready() {
            let _ = Command::new("pg_ctlcluster")
                .args(["--skip-systemctl-redirect", &cluster_version(), "main", "start"])
                .status();
        }
    }
}
