//! What the HTTP layer is told by whoever mounts it: the settings of the API's answers, the
//! bounds on a connection, metrics, forward auth's policies and the dashboard. Nothing of a
//! process here (addresses, workers, signals, logging): the binary owns those.

use crate::handlers::gateway::policy::GatewayPolicies;

use std::time::Duration;

/// Bounds on what one client connection can hold (docs/configuration.md, "Limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub keep_alive: Duration,
    pub max_connections: usize,
}

impl Default for HttpLimits {
    /// The binary's defaults (docs/configuration.md).
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            keep_alive: Duration::from_secs(5),
            max_connections: 4_096,
        }
    }
}

/// The HTTP layer's settings ([`crate::Keygate::new`]).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// `limit` answers carry the rate-limit header fields (`KEYGATE_RATELIMIT_HEADERS`).
    pub ratelimit_headers: bool,
    /// Where error bodies' `docs` links point: `<docs_base>/errors#CODE`.
    pub docs_base: String,
    /// Time limits and the connection cap (the body reader applies `body_timeout`).
    pub limits: HttpLimits,
    /// Metrics recorded (and a Prometheus recorder installed, when none is).
    pub metrics: bool,
    /// Namespaces given series of their own (`KEYGATE_METRICS_NAMESPACES`).
    pub metrics_namespaces: usize,
    /// Who may read `GET /metrics` among the API's routes.
    pub metrics_access: MetricsAccess,
    /// Named policies of `/v1/gateway.authorize` (`KEYGATE_GATEWAY_POLICIES`).
    pub gateway_policies: GatewayPolicies,
    /// The proxies whose `X-Forwarded-For` forward auth believes (`KEYGATE_TRUSTED_PROXIES`);
    /// `None`: the connection's address is the client's.
    pub trusted_proxies: Option<keygate_domain::AllowedIps>,
    /// The share of requests without a caller's trace context that are traced, when the
    /// process traces (`KEYGATE_OTLP_SAMPLE_RATIO`).
    pub trace_sample_ratio: f64,
    /// The dashboard's settings; `None`: no dashboard.
    #[cfg(feature = "pages")]
    pub dashboard: Option<crate::dashboard::settings::DashboardSettings>,
}

impl Default for HttpSettings {
    /// Closed by default where it matters: `/metrics` for root keys holding
    /// `metrics.read` (an embedding service decides whether its metrics are public), no
    /// gateway policies, no dashboard.
    fn default() -> Self {
        Self {
            ratelimit_headers: false,
            docs_base: "/docs".into(),
            limits: HttpLimits::default(),
            metrics: true,
            metrics_namespaces: 20,
            metrics_access: MetricsAccess::RootKey,
            gateway_policies: GatewayPolicies::default(),
            trusted_proxies: None,
            trace_sample_ratio: 0.0,
            #[cfg(feature = "pages")]
            dashboard: None,
        }
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
