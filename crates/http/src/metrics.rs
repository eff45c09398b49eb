//! Prometheus metrics (`GET /metrics`, docs/operations.md lists every one). The libraries
//! count through the `metrics` facade where something happens (verifications, store
//! errors and outages, Redis batches); caches and pools keep their own numbers, read here
//! at scrape time; the HTTP layer records requests and decisions through handles made
//! once, so the hot path does no registry lookup and no allocation. Label values come from
//! bounded sets only: route templates, status codes, outcomes, store and cache names, and
//! the first `KEYGATE_METRICS_NAMESPACES` rate-limit namespaces (the rest count as `other`).

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use parking_lot::RwLock;
use std::collections::HashMap;

/// The metrics' maps: keyed by route templates and namespace ids (names this process
/// made, not a caller's), looked up on every request: foldhash, not SipHash.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Seconds: 100 us to 5 s.
const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
/// Decisions per Redis script call.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// The process's recorder: installed once (the `metrics` facade is process-wide, like
/// `log`); every server of the process renders from it.
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full("keygate_redis_batch_size".into()), BATCH_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("keygate_credit_commit_batch_size".into()),
                    BATCH_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full("keygate_credit_wait_seconds".into()), LATENCY_BUCKETS)
            })
            .map(PrometheusBuilder::build_recorder);
        match recorder {
            Ok(recorder) => {
                let handle = recorder.handle();
                // Another recorder installed first (an embedding program): it gets the
                // libraries' metrics; this handle still renders the server's own.
                if metrics::set_global_recorder(recorder).is_err() {
                    log::warn!(
                        "metrics: a recorder was installed already; /metrics shows only keygate's own"
                    );
                }
                handle
            }
            Err(e) => {
                log::warn!("metrics: {e}");
                PrometheusBuilder::new().build_recorder().handle()
            }
        }
    })
}

/// Per route: its latency histogram and request counters by status.
#[derive(Debug, Default)]
struct RouteMetrics {
    latency: Latency,
    /// By [`STATUSES`] (the last slot: any other status, labelled `other`).
    by_status: [AtomicU64; STATUSES.len() + 1],
}

/// The statuses keygate answers (docs/errors.md): counted apart, any other as `other`.
const STATUSES: [u16; 15] = [200, 400, 401, 403, 404, 405, 408, 409, 412, 413, 415, 429, 431, 500, 503];

/// A latency histogram of fixed buckets ([`LATENCY_BUCKETS`]) kept in atomics and rendered
/// at scrape time. The exporter's own histograms keep every sample until they are drained,
/// which on the hot path cost allocations: this records one request in three relaxed adds.
#[derive(Debug, Default)]
struct Latency {
    /// Per bucket (the last: above every bound), not cumulative.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Latency {
    fn record(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let i = LATENCY_BUCKETS_NS.iter().position(|&b| ns <= b).unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The text format's `_bucket`, `_sum` and `_count` lines of `metric`, with `labels`
    /// (`name="value"` pairs separated by commas, or none).
    fn render(&self, metric: &str, labels: &str, out: &mut String) {
        use std::fmt::Write;
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bound) in
            LATENCY_BUCKETS.iter().map(|b| b.to_string()).chain(["+Inf".to_string()]).enumerate()
        {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{metric}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}");
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let labels = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{metric}_sum{labels} {sum}");
        let _ = writeln!(out, "{metric}_count{labels} {}", self.count.load(Ordering::Relaxed));
    }
}

/// Work handed to the blocking pool ([`Metrics::queued`]): when, and where its wait is
/// counted.
#[derive(Debug)]
pub struct Queued {
    at: std::time::Instant,
    wait: std::sync::Arc<Latency>,
}

impl Queued {
    /// The work starts on a thread of the pool: its wait is counted.
    pub fn started(self) {
        self.wait.record(self.at.elapsed());
    }
}

const LATENCY_METRIC: &str = "keygate_http_request_duration_seconds";
/// [`LATENCY_BUCKETS`] in nanoseconds.
const LATENCY_BUCKETS_NS: [u64; 15] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
];

/// The server's metric handles.
#[derive(Debug)]
pub struct Metrics {
    /// `None` with metrics off: nothing is recorded (no recorder is installed for it).
    handle: Option<PrometheusHandle>,
    routes: FastMap<&'static str, RouteMetrics>,
    /// `keygate_ratelimit_decisions_total{outcome, store}`: passed, denied.
    decisions: [AtomicU64; 2],
    /// `keygate_ratelimit_namespace_decisions_total{workspace, namespace, outcome}`.
    by_namespace: ByNamespace,
    store: &'static str,
    /// `keygate_blocking_wait_seconds`: how long work waited for a thread of the
    /// blocking pool (the pool's saturation).
    blocking_wait: std::sync::Arc<Latency>,
}

