//! The verification cache ([`VerifyCache`]): found keys' snapshots and unknown secrets,
//! bounded apart, each entry with the change counters it was loaded under
//! ([`super::verify`] checks and loads them).

use crate::KeySummary;
use crate::counters::{Scope, Tag, creation_shard};
use keygate_cache::KeyCache;
use std::any::Any;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

/// The default bound on the cached keys' snapshots, in bytes (approximate: strings and
/// their headers): about a million keys of a few permissions each (the server's
/// `KEYGATE_VERIFY_CACHE_MB`; [`crate::RbacService::with_verify_cache_bytes`]). Keys that exist only: their number is
/// the store's, not the caller's.
pub const MAX_CACHED_KEY_BYTES: u64 = 256 << 20;
/// Bound on cached "no such key" answers, apart from the keys: random secrets fill only
/// this cache, so they never evict a real key's entry, and each costs at most one store
/// read until key creation in its shard ends it.
pub const MAX_CACHED_UNKNOWN_KEYS: u64 = 100_000;

/// What a capability attaches to a key's entry (see [`VerifyEntry::weight`]), per rate
/// limit of the key or its identity: the limit's applied form.
const ATTACHED_PER_LIMIT: usize = 96;

/// A cached answer: the key (or none) and the counters it was loaded under.
pub(crate) struct VerifyEntry {
    pub(super) tag: Tag,
    /// What a verification needs of a key: its effective permissions and roles, its
    /// identity and the rate limits of both.
    pub(super) snapshot: Option<KeySummary>,
    /// What the spending capability works out once per snapshot ([`Checked::attached`]).
    pub(super) attached: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for VerifyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyEntry").field("tag", &self.tag).field("snapshot", &self.snapshot).finish()
    }
}

impl VerifyEntry {
    pub(super) fn new(tag: Tag, snapshot: Option<KeySummary>) -> Self {
        Self { tag, snapshot, attached: OnceLock::new() }
    }
}

impl VerifyEntry {
    /// Roughly the bytes it holds, for the cache's bound (with what is attached to it,
    /// counted per rate limit before it is).
    fn weight(&self) -> u32 {
        let strings = |v: &[String]| v.iter().map(|s| s.len() + 24).sum::<usize>();
        let size = 128
            + self.snapshot.as_ref().map_or(0, |s| {
                let k = &s.key;
                k.id.len()
                    + k.workspace_id.len()
                    + k.start.len()
                    + k.api_id.as_ref().map_or(0, String::len)
                    + k.name.as_ref().map_or(0, String::len)
                    + k.meta.as_ref().map_or(0, String::len)
                    + strings(&s.permissions)
                    + strings(&s.roles)
                    + s.ratelimits
                        .iter()
                        .chain(s.identity.iter().flat_map(|i| &i.ratelimits))
                        .map(|l| 64 + ATTACHED_PER_LIMIT + 3 * l.id.len() + 2 * l.name.len())
                        .sum::<usize>()
                    + s.identity.as_ref().map_or(0, |i| {
                        64 + i.identity.external_id.len() + i.identity.meta.as_ref().map_or(0, String::len)
                    })
            });
        u32::try_from(size).unwrap_or(u32::MAX)
    }

    /// The scopes whose counters decide whether this entry is current.
    pub(super) fn scopes<'a>(&'a self, digest: &keygate_cache::Digest) -> ([Scope<'a>; 2], usize) {
        entry_scopes(self.snapshot.as_ref(), digest)
    }
}

/// The verification cache: keys and unknown secrets bounded apart. Found keys, looked up
/// on every verification, are in a sharded map of the project's own ([`KeyCache`]: a hash,
/// a shared lock, a probe); unknown secrets, which anyone can send, in moka (TinyLFU
/// admission, so a burst of one-off secrets does not push out what is asked often).
pub(crate) struct VerifyCache {
    pub(super) enabled: bool,
    pub(super) found: KeyCache<VerifyEntry>,
    unknown: moka::sync::Cache<keygate_cache::Digest, Arc<VerifyEntry>>,
    /// Verifications that read the store (a miss, a stale entry, or the cache off).
    pub(super) loads: AtomicU64,
    /// Verifications answered from the cache.
    pub(super) hits: AtomicU64,
}

impl std::fmt::Debug for VerifyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyCache(enabled: {}, keys: {})", self.enabled, self.found.len())
    }
}

impl VerifyCache {
    pub(crate) fn new(enabled: bool, max_bytes: u64) -> Self {
        Self {
            enabled,
            found: KeyCache::new(max_bytes),
            unknown: moka::sync::Cache::new(MAX_CACHED_UNKNOWN_KEYS),
            loads: Default::default(),
            hits: Default::default(),
        }
    }

    pub(super) fn get(&self, digest: &keygate_cache::Digest) -> Option<Arc<VerifyEntry>> {
        self.found.get(digest).or_else(|| self.unknown.get(digest))
    }

    /// Drops the entry of the key whose stored hash is `stored_hash` (a deleted key). A hash
    /// of another form (a key imported with its own scheme) is left to the bound.
    pub(crate) fn forget(&self, stored_hash: &str) {
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(stored_hash, &mut digest).is_ok() {
            self.found.remove(&digest);
        }
    }

    pub(super) fn put(&self, digest: keygate_cache::Digest, entry: Arc<VerifyEntry>) {
        match entry.snapshot {
            Some(_) => {
                self.unknown.invalidate(&digest);
                let weight = entry.weight();
                self.found.insert(digest, entry, weight);
            }
            None => {
                self.found.remove(&digest);
                self.unknown.insert(digest, entry);
            }
        }
    }
}

/// The scopes whose counters decide whether a snapshot of the key whose secret has
/// `digest` is current: the key's and its workspace's, or for no key, its creation shard's.
pub(super) fn entry_scopes<'a>(
    snapshot: Option<&'a KeySummary>,
    digest: &keygate_cache::Digest,
) -> ([Scope<'a>; 2], usize) {
    match snapshot {
        Some(s) => ([Scope::Key(&s.key.id), Scope::Workspace(&s.key.workspace_id)], 2),
        None => {
            let shard = Scope::KeysCreated(creation_shard(digest));
            ([shard, shard], 1)
        }
    }
}
