//! keygate in process: the capability services wired over the SQL store (`rbac`, and on
//! it `usage` and `analytics`), the rate-limit store the settings select (in-process, or
//! Redis), the change counters that keep the verification cache exact, and the background
//! upkeep that keeps them current ([`upkeep`]). The server composes its HTTP layer around
//! one of these; `keygate-client`'s embedded verifier is one, so a service embedding
//! keygate verifies exactly as the server does.
//!
//! This crate is the composition: it chooses the services and stores the settings ask
//! for, connects them, and runs their upkeep; no behaviour of a capability lives here. It
//! also holds the hot paths' sequencing, which calls several capabilities in order (cache,
//! the store on a miss, the decision, analytics): [`Runtime::limit`] ([`limit`]), through
//! the caller's blocking pool ([`Offload`]), and [`Runtime::verify`] ([`verify`]).

mod cached;
pub mod limit;
pub mod offload;
pub mod upkeep;
pub mod verify;
pub mod warm;

pub use limit::{LimitAsk, Limited, LimitedAll, LoadGates};
pub use offload::{CallError, LoadQueue, Offload};
pub use verify::VerifyCall;

pub use upkeep::{
    ANALYTICS_FLUSH_INTERVAL, COUNTER_POLL_INTERVAL, COUNTER_RECONCILE_INTERVAL,
    CREDIT_WRITE_BEHIND_INTERVAL, SWEEP_INTERVAL, Upkeep, spawn_upkeep,
};

use keygate_analytics::AnalyticsService;
use keygate_domain::Clock;
use keygate_metering::MeteringService;
use keygate_namespaces::Namespaces;
use keygate_operators::Sessions;
use keygate_portal::PortalService;
use keygate_ratelimit::{FailOpen, MemoryStore, RateLimitStore};
use keygate_rbac::{CounterSource, Migrations, OverridesListener, RbacError, RbacService};
use keygate_scanning::{LeakAction, ScanningService};
use keygate_store::{PoolSettings, RedisOpenError, RedisSettings, RedisStore, SqlStore, StoreOpenError};
use keygate_usage::{SharedCredits, UsageService};
use keygate_webhooks::{Outbox, WebhookService};
use std::sync::Arc;
use std::time::Duration;

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
    /// Without Redis, on SQLite: the in-process store's budgets are kept in
    /// `<database file>-ratelimits/`, so that a restart (`kill -9` included) admits nothing
    /// beyond a limit (API-v2.md §26). Off: a restart starts every budget afresh.
    pub ratelimit_persist: bool,
    /// The algorithm rate-limit namespaces are created with (API-v2.md §26).
    pub ratelimit_algorithm: keygate_domain::Algorithm,
    /// The verification cache (on in production; off only to measure without it).
    pub verify_cache: bool,
    /// The most the verification cache's keys weigh, about (bytes).
    pub verify_cache_bytes: u64,
    /// Usage analytics: `Some` records verifications and rate-limit decisions.
    pub analytics: Option<AnalyticsSettings>,
    /// SQLite without Redis: look at the file's change number at most once per this before
    /// trusting a cached verification, so that another process's write is seen at the next
    /// verification, not at the next 50 ms poll ([`keygate_rbac::Probe`]; a look costs
    /// about 2 us). `None` (the server's setting): the poll alone.
    pub change_probe: Option<Duration>,
    /// The migration ids `keys.migrateKeys` accepts besides the built-in schemes' names.
    pub migrations: Migrations,
    /// The keyring recoverable keys are sealed with; `None`: recoverable keys are refused.
    pub vault: Option<Arc<keygate_vault::Keyring>>,
    /// Where end users reach the server (portal sessions' links).
    pub public_url: String,
    /// Webhook endpoints may point at loopback and private addresses.
    pub webhooks_allow_private: bool,
    /// Days finished webhook deliveries, their attempts and events are kept (0: for good).
    pub webhooks_retention_days: u64,
    /// The DNS server webhook endpoints' names are looked up with; `None`: the system's.
    pub webhooks_dns: Option<std::net::SocketAddr>,
    /// The file of GitHub's secret scanning public keys; `None`: reports are refused.
    pub github_scanning_keys: Option<std::path::PathBuf>,
    /// What the first report of a live key does to it.
    pub github_scanning_action: LeakAction,
    /// Verifications that load their key from the database at once, at most (`None`: no
    /// bound): on SQLite a load is CPU (about 90 us), and a cold cache's loads on the
    /// blocking pool's threads would take the workers' cores from the cached verifications
    /// beside them; the others wait for a turn without a thread. The server sets the
    /// number of workers on SQLite, and no bound on PostgreSQL (whose loads wait on the
    /// network).
    pub max_loading: Option<usize>,
    /// The usage export to billing systems (docs/metering.md); `None`: off.
    pub usage_export: Option<keygate_metering::ExportSettings>,
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
            ratelimit_persist: true,
            ratelimit_algorithm: Default::default(),
            verify_cache: true,
            verify_cache_bytes: keygate_rbac::MAX_CACHED_KEY_BYTES,
            analytics: Some(AnalyticsSettings::default()),
            change_probe: None,
            migrations: Migrations::default(),
            vault: None,
            public_url: "http://localhost".into(),
            webhooks_allow_private: false,
            webhooks_retention_days: keygate_webhooks::retention::DEFAULT_RETENTION_DAYS,
            webhooks_dns: None,
            github_scanning_keys: None,
            github_scanning_action: LeakAction::default(),
            max_loading: None,
            usage_export: None,
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
        Self { max_series: 1_000_000, retention_days: 90 }
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
    /// The in-process store's kept budgets could not be read or written.
    #[error("the rate-limit budgets kept beside the database: {0}")]
    RateLimitState(String),
    /// The usage export's settings cannot run.
    #[error("the usage export: {0}")]
    UsageExport(#[from] keygate_metering::SettingsError),
}

