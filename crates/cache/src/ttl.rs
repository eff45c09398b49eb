//! The in-memory caches that keep SQL off the rate-limit hot path.
//!
//! [`TtlCache`] keeps what the store answered (a root key's principal, a namespace's
//! overrides) for at most its lifetime, and reads the store once per key at a time:
//! - an entry past half its lifetime is still served, and the first caller to see that is
//!   told to refresh it ([`Cached::refresh`]) off the request path: under steady traffic an
//!   entry is renewed before it expires, and no request waits for the store;
//! - a caller that finds no live entry (a cold cache, traffic after an idle spell) loads
//!   under [`TtlCache::load_lock`] and looks again first, so a burst of misses reads the
//!   store once per key, not once per request (each request of such a burst would
//!   otherwise queue its own identical read on the blocking pool and hold a pooled
//!   connection for it);
//! - an eviction bumps a generation, and a load that began before it does not store its
//!   answer: an evicted entry cannot come back from a read that raced the change;
//! - negative entries ("this root key does not exist": anyone can make one per request
//!   with a random token) are bounded on their own, [`MAX_NEGATIVE_ENTRIES`]; when they are
//!   full only they are dropped, so random input never evicts a valid key's entry. The
//!   positive entries are bounded by [`MAX_ENTRIES`] and come only from what the store
//!   holds.

use foldhash::HashMap;
use foldhash::HashMapExt;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// SHA-256 digest of a root key: the cache key (never the secret itself).
pub type Digest = [u8; 32];

/// Bound on cached (positive) entries; a full cache is cleared rather than grown.
pub const MAX_ENTRIES: usize = 100_000;

/// Bound on negative entries, apart from the positive ones; when full, the negative
/// entries (only they) are dropped.
pub const MAX_NEGATIVE_ENTRIES: usize = 10_000;

/// Loads of different keys mostly take different locks.
const LOAD_LOCKS: usize = 64;

/// A cached answer, and whether this caller should refresh the entry now (off the
/// request path): true for exactly one caller once the entry is past half its lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached<T> {
    pub value: T,
    pub refresh: bool,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    fetched_at: u64,
    refresh_claimed: AtomicBool,
}

/// Key -> what the store answered, each entry served for `ttl_ms` after it was read.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl_ms: u64,
    entries: RwLock<Entries<K, V>>,
    /// Which values are negative answers (bounded apart).
    is_negative: fn(&V) -> bool,
    /// Bumped (under the write lock) by every eviction.
    generation: AtomicU64,
    load_locks: Box<[Mutex<()>]>,
    lock_hasher: foldhash::fast::RandomState,
    /// Request-path lookups answered from the cache, and not.
    stats: HitCounts,
}

/// Hits and misses of a cache's request-path lookups (exported as metrics).
#[derive(Debug, Default)]
pub struct HitCounts {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl HitCounts {
    pub fn count(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// (hits, misses) so far.
    pub fn get(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

/// The map and how many of its entries are negative.
#[derive(Debug)]
struct Entries<K, V> {
    map: HashMap<K, Entry<V>>,
    negatives: usize,
}

impl<K: Eq + Hash, V> TtlCache<K, V> {
    pub fn new(ttl_ms: u64) -> Self {
        Self::with_negatives(ttl_ms, |_| false)
    }

    /// A cache whose values for which `is_negative` holds are bounded apart
    /// ([`MAX_NEGATIVE_ENTRIES`]).
    pub fn with_negatives(ttl_ms: u64, is_negative: fn(&V) -> bool) -> Self {
        Self {
            ttl_ms,
            entries: RwLock::new(Entries { map: HashMap::new(), negatives: 0 }),
            is_negative,
            generation: AtomicU64::new(0),
            load_locks: (0..LOAD_LOCKS).map(|_| Mutex::new(())).collect(),
            lock_hasher: foldhash::fast::RandomState::default(),
            stats: HitCounts::default(),
        }
    }

    /// (hits, misses) of the request-path lookups so far.
    pub fn hit_counts(&self) -> (u64, u64) {
        self.stats.get()
    }

    /// `f` of a live entry's value, or `None` when there is none (load it, under
    /// [`Self::load_lock`]). Runs under the read lock, without cloning the value. The
    /// request path's lookup: it may hand this caller the entry's refresh.
    pub fn lookup<Q, R>(&self, key: &Q, now: u64, f: impl FnOnce(&V) -> R) -> Option<Cached<R>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let found = self.read(key, now, true, f);
        self.stats.count(found.is_some());
        found
    }

    /// As [`Self::lookup`], for a caller that is loading already: never claims the refresh.
    pub fn peek<Q, R>(&self, key: &Q, now: u64, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.read(key, now, false, f).map(|hit| hit.value)
    }

    fn read<Q, R>(&self, key: &Q, now: u64, claim: bool, f: impl FnOnce(&V) -> R) -> Option<Cached<R>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entries = self.entries.read();
        let e = entries.map.get(key)?;
        let age = now.checked_sub(e.fetched_at)?;
        if age >= self.ttl_ms {
            return None;
        }
        let refresh = claim
            && age >= self.ttl_ms / 2
            && !e.refresh_claimed.load(Ordering::Relaxed)
            && !e.refresh_claimed.swap(true, Ordering::Relaxed);
        Some(Cached { value: f(&e.value), refresh })
    }

    /// Read this before reading the store, and pass it to [`Self::put`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Stores what the store answered (read at `now`), unless an eviction happened since
    /// `generation` was read; then the entry in place, if any, may be refreshed again.
    pub fn put(&self, key: K, value: V, now: u64, generation: u64) {
        let mut entries = self.entries.write();
        if self.generation.load(Ordering::Acquire) != generation {
            if let Some(e) = entries.map.get(&key) {
                e.refresh_claimed.store(false, Ordering::Relaxed);
            }
            return;
        }
        let negative = (self.is_negative)(&value);
        let replaced = entries.map.get(&key).map(|e| (self.is_negative)(&e.value));
        if replaced.is_none() {
            let is_negative = self.is_negative;
            if negative && entries.negatives >= MAX_NEGATIVE_ENTRIES {
                entries.map.retain(|_, e| !is_negative(&e.value));
                entries.negatives = 0;
            } else if !negative && entries.map.len() - entries.negatives >= MAX_ENTRIES {
                entries.map.retain(|_, e| is_negative(&e.value));
            }
        }
        match (replaced, negative) {
            (None | Some(false), true) => entries.negatives += 1,
            (Some(true), false) => entries.negatives -= 1,
            _ => {}
        }
        entries.map.insert(key, Entry { value, fetched_at: now, refresh_claimed: AtomicBool::new(false) });
    }

    pub fn evict<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut entries = self.entries.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(e) = entries.map.remove(key)
            && (self.is_negative)(&e.value)
        {
            entries.negatives -= 1;
        }
    }

