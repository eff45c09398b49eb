//! The shared rate-limit store: window counters in Redis, so that any number of keygate
//! instances draw on one budget per `(namespace, identifier, duration)` (contract §5.7, §7).
//!
//! # One decision, one round trip
//! A Lua script runs the decision inside Redis, atomically (Redis runs one script at a
//! time), so the number of tokens passed in a window never exceeds `limit` whatever the
//! number of instances and connections. It is [`keygate_ratelimit::decide`] restated over
//! one counter (a test checks the two agree on random sequences):
//!
//! ```text
//! used = GET key or 0
//! cost = 0:                 answer (used < limit, used)
//! cost <= limit - used:     used = INCRBY key cost; PEXPIRE key ttl; answer (true, used)
//! otherwise:                answer (false, used)          (a denial deducts nothing)
//! ```
//!
//! Before that, when the caller names the overrides epoch it loaded the namespace's
//! overrides under, the script compares it with `<prefix>ov:<namespace id>` (0 when absent;
//! INCR'd by every override change after its commit) and answers "stale" without deciding
//! when they differ: an override changed on one instance applies to the next request on
//! every instance.
//!
//! Lua numbers are doubles, exact up to 2^53; every operand is at most 2^53 - 1 (the
//! contract's bounds) and the comparison subtracts rather than adds, so nothing rounds.
//!
//! # Keys
//! `<prefix><namespace id>:<duration>:<window start>:<identifier>`: the window is part of
//! the key, so a new window starts from zero without any reset, and the identifier comes
//! last so that a `:` inside it cannot make two budgets share a key (namespace ids have no
//! `:`). A key lives until its window has ended plus [`EXPIRY_SLACK_MS`]: memory in Redis is
//! one small string key per budget used in the current window.
//!
//! "now" is the caller's clock (each instance's): instances must keep their clocks in sync
//! (NTP), as with any fixed window; an instance whose clock is off by `s` counts a request
//! in the neighbouring window during `s` around each window edge.
//!
//! # Failures
//! A connection that fails or times out is dropped, never reused (its reply stream may be
//! out of step); the call answers [`StoreError::Unavailable`] and had no effect that the
//! caller is told of. Waits are bounded: a connection takes at most `connect_timeout`, a
//! command at most `io_timeout`. The pool is built lazily: keygate starts while Redis is
//! down and answers 503 until it is back. After a call could not get a connection, calls
//! fail at once for [`BACKOFF`] instead of each waiting `connect_timeout` (one call per
//! period waits and probes), so an outage costs fast 503s, or fast passes when failing
//! open, rather than a second of latency per request.

use keygate_domain::{redact_in, redact_url};
use keygate_ratelimit::{
    BudgetKey, Checked, Decision, LimitRequest, RateLimitStore, StoreError, window_start,
};
use parking_lot::Mutex;
use redis::ConnectionLike as _;
use std::time::{Duration, Instant};

/// How long a window's key outlives the window (clock skew between instances).
pub const EXPIRY_SLACK_MS: u64 = 60_000;

/// How long calls fail fast after one found Redis unreachable.
pub const BACKOFF: Duration = Duration::from_millis(500);

const DECIDE: &str = r"
if ARGV[4] ~= '' and (redis.call('GET', KEYS[2]) or '0') ~= ARGV[4] then
  return {2, 0}
end
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
if cost == 0 then
  return {used < limit and 1 or 0, used}
end
if cost <= limit - used then
  used = redis.call('INCRBY', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, used}
end
return {0, used}
";

/// Settings of the Redis connection pool.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// Largest number of open connections.
    pub max_size: u32,
    /// Longest wait for a connection (pool checkout or connect).
    pub connect_timeout: Duration,
    /// Longest wait for one command's reply (read and write timeouts of the socket).
    pub io_timeout: Duration,
    /// Put before every key (budgets, and `ov:<namespace id>` for the overrides epochs), so
    /// that several deployments can share one Redis.
    pub key_prefix: String,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            max_size: 32,
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            key_prefix: "keygate:rl:".into(),
        }
    }
}

/// The URL could not be used (bad syntax, unsupported scheme). Reachability is not checked
/// at open.
#[derive(Debug, thiserror::Error)]
#[error("invalid Redis URL {url}: {reason}")]
pub struct RedisOpenError {
    url: String,
    reason: String,
}

/// A pooled connection; `broken` once a command on it failed, so the pool drops it.
struct Conn {
    inner: redis::Connection,
    broken: bool,
}

