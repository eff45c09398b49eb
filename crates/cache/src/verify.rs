//! The verification cache ([`VerifyCache`]): found keys and unknown secrets, bounded
//! apart, each entry with the change counters it was loaded under (`keygate_rbac`'s
//! verification checks and loads them).

use crate::counters::{Scope, Tag, creation_shard};
use crate::{CachedKey, Interner, KeyCache};
use keygate_domain::KeySummary;
use once_cell::race::OnceBox;
use std::any::Any;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

/// The default bound on the cached keys, in bytes (each entry's own memory, its slot in
/// the map and its share of what it holds with other keys: `VerifyEntry::weight`): a
/// million keys of a few permissions each (the server's `KEYGATE_VERIFY_CACHE_MB`;
/// `keygate_rbac::RbacService::with_verify_cache_bytes`). Keys that exist only: their number is
/// the store's, not the caller's.
pub const MAX_CACHED_KEY_BYTES: u64 = 256 << 20;
/// Bound on cached "no such key" answers, apart from the keys: random secrets fill only
/// this cache, so they never evict a real key's entry, and each costs at most one store
/// read until key creation in its shard ends it.
pub const MAX_CACHED_UNKNOWN_KEYS: u64 = 100_000;

/// What a capability attaches to a key's entry (see [`VerifyEntry::weight`]) when the key
/// has credits or limits: a record of its own, and per rate limit of the key or its
/// identity, the limit's applied form.
const ATTACHED: usize = 96;
const ATTACHED_PER_LIMIT: usize = 96;
/// A slot of the key map ([`KeyCache`]: the digest, the entry's pointer and weight, and the
/// table's spare room, its load between 7/16 and 7/8), and the allocator's rounding of
/// the entry (measured: the allocator's count of the heap per cached key is within a few
/// percent of the weight, docs/performance/many-keys.md).
const SLOT: usize = 96;

/// A cached answer: the key (or none) and the counters it was loaded under.
pub struct VerifyEntry {
    pub tag: Tag,
    /// What a verification needs of a key: its effective permissions and roles, its
    /// identity and the rate limits of both.
    pub snapshot: Option<CachedKey>,
    /// What the spending capability works out once per snapshot (`keygate_rbac`'s
    /// `Snapshot::attached`).
    pub attached: OnceLock<Arc<dyn Any + Send + Sync>>,
    /// What analytics count of this key's verifications beside it (`keygate_analytics`:
    /// made at the first one), so that counting one finds its place with the key instead
    /// of in a table of its own.
    pub tally: OnceBox<Tally>,
}

/// Verifications of one key counted per outcome code within one minute, kept beside its
/// cache entry by analytics, which own their meaning (`keygate_analytics`'s recorder):
/// the minute, the counts not yet taken and the credits they were charged, and when the
/// first of them was queued.
#[derive(Debug, Default)]
pub struct Tally(pub parking_lot::Mutex<TallyCounts>);

/// A [`Tally`]'s state, under its lock.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TallyCounts {
    /// The minute the counts are of (minutes since the Unix epoch).
    pub minute: u32,
    /// Per outcome code (`VerifyCode as usize`), the counts not yet taken.
    pub counts: [u32; keygate_domain::VerifyCode::ALL.len()],
    /// The credits the counts not yet taken were charged (API-v2.md §22).
    pub spent: u32,
    /// Whether counts are waiting to be taken (the entry is queued for it).
    pub queued: bool,
    /// When the first count not yet taken came (the recorder's drains made before it,
    /// wrapping: the counts are taken a few drains after they came).
    pub since: u16,
}

impl std::fmt::Debug for VerifyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyEntry").field("tag", &self.tag).field("snapshot", &self.snapshot).finish()
    }
}

impl VerifyEntry {
    pub fn new(tag: Tag, snapshot: Option<CachedKey>) -> Self {
        Self { tag, snapshot, attached: OnceLock::new(), tally: OnceBox::new() }
    }
}

