//! An in-process keygate: the RBAC service over the SQL store, the rate-limit store the
//! settings select (in-process, or Redis), the change counters that keep the verification
//! cache exact, and the background upkeep that keeps them current. The server composes
//! its HTTP layer around one of these; `keygate-client`'s embedded verifier is one, so a
//! service embedding keygate verifies exactly as the server does.

use keygate_domain::Clock;
use keygate_ratelimit::{FailOpen, MemoryStore, RateLimitStore};
use keygate_rbac::{CounterSource, OverridesListener, RbacError, RbacService};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::{PoolSettings, RedisOpenError, RedisSettings, RedisStore, SqlStore, StoreOpenError};

/// What an in-process keygate is opened with (the server reads these from its
/// configuration; docs/configuration.md names each).
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// `DATABASE_URL`: `sqlite://<file>` or `postgres://...`.
    pub database_url: String,
    /// The database pool.
    pub pool: PoolSettings,
    /// `REDIS_URL`: counters, change counters and live credits in Redis (several URLs or a
    /// cluster as [`RedisStore::open`] takes them); `None`: all in process.
    pub redis_url: Option<String>,
    /// The Redis store's settings (`lanes`: one per worker that decides).
    pub redis: RedisSettings,
    /// Pass rate-limit requests while Redis is unreachable (contract §5.12).
    pub fail_open: bool,
    /// The verification cache (on in production; off only to measure without it).
    pub verify_cache: bool,
    /// Usage analytics: `Some` records verifications and rate-limit decisions.
    pub analytics: Option<AnalyticsSettings>,
    /// SQLite without Redis: look at the file's change number at most once per this before
    /// trusting a cached verification, so that another process's write is seen at the next
    /// verification, not at the next 50 ms poll ([`keygate_rbac::Probe`]; a look costs
    /// about 2 us). `None` (the server's setting): the poll alone.
    pub change_probe: Option<Duration>,
}

impl RuntimeSettings {
    /// The defaults for `database_url`: no Redis, cache and analytics on.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            pool: PoolSettings::default(),
            redis_url: None,
            redis: RedisSettings::default(),
            fail_open: false,
            verify_cache: true,
            analytics: Some(AnalyticsSettings::default()),
            change_probe: None,
        }
    }
}

/// Usage analytics' bounds (`KEYGATE_ANALYTICS_MAX_SERIES`, `KEYGATE_ANALYTICS_RETENTION_DAYS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyticsSettings {
    /// Distinct series held in memory between flushes.
    pub max_series: usize,
    /// Days of day rows kept.
    pub retention_days: u64,
}

impl Default for AnalyticsSettings {
    fn default() -> Self {
        Self { max_series: 100_000, retention_days: 90 }
    }
}

