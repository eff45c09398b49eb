//! Composition: store + RBAC service + rate-limit store + actix-web.

use crate::config::{HttpLimits, MetricsSetting, ServerConfig};
use crate::connections::{self, Connections};
use crate::http;
use crate::listen::{ListenAddr, Listener, SocketFile};
use crate::routes;
pub use crate::state::AppState;
use crate::state::{LoadGates, MetricsAccess};
use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use keygate_domain::{Clock, Secret, SystemClock, redact_in, redact_url, validate_root_key_secret};
use keygate_ratelimit::{FailOpen, MemoryStore, RateLimitStore};
use keygate_rbac::{CounterSource, OverridesListener, RbacService};
use keygate_store::{RedisSettings, RedisStore, SqlStore};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A started server.
pub struct RunningServer {
    /// Where it listens (a TCP address, or a Unix socket).
    pub addr: ListenAddr,
    pub handle: ServerHandle,
    pub server: actix_web::dev::Server,
    /// The root key created by the first-start bootstrap, if this start created one.
    pub bootstrap_root_key: Option<Secret>,
    pub state: web::Data<AppState>,
    /// Where `/metrics` listens when it has its own address (`KEYGATE_METRICS_LISTEN`).
    pub metrics_addr: Option<SocketAddr>,
    /// A Unix socket's file, removed when this is dropped (after the server has stopped).
    pub socket_file: Option<SocketFile>,
}

impl std::fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// How often idle expired rate-limit windows are reclaimed.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

