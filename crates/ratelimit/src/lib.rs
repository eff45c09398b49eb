//! The keygate rate-limit engine.
//!
//! * [`decide`]: the decision as a pure function of (window state, request, now).
//! * [`overrides`]: which of a namespace's overrides applies to an identifier (an exact
//!   match, else the most specific pattern).
//! * [`RateLimitStore`]: where window states live; [`MemoryStore`] is the in-process,
//!   sharded implementation. The shared Redis store implements the same trait in
//!   `keygate-store`; [`FailOpen`] wraps a shared store for operators who prefer passing
//!   requests to refusing them while it is unreachable.
//!
//! # The algorithms
//! A namespace chooses `fixed` (below, the default), `sliding` or `token_bucket`: see
//! [`algorithm`] for the other two.
//!
//! ## Fixed windows aligned to the Unix epoch
//!
//! A budget is identified by `(namespace, identifier, duration)` ([`BudgetKey`]); the
//! namespace id is unique per workspace, so workspaces never share a budget. `limit` is *not*
//! part of the identity: changing the limit of an identifier keeps its count.
//!
//! With `d = duration` and `t = now` (ms):
//!
//! ```text
//! window = floor(t / d)            reset = (window + 1) * d
//! used   = stored.used  if stored.window == window, else 0
//! cost = 0:                success = used < limit,            used unchanged
//! used + cost <= limit:    success = true,  used' = used + cost
//! otherwise:               success = false, used unchanged    (a denial deducts nothing)
//! remaining = max(0, limit - used')
//! ```
//!
//! Every check-and-update of one budget happens under one lock, so the number of tokens
//! passed in a window never exceeds `limit`, whatever the concurrency.

pub mod algorithm;
mod decision;
mod memory;
pub mod overrides;
mod table;

pub use algorithm::{Algorithm, bucket_give_back, decide_as, decide_bucket, decide_sliding};
pub use decision::{
    Decision, LimitRequest, MIN_DURATION_MS, MIN_LIMIT, WindowState, decide, deny_from_known,
    fail_open_decision, window_start,
};
pub use memory::{AllOrNothing, MemoryStore, MemoryStoreStats};
pub use overrides::{
    Effective, MAX_OVERRIDES_PER_NAMESPACE, MAX_PATTERN_BYTES_PER_NAMESPACE, MAX_STARS_PER_PATTERN, Override,
    OverrideSet, is_pattern, validate_pattern,
};

use keygate_domain::ErrorCode;
use std::sync::Arc;

/// The identity of one budget. Borrowed, so the hot path allocates nothing for a budget
/// that already exists. The namespace id is an `Arc<String>` so that every budget of a
/// namespace can share one allocation through a thin (8-byte) pointer, compared by pointer
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BudgetKey<'a> {
    pub namespace_id: &'a Arc<String>,
    pub identifier: &'a str,
    pub duration: u64,
    /// The algorithm deciding this budget ([`Algorithm`]): part of its identity, so a
    /// namespace whose algorithm changes starts every budget afresh (API-v2.md §26).
    pub algorithm: Algorithm,
}

/// Errors of a rate-limit store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The shared store could not be reached; the request had no effect.
    #[error("rate-limit store unavailable: {0}")]
    Unavailable(String),
    /// A request this store cannot carry out atomically (a multi-budget decision whose
    /// budgets live on several nodes of a Redis Cluster); nothing was decided.
    #[error("{0}")]
    CannotAtomically(String),
}

impl StoreError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::Unavailable(_) => ErrorCode::ServiceUnavailable,
            StoreError::CannotAtomically(_) => ErrorCode::BadRequest,
        }
    }
}

/// One entry of [`RateLimitStore::limit_all`].
pub type Entry<'a> = (BudgetKey<'a>, LimitRequest);

/// The answer of [`RateLimitStore::limit_if_current`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    Decided(Decision),
    /// The namespace's overrides changed since the caller loaded them: nothing was decided
    /// or deducted; reload them (and their epoch) and ask again.
    StaleOverrides,
    /// A change counter the caller named (the Redis store's counter guard, see
    /// `keygate_store::RedisStore::limit_batched`) changed since the caller read it: nothing
    /// was decided or deducted; check what it guards and ask again.
    StaleCounter,
}

/// Where window states live. `limit` must apply [`decide`] atomically per budget.
pub trait RateLimitStore: Send + Sync + std::fmt::Debug {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError>;

