//! A fresh database per test, on the backend the environment selects:
//!
//! * `KEYGATE_TEST_POSTGRES_URL` unset: a SQLite file in a temp directory.
//! * `KEYGATE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test`: a new schema
//!   `kg_test_<random>` in that database (the URL gets `options=--search_path=<schema>`, so
//!   diesel's migration table lands there too), dropped when the value is dropped.
//!
//! When PostgreSQL is selected but cannot be reached, [`TestDb::fresh`] panics with the
//! reason: a test never silently falls back to SQLite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use rand::Rng;

pub const POSTGRES_ENV: &str = "KEYGATE_TEST_POSTGRES_URL";

/// A database that exists for the lifetime of this value.
#[derive(Debug)]
pub struct TestDb {
    /// The `DATABASE_URL` to give keygate.
    pub url: String,
    pg: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// Whether the tests run on PostgreSQL.
    pub fn postgres_url() -> Option<String> {
        std::env::var(POSTGRES_ENV).ok().filter(|u| !u.trim().is_empty())
    }

    pub fn fresh() -> Self {
        match Self::postgres_url() {
            Some(base) => Self::postgres(&base),
            None => Self::sqlite(),
        }
    }

    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("keygate.db").display());
        Self { url, pg: None, _dir: Some(dir) }
    }

    /// A new schema in the PostgreSQL database at `base`.
    pub fn postgres(base: &str) -> Self {
        let schema = format!("kg_test_{:016x}", rand::rng().random::<u64>());
        let mut conn = PgConnection::establish(base)
            .unwrap_or_else(|e| panic!("{POSTGRES_ENV}={base}: PostgreSQL is not reachable: {e}"));
        conn.batch_execute(&format!("CREATE SCHEMA {schema}")).expect("create schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=--search_path%3D{schema}");
        Self { url, pg: Some((base.to_string(), schema)), _dir: None }
    }

    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    /// The temp directory holding a SQLite database (where a test may put other files,
    /// removed with it). Panics on PostgreSQL.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.as_ref().map(tempfile::TempDir::path).expect("a SQLite TestDb has a directory")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((base, schema)) = &self.pg
            && let Ok(mut conn) = PgConnection::establish(base)
        {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
        }
    }
}

pub const REDIS_ENV: &str = "KEYGATE_TEST_REDIS_URL";

/// The Redis the tests use, when `KEYGATE_TEST_REDIS_URL` is set (`.ci/run` sets it).
pub fn redis_url() -> Option<String> {
    std::env::var(REDIS_ENV).ok().filter(|u| !u.trim().is_empty())
}

/// The Redis key prefix of the servers on database `url`: one per database, as keygate
/// needs (instances on one database share their counters; a deployment on another
/// database, here another test, must not see them).
pub fn redis_prefix_for(url: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    url.hash(&mut h);
    format!("keygate:test:db{:016x}:", h.finish())
}

/// A key prefix no other test uses, so that tests sharing one Redis never share a budget.
pub fn redis_test_prefix() -> String {
    format!("keygate:test:{:016x}:", rand::rng().random::<u64>())
}

pub const REDIS_CLUSTER_ENV: &str = "KEYGATE_TEST_REDIS_CLUSTER";

/// Whether the tests' Redis (`KEYGATE_TEST_REDIS_URL`, then the seed nodes separated by
/// commas) is a Redis Cluster: `KEYGATE_TEST_REDIS_CLUSTER=1` (`.ci/run` runs the Redis
/// tests once on a single server, once on the local cluster of [`local_redis_cluster`]
/// with base port 7000). When it is, that cluster is started first if it is not up.
pub fn redis_cluster() -> bool {
    let on = std::env::var(REDIS_CLUSTER_ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "on"));
    if on {
        local_redis_cluster(7000);
    }
    on
}

/// A local three-node Redis Cluster on `127.0.0.1:base+1..base+3`, started (and created)
/// when it is not up, by `.ci/redis-cluster.sh` (a few milliseconds when it is); its seed
/// URLs separated by commas. Panics, with the reason, when it cannot be started.
pub fn local_redis_cluster(base: u16) -> String {
    redis_cluster_nodes(base, 0)
}

/// [`local_redis_cluster`] with one replica per master (nodes `base+1..base+6`; which of a
/// pair is the master changes when a test fails one over): every node's URL.
pub fn local_redis_cluster_with_replicas(base: u16) -> String {
    redis_cluster_nodes(base, 1)
}

fn redis_cluster_nodes(base: u16, replicas: u16) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/redis-cluster.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(base.to_string())
        .arg(replicas.to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(
        out.status.success(),
        "the local Redis Cluster (base port {base}) could not be started: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (1..=3 * (1 + replicas)).map(|i| format!("redis://127.0.0.1:{}", base + i)).collect::<Vec<_>>().join(",")
}