impl VerifyEntry {
    /// About the bytes it holds, for the cache's bound: its slot, its own size and heap,
    /// its share of what it holds with other keys, and what is attached to it (counted
    /// before it is).
    fn weight(&self) -> u32 {
        let size = SLOT
            + 16
            + std::mem::size_of::<Self>()
            + self.snapshot.as_ref().map_or(0, |k| {
                let limits = k.ratelimits().len() + k.identity().map_or(0, |i| i.ratelimits.len());
                // (A key with no credits and no limits shares what is attached to it.)
                let own = k.credits().is_some() || limits > 0;
                k.heap_weight() + if own { ATTACHED + limits * ATTACHED_PER_LIMIT } else { 0 }
            });
        u32::try_from(size).unwrap_or(u32::MAX)
    }

    /// The scopes whose counters decide whether this entry is current.
    pub fn scopes<'a>(&'a self, digest: &crate::Digest) -> ([Scope<'a>; 2], usize) {
        entry_scopes(self.snapshot.as_ref().map(|k| (k.id(), k.workspace_id())), digest)
    }
}

/// The verification cache: keys and unknown secrets bounded apart. Found keys, looked up
/// on every verification, are in a sharded map of the project's own ([`KeyCache`]: a hash,
/// a shared lock, a probe); unknown secrets, which anyone can send, in moka (TinyLFU
/// admission, so a burst of one-off secrets does not push out what is asked often).
pub struct VerifyCache {
    pub enabled: bool,
    pub found: KeyCache<VerifyEntry>,
    /// The names, sets of names and identities the cached keys share.
    pub interner: Interner,
    unknown: moka::sync::Cache<crate::Digest, Arc<VerifyEntry>>,
    /// Verifications that read the store (a miss, a stale entry, or the cache off).
    pub loads: AtomicU64,
    /// Verifications answered from the cache.
    pub hits: AtomicU64,
}

impl std::fmt::Debug for VerifyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyCache(enabled: {}, keys: {})", self.enabled, self.found.len())
    }
}

impl VerifyCache {
    pub fn new(enabled: bool, max_bytes: u64) -> Self {
        Self {
            enabled,
            found: KeyCache::new(max_bytes),
            interner: Interner::default(),
            unknown: moka::sync::Cache::new(MAX_CACHED_UNKNOWN_KEYS),
            loads: Default::default(),
            hits: Default::default(),
        }
    }

    /// The cached form of a key the store answered.
    pub fn compact(&self, key: Option<KeySummary>) -> Option<CachedKey> {
        key.map(|k| CachedKey::new(k, &self.interner))
    }

    pub fn get(&self, digest: &crate::Digest) -> Option<Arc<VerifyEntry>> {
        self.found.get(digest).or_else(|| self.unknown.get(digest))
    }

    /// Drops the entry of the key whose stored hash is `stored_hash` (a deleted key). A hash
    /// of another form (a key imported with its own scheme) is left to the bound.
    pub fn forget(&self, stored_hash: &str) {
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(stored_hash, &mut digest).is_ok() {
            self.found.remove(&digest);
        }
    }

    /// Drops a remembered "no such key" for `digest` (an answer that must not be kept).
    pub fn forget_unknown(&self, digest: &crate::Digest) {
        self.unknown.invalidate(digest);
    }

    pub fn put(&self, digest: crate::Digest, entry: Arc<VerifyEntry>) {
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
/// `digest` is current: the key's and its workspace's (`key`: its id and workspace's), or
/// for no key, its creation shard's.
pub fn entry_scopes<'a>(key: Option<(&'a str, &'a str)>, digest: &crate::Digest) -> ([Scope<'a>; 2], usize) {
    match key {
        Some((id, workspace_id)) => ([Scope::Key(id), Scope::Workspace(workspace_id)], 2),
        None => {
            let shard = Scope::KeysCreated(creation_shard(digest));
            ([shard, shard], 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_with_its_reference_counts_fits_the_allocators_128_byte_class() {
        // An `Arc` allocation is the entry after two counters (16 bytes).
        assert!(16 + std::mem::size_of::<VerifyEntry>() <= 128, "{}", std::mem::size_of::<VerifyEntry>());
        assert!(std::mem::size_of::<Tally>() <= 48, "{}", std::mem::size_of::<Tally>());
    }
}
