//! The map of found keys behind `keys.verifyKey`'s cache: what a cached verification looks
//! up on every request, so it costs a hash, a shared lock of one shard and a probe.
//!
//! Its own rules, not a general cache's: an entry is current while the change counters it
//! was loaded under are (the verification checks that, not this map), so it has no
//! lifetime; it only bounds memory. Entries come from the store alone (a key that exists),
//! so nobody can fill it with made-up secrets; unknown secrets are cached elsewhere, with an
//! admission policy (`keygate_rbac`'s verification cache).
//!
//! - Sharded by the digest: lookups of different keys mostly take different locks, and a
//!   lookup takes its shard's lock shared.
//! - Keyed by the secret's SHA-256 digest, hashed again with a per-process random seed: a
//!   caller cannot choose where a key lands.
//! - Bounded by weight (about the bytes an entry holds), per shard. An insert that takes
//!   a shard over its share evicts the entries not used recently first: a lookup marks its
//!   entry (a plain load, and a store only when the mark was clear, so a hot key's lookups
//!   do not write to shared memory), and an entry starts unmarked, so a key looked up once
//!   goes before the keys in use; when every entry is marked, the marks are cleared.

use hashbrown::HashTable;
use parking_lot::RwLock;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// SHA-256 digest of a key's secret.
pub type Digest = [u8; 32];

/// Shards: a power of two, well above the number of cores that look up at once.
const SHARDS: usize = 64;

/// A sweep frees a shard down to this fraction (in eighths) of its share, so that the
/// next inserts do not sweep again at once.
const SWEEP_TO_EIGHTHS: u64 = 7;

struct Slot<V> {
    digest: Digest,
    value: Arc<V>,
    weight: u32,
    /// Looked up since the last sweep passed it.
    used: AtomicBool,
}

struct Shard<V> {
    table: HashTable<Slot<V>>,
    weight: u64,
}

/// Digest -> `Arc<V>`, bounded by the weight of its entries (see the module docs).
pub struct KeyCache<V> {
    shards: Box<[RwLock<Shard<V>>]>,
    hasher: foldhash::fast::RandomState,
    /// Each shard's share of the bound.
    shard_budget: u64,
}

impl<V> std::fmt::Debug for KeyCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyCache({} entries)", self.len())
    }
}

