//! Composition: store + RBAC service + rate-limit store + actix-web.

use crate::config::{HttpLimits, MetricsSetting, ServerConfig};
use crate::listen::{ListenAddr, Listener, SocketFile};
use actix_web::dev::ServerHandle;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use keygate_domain::{Clock, Secret, SystemClock, redact_in, redact_url, validate_root_key_secret};
pub use keygate_http::AppState;
use keygate_http::connections::{self, Connections};
use keygate_http::{HttpSettings, Keygate, MetricsAccess};
use keygate_rbac::RbacService;
pub use keygate_runtime::{ANALYTICS_FLUSH_INTERVAL, CREDIT_WRITE_BEHIND_INTERVAL};
use keygate_runtime::{Runtime, RuntimeError, RuntimeSettings, Upkeep};
use keygate_store::{RedisSettings, SqlStore};
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
    /// The gRPC listener, when on (`KEYGATE_GRPC_LISTEN`): stopped when this is dropped.
    pub grpc: Option<GrpcListener>,
    /// The background threads (counters, sweeps, write-behind, analytics, audit retention,
    /// metrics): stopped and waited for when this is dropped.
    pub upkeep: Upkeep,
    /// Where the verification cache's keys are written when it stops
    /// (`KEYGATE_VERIFY_CACHE_SNAPSHOT`).
    pub verify_cache_snapshot: Option<std::path::PathBuf>,
    /// A Unix socket's file, removed when this is dropped (after the server has stopped).
    pub socket_file: Option<SocketFile>,
}

impl std::fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// Recoverable keys are sealed under encryption keys the keyring lacks: keygate does not
/// start (exit 2), since it could not reveal them.
#[derive(Debug)]
pub struct MissingEncryptionKeys(pub Vec<(String, u64)>);

impl std::fmt::Display for MissingEncryptionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named: Vec<String> = self.0.iter().map(|(id, n)| format!("{id} ({n} keys)")).collect();
        write!(
            f,
            "recoverable keys are sealed under encryption key {}, which KEYGATE_ENCRYPTION_KEYS does not hold: \
             add it back to the keyring (docs/security.md)",
            named.join(", ")
        )
    }
}