/// The numbers other parts keep themselves, read at scrape time.
#[derive(Debug, Clone)]
pub struct Kept {
    /// (cache, hits, misses).
    pub caches: [(&'static str, u64, u64); 4],
    /// The database pool: (connections open, of which idle).
    pub db_pool: (u32, u32),
    /// Redis: (script calls, decisions they carried, counter reads, confirmations they
    /// carried).
    pub redis_batches: Option<[u64; 6]>,
    /// The soonest root-key expiry ahead (unix ms; `Some(None)`: none expires; `None`: not
    /// known now, the last value stays).
    pub root_key_next_expiry: Option<Option<i64>>,
    /// Analytics counts held in memory: (verification series, rate-limit counts); `None`
    /// with analytics off.
    pub analytics_held: Option<(usize, usize)>,
    /// Keys held in the verification cache, and what they weigh by its account (bounded
    /// by `KEYGATE_VERIFY_CACHE_MB`).
    pub verify_cache: (usize, u64),
    /// Old systems' hashes checked so far (keys brought in under a legacy migration,
    /// checked on their first use).
    pub legacy_checks: u64,
}

/// The allocator's own account of the heap, by `kind` of `keygate_memory_bytes`:
/// `allocated` (bytes the program holds), `active` (the pages those bytes are in: the
/// difference is fragmentation inside pages in use), `metadata` (the allocator's own) and
/// `resident` (its pages in memory: active, metadata, and freed pages kept for reuse, not
/// yet given back). The process's RSS adds to `resident` the C libraries' own heap (SQLite's
/// page caches, libpq), the stacks and the binary. `None` where jemalloc's statistics
/// cannot be read.
fn allocator_bytes() -> Option<[(&'static str, usize); 4]> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are cached; advancing the epoch refreshes them.
    epoch::advance().ok()?;
    Some([
        ("allocated", stats::allocated::read().ok()?),
        ("active", stats::active::read().ok()?),
        ("metadata", stats::metadata::read().ok()?),
        ("resident", stats::resident::read().ok()?),
    ])
}

/// The route label of a request no route matched.
pub const UNMATCHED: &str = "unmatched";

/// The route template a request matched (resource data: read back by the request-id
/// middleware for the metrics and the access log, without matching the path again).
#[derive(Debug, Clone, Copy)]
pub struct RouteName(pub &'static str);

impl Metrics {
    /// Counts for each of `routes` (the route table's templates) and the decisions of
    /// `store` ("memory", "redis"), the first `namespaces` namespaces' apart; with `enabled`
    /// false (`KEYGATE_METRICS=off`), nothing is recorded.
    pub fn new(routes: &[&'static str], store: &'static str, enabled: bool, namespaces: usize) -> Self {
        let by_namespace = ByNamespace::new(namespaces);
        if !enabled {
            return Self {
                handle: None,
                routes: FastMap::default(),
                decisions: Default::default(),
                by_namespace,
                store,
                blocking_wait: Default::default(),
            };
        }
        let handle = Some(recorder().clone());
        // The counters of rare events exist from the start, at 0: `rate()` and `increase()`
        // see their first event, and every metric the dashboard and the alerts read
        // (deploy/) is in the first scrape.
        for store in ["database", "redis"] {
            metrics::counter!("keygate_store_errors_total", "store" => store).increment(0);
        }
        metrics::counter!("keygate_store_outages_total", "store" => "redis").increment(0);
        metrics::counter!("keygate_analytics_dropped_total").increment(0);
        metrics::counter!("keygate_credit_commits_total").increment(0);
        metrics::counter!("keygate_credit_writebehind_total").increment(0);
        // 0: never (no credits in Redis, or none written yet), and no root key expiring.
        metrics::gauge!("keygate_credit_writebehind_last_success_timestamp_seconds").increment(0.0);
        metrics::gauge!("keygate_root_key_next_expiry_timestamp_seconds").set(0.0);
        for event in ["created", "exchanged", "revoked", "refused"] {
            metrics::counter!("keygate_portal_sessions_total", "event" => event).increment(0);
        }
        for reason in REFUSAL_REASONS {
            metrics::counter!("keygate_gateway_refusals_total", "reason" => reason).increment(0);
        }
        for outcome in keygate_webhooks::deliver::OUTCOMES {
            metrics::counter!("keygate_webhook_deliveries_total", "outcome" => outcome).increment(0);
        }
        metrics::gauge!("keygate_webhook_pending_deliveries").set(0.0);
        metrics::gauge!("keygate_webhook_oldest_pending_seconds").set(0.0);
        let routes =
            routes.iter().copied().chain([UNMATCHED]).map(|route| (route, RouteMetrics::default())).collect();
        Self {
            handle,
            routes,
            decisions: Default::default(),
            by_namespace,
            store,
            blocking_wait: Default::default(),
        }
    }

    /// Work handed to the blocking pool now; [`Queued::started`] counts its wait.
    pub fn queued(&self) -> Queued {
        Queued { at: std::time::Instant::now(), wait: self.blocking_wait.clone() }
    }

    /// One HTTP request: its route template (or [`UNMATCHED`]), status and duration.
    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        // Metrics off: no routes, nothing recorded.
        let Some(r) = self.routes.get(route).or_else(|| self.routes.get(UNMATCHED)) else { return };
        r.latency.record(elapsed);
        let i = STATUSES.iter().position(|&s| s == status).unwrap_or(STATUSES.len());
        r.by_status[i].fetch_add(1, Ordering::Relaxed);
    }

    /// One rate-limit decision in the namespace `namespace_id` of `workspace`, which the
    /// caller named `name` (its name, or its id).
    pub fn decision(&self, workspace: &str, namespace_id: &Arc<String>, name: &str, passed: bool) {
        if self.handle.is_some() {
            self.decisions[usize::from(!passed)].fetch_add(1, Ordering::Relaxed);
            self.by_namespace.count(workspace, namespace_id, name, passed);
        }
    }

    /// The Prometheus text of every metric, with the numbers kept elsewhere (`kept`:
    /// caches, pools, batches) brought up to date first.
    pub fn render(&self, kept: &Kept) -> String {
        let Some(handle) = &self.handle else { return String::new() };
        for &(cache, hits, misses) in &kept.caches {
            metrics::counter!("keygate_cache_requests_total", "cache" => cache, "result" => "hit")
                .absolute(hits);
            metrics::counter!("keygate_cache_requests_total", "cache" => cache, "result" => "miss")
                .absolute(misses);
        }
        let (open, idle) = kept.db_pool;
        metrics::gauge!("keygate_db_pool_connections", "state" => "idle").set(f64::from(idle));
        metrics::gauge!("keygate_db_pool_connections", "state" => "in_use")
            .set(f64::from(open.saturating_sub(idle)));
        if let Some(next) = kept.root_key_next_expiry {
            let seconds = next.map_or(0.0, |ms| ms as f64 / 1000.0);
            metrics::gauge!("keygate_root_key_next_expiry_timestamp_seconds").set(seconds);
        }
        if let Some((verifications, ratelimits)) = kept.analytics_held {
            metrics::gauge!("keygate_analytics_held", "kind" => "verifications").set(verifications as f64);
            metrics::gauge!("keygate_analytics_held", "kind" => "ratelimits").set(ratelimits as f64);
        }
        if let Some([calls, decisions, reads, confirmations, pushed, pushed_stale]) = kept.redis_batches {
            metrics::counter!("keygate_redis_round_trips_total").absolute(calls);
            metrics::counter!("keygate_redis_batched_decisions_total").absolute(decisions);
            metrics::counter!("keygate_redis_counter_reads_total").absolute(reads);
            metrics::counter!("keygate_redis_confirmations_total").absolute(confirmations);
            metrics::counter!("keygate_redis_pushed_changes_total").absolute(pushed);
            metrics::counter!("keygate_redis_pushed_stale_total").absolute(pushed_stale);
        }
        metrics::gauge!("keygate_verify_cache_keys").set(kept.verify_cache.0 as f64);
        metrics::gauge!("keygate_verify_cache_bytes").set(kept.verify_cache.1 as f64);
        metrics::counter!("keygate_legacy_hash_checks_total").absolute(kept.legacy_checks);
        for (kind, bytes) in allocator_bytes().into_iter().flatten() {
            metrics::gauge!("keygate_memory_bytes", "kind" => kind).set(bytes as f64);
        }
        handle.run_upkeep();
        let mut out = handle.render();
        self.render_own(&mut out);
        out
    }

    /// The metrics kept here: requests by route and status, their latency, decisions.
    fn render_own(&self, out: &mut String) {
        use std::fmt::Write;
        let mut routes: Vec<(&&str, &RouteMetrics)> = self.routes.iter().collect();
        routes.sort_by_key(|(r, _)| **r);
        let _ =
            writeln!(out, "# HELP keygate_http_requests_total HTTP requests by route template and status");
        let _ = writeln!(out, "# TYPE keygate_http_requests_total counter");
        for (route, m) in &routes {
            for (i, n) in m.by_status.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    let status = STATUSES.get(i).map_or_else(|| "other".to_string(), u16::to_string);
                    let _ = writeln!(
                        out,
                        "keygate_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        let _ = writeln!(out, "# HELP {LATENCY_METRIC} HTTP request latency by route template");
        let _ = writeln!(out, "# TYPE {LATENCY_METRIC} histogram");
        for (route, m) in &routes {
            if m.latency.count.load(Ordering::Relaxed) > 0 {
                m.latency.render(LATENCY_METRIC, &format!("route=\"{route}\""), out);
            }
        }
        let _ = writeln!(
            out,
            "# HELP keygate_blocking_wait_seconds Time work waited for a thread of the blocking pool"
        );
        let _ = writeln!(out, "# TYPE keygate_blocking_wait_seconds histogram");
        self.blocking_wait.render("keygate_blocking_wait_seconds", "", out);
        let _ = writeln!(
            out,
            "# HELP keygate_ratelimit_decisions_total Rate-limit decisions by outcome and store"
        );
        let _ = writeln!(out, "# TYPE keygate_ratelimit_decisions_total counter");
        for (i, outcome) in ["passed", "denied"].iter().enumerate() {
            let n = self.decisions[i].load(Ordering::Relaxed);
            let store = self.store;
            let _ = writeln!(
                out,
                "keygate_ratelimit_decisions_total{{outcome=\"{outcome}\",store=\"{store}\"}} {n}"
            );
        }
        self.by_namespace.render(out);
    }

    /// Drains the histograms' buffers (the exporter keeps samples until then).
    pub fn upkeep(&self) {
        if let Some(handle) = &self.handle {
            handle.run_upkeep();
        }
    }
}

/// Rate-limit decisions per namespace, a bounded set of series: the first `capacity`
/// namespaces decided on since the process started get their own (labelled with their
/// workspace and the name the first caller gave), every later one counts under
/// `namespace="other"`. A slot is never given back, so each series only grows (a counter's
/// contract); the set is the same on every scrape. Looked up under a read lock by the
/// namespace's id, one hash of it per decision; the write lock is taken at most
/// `capacity` times.
#[derive(Debug)]
struct ByNamespace {
    capacity: usize,
    named: RwLock<FastMap<Arc<String>, NamespaceCounts>>,
    other: [AtomicU64; 2],
}

#[derive(Debug)]
struct NamespaceCounts {
    workspace: String,
    name: String,
    /// Passed, denied.
    counts: [AtomicU64; 2],
}

impl ByNamespace {
    fn new(capacity: usize) -> Self {
        Self { capacity, named: RwLock::new(FastMap::default()), other: Default::default() }
    }

    fn count(&self, workspace: &str, namespace_id: &Arc<String>, name: &str, passed: bool) {
        let i = usize::from(!passed);
        {
            let named = self.named.read();
            if let Some(ns) = named.get(namespace_id) {
                ns.counts[i].fetch_add(1, Ordering::Relaxed);
                return;
            }
            if named.len() >= self.capacity {
                self.other[i].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut named = self.named.write();
        if !named.contains_key(namespace_id) && named.len() < self.capacity {
            let ns = NamespaceCounts {
                workspace: workspace.to_string(),
                name: name.to_string(),
                counts: Default::default(),
            };
            named.insert(namespace_id.clone(), ns);
        }
        let counts = named.get(namespace_id).map_or(&self.other, |ns| &ns.counts);
        counts[i].fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String) {
        use std::fmt::Write;
        const METRIC: &str = "keygate_ratelimit_namespace_decisions_total";
        let _ = writeln!(
            out,
            "# HELP {METRIC} Rate-limit decisions by namespace (the first KEYGATE_METRICS_NAMESPACES; the rest as other) and outcome"
        );
        let _ = writeln!(out, "# TYPE {METRIC} counter");
        let named = self.named.read();
        let mut named: Vec<&NamespaceCounts> = named.values().collect();
        named.sort_by(|a, b| (&a.workspace, &a.name).cmp(&(&b.workspace, &b.name)));
        for (i, outcome) in ["passed", "denied"].iter().enumerate() {
            for ns in &named {
                let (workspace, name) = (escape(&ns.workspace), escape(&ns.name));
                let n = ns.counts[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{METRIC}{{workspace=\"{workspace}\",namespace=\"{name}\",outcome=\"{outcome}\"}} {n}"
                );
            }
            let n = self.other[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{METRIC}{{namespace=\"other\",outcome=\"{outcome}\"}} {n}");
        }
    }
}

/// A label value in the text format: backslash, double quote and line feed escaped.
fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
}

/// `keygate_gateway_refusals_total{reason}`: calls refused because a header was not the
/// gateway's alone to give (docs/gateways.md, "Who decides the policy"): an end user's
/// forgery that a gateway let through, or a gateway configured to append.
pub(crate) const REFUSAL_REASONS: [&str; 3] = ["duplicate_header", "policy_overridden", "policy_not_bound"];