/// Opens the stores, bootstraps a fresh database, binds the listener and builds the
/// server (not yet polled: await `server` or run it on an actix system).
pub fn start(config: ServerConfig, clock: Arc<dyn Clock>) -> anyhow::Result<RunningServer> {
    if let Some(chosen) = &config.root_key {
        validate_root_key_secret(chosen).map_err(|e| anyhow::anyhow!("KEYGATE_ROOT_KEY {}", e.message))?;
    }
    // The address first: a start that cannot listen must not bootstrap the database (its
    // one-time root key would be printed, then lost with the failed start).
    let (listener, addr) = Listener::bind(&config.listen, config.listen_mode)?;
    // Configuration that can fail, before the database is touched.
    let gateway_policies = match &config.gateway_policies {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading KEYGATE_GATEWAY_POLICIES {path}"))?;
            keygate_rbac::gateway::GatewayPolicies::from_json(&text)
                .map_err(|e| anyhow::anyhow!("KEYGATE_GATEWAY_POLICIES {path}: {e}"))?
        }
        None => Default::default(),
    };
    let store = SqlStore::open(&config.database_url, config.pool.clone()).map_err(|e| {
        let url = &config.database_url;
        anyhow::anyhow!("opening the database {:?}: {}", redact_url(url), redact_in(&e.to_string(), url))
    })?;
    let db_desc = format!("{} {}", store.backend().kind(), store.backend().display_location());
    let (limiter, redis, limiter_desc) = rate_limit_store(&config)?;
    let counters = match (&redis, store.backend().kind()) {
        (Some(redis), _) => CounterSource::Shared(redis.clone()),
        (None, "sqlite") => CounterSource::Local(Default::default()),
        (None, _) => CounterSource::Store,
    };
    let mut rbac = RbacService::new(store, clock.clone())
        .with_overrides_listener(Arc::new(OverridesToLimiter(limiter.clone())))
        .with_counter_source(counters)
        .with_limiter(limiter.clone())
        .with_verify_cache(config.verify_cache);
    if let Some(redis) = &redis {
        // Credit counters live in Redis, written behind to the database.
        rbac = rbac.with_shared_credits(redis.clone());
    }
    if let Some(a) = config.analytics {
        rbac = rbac
            .with_analytics(Arc::new(keygate_rbac::analytics::Recorder::new(a.max_series)))
            .with_ratelimit_analytics(Arc::new(keygate_rbac::ratelimit_analytics::LimitRecorder::new(
                a.max_series,
            )));
    }
    let bootstrap_root_key = bootstrap(&rbac, config.root_key.clone())?;
    // Local counters: where the database stands now, before anything is cached. Shared:
    // trusted once this first reconciliation succeeds (the database's are read until then).
    rbac.poll_changes().context("reading the change counters")?;
    if let Err(e) = rbac.reconcile_shared_counters() {
        log::warn!("change counters: the shared store is not reachable yet, reading the database's: {e}");
    }

    spawn_sweeper(Arc::downgrade(&limiter), clock.clone());
    let docs_base = config.docs_url.clone().unwrap_or_else(|| match addr.tcp() {
        Some(tcp) => format!("http://{tcp}/docs"),
        None => "http://localhost/docs".to_string(),
    });
    let workers = worker_count(&config);
    // Database and Redis pools, and each worker's asynchronous Redis connection.
    let redis_conns = if redis.is_some() { u64::from(config.redis.max_size) + workers as u64 } else { 0 };
    let pools = u64::from(config.pool.max_size) + redis_conns;
    let (cap, lowered) = connections::effective_cap(config.http.max_connections, pools);
    if let Some(why) = lowered {
        log::warn!("{why}");
    }
    let limits = HttpLimits { max_connections: cap, ..config.http };
    let connections = Connections::new(cap);
    let metrics_access = match (config.metrics, &config.metrics_listen) {
        (MetricsSetting::Off, _) | (_, Some(_)) => MetricsAccess::NotHere,
        (MetricsSetting::RootKey, None) => MetricsAccess::RootKey,
        (MetricsSetting::On, None) => MetricsAccess::Open,
    };
    let route_names: Vec<&'static str> = routes::ROUTES.iter().map(|(path, _)| *path).collect();
    let metrics =
        crate::metrics::Metrics::new(&route_names, limiter.kind(), config.metrics != MetricsSetting::Off);
    let state = web::Data::new(AppState {
        rbac,
        limiter,
        redis,
        fail_open: config.ratelimit_fail_open,
        clock: clock.clone(),
        docs_base,
        loads: LoadGates::default(),
        limits,
        connections: connections.clone(),
        metrics,
        metrics_access,
        gateway_policies,
        openapi: Default::default(),
        dashboard: config.dashboard.clone().map(|d| Arc::new(crate::dashboard::Dashboard::new(d))),
    });
    let metrics_addr = match (&config.metrics_listen, config.metrics) {
        (Some(listen), MetricsSetting::On | MetricsSetting::RootKey) => {
            Some(spawn_metrics_listener(listen, state.clone(), config.metrics)?)
        }
        _ => None,
    };

    let app_state = state.clone();
    let dashboard = config.dashboard.is_some();
    let mut server = HttpServer::new(move || {
        // The API's routes first (the hot paths are tried first), then the dashboard's
        // scope; the API's JSON 404 answers every other path.
        App::new().app_data(app_state.clone()).wrap(http::RequestId).configure(|cfg| {
            routes::configure(cfg);
            if dashboard {
                crate::dashboard::configure(cfg);
            }
        })
    })
    .workers(workers)
    .max_connections(connections::per_worker(cap, workers))
    .client_request_timeout(limits.header_timeout)
    .client_disconnect_timeout(Duration::from_secs(1))
    .keep_alive(limits.keep_alive)
    .on_connect(move |_, ext| {
        ext.insert(connections.opened(clock.now_ms()));
    });
    let socket_file = match listener {
        Listener::Tcp(l) => {
            server = server.listen(l)?;
            None
        }
        Listener::Unix(l, file) => {
            server = server.listen_uds(l)?;
            Some(file)
        }
    };
    if !config.handle_signals {
        server = server.disable_signals();
    }
    let server = server.shutdown_timeout(5).run();
    spawn_counter_upkeep(Arc::downgrade(&state.clone().into_inner()));
    if config.audit_retention_days > 0 {
        spawn_audit_retention(Arc::downgrade(&state.clone().into_inner()), config.audit_retention_days);
    }
    spawn_metrics_upkeep(Arc::downgrade(&state.clone().into_inner()));
    if let Some(a) = config.analytics {
        spawn_analytics_upkeep(Arc::downgrade(&state.clone().into_inner()), a.retention_days);
    }
    if state.redis.is_some() {
        spawn_credit_write_behind(Arc::downgrade(&state.clone().into_inner()));
    }
    log::info!("keygate listening on {addr} (database: {db_desc}; rate-limit store: {limiter_desc})");
    if let Some(m) = metrics_addr {
        log::info!("keygate metrics on http://{m}/metrics");
    }
    Ok(RunningServer {
        addr,
        handle: server.handle(),
        server,
        bootstrap_root_key,
        state,
        metrics_addr,
        socket_file,
    })
}