impl std::error::Error for MissingEncryptionKeys {}

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
            keygate_http::GatewayPolicies::from_json(&text)
                .map_err(|e| anyhow::anyhow!("KEYGATE_GATEWAY_POLICIES {path}: {e}"))?
        }
        None => Default::default(),
    };
    let trusted_proxies =
        keygate_domain::AllowedIps::parse("KEYGATE_TRUSTED_PROXIES", &config.trusted_proxies)
            .map_err(|e| anyhow::anyhow!("{}: {}", e.path, e.message))?;
    if let Some(path) = &config.github_scanning_keys {
        keygate_scanning::signature::KeyFile::new(Some(path.clone()))
            .check()
            .map_err(|e| anyhow::anyhow!("KEYGATE_GITHUB_SCANNING_KEYS: {e}"))?;
    }
    // One lane (asynchronous connection, queue, one script call in flight) per worker.
    let settings = RuntimeSettings {
        database_url: config.database_url.clone(),
        pool: config.pool.clone(),
        redis_url: config.redis_url.clone(),
        redis: RedisSettings { lanes: worker_count(&config), ..config.redis.clone() },
        fail_open: config.ratelimit_fail_open,
        ratelimit_persist: config.ratelimit_persist,
        ratelimit_algorithm: config.ratelimit_algorithm,
        webhooks_allow_private: config.webhooks_allow_private,
        webhooks_retention_days: config.webhooks_retention_days,
        webhooks_dns: config.webhooks_dns,
        usage_export: config.usage_export.clone().map_err(|e| anyhow::anyhow!("usage export: {e}"))?,
        github_scanning_keys: config.github_scanning_keys.clone(),
        github_scanning_action: config.github_scanning_action,
        verify_cache: config.verify_cache,
        verify_cache_bytes: config.verify_cache_mb << 20,
        analytics: config.analytics,
        change_probe: None,
        // SQLite's loads are CPU: as many at once as workers (and one more with legacy
        // migrations, whose old-hash check may hold a load for its time, at the lowest
        // priority); PostgreSQL's wait on the network.
        max_loading: (config.redis_url.is_none()
            && matches!(
                keygate_store::Backend::from_url(&config.database_url),
                Ok(keygate_store::Backend::Sqlite(_))
            ))
        .then(|| {
            worker_count(&config) + usize::from(config.migrations.iter().any(|m| m.contains("legacy:")))
        }),
        migrations: keygate_rbac::Migrations::parse(&config.migrations)
            .map_err(|e| anyhow::anyhow!("KEYGATE_MIGRATIONS: {e}"))?,
        vault: config
            .encryption_keys
            .as_deref()
            .map(|spec| keygate_vault::Keyring::parse(spec).map(Arc::new))
            .transpose()
            .map_err(|e| anyhow::anyhow!("KEYGATE_ENCRYPTION_KEYS: {e}"))?,
        public_url: config.public_url.clone().unwrap_or_else(|| match addr.tcp() {
            Some(tcp) => format!("http://{tcp}"),
            None => "http://localhost".to_string(),
        }),
    };
    let runtime = Runtime::open(&settings, clock.clone()).map_err(|e| match e {
        RuntimeError::Store(e) => {
            let url = &config.database_url;
            anyhow::anyhow!("opening the database {:?}: {}", redact_url(url), redact_in(&e.to_string(), url))
        }
        e => anyhow::anyhow!(e),
    })?;
    let missing =
        runtime.rbac.missing_vault_keys().context("reading the recoverable keys' encryption key ids")?;
    if !missing.is_empty() {
        return Err(MissingEncryptionKeys(missing).into());
    }
    let bootstrap_root_key = bootstrap(&runtime.rbac, config.root_key.clone())?;
    runtime.sync_counters().context("reading the change counters")?;
    let verify_cache_snapshot = match &config.verify_cache_snapshot {
        Some(Some(path)) => Some(path.clone()),
        Some(None) => runtime.rbac.store().beside_database("-keys"),
        None => None,
    };
    let docs_base = config.docs_url.clone().unwrap_or_else(|| match addr.tcp() {
        Some(tcp) => format!("http://{tcp}/docs"),
        None => "http://localhost/docs".to_string(),
    });
    let workers = worker_count(&config);
    // Database and Redis pools, and each worker's asynchronous Redis connection.
    let redis_conns =
        if runtime.redis.is_some() { u64::from(config.redis.max_size) + workers as u64 } else { 0 };
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
    let description = runtime.description.clone();
    let sample_ratio = config.tracing.as_ref().map_or(0.0, |t| t.sample_ratio);
    let keygate = Keygate::new(
        runtime,
        HttpSettings {
            ratelimit_headers: config.ratelimit_headers,
            docs_base,
            limits,
            metrics: config.metrics != MetricsSetting::Off,
            metrics_namespaces: config.metrics_namespaces,
            metrics_access,
            gateway_policies,
            trusted_proxies,
            trace_sample_ratio: sample_ratio,
            dashboard: config.dashboard.clone(),
        },
    );
    let state = keygate.state().clone();
    let metrics_addr = match (&config.metrics_listen, config.metrics) {
        (Some(listen), MetricsSetting::On | MetricsSetting::RootKey) => {
            Some(spawn_metrics_listener(listen, &keygate, config.metrics)?)
        }
        _ => None,
    };

    let grpc = match &config.grpc.listen {
        Some(listen) => Some(GrpcListener::start(listen, &config, state.clone())?),
        None => None,
    };

    let mut server = HttpServer::new(move || {
        // The API's routes first (the hot paths are tried first), then the dashboard's
        // and the customer portal's scopes; the API's JSON 404 answers every other path.
        App::new()
            .configure(keygate.api_and_not_found())
            .configure(keygate.dashboard())
            .configure(keygate.portal_pages())
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
    // The usage export's first round before anything is served: a sink's first period is
    // the one open at the start (its mark written now), not at the first periodic round.
    if let Some(Err(e)) = state.runtime.metering.as_ref().map(|m| m.export_due()) {
        log::warn!("usage export: the first round failed (tried again shortly): {e}");
    }
    let server = server.shutdown_timeout(5).run();
    let host = Arc::downgrade(&state.clone().into_inner());
    let mut upkeep = keygate_runtime::spawn_upkeep(host.clone());
    if config.audit_retention_days > 0 {
        spawn_audit_retention(&mut upkeep, host.clone(), config.audit_retention_days);
    }
    upkeep.spawn("keygate-metrics", METRICS_UPKEEP_INTERVAL, host, |state: &AppState, _| {
        state.metrics.upkeep()
    });
    if let Some(path) = verify_cache_snapshot.clone() {
        let state = state.clone();
        let warm = move || match state.runtime.load_verify_cache(&path) {
            Ok(w) if w.read > 0 => log::info!(
                "verification cache: {} of {} keys read from {} (the others changed since it was written)",
                w.cached,
                w.read,
                path.display()
            ),
            Ok(_) => {}
            Err(e) => log::warn!("verification cache: the snapshot {} was not read: {e}", path.display()),
        };
        std::thread::Builder::new().name("keygate-warm-cache".into()).spawn(warm)?;
    }
    log::info!("keygate listening on {addr} ({description})");
    if let Some(m) = metrics_addr {
        log::info!("keygate metrics on http://{m}/metrics");
    }
    if let Some(g) = &grpc {
        log::info!("keygate gRPC (ext_authz, health) on {}", g.addr);
    }
    Ok(RunningServer {
        addr,
        handle: server.handle(),
        server,
        bootstrap_root_key,
        state,
        metrics_addr,
        grpc,
        socket_file,
        upkeep,
        verify_cache_snapshot,
    })
}

/// `/metrics` alone on its own address (`KEYGATE_METRICS_LISTEN`), one worker, run on the
/// caller's actix system; the root-key setting applies there too.
fn spawn_metrics_listener(
    listen: &str,
    keygate: &Keygate,
    setting: MetricsSetting,
) -> anyhow::Result<SocketAddr> {
    let listener =
        TcpListener::bind(listen).with_context(|| format!("binding the metrics address {listen}"))?;
    let addr = listener.local_addr()?;
    let access =
        if setting == MetricsSetting::RootKey { MetricsAccess::RootKey } else { MetricsAccess::Open };
    let metrics = keygate.metrics_only(access);
    let server = HttpServer::new(move || App::new().configure(metrics.clone()))
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
    actix_web::rt::spawn(server);
    Ok(addr)
}

/// The gRPC listener (`KEYGATE_GRPC_LISTEN`, `keygate-grpc`): threads of its own (as many
/// as HTTP workers) each running a one-thread tokio runtime, over the HTTP server's state
/// (the same store and caches).
pub struct GrpcListener {
    /// Where it listens.
    pub addr: ListenAddr,
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// A Unix socket's file, removed after the listener stops.
    _socket_file: Option<SocketFile>,
}

impl std::fmt::Debug for GrpcListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcListener").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl GrpcListener {
    fn start(listen: &str, config: &ServerConfig, state: web::Data<AppState>) -> anyhow::Result<Self> {
        let tls = match &config.grpc.tls {
            Some((cert, key)) => Some(keygate_grpc::TlsPair {
                cert_pem: std::fs::read(cert)
                    .with_context(|| format!("reading the gRPC certificate {}", cert.display()))?,
                key_pem: std::fs::read(key)
                    .with_context(|| format!("reading the gRPC key {}", key.display()))?,
            }),
            None => None,
        };
        let rls = match &config.grpc.ratelimit_config {
            Some(path) => {
                let loaded = keygate_grpc::rls::config::RlsConfig::load(path)
                    .context("the Envoy rate-limit configuration (KEYGATE_ENVOY_RATELIMIT_CONFIG)")?;
                log::info!("Envoy rate limit: {} domains from {}", loaded.domains.len(), path.display());
                Some((
                    path.clone(),
                    std::sync::Arc::new(parking_lot::RwLock::new(std::sync::Arc::new(loaded))),
                ))
            }
            None => None,
        };
        let (listener, addr) = Listener::bind(listen, config.listen_mode)
            .with_context(|| format!("the gRPC listener {listen}"))?;
        let (std_incoming, socket_file) = match listener {
            Listener::Tcp(l) => {
                l.set_nonblocking(true)?;
                (StdIncoming::Tcp(l), None)
            }
            Listener::Unix(l, file) => {
                l.set_nonblocking(true)?;
                (StdIncoming::Unix(l), Some(file))
            }
        };
        // As many threads as HTTP workers, each a runtime of one thread accepting on the
        // same socket. One thread per runtime: a call's answer waits in the connection's
        // buffer while the other calls ready run, then they go out in one write (a
        // multi-thread runtime runs the woken connection first: a write per answer, a
        // third of the CPU of a call).
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut threads = Vec::new();
        for n in 0..worker_count(config) {
            let incoming = match &std_incoming {
                StdIncoming::Tcp(l) => StdIncoming::Tcp(l.try_clone()?),
                StdIncoming::Unix(l) => StdIncoming::Unix(l.try_clone()?),
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the gRPC runtime")?;
            let (shown, tls, state, rls) = (addr.clone(), tls.clone(), state.clone(), rls.clone());
            let mut stopped = stopped.clone();
            let thread = std::thread::Builder::new().name(format!("keygate-grpc-{n}")).spawn(move || {
                runtime.block_on(async move {
                    if let (0, Some((path, shared))) = (n, &rls) {
                        reload_on_hangup(path.clone(), shared.clone());
                    }
                    let incoming = match incoming {
                        StdIncoming::Tcp(l) => {
                            tokio::net::TcpListener::from_std(l).map(keygate_grpc::Incoming::Tcp)
                        }
                        StdIncoming::Unix(l) => {
                            tokio::net::UnixListener::from_std(l).map(keygate_grpc::Incoming::Unix)
                        }
                    };
                    let served = match incoming {
                        Ok(i) => {
                            let rls = rls.map(|(_, shared)| shared);
                            let stop = async move { drop(stopped.wait_for(|s| *s).await) };
                            keygate_grpc::serve(i, tls, state, rls, stop).await
                        }
                        Err(e) => return log::error!("gRPC listener {shown}: {e}"),
                    };
                    if let Err(e) = served {
                        log::error!("gRPC listener {shown}: {e}");
                    }
                });
            })?;
            threads.push(thread);
        }
        drop(std_incoming);
        Ok(Self { addr, stop, threads, _socket_file: socket_file })
    }
}

/// Reads the Envoy rate-limit configuration again on each SIGHUP (on the gRPC runtime):
/// calls under way finish with the one they started with; a configuration that does not
/// load is logged and the one in use kept.
fn reload_on_hangup(path: std::path::PathBuf, shared: keygate_grpc::SharedRlsConfig) {
    tokio::spawn(async move {
        let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
            return log::warn!(
                "Envoy rate limit: SIGHUP cannot be watched; the configuration is not reloaded"
            );
        };
        while hangups.recv().await.is_some() {
            match keygate_grpc::rls::config::RlsConfig::load(&path) {
                Ok(c) => {
                    log::info!(
                        "Envoy rate limit: reloaded {} domains from {}",
                        c.domains.len(),
                        path.display()
                    );
                    *shared.write() = std::sync::Arc::new(c);
                }
                Err(e) => log::error!(
                    "Envoy rate limit: the configuration was not reloaded (the last one stays): {e}"
                ),
            }
        }
    });
}

