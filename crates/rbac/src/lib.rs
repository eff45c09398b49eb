//! The keygate RBAC service.
//!
//! Knows nothing of HTTP or SQL: it is defined over the storage traits of [`store`], which
//! the `keygate-store` crate implements for SQLite and PostgreSQL. Every operation
//! validates, authorizes, resolves and then writes, in that order, and all writes of one
//! call go through one [`RbacStore::transaction`], so a failed call changes nothing.

pub mod analytics;
mod cache;
pub mod counters;
mod error;
pub mod gateway;
mod model;
mod overrides;
mod perms;
mod query;
pub mod ratelimit_analytics;
pub mod refill;
mod service;
pub mod store;

pub use cache::Cached;
pub use counters::{ChangeProbe, CounterSource, LocalCounters, Probe, Scope, SharedCounters};
pub use error::{RbacError, Resource, StorageError};
pub use model::*;
pub use overrides::{
    Effective, MAX_PATTERN_BYTES_PER_NAMESPACE, MAX_STARS_PER_PATTERN, Override, OverrideSet, is_pattern,
    validate_pattern,
};
pub use perms::ApiAccess;
pub use query::{
    MAX_QUERY_DEPTH, MAX_QUERY_NODES, MAX_QUERY_TOKENS, QuerySyntaxError, parse_permission_query,
};
pub use service::{
    AUTH_CACHE_TTL_MS, CreditOp, DEFAULT_RETENTION_DAYS, DailyVerifications, DashboardSession, Installed,
    KeyOrOwner, LimitSlice, LinkMode, MAX_AUDIT_PAGE, MAX_CACHED_KEY_BYTES, MAX_CACHED_UNKNOWN_KEYS,
    MAX_IDENTITY_META_BYTES, MAX_KEY_META_BYTES, MAX_KEY_PREFIX_CHARS, MAX_LIMIT_DURATION_MS,
    MAX_LIMIT_NAME_CHARS, MAX_LIMIT_TOKENS, MAX_OVERRIDES_PER_NAMESPACE, MAX_RATELIMITS,
    MAX_V2_KEY_PREFIX_CHARS, MAX_VERIFY_KEY_CHARS, MAX_VERIFY_RATELIMITS, OVERRIDE_CACHE_TTL_MS, OrderField,
    OverridesListener, PERM_READ_AUDIT, Pending, RatelimitsQuery, RatelimitsRow, RbacService, RefillSpec,
    SESSION_IDLE_MS, SharedCredits, SharedRefill, SharedSpend, SharedSpendAsk, TOP_IDENTIFIERS, TimeSlice,
    VERIFY_NAMESPACE_PREFIX, VerificationsQuery, VerificationsRow, check_refill, credit_setting, key_summary,
    key_view, outcome_field, validate_ratelimits, validate_usage,
};
pub use store::{EntityKind, RbacStore, RbacTx};