#[derive(Debug)]
struct Manager {
    client: redis::Client,
    connect_timeout: Duration,
    io_timeout: Duration,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Conn, redis::RedisError> {
        let inner = self.client.get_connection_with_timeout(self.connect_timeout)?;
        inner.set_read_timeout(Some(self.io_timeout))?;
        inner.set_write_timeout(Some(self.io_timeout))?;
        Ok(Conn { inner, broken: false })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query::<()>(&mut conn.inner)
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

/// The Redis rate-limit store.
pub struct RedisStore {
    pool: r2d2::Pool<Manager>,
    script: redis::Script,
    /// The change counters' read and publish scripts (`redis_counters.rs`).
    counter_scripts: (redis::Script, redis::Script),
    prefix: String,
    location: String,
    /// Until when calls fail fast (see [`BACKOFF`]).
    down_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("location", &self.location).finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for `url` (`redis://[user:password@]host[:port][/db]`, `rediss://`, or
    /// `redis+unix:///path`). Connects lazily.
    pub fn open(url: &str, settings: RedisSettings) -> Result<Self, RedisOpenError> {
        let location = redact_url(url);
        let client = redis::Client::open(url)
            .map_err(|e| RedisOpenError { url: location.clone(), reason: redact_in(&e.to_string(), url) })?;
        let manager =
            Manager { client, connect_timeout: settings.connect_timeout, io_timeout: settings.io_timeout };
        let pool = r2d2::Pool::builder()
            .max_size(settings.max_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(settings.connect_timeout)
            // A PING per checkout would double the round trips; failed connections are
            // marked broken instead (above).
            .test_on_check_out(false)
            .error_handler(Box::new(QuietErrors))
            .build_unchecked(manager);
        Ok(Self {
            pool,
            script: redis::Script::new(DECIDE),
            counter_scripts: (
                redis::Script::new(crate::redis_counters::READ),
                redis::Script::new(crate::redis_counters::PUBLISH),
            ),
            prefix: settings.key_prefix,
            location,
            down_until: Mutex::new(None),
        })
    }

    /// The URL without credentials, for logs.
    pub fn display_location(&self) -> &str {
        &self.location
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn counter_scripts(&self) -> &(redis::Script, redis::Script) {
        &self.counter_scripts
    }

    fn key(&self, key: &BudgetKey<'_>, start: u64) -> Vec<u8> {
        let mut k =
            Vec::with_capacity(self.prefix.len() + key.namespace_id.len() + key.identifier.len() + 48);
        k.extend_from_slice(self.prefix.as_bytes());
        k.extend_from_slice(key.namespace_id.as_bytes());
        k.push(b':');
        k.extend_from_slice(itoa::Buffer::new().format(key.duration).as_bytes());
        k.push(b':');
        k.extend_from_slice(itoa::Buffer::new().format(start).as_bytes());
        k.push(b':');
        k.extend_from_slice(key.identifier.as_bytes());
        k
    }

    pub(crate) fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        {
            let mut down = self.down_until.lock();
            match *down {
                // One caller per period probes (it clears the mark); the others fail fast.
                Some(until) if Instant::now() < until => {
                    return Err(StoreError::Unavailable("Redis: unreachable (retrying shortly)".into()));
                }
                Some(_) => *down = Some(Instant::now() + BACKOFF),
                None => {}
            }
        }
        let mut conn = self.pool.get().map_err(|e| {
            *self.down_until.lock() = Some(Instant::now() + BACKOFF);
            StoreError::Unavailable(format!("Redis: {e}"))
        })?;
        {
            let mut down = self.down_until.lock();
            if down.is_some() {
                *down = None;
            }
        }
        f(&mut conn.inner).map_err(|e| {
            conn.broken = true;
            StoreError::Unavailable(format!("Redis: {e}"))
        })
    }
}

impl RedisStore {
    fn epoch_key(&self, namespace_id: &str) -> String {
        format!("{}ov:{namespace_id}", self.prefix)
    }

    /// The decision script; `epoch` empty: no overrides check.
    fn run(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        epoch: &str,
    ) -> Result<Checked, StoreError> {
        let duration = req.duration.max(1);
        let start = window_start(now_ms, duration);
        let reset = start.saturating_add(duration);
        let ttl = reset - now_ms + EXPIRY_SLACK_MS;
        let (k, ek) = (self.key(&key, start), self.epoch_key(key.namespace_id));
        let (answer, used): (u8, u64) = self.with_conn(|c| {
            self.script.key(k.as_slice()).key(ek).arg(req.limit).arg(req.cost).arg(ttl).arg(epoch).invoke(c)
        })?;
        if answer == 2 {
            return Ok(Checked::StaleOverrides);
        }
        Ok(Checked::Decided(Decision {
            success: answer == 1,
            limit: req.limit,
            remaining: req.limit.saturating_sub(used),
            reset,
        }))
    }
}

impl RateLimitStore for RedisStore {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError> {
        match self.run(key, req, now_ms, "")? {
            Checked::Decided(d) => Ok(d),
            Checked::StaleOverrides => Err(StoreError::Unavailable("Redis: unexpected script answer".into())),
        }
    }

    fn limit_if_current(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: u64,
    ) -> Result<Checked, StoreError> {
        self.run(key, req, now_ms, itoa::Buffer::new().format(overrides_epoch))
    }

    fn overrides_epoch(&self, namespace_id: &str) -> Result<u64, StoreError> {
        let k = self.epoch_key(namespace_id);
        let epoch: Option<u64> = self.with_conn(|c| redis::cmd("GET").arg(k).query(c))?;
        Ok(epoch.unwrap_or(0))
    }

    fn bump_overrides_epoch(&self, namespace_id: &str) -> Result<(), StoreError> {
        let k = self.epoch_key(namespace_id);
        self.with_conn(|c| redis::cmd("INCR").arg(k).query::<u64>(c)).map(drop)
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.with_conn(|c| redis::cmd("PING").query::<()>(c))
    }
}
