//! The keygate rate-limit engine.
//!
//! * [`decide`]: the decision as a pure function of (window state, request, now).
//! * [`RateLimitStore`]: where window states live; [`MemoryStore`] is the in-process,
//!   sharded implementation. Shared stores (Redis) implement the same trait elsewhere.
//!
//! # The algorithm: fixed windows aligned to the Unix epoch
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

mod decision;
mod memory;
mod table;

pub use decision::{Decision, LimitRequest, WindowState, decide};
pub use memory::{MemoryStore, MemoryStoreStats};

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
}

/// Errors of a rate-limit store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The shared store could not be reached; the request had no effect.
    #[error("rate-limit store unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::Unavailable(_) => ErrorCode::ServiceUnavailable,
        }
    }
}

/// Where window states live. `limit` must apply [`decide`] atomically per budget.
pub trait RateLimitStore: Send + Sync + std::fmt::Debug {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError>;

    /// A short name for logs and liveness ("memory", "redis").
    fn kind(&self) -> &'static str;

    /// Drops state that can no longer matter (expired windows). Stores that expire by
    /// themselves do nothing.
    fn sweep(&self, _now_ms: u64) {}
}
