//! keygate's customer portal (API-v2.md §17): a team's backend mints a short-lived
//! session for one of its end users (an identity's `externalId`); the user redeems its
//! single-use code for an access token and then sees, rerolls and charts only that
//! identity's keys in the portal's API.
//!
//! - [`portals`] serves `portal.createPortal|getPortal|updatePortal|deletePortal`.
//! - [`sessions`] serves `portal.createSession|exchangeCode|listSessions|revokeSession`,
//!   and finds the session behind an access token.
//! - [`end_user`] serves what a session may do: `portal.listKeys|rerollKey|getVerifications`.
//!
//! Built on `keygate-rbac` (root keys, keys, rerolls) and `keygate-analytics` (the counts);
//! the store extends theirs ([`store::PortalTx`] extends `AnalyticsTx`). Sessions are
//! read from the database on every end-user request (those are not the hot path), so a
//! revocation, a disabled or deleted portal, or a deleted or expired root key applies on
//! the next request on every instance.

pub mod end_user;
pub mod model;
pub mod portals;
pub mod sessions;
pub mod store;

pub use end_user::{KeySeries, PortalVerifications, VerificationPoint};
pub use model::{
    CODE_TTL_MS, NewPortal, Portal, PortalChange, PortalScope, PortalSession, TOKEN_TTL_MS, validate_url,
};
pub use portals::PortalRef;
pub use sessions::{NewSession, PortalContext, SessionGroup};
pub use store::{PortalStore, PortalTx};

use keygate_analytics::AnalyticsService;
use keygate_rbac::RbacService;
use std::sync::Arc;

/// The portal service, over rbac's service and store.
#[derive(Debug)]
pub struct PortalService<S> {
    rbac: Arc<RbacService<S>>,
    /// The counts' service (a read of the counts folds its journal first).
    analytics: Arc<AnalyticsService<S>>,
    /// Where the portal's pages are reached from outside (`url` of a new session).
    public_url: String,
}

impl<S: PortalStore> PortalService<S> {
    /// The portal over `rbac` and `analytics`; its pages reached at `public_url` (no
    /// trailing slash).
    pub fn new(rbac: Arc<RbacService<S>>, analytics: Arc<AnalyticsService<S>>, public_url: &str) -> Self {
        Self { rbac, analytics, public_url: public_url.trim_end_matches('/').to_string() }
    }

    pub fn rbac(&self) -> &Arc<RbacService<S>> {
        &self.rbac
    }

    /// The base URL the sessions' links start with.
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    fn now(&self) -> i64 {
        self.rbac.clock().now_ms() as i64
    }
}

/// Counts a session event (`created`, `exchanged`, `revoked`, `refused`).
fn count(event: &'static str) {
    metrics::counter!("keygate_portal_sessions_total", "event" => event).increment(1);
}
