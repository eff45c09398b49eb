//! What every worker shares: the services, the stores, the settings in force and the
//! gates that keep cache misses to one store read per key. Its own module so that the
//! plumbing (`http`), the handlers and the composition (`server`) depend on it and not on
//! each other.

use crate::settings::{HttpLimits, MetricsAccess};
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
    /// `ratelimits.limit` answers carry the rate-limit header fields (`KEYGATE_RATELIMIT_HEADERS`).
    pub ratelimit_headers: bool,
    pub clock: Arc<dyn Clock>,
    pub docs_base: String,
    /// Time limits and the connection cap (the body reader applies `body_timeout`).
    pub limits: HttpLimits,
    /// The metric handles and the Prometheus renderer.
    pub metrics: crate::metrics::Metrics,
    /// Who may read `/metrics` on the main listener.
    pub metrics_access: MetricsAccess,
    /// Named policies of `/v1/gateway.authorize` (`KEYGATE_GATEWAY_POLICIES`).
    pub gateway_policies: crate::handlers::gateway::policy::GatewayPolicies,
    /// The proxies whose `X-Forwarded-For` forward auth believes.
    pub trusted_proxies: Option<keygate_domain::AllowedIps>,
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
