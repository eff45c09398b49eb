//! keygate's GitHub secret scanning partner endpoint (API-v2.md §24). A self-hosted
//! keygate is its owner's key issuer, so it can join GitHub's secret scanning partner
//! program: GitHub finds a key in a public repository (a checksummed key, recognized
//! offline, `keygate_domain::checksum`), posts it signed to `POST
//! /v1/secret-scanning/github`, and keygate answers whether it is a real key and, the
//! first time a live key is reported, disables it, expires it or only reports it
//! ([`LeakAction`]), with the `key.leaked` audit event and webhook, in one transaction.
//!
//! - [`signature`]: GitHub's ECDSA P-256 signatures and the published key file.
//! - [`report`]: a report's tokens judged and acted on.
//! - [`store`]: the rows it keeps (one per key reported), which `keygate-store` implements.
//!
//! Built on `keygate-rbac`: its writes go through rbac's change counters
//! ([`keygate_rbac::RbacService::write_through`]), so a disabled key answers DISABLED on
//! every instance at its next verification.

pub mod report;
pub mod signature;
pub mod store;

pub use report::{Label, MAX_REPORTED_TOKENS, SCANNING_ACTOR, Verdict};
pub use store::{LeakRecord, LeakRows, LeakStore, LeakTx};

use keygate_rbac::RbacService;
use signature::KeyFile;
use std::path::PathBuf;
use std::sync::Arc;

/// What the first report of a live key does to it (`KEYGATE_GITHUB_SCANNING_ACTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeakAction {
    /// Disabled: verifications answer DISABLED; `updateKey` can enable it again.
    #[default]
    Disable,
    /// Expired now: verifications answer EXPIRED.
    Expire,
    /// Left working: the audit event and the webhook only.
    Report,
}

impl LeakAction {
    pub const fn as_str(self) -> &'static str {
        match self {
            LeakAction::Disable => "disable",
            LeakAction::Expire => "expire",
            LeakAction::Report => "report",
        }
    }

    /// From [`Self::as_str`]'s form.
    pub fn parse(s: &str) -> Option<Self> {
        [LeakAction::Disable, LeakAction::Expire, LeakAction::Report].into_iter().find(|a| a.as_str() == s)
    }
}

/// Secret scanning reports, over rbac's service and store.
#[derive(Debug)]
pub struct ScanningService<S> {
    rbac: Arc<RbacService<S>>,
    keys: KeyFile,
    action: LeakAction,
}

impl<S> ScanningService<S> {
    /// Reports verified against the public keys in the file at `keys` (`None`: every
    /// report is refused).
    pub fn new(rbac: Arc<RbacService<S>>, keys: Option<PathBuf>, action: LeakAction) -> Self {
        Self { rbac, keys: KeyFile::new(keys), action }
    }

    /// Whether reports are taken at all (a key file is configured).
    pub fn configured(&self) -> bool {
        self.keys.configured()
    }

    /// Reads the key file now: a bad one fails the start rather than the first report.
    pub fn check_keys(&self) -> Result<(), String> {
        self.keys.check()
    }
}
