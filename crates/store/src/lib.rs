//! keygate storage: the diesel schema, embedded migrations, an r2d2 pool over SQLite or
//! PostgreSQL (one `MultiConnection`), and the implementation of every capability's
//! storage traits (`keygate-rbac`, `keygate-usage`, `keygate-analytics`), one transaction
//! serving them all; the Redis store (`RedisStore`), which implements `keygate-ratelimit`'s
//! trait and the shared change counters and credit counters.
//!
//! Cargo features: `sqlite` (default), `postgres` and `redis`, one per backend, so that a
//! service embedding the crate compiles only what it uses (docs/embedding.md).
//!
//! Error policy: every diesel/r2d2 error is turned into a [`keygate_rbac::StorageError`]
//! here (unreachable/timeout -> `Unavailable`, unique violation -> `Conflict`, anything else
//! -> `Internal`), so no caller above this crate sees diesel.

mod backend;
mod backup;
mod capabilities;
mod conn;
pub mod copy;
mod pool;
#[cfg(feature = "sqlite")]
mod probe;
#[cfg(feature = "redis")]
mod redis;
pub mod schema;
mod tx;

#[cfg(feature = "redis")]
pub use self::redis::{
    BACKOFF, BatchStats, CREDIT_IDLE_MS, CREDIT_SHARDS, CounterGuard, EXPIRY_SLACK_MS, MAX_EPOCH_AGE,
    RedisOpenError, RedisSettings, RedisStore, SLIDING_SETTLED_MS, async_overshoot_bound, credit_shard,
};
pub use backend::{Backend, BackendError};
pub use backup::Backup;
pub use conn::DbConn;
#[cfg(feature = "postgres")]
pub use pool::MIGRATION_LOCK_KEY;
pub use pool::{MIGRATION_TIMEOUT_MS, PoolSettings, SqlStore, StoreOpenError, WAL_AUTOCHECKPOINT_PAGES};
