//! keygate's webhooks (API-v2.md §23): a workspace's endpoints are called, signed per the
//! Standard Webhooks specification, when its keys change (and, as those land, when
//! credits run low, keys expire or leak).
//!
//! - [`model`]: endpoints, deliveries, attempts, and what a request may say of them.
//! - [`endpoints`] serves `webhooks.*`: endpoints, secrets and their rotation, the
//!   delivery log and replay.
//! - [`outbox`] writes an event, with a delivery per subscribed endpoint, in the
//!   transaction of the change that causes it (registered with the RBAC service as its
//!   `KeyEvents`): a change is never committed without its event.
//! - [`deliver`] is the worker: it claims due deliveries with a lease (so any number of
//!   instances deliver each once), signs ([`signing`]), sends, records the answer and
//!   schedules the retries.
//! - [`thresholds`] decides when credit events fire, from a counter's write; [`expiry`]
//!   finds the keys about to expire or expired.
//! - [`address`] keeps deliveries off loopback and private networks.
//! - [`sinks`]: destinations the operator configures (the usage export's), delivered
//!   through the same outbox, unsigned, with their own headers.
//!
//! Built on `keygate-rbac`; the store extends its transactions ([`store::WebhookTx`]).

pub mod address;
pub mod deliver;
pub mod endpoints;
pub mod expiry;
pub mod model;
pub mod outbox;
pub mod retention;
pub mod signing;
pub mod sinks;
pub mod store;
pub mod thresholds;

pub use deliver::{DELIVERY_TIMEOUT, LEASE_MS, MAX_RESPONSE_BYTES, RETRY_DELAYS_MS};
pub use model::{
    Attempt, Delivery, DeliveryStatus, EVENT_TYPES, Endpoint, EndpointChange, EndpointSecrets, NewEndpoint,
    Thresholds,
};
pub use outbox::{KeyRenderer, Outbox};
pub use store::{WebhookStore, WebhookTx};

use keygate_rbac::RbacService;
use std::sync::{Arc, OnceLock};

/// The webhooks service, over rbac's service and store.
#[derive(Debug)]
pub struct WebhookService<S> {
    rbac: Arc<RbacService<S>>,
    outbox: Arc<Outbox>,
    /// `KEYGATE_WEBHOOKS_ALLOW_PRIVATE`: endpoints may point at loopback and private
    /// addresses.
    allow_private: bool,
    /// The HTTP client and the runtime it runs on, made at the first delivery.
    sender: OnceLock<Result<deliver::Sender, String>>,
    /// This instance's name on the leases it takes.
    instance: String,
    /// How long finished deliveries, their attempts and their events are kept, in days
    /// (0: for good).
    retention_days: u64,
    /// Where endpoints' host names are looked up.
    names: address::Names,
    /// The configured sinks ([`sinks`]).
    sinks: Vec<sinks::Sink>,
}

impl<S: WebhookStore> WebhookService<S> {
    /// The service over `rbac`, whose key changes `outbox` (registered with it as its
    /// `KeyEvents`) writes.
    pub fn new(rbac: Arc<RbacService<S>>, outbox: Arc<Outbox>, allow_private: bool) -> Self {
        let instance = keygate_domain::random_token("inst");
        let retention_days = retention::DEFAULT_RETENTION_DAYS;
        Self {
            rbac,
            outbox,
            allow_private,
            sender: OnceLock::new(),
            instance,
            retention_days,
            names: address::Names::System,
            sinks: Vec::new(),
        }
    }

    /// Delivers to `sinks` too (deliveries to a sink no longer configured fail).
    pub fn with_sinks(mut self, sinks: Vec<sinks::Sink>) -> Self {
        self.sinks = sinks;
        self
    }

    /// Looks endpoints' host names up with the DNS server at `server` (`None`: the
    /// system's resolver), when they are written and at every delivery.
    pub fn with_dns(mut self, server: Option<std::net::SocketAddr>) -> Self {
        self.names = server.map_or(address::Names::System, address::Names::Server);
        self
    }

    /// Keeps finished deliveries, their attempts and events `days` (0: for good).
    pub fn with_retention_days(mut self, days: u64) -> Self {
        self.retention_days = days;
        self
    }

    /// The outbox (to set how keys are shown in events: [`Outbox::set_key_renderer`]).
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Whether endpoints may point at loopback and private addresses.
    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    fn now(&self) -> i64 {
        self.rbac.clock().now_ms() as i64
    }
}