    /// A short name for logs and liveness ("memory", "redis").
    fn kind(&self) -> &'static str;

    /// [`Self::limit`], made only while the namespace's overrides epoch (see
    /// [`Self::overrides_epoch`]) is still `overrides_epoch`, in the same atomic step. A
    /// store shared by several instances keeps the epoch, so that an override changed on
    /// one instance applies to the next request on every other. A store private to one
    /// instance has nothing to check (that instance drops its own cached overrides).
    fn limit_if_current(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: u64,
    ) -> Result<Checked, StoreError> {
        let _ = overrides_epoch;
        self.limit(key, req, now_ms).map(Checked::Decided)
    }

    /// Decides `entries` in order, each on top of the earlier ones (two entries on one
    /// budget add up), all-or-nothing: if every entry fits, all are consumed, else nothing
    /// anywhere (v2's `ratelimit.multiLimit`), in one atomic step. `epochs` are the
    /// overrides epochs (namespace id, epoch) the entries' overrides were read under, as in
    /// [`Self::limit_if_current`]: `None` when one changed (nothing decided).
    fn limit_all(
        &self,
        entries: &[Entry<'_>],
        epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<AllOrNothing>, StoreError>;

    /// Gives back what a passed [`Self::limit_all`] consumed (`entries` as they were
    /// passed, at the same `now_ms`): each budget's count goes down by its cost, in the
    /// window that took it (a window that has ended since is left alone). For a caller whose
    /// next step failed after the limits passed (a verification out of credits).
    fn give_back(&self, entries: &[Entry<'_>], now_ms: u64) -> Result<(), StoreError>;

    /// The namespace's overrides epoch: a number that changes whenever its overrides do.
    /// Read it *before* reading the overrides.
    fn overrides_epoch(&self, _namespace_id: &str) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// Changes the namespace's overrides epoch; called after a change to its overrides
    /// is committed.
    fn bump_overrides_epoch(&self, _namespace_id: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// Whether a call may wait on the network; the server then runs it off its event loop.
    fn is_remote(&self) -> bool {
        false
    }

    /// Whether the store answers (liveness).
    fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Drops state that can no longer matter (expired windows). Stores that expire by
    /// themselves do nothing.
    fn sweep(&self, _now_ms: u64) {}
}

/// A shared store is a store (one Redis connection pool serves the limiter and, in the
/// server, the change counters).
impl<S: RateLimitStore + ?Sized> RateLimitStore for std::sync::Arc<S> {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError> {
        (**self).limit(key, req, now_ms)
    }
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn limit_all(
        &self,
        entries: &[Entry<'_>],
        epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<AllOrNothing>, StoreError> {
        (**self).limit_all(entries, epochs, now_ms)
    }
    fn give_back(&self, entries: &[Entry<'_>], now_ms: u64) -> Result<(), StoreError> {
        (**self).give_back(entries, now_ms)
    }
    fn limit_if_current(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: u64,
    ) -> Result<Checked, StoreError> {
        (**self).limit_if_current(key, req, now_ms, overrides_epoch)
    }
    fn overrides_epoch(&self, namespace_id: &str) -> Result<u64, StoreError> {
        (**self).overrides_epoch(namespace_id)
    }
    fn bump_overrides_epoch(&self, namespace_id: &str) -> Result<(), StoreError> {
        (**self).bump_overrides_epoch(namespace_id)
    }
    fn is_remote(&self) -> bool {
        (**self).is_remote()
    }
    fn ping(&self) -> Result<(), StoreError> {
        (**self).ping()
    }
    fn sweep(&self, now_ms: u64) {
        (**self).sweep(now_ms)
    }
}

/// A store that answers every request as passed ([`fail_open_decision`]) when the store it
/// wraps is unavailable, and logs each such answer (contract §5.12, opt-in).
#[derive(Debug)]
pub struct FailOpen<S>(pub S);

/// The answer when the store is unavailable and the operator chose to fail open: a pass
/// ([`fail_open_decision`]), logged with why.
pub fn pass_failing_open(key: BudgetKey<'_>, req: LimitRequest, now_ms: u64, e: &StoreError) -> Decision {
    log::warn!(
        "rate-limit store unavailable, failing open (namespace {}, identifier {:?}): {e}",
        key.namespace_id,
        key.identifier
    );
    fail_open_decision(req, now_ms)
}

impl<S: RateLimitStore> RateLimitStore for FailOpen<S> {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError> {
        match self.0.limit(key, req, now_ms) {
            Err(e @ StoreError::Unavailable(_)) => Ok(pass_failing_open(key, req, now_ms, &e)),
            other => other,
        }
    }

    fn limit_if_current(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: u64,
    ) -> Result<Checked, StoreError> {
        match self.0.limit_if_current(key, req, now_ms, overrides_epoch) {
            Err(e @ StoreError::Unavailable(_)) => {
                Ok(Checked::Decided(pass_failing_open(key, req, now_ms, &e)))
            }
            other => other,
        }
    }

    /// Every entry passes, failing open, while the store is down.
    fn limit_all(
        &self,
        entries: &[Entry<'_>],
        epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<AllOrNothing>, StoreError> {
        match self.0.limit_all(entries, epochs, now_ms) {
            Err(e @ StoreError::Unavailable(_)) => {
                let decisions = entries.iter().map(|(k, r)| pass_failing_open(*k, *r, now_ms, &e)).collect();
                Ok(Some(AllOrNothing { passed: true, decisions }))
            }
            other => other,
        }
    }

    /// Nothing to give back while the store is down (what passed failing open took nothing).
    fn give_back(&self, entries: &[Entry<'_>], now_ms: u64) -> Result<(), StoreError> {
        match self.0.give_back(entries, now_ms) {
            Err(StoreError::Unavailable(_)) => Ok(()),
            other => other,
        }
    }

    /// Unknown while the store is down: 0; once it is back, the first decision finds the
    /// real epoch differs and the overrides are reloaded.
    fn overrides_epoch(&self, namespace_id: &str) -> Result<u64, StoreError> {
        Ok(self.0.overrides_epoch(namespace_id).unwrap_or(0))
    }

    fn bump_overrides_epoch(&self, namespace_id: &str) -> Result<(), StoreError> {
        self.0.bump_overrides_epoch(namespace_id)
    }

    fn kind(&self) -> &'static str {
        self.0.kind()
    }

    fn is_remote(&self) -> bool {
        self.0.is_remote()
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.0.ping()
    }

    fn sweep(&self, now_ms: u64) {
        self.0.sweep(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Down;

    impl RateLimitStore for Down {
        fn limit(&self, _: BudgetKey<'_>, _: LimitRequest, _: u64) -> Result<Decision, StoreError> {
            Err(StoreError::Unavailable("connection refused".into()))
        }
        fn kind(&self) -> &'static str {
            "down"
        }
        fn limit_all(
            &self,
            _: &[Entry<'_>],
            _: &[(&str, u64)],
            _: u64,
        ) -> Result<Option<AllOrNothing>, StoreError> {
            Err(StoreError::Unavailable("connection refused".into()))
        }
        fn give_back(&self, _: &[Entry<'_>], _: u64) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("connection refused".into()))
        }
        fn ping(&self) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("connection refused".into()))
        }
    }

    #[test]
    fn fail_open_passes_when_the_store_is_down_and_reports_it_in_ping() {
        let ns = Arc::new("ns".to_string());
        let key =
            BudgetKey { namespace_id: &ns, identifier: "u", duration: 60_000, algorithm: Default::default() };
        let req = LimitRequest { limit: 10, duration: 60_000, cost: 3 };
        assert_eq!(Down.limit(key, req, 61_000).unwrap_err().code(), ErrorCode::ServiceUnavailable);
        let d = FailOpen(Down).limit(key, req, 61_000).expect("fails open");
        assert_eq!(d, Decision { success: true, limit: 10, remaining: 7, reset: 120_000 });
        // Even a cost above the limit passes: the operator chose availability.
        let d = FailOpen(Down).limit(key, LimitRequest { cost: 11, ..req }, 61_000).expect("open");
        assert!(d.success && d.remaining == 0);
        assert!(FailOpen(Down).ping().is_err(), "liveness still tells the truth");
    }

    #[test]
    fn fail_open_answers_the_wrapped_store_when_it_is_up() {
        let ns = Arc::new("ns".to_string());
        let key =
            BudgetKey { namespace_id: &ns, identifier: "u", duration: 60_000, algorithm: Default::default() };
        let req = LimitRequest { limit: 1, duration: 60_000, cost: 1 };
        let store = FailOpen(MemoryStore::new());
        assert!(store.limit(key, req, 0).unwrap().success);
        assert!(!store.limit(key, req, 1).unwrap().success, "the second call is denied as usual");
        assert_eq!(store.kind(), "memory");
    }
}
