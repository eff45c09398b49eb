//! keygate's exact caches: what keeps SQL off the hot paths without serving a stale
//! answer, apart from what is cached.
//!
//! * [`TtlCache`]: what the store answered, served for a lifetime, refreshed ahead of it
//!   by one caller, loaded once per key at a time, negative entries bounded apart.
//! * [`KeyCache`]: the map of found keys behind `keys.verifyKey`'s cache, bounded by
//!   weight, with no lifetime of its own.
//! * [`counters`]: the change counters that tell a cached answer it is still current, on
//!   this instance and every other.
//!
//! Synchronous, storage-free and knowing nothing of keys' contents: `keygate-rbac` keeps
//! root keys' principals, overrides and key snapshots in them, and `keygate-store`
//! implements the counters' shared side on Redis.

pub mod counters;
mod keys;
mod ttl;

pub use keys::KeyCache;
pub use ttl::{Cached, Digest, HitCounts, MAX_ENTRIES, MAX_NEGATIVE_ENTRIES, TtlCache};
