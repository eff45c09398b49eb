//! keygate's exact caches: what keeps SQL off the hot paths without serving a stale
//! answer, apart from what is cached.
//!
//! * [`TtlCache`]: what the store answered, served for a lifetime, refreshed ahead of it
//!   by one caller, loaded once per key at a time, negative entries bounded apart.
//! * [`KeyCache`]: the map of found keys behind `keys.verifyKey`'s cache, bounded by
//!   weight, with no lifetime of its own.
//! * [`counters`]: the change counters that tell a cached answer it is still current, on
//!   this instance and every other.
//! * [`CachedKey`]: a key as the verification cache holds it, compact, its names, sets of
//!   names and identity shared through an [`Interner`]; [`verify`], the verification
//!   cache itself (known keys and unknown secrets), and [`snapshot`], its keys in a file.
//!
//! Synchronous and storage-free: `keygate-rbac` keeps root keys' principals, overrides and
//! cached keys in them, and `keygate-store` implements the counters' shared side on Redis.

mod compact;
pub mod counters;
mod intern;
mod keys;
pub mod snapshot;
mod ttl;
pub mod verify;

pub use compact::{CachedKey, KeyCredits};
pub use intern::{Grants, Interner, KeyScope, Name, Names};
pub use keys::KeyCache;
pub use ttl::{Cached, Digest, HitCounts, MAX_ENTRIES, MAX_NEGATIVE_ENTRIES, TtlCache};