/// An opened in-process keygate (see the module docs). Start its upkeep with
/// [`spawn_upkeep`] once it is shared.
#[derive(Debug)]
pub struct Runtime {
    /// Root keys, keys, identities, permissions and roles, namespaces and overrides, audit,
    /// and the check of a verification.
    pub rbac: Arc<RbacService<SqlStore>>,
    /// What verifications spend: rate limits of keys and identities, credits.
    pub usage: UsageService<SqlStore>,
    /// Verification and rate-limit counts.
    pub analytics: Arc<AnalyticsService<SqlStore>>,
    /// The customer portal (API-v2.md §17).
    pub portal: PortalService<SqlStore>,
    /// Webhook endpoints and the delivery of their events (API-v2.md §23), and of the
    /// usage export's.
    pub webhooks: WebhookService<SqlStore>,
    /// The usage export to billing systems, when configured.
    pub metering: Option<MeteringService<SqlStore>>,
    /// GitHub's secret scanning reports (API-v2.md §24).
    pub scanning: ScanningService<SqlStore>,
    /// The dashboard's sessions.
    pub sessions: Sessions<SqlStore>,
    /// Rate-limit namespaces' settings (API-v2.md §26).
    pub namespaces: Namespaces<SqlStore>,
    /// Where rate-limit decisions are made.
    pub limiter: Arc<dyn RateLimitStore>,
    /// The Redis store, when `redis_url` is set (`limiter` wraps it).
    pub redis: Option<Arc<RedisStore>>,
    /// `"<database>; rate-limit store: <store>"`, for a startup line.
    pub description: String,
    /// The analytics settings in force.
    pub analytics_settings: Option<AnalyticsSettings>,
    /// Pass rate-limit requests while Redis is unreachable (contract §5.12).
    pub fail_open: bool,
    /// One store read per root key, namespace or overrides at a time (the hot paths' misses).
    pub loads: LoadGates,
    /// Verifications loading their key, at most [`RuntimeSettings::max_loading`] at once.
    pub loading: Option<Arc<LoadQueue>>,
}

