//! keygate usage: what a verification spends once its check passed (API-v2.md §13), and
//! the credits it spends them from.
//!
//! - [`verify`]: `keys.verifyKey` whole, rbac's check then the spend.
//! - [`limits`]: which rate limits of the key and its identity apply to a verification,
//!   taken all-or-nothing through the rate-limit engine (`keygate-ratelimit`).
//! - [`spend`]: the spend itself, limits then credits, and [`Pending`], the answer that
//!   waits for its credit spend's commit.
//! - [`ledger`]: where credit counters live and how spends are committed: in memory with a
//!   group commit (one process owns the database), on the keys' rows with a writer thread
//!   (several instances), or in a shared store written behind (Redis).
//! - [`credits`]: `keys.updateCredits`, and the scale-out write-behind.
//! - [`refill`]: when credits refill.
//!
//! Built on `keygate-rbac`: a verification's check is rbac's ([`keygate_rbac::Checked`]),
//! its writes go through rbac's change counters ([`keygate_rbac::RbacService::write_through`]),
//! and the ledger is registered with rbac as its [`keygate_rbac::CreditCounters`], so that
//! rbac's own writes of a key's credits (`updateKey`, `rerollKey`) hold the counter.

pub mod credits;
pub mod ledger;
pub mod limits;
pub mod refill;
pub mod spend;
pub mod store;
pub mod verify;

pub use credits::CreditOp;
pub use ledger::journaling::replay_credit_journal;
pub use ledger::shared::{Installed, Queued, SharedCredits, SharedRefill, SharedSpend, SharedSpendAsk};
pub use limits::{LimitAsk, MAX_VERIFY_RATELIMITS, Usage, validate_usage};
pub use spend::Pending;
pub use store::{CreditRow, CreditSpend, CreditTx, LiveCredits, UsageStore, UsageTx, WrittenBehind};

use keygate_ratelimit::RateLimitStore;
use keygate_rbac::RbacService;
use ledger::Ledger;
use std::sync::Arc;

/// The usage service: spends what verifications ask, over rbac's service and store.
#[derive(Debug)]
pub struct UsageService<S> {
    rbac: Arc<RbacService<S>>,
    ledger: Arc<Ledger<S>>,
    /// Where the rate limits of keys and identities are counted.
    limiter: Arc<dyn RateLimitStore>,
    /// [`limits::LOCAL_OWN_NAMESPACE`], allocated once: the in-process store compares a
    /// budget's namespace by pointer first.
    own_local: Arc<String>,
    /// No limits: what keys without auto-applied limits share.
    no_limits: Arc<[limits::Applied]>,
    /// What every key with nothing of its own to take shares (no credits, no limits, the
    /// in-process store's namespace).
    plain: Arc<limits::KeyLimits>,
}

/// Clones share the service (its parts are shared already).
impl<S> Clone for UsageService<S> {
    fn clone(&self) -> Self {
        Self {
            rbac: self.rbac.clone(),
            ledger: self.ledger.clone(),
            limiter: self.limiter.clone(),
            own_local: self.own_local.clone(),
            no_limits: self.no_limits.clone(),
            plain: self.plain.clone(),
        }
    }
}

impl<S: UsageStore + 'static> UsageService<S> {
    /// Wires usage onto `rbac`: the credit ledger that fits (in a shared store when
    /// `shared` is given: several instances; else in memory when rbac's change counters are
    /// local, as the database is then this process's alone; else on the keys' rows),
    /// registered as rbac's credit counters; the rate limits of keys and identities counted
    /// in `limiter` (an in-process store, or one shared by instances), keyed apart from
    /// every `ratelimit.*` namespace's budgets.
    pub fn wire(
        rbac: RbacService<S>,
        limiter: Arc<dyn RateLimitStore>,
        shared: Option<Arc<dyn SharedCredits>>,
    ) -> (Arc<RbacService<S>>, Self) {
        let events = ledger::SpendEvents::new(rbac.key_events().cloned(), rbac.clock().clone());
        let ledger = Arc::new(Ledger::new(rbac.store().clone(), rbac.counter_source(), shared, events));
        let rbac = Arc::new(rbac.with_credit_counters(ledger.clone()));
        let own_local = Arc::new(limits::LOCAL_OWN_NAMESPACE.to_owned());
        let no_limits: Arc<[limits::Applied]> = Arc::new([]);
        let plain = Arc::new(limits::KeyLimits::plain(own_local.clone(), no_limits.clone()));
        (rbac.clone(), Self { rbac, ledger, limiter, own_local, no_limits, plain })
    }

    /// The RBAC service usage is wired onto.
    pub fn rbac(&self) -> &Arc<RbacService<S>> {
        &self.rbac
    }
}