impl<V> KeyCache<V> {
    /// A map whose entries weigh at most about `max_weight` in all.
    pub fn new(max_weight: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard { table: HashTable::new(), weight: 0 })).collect(),
            hasher: foldhash::fast::RandomState::default(),
            shard_budget: (max_weight / SHARDS as u64).max(1),
        }
    }

    fn locate(&self, digest: &Digest) -> (u64, &RwLock<Shard<V>>) {
        let hash = self.hasher.hash_one(digest);
        // The top bits pick the shard; the table uses the low ones.
        (hash, &self.shards[(hash >> 58) as usize % SHARDS])
    }

    /// The entry for `digest`, marked as used.
    pub fn get(&self, digest: &Digest) -> Option<Arc<V>> {
        let (hash, shard) = self.locate(digest);
        let shard = shard.read();
        let slot = shard.table.find(hash, |s| s.digest == *digest)?;
        if !slot.used.load(Ordering::Relaxed) {
            slot.used.store(true, Ordering::Relaxed);
        }
        Some(slot.value.clone())
    }

    /// Stores `value` for `digest` (replacing what was there), then, when the shard is over
    /// its share, evicts by second chance until it is back under.
    pub fn insert(&self, digest: Digest, value: Arc<V>, weight: u32) {
        let (hash, shard) = self.locate(&digest);
        let mut guard = shard.write();
        let shard = &mut *guard;
        let slot = Slot { digest, value, weight, used: AtomicBool::new(false) };
        match shard.table.find_mut(hash, |s| s.digest == digest) {
            Some(old) => {
                shard.weight = shard.weight - u64::from(old.weight) + u64::from(weight);
                *old = slot;
            }
            None => {
                shard.weight += u64::from(weight);
                let hasher = &self.hasher;
                shard.table.insert_unique(hash, slot, |s| hasher.hash_one(s.digest));
            }
        }
        if shard.weight > self.shard_budget {
            Self::sweep(shard, self.shard_budget * SWEEP_TO_EIGHTHS / 8, &digest);
        }
    }

    /// Not-recently-used: entries not looked up since the marks were last cleared go
    /// first (never `keep`, just inserted); when every entry left is marked, the marks are
    /// cleared and entries go in table order, until the shard weighs at most `target`.
    fn sweep(shard: &mut Shard<V>, target: u64, keep: &Digest) {
        let evict = |shard: &mut Shard<V>, unmarked_only: bool| {
            let mut weight = shard.weight;
            shard.table.retain(|s| {
                if weight <= target || s.digest == *keep || (unmarked_only && s.used.load(Ordering::Relaxed))
                {
                    return true;
                }
                weight -= u64::from(s.weight);
                false
            });
            shard.weight = weight;
        };
        evict(shard, true);
        if shard.weight > target {
            for s in shard.table.iter() {
                s.used.store(false, Ordering::Relaxed);
            }
            evict(shard, false);
        }
    }

    /// Forgets `digest`.
    pub fn remove(&self, digest: &Digest) {
        let (hash, shard) = self.locate(digest);
        let mut shard = shard.write();
        if let Ok(entry) = shard.table.find_entry(hash, |s| s.digest == *digest) {
            let (slot, _) = entry.remove();
            shard.weight -= u64::from(slot.weight);
        }
    }

    /// Calls `f` with each entry (a shard at a time, under its read lock).
    pub fn for_each(&self, mut f: impl FnMut(&Digest, &Arc<V>)) {
        for shard in self.shards.iter() {
            for slot in shard.read().table.iter() {
                f(&slot.digest, &slot.value);
            }
        }
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().table.len()).sum()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.read().table.is_empty())
    }

    /// What its entries weigh in all.
    pub fn weight(&self) -> u64 {
        self.shards.iter().map(|s| s.read().weight).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(i: u32) -> Digest {
        let mut d = [0u8; 32];
        d[..4].copy_from_slice(&i.to_le_bytes());
        d
    }

    #[test]
    fn entries_are_found_replaced_and_removed_with_their_weight() {
        let c = KeyCache::new(1 << 20);
        c.insert(digest(1), Arc::new("a"), 100);
        c.insert(digest(2), Arc::new("b"), 50);
        assert_eq!(c.get(&digest(1)).as_deref(), Some(&"a"));
        assert_eq!(c.get(&digest(3)), None);
        c.insert(digest(1), Arc::new("c"), 10);
        assert_eq!(c.get(&digest(1)).as_deref(), Some(&"c"), "replaced");
        assert_eq!((c.len(), c.weight()), (2, 60));
        c.remove(&digest(2));
        c.remove(&digest(9));
        assert_eq!((c.len(), c.weight()), (1, 10));
    }

    #[test]
    fn the_bound_holds_and_keys_in_use_outlive_one_off_keys() {
        // 64 shards of 2,000 each; entries of 100: 20 per shard, about 3 of them hot.
        let c = KeyCache::new(128_000);
        let hot: Vec<u32> = (0..200).collect();
        for &i in &hot {
            c.insert(digest(i), Arc::new(i), 100);
        }
        for round in 0..50u32 {
            // Keys used on every request, and a stream of keys each used once.
            for &i in &hot {
                c.get(&digest(i));
            }
            for j in 0..100 {
                c.insert(digest(1_000_000 + round * 100 + j), Arc::new(j), 100);
            }
            assert!(c.weight() <= 128_000, "round {round}: {}", c.weight());
        }
        for &i in &hot {
            c.get(&digest(i));
        }
        let kept = hot.iter().filter(|&&i| c.get(&digest(i)).is_some()).count();
        assert!(kept >= 190, "the keys in use stay cached: {kept} of 200");
    }

    #[test]
    fn an_entry_heavier_than_its_shard_is_still_stored() {
        let c = KeyCache::new(64);
        c.insert(digest(1), Arc::new(1), 1_000);
        assert_eq!(c.get(&digest(1)).as_deref(), Some(&1), "the entry just inserted is never swept");
        c.insert(digest(1), Arc::new(2), 1_000);
        assert_eq!(c.len(), 1);
    }
}