impl Runtime {
    /// Opens the database (migrating it), the rate-limit store and the service. Redis is
    /// not contacted here: keygate starts while it is down. Nothing is bootstrapped; call
    /// [`Self::sync_counters`] before the first verification.
    pub fn open(settings: &RuntimeSettings, clock: Arc<dyn Clock>) -> Result<Self, RuntimeError> {
        let store = SqlStore::open(&settings.database_url, settings.pool.clone())?;
        let db = format!("{} {}", store.backend().kind(), store.backend().display_location());
        let persist_in = settings.ratelimit_persist.then(|| store.beside_database("-ratelimits")).flatten();
        let (limiter, redis, limiter_desc) = rate_limit_store(settings, persist_in, clock.now_ms())?;
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
            .with_verify_cache_bytes(settings.verify_cache, settings.verify_cache_bytes)
            .with_migrations(settings.migrations.clone())
            .with_legacy(Arc::new(keygate_legacy::Legacy::default()))
            .with_default_algorithm(settings.ratelimit_algorithm);
        if let Some((probe, every)) = probe {
            rbac = rbac.with_change_probe(probe, every);
        }
        if let Some(keyring) = &settings.vault {
            rbac = rbac.with_vault(keyring.clone());
        }
        let outbox = Arc::new(Outbox::default());
        rbac = rbac.with_key_events(outbox.clone());
        // With Redis, credit counters live there, written behind to the database.
        let shared_credits = redis.clone().map(|r| r as Arc<dyn SharedCredits>);
        let (rbac, usage) = UsageService::wire(rbac, limiter.clone(), shared_credits);
        // SQL analytics queries hold a pooled connection each for up to 5 s: half the pool.
        let analytics = Arc::new(
            AnalyticsService::new(rbac.clone(), settings.analytics.map(|a| a.max_series))
                .with_sql_capacity(settings.pool.max_size as usize / 2),
        );
        let portal = PortalService::new(rbac.clone(), analytics.clone(), &settings.public_url);
        let metering = match &settings.usage_export {
            Some(export) => Some(MeteringService::new(rbac.clone(), analytics.clone(), export.clone())?),
            None => None,
        };
        let webhooks = WebhookService::new(rbac.clone(), outbox, settings.webhooks_allow_private)
            .with_retention_days(settings.webhooks_retention_days)
            .with_dns(settings.webhooks_dns)
            .with_sinks(metering.as_ref().map(MeteringService::sinks).unwrap_or_default());
        let scanning = ScanningService::new(
            rbac.clone(),
            settings.github_scanning_keys.clone(),
            settings.github_scanning_action,
        );
        let sessions = Sessions::new(rbac.clone());
        let namespaces = Namespaces::new(rbac.clone());
        let description = format!("database: {db}; rate-limit store: {limiter_desc}");
        Ok(Self {
            rbac,
            usage,
            analytics,
            portal,
            webhooks,
            metering,
            scanning,
            sessions,
            namespaces,
            limiter,
            redis,
            description,
            analytics_settings: settings.analytics,
            fail_open: settings.fail_open,
            loads: LoadGates::default(),
            loading: settings.max_loading.map(|n| Arc::new(LoadQueue::new(n))),
        })
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
/// description. Without Redis, the in-process store keeps its budgets in `persist_in`
/// when given.
fn rate_limit_store(
    settings: &RuntimeSettings,
    persist_in: Option<std::path::PathBuf>,
    now_ms: u64,
) -> Result<RateLimitStores, RuntimeError> {
    let Some(url) = &settings.redis_url else {
        let Some(dir) = persist_in else {
            return Ok((Arc::new(MemoryStore::new()), None, "memory (in-process)".into()));
        };
        let opened = MemoryStore::persistent(&dir, now_ms)
            .map_err(|e| RuntimeError::RateLimitState(format!("{}: {e}", dir.display())))?;
        return Ok(match opened {
            Some(store) => (Arc::new(store), None, format!("memory (in-process, kept in {})", dir.display())),
            None => {
                log::warn!(
                    "{}: another process keeps its rate-limit budgets there; this one's are in memory only (a restart starts them afresh)",
                    dir.display()
                );
                (Arc::new(MemoryStore::new()), None, "memory (in-process)".into())
            }
        });
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
