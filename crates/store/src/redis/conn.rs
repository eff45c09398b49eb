//! The blocking side: an r2d2 pool of synchronous connections, and the outage mark that
//! both sides share (after a failed connect, calls fail fast for [`BACKOFF`]); the Redis
//! deployment, one server or a Cluster, that both sides connect to ([`Target`]).

use super::{BACKOFF, RedisSettings};
use keygate_ratelimit::StoreError;
use parking_lot::Mutex;
use redis::ConnectionLike as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Until when calls fail fast because a connect failed (see [`BACKOFF`]).
#[derive(Debug, Default)]
pub(super) struct Outage {
    down_until: Mutex<Option<Instant>>,
    /// Bumped by every failure (a connect, a command): a pooled connection last used
    /// before the latest one is checked before its next use.
    failures: std::sync::atomic::AtomicU64,
}

impl Outage {
    /// `Err` while Redis is known to be down. Once the period is over, one caller per period
    /// probes (it is let through and the mark pushed back); the others keep failing fast.
    pub(super) fn check(&self) -> Result<(), StoreError> {
        let mut down = self.down_until.lock();
        match *down {
            Some(until) if Instant::now() < until => {
                Err(StoreError::Unavailable("Redis: unreachable (retrying shortly)".into()))
            }
            Some(_) => {
                *down = Some(Instant::now() + BACKOFF);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Whether a connect failed and none has succeeded since.
    pub(super) fn is_down(&self) -> bool {
        self.down_until.lock().is_some()
    }

    /// How many failures there were so far.
    fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A command failed: the connections used before are checked before their next use.
    fn failed(&self) {
        self.failures.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A connect failed.
    pub(super) fn down(&self) {
        self.failed();
        let mut down = self.down_until.lock();
        if down.is_none() {
            // Up to down: one outage (`keygate_store_outages_total`).
            metrics::counter!("keygate_store_outages_total", "store" => "redis").increment(1);
        }
        *down = Some(Instant::now() + BACKOFF);
    }

    /// A connect succeeded.
    pub(super) fn up(&self) {
        let mut down = self.down_until.lock();
        if down.is_some() {
            *down = None;
        }
    }
}

/// Where Redis is: one server, or a Redis Cluster (its seed nodes).
#[derive(Clone)]
pub(super) enum Target {
    Single(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl Target {
    /// `urls`: one URL, or with `cluster` one or more seed nodes separated by commas.
    pub(super) fn open(urls: &str, cluster: bool, settings: &RedisSettings) -> redis::RedisResult<Self> {
        if !cluster {
            return redis::Client::open(urls).map(Self::Single);
        }
        let nodes: Vec<&str> = urls.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
        redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.io_timeout)
            // A moved slot or a failover is retried once; an unreachable cluster fails
            // within the timeouts rather than after a long series of retries.
            .retries(1)
            .build()
            .map(|c| Self::Cluster(Box::new(c)))
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

/// A blocking connection to one server or to the cluster.
enum SyncConn {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl SyncConn {
    fn as_dyn(&mut self) -> &mut dyn redis::ConnectionLike {
        match self {
            Self::Single(c) => c,
            Self::Cluster(c) => &mut **c,
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Self::Single(c) => c.is_open(),
            Self::Cluster(c) => c.is_open(),
        }
    }
}

/// A pooled connection; `broken` once a command on it failed, so the pool drops it.
pub(super) struct Conn {
    inner: SyncConn,
    broken: bool,
    /// The failure count when it was last known good, and when it was last used: see
    /// [`Pool::with_conn`].
    good_at: u64,
    used: Instant,
}

/// A pooled connection idle this long is checked before its next use (Redis may have
/// restarted meanwhile without any call failing).
const IDLE_CHECK: Duration = Duration::from_secs(1);

struct Manager {
    target: Target,
    connect_timeout: Duration,
    io_timeout: Duration,
    outage: Arc<Outage>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").field("cluster", &self.target.is_cluster()).finish_non_exhaustive()
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Conn, redis::RedisError> {
        let inner = match &self.target {
            Target::Single(client) => {
                let c = client.get_connection_with_timeout(self.connect_timeout)?;
                c.set_read_timeout(Some(self.io_timeout))?;
                c.set_write_timeout(Some(self.io_timeout))?;
                SyncConn::Single(c)
            }
            Target::Cluster(client) => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(self.connect_timeout)
                    .set_response_timeout(self.io_timeout);
                SyncConn::Cluster(Box::new(client.get_connection_with_config(config)?))
            }
        };
        Ok(Conn { inner, broken: false, good_at: self.outage.failures(), used: Instant::now() })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query::<()>(conn.inner.as_dyn())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !conn.inner.is_open()
    }
}

/// r2d2 logs every failed connection attempt at `error`, several per second while Redis is
/// down; each failed call is already reported once (the 503's warning, or fail-open's).
#[derive(Debug)]
struct QuietErrors;

impl r2d2::HandleError<redis::RedisError> for QuietErrors {
    fn handle_error(&self, e: redis::RedisError) {
        log::debug!("Redis connection attempt failed: {e}");
    }
}

/// The blocking connections.
pub(super) struct Pool {
    pool: r2d2::Pool<Manager>,
    outage: Arc<Outage>,
}

impl Pool {
    /// Built lazily: no connection is made here.
    pub(super) fn new(target: Target, settings: &RedisSettings, outage: Arc<Outage>) -> Self {
        let manager = Manager {
            target,
            connect_timeout: settings.connect_timeout,
            io_timeout: settings.io_timeout,
            outage: outage.clone(),
        };
        let pool = r2d2::Pool::builder()
            .max_size(settings.max_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(settings.connect_timeout)
            // No PING per checkout: a verification's round trips are counted (a PING would
            // double them). A connection is checked when it may be dead: after a failure
            // anywhere, or an idle spell ([`Pool::with_conn`]).
            .test_on_check_out(false)
            .error_handler(Box::new(QuietErrors))
            .build_unchecked(manager);
        Self { pool, outage }
    }

    /// Runs `f` on a pooled connection; a failure of `f` drops the connection. A pooled
    /// connection is used as it is while nothing failed since it was last used and it was
    /// used within [`IDLE_CHECK`]; otherwise it is checked first (`PING`), and a dead one
    /// is dropped for another (after an outage the idle ones are dead: without the check,
    /// the first use of each would fail, a liveness probe saying "down" after Redis is back).
    pub(super) fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let _span = keygate_domain::trace::child_span(|| {
            tracing::info_span!("redis", otel.kind = "client", db.system.name = "redis")
        })
        .entered();
        self.outage.check()?;
        let failures = self.outage.failures();
        let mut conn = self.checked_conn(failures)?;
        self.outage.up();
        match f(conn.inner.as_dyn()) {
            Ok(out) => {
                (conn.good_at, conn.used) = (failures, Instant::now());
                Ok(out)
            }
            Err(e) => {
                metrics::counter!("keygate_store_errors_total", "store" => "redis").increment(1);
                conn.broken = true;
                self.outage.failed();
                Err(StoreError::Unavailable(format!("Redis: {e}")))
            }
        }
    }

    /// A pooled connection fit for use: one that may be dead is checked, and replaced when
    /// it is (as many times as the pool has connections, then a new one is made).
    fn checked_conn(&self, failures: u64) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        let attempts = self.pool.max_size() + 1;
        for _ in 0..attempts {
            let mut conn = self.pool.get().map_err(|e| {
                self.outage.down();
                StoreError::Unavailable(format!("Redis: {e}"))
            })?;
            if conn.good_at == failures && conn.used.elapsed() < IDLE_CHECK {
                return Ok(conn);
            }
            if redis::cmd("PING").query::<()>(conn.inner.as_dyn()).is_ok() {
                (conn.good_at, conn.used) = (failures, Instant::now());
                return Ok(conn);
            }
            conn.broken = true;
        }
        self.outage.down();
        Err(StoreError::Unavailable("Redis: no connection answers".into()))
    }
}
