//! keygate's HTTP layer: everything an actix-web `App` needs to serve keygate's v1 and v2
//! API (the route table, handlers, extractors, the one mapping of errors to HTTP, the
//! request-id and trace-context middleware, the OpenAPI documents, the HTTP metrics) and,
//! with the default `pages` feature, the operator dashboard and the customer portal's pages.
//!
//! It knows nothing of a process: whoever mounts it opens the [`Runtime`] and says how to
//! answer ([`HttpSettings`]); the `keygate` binary adds the listeners, workers, signals,
//! configuration and logging. Another actix-web service mounts the API beside its own
//! routes:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use keygate_http::{HttpSettings, Keygate};
//! # let runtime: keygate_runtime::Runtime = unimplemented!();
//! let kg = Keygate::new(runtime, HttpSettings::default());
//! let app = move || {
//!     actix_web::App::new()
//!         .configure(kg.api())
//!         .route("/hello", actix_web::web::get().to(|| async { "hello" }))
//! };
//! # let _ = app; Ok(()) }
//! ```
//!
//! Error policy: request handling uses typed errors end to end and turns them into HTTP in
//! one place ([`error::ApiError`]).

pub mod connections;
#[cfg(feature = "pages")]
mod dashboard;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod handlers;
pub mod metrics;
pub mod openapi;
mod plumbing;
#[cfg(feature = "pages")]
mod portal;
pub mod routes;
pub mod settings;
mod state;
pub mod throttle;

#[cfg(feature = "pages")]
pub use dashboard::settings::DashboardSettings;
pub use handlers::gateway::policy::GatewayPolicies;
pub use handlers::gateway::{Copies, ForwardAuth, ForwardAuthFields, Passed, forward_auth};
pub use handlers::keys::import::MigrateKeyEntry;
pub use keygate_runtime::Runtime;
pub use plumbing::{ACCESS_TARGET, Caller, Obj, RequestId};
pub use settings::MetricsAccess;
pub use settings::{HttpLimits, HttpSettings};
pub use state::AppState;

use actix_web::web;

/// keygate's HTTP layer, ready to mount: its state (the runtime and the settings) shared by
/// every worker, and the routes that serve it. Cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct Keygate {
    state: web::Data<AppState>,
}

impl Keygate {
    /// The HTTP layer over `runtime` (opened, its counters synced: [`Runtime::sync_counters`]).
    pub fn new(runtime: Runtime, settings: HttpSettings) -> Self {
        let route_names: Vec<&'static str> = routes::ROUTES.iter().map(|(path, _)| *path).collect();
        let metrics = metrics::Metrics::new(
            &route_names,
            runtime.limiter.kind(),
            settings.metrics,
            settings.metrics_namespaces,
        );
        let clock = runtime.rbac.clock().clone();
        handlers::v2::webhooks::render_keys_as_v2(&runtime);
        let state = AppState {
            runtime,
            ratelimit_headers: settings.ratelimit_headers,
            clock,
            docs_base: settings.docs_base,
            limits: settings.limits,
            metrics,
            metrics_access: settings.metrics_access,
            gateway_policies: settings.gateway_policies,
            trusted_proxies: settings.trusted_proxies,
            trace_sample_ratio: settings.trace_sample_ratio,
            openapi: openapi::Documents::new(openapi::document::render),
            #[cfg(feature = "pages")]
            dashboard: settings
                .dashboard
                .map(|d| std::sync::Arc::new(dashboard::settings::Dashboard::new(d))),
        };
        Self { state: web::Data::new(state) }
    }

    /// The state every handler reads (the runtime is `state().runtime`).
    pub fn state(&self) -> &web::Data<AppState> {
        &self.state
    }

    /// The request-id and trace-context middleware, as the API's routes are wrapped in it:
    /// for a service that wants its own routes' errors and ids rendered the same way.
    pub fn request_id(&self) -> RequestId {
        RequestId::new(self.state.trace_sample_ratio)
    }

    /// Every route of the v1 and v2 API (each wrapped in the request-id middleware, so
    /// nothing else in the `App` is) and the state they read; with `not_found`, the API's
    /// JSON 404 answers any path no route of the `App` serves.
    pub fn api(&self) -> impl FnOnce(&mut web::ServiceConfig) + Clone + 'static {
        self.api_with(false)
    }

    /// [`Self::api`], with the API's JSON 404 as the `App`'s default service: what the
    /// `keygate` binary serves.
    pub fn api_and_not_found(&self) -> impl FnOnce(&mut web::ServiceConfig) + Clone + 'static {
        self.api_with(true)
    }

    fn api_with(&self, not_found: bool) -> impl FnOnce(&mut web::ServiceConfig) + Clone + 'static {
        let state = self.state.clone();
        let middleware = self.request_id();
        move |cfg| {
            cfg.app_data(state);
            routes::configure(cfg, middleware);
            if not_found {
                routes::not_found(cfg, middleware);
            }
        }
    }

    /// `GET /metrics` alone, readable as `access` says, with the state it reads: a listener
    /// of its own for the metrics (`KEYGATE_METRICS_LISTEN`).
    pub fn metrics_only(
        &self,
        access: MetricsAccess,
    ) -> impl FnOnce(&mut web::ServiceConfig) + Clone + 'static {
        let state = self.state.clone();
        move |cfg| {
            cfg.app_data(state).app_data(access).service(
                web::resource("/metrics")
                    .route(web::get().to(handlers::system::metrics))
                    .wrap(RequestId::default()),
            );
        }
    }

    /// The operator dashboard under its base path, when the settings turn it on (nothing
    /// otherwise). The API's state must be in the `App` too ([`Self::api`]).
    #[cfg(feature = "pages")]
    pub fn dashboard(&self) -> impl FnOnce(&mut web::ServiceConfig) + Clone + 'static {
        let on = self.state.dashboard.is_some();
        let middleware = self.request_id();
        move |cfg| {
            if on {
                dashboard::configure(cfg, middleware);
            }
        }
    }

    /// The customer portal's pages, under `/portal`. The API's state must be in the `App`
    /// too ([`Self::api`]).
    #[cfg(feature = "pages")]
    pub fn portal_pages(&self) -> impl FnOnce(&mut web::ServiceConfig) + Clone + 'static {
        let middleware = self.request_id();
        move |cfg| portal::configure(cfg, middleware)
    }
}
