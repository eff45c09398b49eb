//! What every worker shares: the services, the stores, the settings in force and the
//! gates that keep cache misses to one store read per key. Its own module so that the
//! plumbing (`http`), the handlers and the composition (`server`) depend on it and not on
//! each other.

use crate::settings::HttpLimits;
use keygate_domain::Clock;
use keygate_runtime::Runtime;
use std::sync::Arc;

/// Shared by every worker.
#[derive(Debug)]
pub struct AppState {
    /// The service and its stores (`rbac`, `limiter`, `redis`, reached through `Deref`).
    /// With Redis, `ratelimits.limit` decides through the Redis store's batched
    /// asynchronous path (`limiter` wraps the same store, for everything else).
    pub runtime: Runtime,
    /// Pass requests when the shared store is unreachable (contract §5.12).
    pub fail_open: bool,
    /// `ratelimits.limit` answers carry the rate-limit header fields (`KEYGATE_RATELIMIT_HEADERS`).
    pub ratelimit_headers: bool,
    pub clock: Arc<dyn Clock>,
    pub docs_base: String,
    /// One store read per root key, namespace or overrides at a time (`ratelimits.limit`'s misses).
    pub loads: LoadGates,
    /// Time limits and the connection cap (the body reader applies `body_timeout`).
    pub limits: HttpLimits,
    /// The metric handles and the Prometheus renderer.
    pub metrics: crate::metrics::Metrics,
    /// Who may read `/metrics` on the main listener.
    pub metrics_access: MetricsAccess,
    /// Named policies of `/v1/gateway.authorize` (`KEYGATE_GATEWAY_POLICIES`).
    pub gateway_policies: crate::handlers::gateway::policy::GatewayPolicies,
    /// The OpenAPI documents, rendered on first request.
    pub openapi: crate::openapi::Documents,
    /// The share of requests without a caller's trace context that are traced.
    pub trace_sample_ratio: f64,
    /// The dashboard, when it is on.
    #[cfg(feature = "pages")]
    pub dashboard: Option<Arc<crate::dashboard::settings::Dashboard>>,
}

impl std::ops::Deref for AppState {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

impl AsRef<Runtime> for AppState {
    fn as_ref(&self) -> &Runtime {
        &self.runtime
    }
}

/// Who may read `GET /metrics` on the main listener (`KEYGATE_METRICS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAccess {
    /// Anyone (labels carry no tenant data): the default.
    Open,
    /// A root key holding `metrics.read`.
    RootKey,
    /// Not served here: off, or on its own listener (`KEYGATE_METRICS_LISTEN`).
    NotHere,
}

/// One cache load per key at a time, on the async side: requests that miss together wait
/// here as futures for the one that reads the store, then find its answer in the cache.
/// (Each would otherwise take a blocking-pool thread of its own to wait in: after an idle
/// spell, a burst of 40k req/s grew the process from 7 to 71 threads in one load's time,
/// all on the worker's core.) Keys fall into 64 stripes.
#[derive(Debug)]
pub struct LoadGates {
    gates: Box<[futures_util::lock::Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for LoadGates {
    fn default() -> Self {
        Self {
            gates: (0..64).map(|_| futures_util::lock::Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl LoadGates {
    pub async fn enter<K: std::hash::Hash + ?Sized>(
        &self,
        key: &K,
    ) -> futures_util::lock::MutexGuard<'_, ()> {
        use std::hash::BuildHasher;
        let i = self.hasher.hash_one(key) as usize % self.gates.len();
        self.gates[i].lock().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::future::FutureExt;

    #[test]
    fn a_load_gate_lets_one_caller_per_key_through_at_a_time() {
        let gates = LoadGates::default();
        let first = gates.enter("kg_root_a").now_or_never().expect("a free gate opens at once");
        assert!(gates.enter("kg_root_a").now_or_never().is_none(), "the same key waits");
        // Another key opens unless it shares the stripe: find one that does not.
        let other =
            (0..1000).map(|i| format!("rlns_{i}")).find_map(|k| gates.enter(k.as_str()).now_or_never());
        assert!(other.is_some(), "other keys are not held up by this one");
        drop(other);
        drop(first);
        assert!(gates.enter("kg_root_a").now_or_never().is_some(), "open again once the loader is done");
    }
}