/// `/metrics` alone on its own address (`KEYGATE_METRICS_LISTEN`), one worker, run on the
/// caller's actix system; the root-key setting applies there too.
fn spawn_metrics_listener(
    listen: &str,
    state: web::Data<AppState>,
    setting: MetricsSetting,
) -> anyhow::Result<SocketAddr> {
    let listener =
        TcpListener::bind(listen).with_context(|| format!("binding the metrics address {listen}"))?;
    let addr = listener.local_addr()?;
    let access =
        if setting == MetricsSetting::RootKey { MetricsAccess::RootKey } else { MetricsAccess::Open };
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(access)
            .wrap(http::RequestId)
            .route("/metrics", web::get().to(crate::handlers::system::metrics))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    actix_web::rt::spawn(server);
    Ok(addr)
}

/// How often the histograms' sample buffers are drained when nobody scrapes.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

fn spawn_metrics_upkeep(state: Weak<AppState>) {
    let spawned = std::thread::Builder::new().name("keygate-metrics".into()).spawn(move || {
        loop {
            std::thread::sleep(METRICS_UPKEEP_INTERVAL);
            let Some(state) = state.upgrade() else { return };
            state.metrics.upkeep();
        }
    });
    if let Err(e) = spawned {
        log::warn!("could not start the metrics upkeep: {e}");
    }
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

/// The rate-limit store, the Redis store behind it if any (it also holds the change
/// counters), and a description for the startup line.
/// The HTTP workers: as configured, or one per CPU.
fn worker_count(config: &ServerConfig) -> usize {
    config
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
        .max(1)
}

type RateLimitStores = (Arc<dyn RateLimitStore>, Option<Arc<RedisStore>>, String);

/// The rate-limit store the configuration selects, and its description for the startup
/// line: Redis when `REDIS_URL` is set (not contacted here: keygate starts while Redis is
/// down and answers 503 until it is back, or passes requests when failing open).
fn rate_limit_store(config: &ServerConfig) -> anyhow::Result<RateLimitStores> {
    let Some(url) = &config.redis_url else {
        return Ok((Arc::new(MemoryStore::new()), None, "memory (in-process)".into()));
    };
    // One lane (asynchronous connection, queue, one script call in flight) per worker.
    let settings = RedisSettings { lanes: worker_count(config), ..config.redis.clone() };
    let redis = Arc::new(RedisStore::open(url, settings)?);
    let mut desc = format!("redis {}", redis.display_location());
    if let Err(e) = redis.ping() {
        log::warn!("the rate-limit store is not reachable yet: {e}");
    }
    let store: Arc<dyn RateLimitStore> = if config.ratelimit_fail_open {
        desc.push_str(", failing open");
        Arc::new(FailOpen(redis.clone()))
    } else {
        redis.clone()
    };
    Ok((store, Some(redis), desc))
}

/// First start: creates workspace `default` and a root key holding `*`, printed once.
/// A key chosen through `KEYGATE_ROOT_KEY` is not printed: the operator has it already,
/// and the output may end up in a log.
fn bootstrap(rbac: &RbacService<SqlStore>, root_key: Option<String>) -> anyhow::Result<Option<Secret>> {
    let chosen = root_key.is_some();
    let Some((ws, rk, secret)) = rbac.bootstrap(root_key.map(Secret::new)).context("bootstrapping")? else {
        if chosen {
            crate::logging::notice(
                "KEYGATE_ROOT_KEY is ignored: this database was set up by an earlier start \
                 and has its root keys (create another with `keygate root-keys create`, or point \
                 DATABASE_URL at a new database).",
            );
        }
        return Ok(None);
    };
    crate::logging::notice(&format!(
        "first start: created workspace {:?} ({}) and root key {} holding \"*\".",
        ws.name, ws.id, rk.id
    ));
    if chosen {
        crate::logging::notice("the root key is the one given in KEYGATE_ROOT_KEY (not printed).");
    } else {
        crate::logging::notice(&format!(
            "ROOT KEY (shown once; store it now, it cannot be shown again): {}",
            secret.expose()
        ));
    }
    Ok(Some(secret))
}

/// Reclaims ended windows of idle budgets; stops when the store is dropped.
fn spawn_sweeper(store: Weak<dyn RateLimitStore>, clock: Arc<dyn Clock>) {
    let spawned = std::thread::Builder::new().name("keygate-sweeper".into()).spawn(move || {
        loop {
            std::thread::sleep(SWEEP_INTERVAL);
            match store.upgrade() {
                Some(s) => s.sweep(clock.now_ms()),
                None => return,
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("could not start the rate-limit sweeper: {e}");
    }
}

/// How often the database's change counters are polled for writes made by other processes
/// (local counters; the documented bound is twice this).
const COUNTER_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often recent counter changes are published to the shared store again, and how far
/// back (shared counters: closes the gap a writer leaves that committed but did not publish).
const COUNTER_RECONCILE_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the change counters current: polls the database (local counters) or republishes
/// recent changes (shared counters); with Redis, also confirms the overrides epochs that
/// local denials rely on. Stops when the server's state is dropped.
fn spawn_counter_upkeep(state: Weak<AppState>) {
    let spawned = std::thread::Builder::new().name("keygate-counters".into()).spawn(move || {
        let mut since_reconcile = Duration::ZERO;
        loop {
            std::thread::sleep(COUNTER_POLL_INTERVAL);
            since_reconcile += COUNTER_POLL_INTERVAL;
            let Some(state) = state.upgrade() else { return };
            if let Err(e) = state.rbac.poll_changes() {
                log::warn!("change counters: polling the database failed: {e}");
            }
            if let Some(redis) = &state.redis
                && let Err(e) = redis.poll_overrides_epochs()
            {
                log::debug!("local denials: reading the overrides epochs failed (they pause): {e}");
            }
            if since_reconcile >= COUNTER_RECONCILE_INTERVAL {
                since_reconcile = Duration::ZERO;
                if let Err(e) = state.rbac.reconcile_shared_counters() {
                    log::warn!("change counters: publishing recent changes failed: {e}");
                }
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("could not start the change-counter upkeep: {e}");
    }
}

/// How often the live credit counters (in Redis) are written behind to the database: the
/// bound on what a loss of Redis re-grants (`docs/operations.md`).
pub const CREDIT_WRITE_BEHIND_INTERVAL: Duration = Duration::from_secs(1);

/// Writes the credit counters changed in Redis to the database, once per
/// [`CREDIT_WRITE_BEHIND_INTERVAL`] (each instance; a lease per shard keeps them from doing
/// the same work). Stops when the server's state is dropped.
fn spawn_credit_write_behind(state: Weak<AppState>) {
    let spawned = std::thread::Builder::new().name("keygate-credits-behind".into()).spawn(move || {
        loop {
            std::thread::sleep(CREDIT_WRITE_BEHIND_INTERVAL);
            let Some(state) = state.upgrade() else { return };
            if let Err(e) = state.rbac.write_behind_credits() {
                log::warn!("credits: writing the live counters behind to the database failed: {e}");
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("could not start the credit write-behind: {e}");
    }
}

/// How often the verification counts held in memory are written to the database (they
/// reach the API within this), and how often the roll-up and retention of analytics run.
pub const ANALYTICS_FLUSH_INTERVAL: Duration = Duration::from_secs(2);
const ANALYTICS_ROLLUP_INTERVAL: Duration = Duration::from_secs(600);

/// Writes the analytics counts every [`ANALYTICS_FLUSH_INTERVAL`] and rolls them up every
/// [`ANALYTICS_ROLLUP_INTERVAL`]. Stops when the server's state is dropped.
fn spawn_analytics_upkeep(state: Weak<AppState>, retention_days: u64) {
    let spawned = std::thread::Builder::new().name("keygate-analytics".into()).spawn(move || {
        let mut since_rollup = ANALYTICS_ROLLUP_INTERVAL;
        loop {
            std::thread::sleep(ANALYTICS_FLUSH_INTERVAL);
            let Some(state) = state.upgrade() else { return };
            if let Err(e) = state.rbac.flush_analytics() {
                log::warn!("analytics: writing the counts failed (kept for the next try): {e}");
            }
            since_rollup += ANALYTICS_FLUSH_INTERVAL;
            if since_rollup >= ANALYTICS_ROLLUP_INTERVAL {
                since_rollup = Duration::ZERO;
                if let Err(e) = state.rbac.roll_up_analytics(retention_days) {
                    log::warn!("analytics: the roll-up failed (tried again later): {e}");
                }
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("could not start the analytics upkeep: {e}");
    }
}

/// How often the audit retention runs, and the most events one pass deletes (bounded work
/// per pass: a long backlog is worked off over several passes).
const AUDIT_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
pub const AUDIT_PRUNE_PER_PASS: usize = 5_000;

/// Deletes audit events older than `days`, at most [`AUDIT_PRUNE_PER_PASS`] a pass, once
/// per [`AUDIT_RETENTION_INTERVAL`]. Stops when the server's state is dropped.
fn spawn_audit_retention(state: Weak<AppState>, days: u64) {
    let keep_ms = i64::try_from(days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
    let spawned = std::thread::Builder::new().name("keygate-audit-retention".into()).spawn(move || {
        loop {
            let Some(state) = state.upgrade() else { return };
            let cutoff = i64::try_from(state.clock.now_ms()).unwrap_or(i64::MAX).saturating_sub(keep_ms);
            match state.rbac.prune_audit_events(cutoff, AUDIT_PRUNE_PER_PASS) {
                Ok(0) => {}
                Ok(n) => log::info!("audit retention: deleted {n} events older than {days} days"),
                Err(e) => log::warn!("audit retention: {e}"),
            }
            drop(state);
            std::thread::sleep(AUDIT_RETENTION_INTERVAL);
        }
    });
    if let Err(e) = spawned {
        log::warn!("could not start the audit retention: {e}");
    }
}

/// `keygate serve`: runs until SIGINT or SIGTERM, then stops accepting, lets in-flight
/// requests finish (up to 5 s) and exits.
pub fn run_forever(config: ServerConfig) -> anyhow::Result<()> {
    actix_web::rt::System::new().block_on(async move {
        let running = start(config, Arc::new(SystemClock))?;
        running.server.await.context("server")?;
        // What the last requests spent, in the database before the process ends.
        let state = running.state.clone();
        let last = move || (state.rbac.write_behind_credits(), state.rbac.flush_analytics_final());
        match actix_web::rt::task::spawn_blocking(last).await {
            Ok((credits, analytics)) => {
                if let Err(e) = credits {
                    log::warn!("credits: the last write-behind failed (another instance does it): {e}");
                }
                if let Err(e) = analytics {
                    log::warn!("analytics: the last counts could not be written: {e}");
                }
            }
            Err(e) => log::warn!("the last write-behind and analytics flush did not run: {e}"),
        }
        // A Unix socket's file goes with the server.
        drop(running.socket_file);
        log::info!("keygate stopped");
        Ok(())
    })
}