    pub fn evict_where(&self, mut evict: impl FnMut(&V) -> bool) {
        let mut entries = self.entries.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.map.retain(|_, e| !evict(&e.value));
        let is_negative = self.is_negative;
        entries.negatives = entries.map.values().filter(|e| is_negative(&e.value)).count();
    }

    /// Held while `key` is loaded from the store: callers that missed together wait here,
    /// then find the entry the first one stored.
    pub fn load_lock<Q: Hash + ?Sized>(&self, key: &Q) -> MutexGuard<'_, ()> {
        let i = self.lock_hasher.hash_one(key) as usize % self.load_locks.len();
        self.load_locks[i].lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root keys as `keygate-rbac` caches them: an owner id, or `None` for an unknown key.
    fn cache() -> TtlCache<Digest, Option<String>> {
        TtlCache::with_negatives(10_000, Option::is_none)
    }

    fn owner(id: &str) -> Option<String> {
        Some(id.to_string())
    }

    #[test]
    fn loads_of_one_key_take_one_lock() {
        let c: TtlCache<Box<str>, u64> = TtlCache::new(1_000);
        let held = c.load_lock("rlns_a");
        assert_eq!(c.load_locks.iter().filter(|l| l.is_locked()).count(), 1);
        let i = c.load_locks.iter().position(|l| l.is_locked());
        drop(held);
        let again = c.load_lock("rlns_a");
        assert_eq!(c.load_locks.iter().position(|l| l.is_locked()), i, "the same key, the same lock");
        drop(again);
    }

    #[test]
    fn random_tokens_never_evict_a_valid_entry() {
        let c = cache();
        let valid = [7u8; 32];
        c.put(valid, owner("rk_valid"), 1_000, c.generation());
        // 100k distinct unknown tokens, each cached as unknown after its (one) store read.
        let mut loads = 0;
        for i in 0..100_000u32 {
            let mut digest = [0u8; 32];
            digest[..4].copy_from_slice(&i.to_le_bytes());
            digest[31] = 1;
            if c.lookup(&digest, 1_001, |_| ()).is_none() {
                loads += 1;
                c.put(digest, None, 1_001, c.generation());
            }
            // The valid entry is a hit throughout: no load.
            let hit = c.lookup(&valid, 1_001, Clone::clone);
            assert_eq!(
                hit,
                Some(Cached { value: owner("rk_valid"), refresh: false }),
                "after {i} random tokens"
            );
        }
        assert_eq!(loads, 100_000, "each random token is read once");
        let entries = c.entries.read();
        assert!(entries.negatives <= MAX_NEGATIVE_ENTRIES, "{}", entries.negatives);
        assert_eq!(entries.map.len(), entries.negatives + 1);
    }

    #[test]
    fn the_negative_count_follows_replacements_and_evictions() {
        let c = cache();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        c.put(a, None, 0, c.generation());
        c.put(b, None, 0, c.generation());
        assert_eq!(c.entries.read().negatives, 2);
        c.put(a, owner("rk_a"), 0, c.generation());
        assert_eq!(c.entries.read().negatives, 1, "a key created since: no longer negative");
        c.evict(&b);
        assert_eq!(c.entries.read().negatives, 0);
        c.put(b, None, 0, c.generation());
        c.evict_where(|v| v.as_deref() == Some("rk_a"));
        assert_eq!((c.entries.read().negatives, c.entries.read().map.len()), (1, 1));
    }
}