/// Why an in-process keygate could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The database could not be opened or migrated.
    #[error("opening the database: {0}")]
    Store(#[from] StoreOpenError),
    /// `REDIS_URL` is not a Redis address this store can use.
    #[error("opening Redis: {0}")]
    Redis(#[from] RedisOpenError),
    /// The change counters could not be read at start.
    #[error("reading the change counters: {0}")]
    Counters(#[from] RbacError),
}

/// An opened in-process keygate (see the module docs). Start its upkeep with
/// [`spawn_upkeep`] once it is shared.
#[derive(Debug)]
pub struct Runtime {
    /// The RBAC service: keys, verification, permissions, namespaces, analytics.
    pub rbac: RbacService<SqlStore>,
    /// Where rate-limit decisions are made.
    pub limiter: Arc<dyn RateLimitStore>,
    /// The Redis store, when `redis_url` is set (`limiter` wraps it).
    pub redis: Option<Arc<RedisStore>>,
    /// "<database>; rate-limit store: <store>", for a startup line.
    pub description: String,
    /// The analytics settings in force.
    pub analytics: Option<AnalyticsSettings>,
}

impl Runtime {
    /// Opens the database (migrating it), the rate-limit store and the service. Redis is
    /// not contacted here: keygate starts while it is down. Nothing is bootstrapped; call
    /// [`Self::sync_counters`] before the first verification.
    pub fn open(settings: &RuntimeSettings, clock: Arc<dyn Clock>) -> Result<Self, RuntimeError> {
        let store = SqlStore::open(&settings.database_url, settings.pool.clone())?;
        let db = format!("{} {}", store.backend().kind(), store.backend().display_location());
        let (limiter, redis, limiter_desc) = rate_limit_store(settings)?;
        let counters = match (&redis, store.backend().kind()) {
            (Some(redis), _) => CounterSource::Shared(redis.clone()),
            (None, "sqlite") => CounterSource::Local(Default::default()),
            (None, _) => CounterSource::Store,
        };
        let probe = match (&counters, settings.change_probe) {
            (CounterSource::Local(_), Some(every)) => store.change_probe()?.map(|p| (p, every)),
            _ => None,
        };
        let mut rbac = RbacService::new(store, clock)
            .with_overrides_listener(Arc::new(OverridesToLimiter(limiter.clone())))
            .with_counter_source(counters)
            .with_limiter(limiter.clone())
            .with_verify_cache(settings.verify_cache);
        if let Some((probe, every)) = probe {
            rbac = rbac.with_change_probe(probe, every);
        }
        if let Some(redis) = &redis {
            // Credit counters live in Redis, written behind to the database.
            rbac = rbac.with_shared_credits(redis.clone());
        }
        if let Some(a) = settings.analytics {
            rbac = rbac
                .with_analytics(Arc::new(keygate_rbac::analytics::Recorder::new(a.max_series)))
                .with_ratelimit_analytics(Arc::new(keygate_rbac::ratelimit_analytics::LimitRecorder::new(
                    a.max_series,
                )));
        }
        let description = format!("database: {db}; rate-limit store: {limiter_desc}");
        Ok(Self { rbac, limiter, redis, description, analytics: settings.analytics })
    }

    /// Local counters: where the database stands now, before anything is cached. Shared:
    /// trusted once this first reconciliation succeeds (the database's are read until then).
    pub fn sync_counters(&self) -> Result<(), RbacError> {
        self.rbac.poll_changes()?;
        if let Err(e) = self.rbac.reconcile_shared_counters() {
            log::warn!("change counters: the shared store is not reachable yet, reading the database's: {e}");
        }
        Ok(())
    }
}

impl AsRef<Runtime> for Runtime {
    fn as_ref(&self) -> &Runtime {
        self
    }
}

type RateLimitStores = (Arc<dyn RateLimitStore>, Option<Arc<RedisStore>>, String);

/// The rate-limit store the settings select, the Redis store behind it if any, and a
/// description.
fn rate_limit_store(settings: &RuntimeSettings) -> Result<RateLimitStores, RuntimeError> {
    let Some(url) = &settings.redis_url else {
        return Ok((Arc::new(MemoryStore::new()), None, "memory (in-process)".into()));
    };
    let redis = Arc::new(RedisStore::open(url, settings.redis.clone())?);
    let mut desc = format!("redis {}", redis.display_location());
    if let Err(e) = redis.ping() {
        log::warn!("the rate-limit store is not reachable yet: {e}");
    }
    let store: Arc<dyn RateLimitStore> = if settings.fail_open {
        desc.push_str(", failing open");
        Arc::new(FailOpen(redis.clone()))
    } else {
        redis.clone()
    };
    Ok((store, Some(redis), desc))
}

/// Passes override changes on to the rate-limit store (a shared one bumps the namespace's
/// overrides epoch, so every instance reloads them on its next request). When that fails
/// the change is committed all the same, and other instances see it within the override
/// cache's TTL (1 s).
#[derive(Debug)]
struct OverridesToLimiter(Arc<dyn RateLimitStore>);

impl OverridesListener for OverridesToLimiter {
    fn overrides_changed(&self, namespace_id: &str) {
        if let Err(e) = self.0.bump_overrides_epoch(namespace_id) {
            log::warn!(
                "overrides of namespace {namespace_id} changed, but other instances could not be told at once (they reload within 1 s): {e}"
            );
        }
    }
}

/// How often idle expired rate-limit windows are reclaimed.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// How often the database's change counters are polled for writes made by other processes
/// (local counters; the documented bound is twice this).
pub const COUNTER_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often recent counter changes are published to the shared store again, and how far
/// back (shared counters: closes the gap a writer leaves that committed but did not publish).
pub const COUNTER_RECONCILE_INTERVAL: Duration = Duration::from_secs(1);
/// How often the live credit counters (in Redis) are written behind to the database: the
/// bound on what a loss of Redis re-grants (`docs/operations.md`).
pub const CREDIT_WRITE_BEHIND_INTERVAL: Duration = Duration::from_secs(1);
/// How often the verification counts held in memory are written to the database (they
/// reach the API within this), and how often the roll-up and retention of analytics run.
pub const ANALYTICS_FLUSH_INTERVAL: Duration = Duration::from_secs(2);
const ANALYTICS_ROLLUP_INTERVAL: Duration = Duration::from_secs(600);

/// Starts the background upkeep of the runtime `host` holds, each task on a thread of its
/// own: the sweep of ended rate-limit windows, the change counters (polled, or
/// republished to Redis; with Redis, the overrides epochs that local denials rely on), the
/// credit write-behind (with Redis) and the analytics flush and roll-up (when analytics
/// are on). The threads stop when `host` is dropped, or when the returned [`Upkeep`] is
/// stopped or dropped (which waits for a task under way to finish: a process that ends
/// right after has no thread left in the database's client library).
pub fn spawn_upkeep<T: AsRef<Runtime> + Send + Sync + 'static>(host: Weak<T>) -> Upkeep {
    let mut upkeep = Upkeep::default();
    let Some(strong) = host.upgrade() else { return upkeep };
    let (redis, analytics) = (strong.as_ref().as_ref().redis.is_some(), strong.as_ref().as_ref().analytics);
    drop(strong);
    upkeep.spawn("keygate-sweeper", SWEEP_INTERVAL, host.clone(), |h: &T, _| {
        let rt = h.as_ref();
        rt.limiter.sweep(rt.rbac.clock().now_ms());
    });
    upkeep.spawn("keygate-counters", COUNTER_POLL_INTERVAL, host.clone(), |h: &T, round| {
        let rt = h.as_ref();
        if let Err(e) = rt.rbac.poll_changes() {
            log::warn!("change counters: polling the database failed: {e}");
        }
        if let Some(redis) = &rt.redis
            && let Err(e) = redis.poll_overrides_epochs()
        {
            log::debug!("local denials: reading the overrides epochs failed (they pause): {e}");
        }
        let every = (COUNTER_RECONCILE_INTERVAL.as_millis() / COUNTER_POLL_INTERVAL.as_millis()) as u64;
        if round % every == every - 1
            && let Err(e) = rt.rbac.reconcile_shared_counters()
        {
            log::warn!("change counters: publishing recent changes failed: {e}");
        }
    });
    if redis {
        upkeep.spawn("keygate-credits-behind", CREDIT_WRITE_BEHIND_INTERVAL, host.clone(), |h: &T, _| {
            if let Err(e) = h.as_ref().rbac.write_behind_credits() {
                log::warn!("credits: writing the live counters behind to the database failed: {e}");
            }
        });
    }
    if let Some(a) = analytics {
        let every = (ANALYTICS_ROLLUP_INTERVAL.as_millis() / ANALYTICS_FLUSH_INTERVAL.as_millis()) as u64;
        upkeep.spawn("keygate-analytics", ANALYTICS_FLUSH_INTERVAL, host, move |h: &T, round| {
            let rt = h.as_ref();
            if let Err(e) = rt.rbac.flush_analytics() {
                log::warn!("analytics: writing the counts failed (kept for the next try): {e}");
            }
            // The first roll-up at the first flush, then every ANALYTICS_ROLLUP_INTERVAL.
            if round % every == 0
                && let Err(e) = rt.rbac.roll_up_analytics(a.retention_days)
            {
                log::warn!("analytics: the roll-up failed (tried again later): {e}");
            }
        });
    }
    upkeep
}

/// Background threads that each run a task at an interval, and stop together: when
/// [`Upkeep::stop`] is called or the `Upkeep` is dropped (each woken at once, a task under
/// way finished first), or when the host they serve is dropped.
#[derive(Debug, Default)]
pub struct Upkeep {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Upkeep {
    /// Runs `task` every `interval`, first after one interval (with the round's number), on
    /// a thread named `name`, while `host` lives and until stopped.
    pub fn spawn<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        interval: Duration,
        host: Weak<T>,
        task: impl Fn(&T, u64) + Send + 'static,
    ) {
        self.spawn_from(name, interval, interval, host, task);
    }

    /// As [`Self::spawn`], the first run at once.
    pub fn spawn_now<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        interval: Duration,
        host: Weak<T>,
        task: impl Fn(&T, u64) + Send + 'static,
    ) {
        self.spawn_from(name, Duration::ZERO, interval, host, task);
    }

    fn spawn_from<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        first: Duration,
        interval: Duration,
        host: Weak<T>,
        task: impl Fn(&T, u64) + Send + 'static,
    ) {
        let stop = self.stop.clone();
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            let mut wait = first;
            for round in 0u64.. {
                let deadline = std::time::Instant::now() + wait;
                wait = interval;
                loop {
                    if stop.load(std::sync::atomic::Ordering::Acquire) {
                        return;
                    }
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        break;
                    }
                    std::thread::park_timeout(deadline - now);
                }
                let Some(host) = host.upgrade() else { return };
                task(&host, round);
            }
        });
        match spawned {
            Ok(handle) => self.threads.push(handle),
            Err(e) => log::warn!("could not start {name}: {e}"),
        }
    }

    /// Stops every thread and waits for them (a task under way finishes first).
    pub fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        for t in &self.threads {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.stop();
    }
}