/// A bound listener before the gRPC runtime takes it.
enum StdIncoming {
    Tcp(TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Drop for GrpcListener {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// How often the histograms' sample buffers are drained when nobody scrapes.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The HTTP workers: as configured, or one per CPU.
fn worker_count(config: &ServerConfig) -> usize {
    config
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
        .max(1)
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

/// How often the audit retention runs, and the most events one pass deletes (bounded work
/// per pass: a long backlog is worked off over several passes).
const AUDIT_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
pub const AUDIT_PRUNE_PER_PASS: usize = 5_000;

/// Deletes audit events older than `days`, at most [`AUDIT_PRUNE_PER_PASS`] a pass, once
/// per [`AUDIT_RETENTION_INTERVAL`], the first pass at start; part of the server's upkeep.
fn spawn_audit_retention(upkeep: &mut Upkeep, state: Weak<AppState>, days: u64) {
    let keep_ms = i64::try_from(days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
    upkeep.spawn_now(
        "keygate-audit-retention",
        AUDIT_RETENTION_INTERVAL,
        state,
        move |state: &AppState, _| {
            let cutoff = i64::try_from(state.clock.now_ms()).unwrap_or(i64::MAX).saturating_sub(keep_ms);
            match state.rbac.prune_audit_events(cutoff, AUDIT_PRUNE_PER_PASS) {
                Ok(0) => {}
                Ok(n) => log::info!("audit retention: deleted {n} events older than {days} days"),
                Err(e) => log::warn!("audit retention: {e}"),
            }
        },
    );
}

/// How long a stopping server waits for its webhook requests still open.
const WEBHOOK_SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `keygate serve`: runs until SIGINT or SIGTERM, then stops accepting, lets in-flight
/// requests finish (up to 5 s) and exits.
pub fn run_forever(config: ServerConfig) -> anyhow::Result<()> {
    // Outside the server's runtime: it exports the last spans when dropped, after the server.
    let _tracing = config.tracing.as_ref().map(crate::telemetry::Tracing::install).transpose()?;
    actix_web::rt::System::new().block_on(async move {
        let running = start(config, Arc::new(SystemClock))?;
        let mut running = running;
        running.server.await.context("server")?;
        // The gRPC listener stops with the HTTP server (its calls answered first).
        drop(running.grpc.take());
        // The background threads stopped (a task under way finished), then what the last
        // requests spent into the database: no thread is left in the database's client
        // library when the process ends.
        running.upkeep.stop();
        let state = running.state.clone();
        let snapshot = running.verify_cache_snapshot.clone();
        let last = move || {
            if let Some(path) = &snapshot {
                match state.runtime.save_verify_cache(path) {
                    Ok(n) => log::info!("verification cache: {n} keys written to {}", path.display()),
                    Err(e) => {
                        log::warn!("verification cache: the snapshot {} was not written: {e}", path.display())
                    }
                }
            }
            match state.runtime.webhooks.finish_sending(WEBHOOK_SHUTDOWN_WAIT) {
                Ok(0) => {}
                Ok(n) => {
                    log::info!("webhooks: {n} deliveries still open at exit are sent again after their lease")
                }
                Err(e) => log::warn!(
                    "webhooks: the last answers were not recorded (sent again after their lease): {e}"
                ),
            }
            (state.usage.write_behind_credits(), state.analytics.flush_analytics_final())
        };
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
