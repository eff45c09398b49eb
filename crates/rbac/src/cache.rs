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

use crate::{Effective, OverrideSet, Principal};
use foldhash::HashMap;
use foldhash::HashMapExt;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// SHA-256 digest of a root key: the cache key (never the secret itself).
pub(crate) type Digest = [u8; 32];

/// Bound on cached (positive) entries; a full cache is cleared rather than grown.
const MAX_ENTRIES: usize = 100_000;

/// Bound on negative entries, apart from the positive ones; when full, the negative
/// entries (only they) are dropped.
pub(crate) const MAX_NEGATIVE_ENTRIES: usize = 10_000;

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
pub(crate) struct TtlCache<K, V> {
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
pub(crate) struct HitCounts {
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

/// Root-key digest -> its principal, or `None` for a key known to be invalid.
pub(crate) type AuthCache = TtlCache<Digest, Option<Arc<Principal>>>;

impl AuthCache {
    /// Caches "unknown root key" answers apart (see the module docs).
    pub fn for_root_keys(ttl_ms: u64) -> Self {
        Self::with_negatives(ttl_ms, Option::is_none)
    }

    /// Forgets a root key at once (revocation through this instance).
    pub fn evict_root_key(&self, root_key_id: &str) {
        self.evict_where(|p| p.as_ref().is_some_and(|p| p.root_key_id == root_key_id));
    }
}

/// Namespace id -> its overrides, and the overrides epoch the shared rate-limit store had
/// for the namespace just before they were read (see `RbacService::load_overrides`).
/// Dropped at once when this instance changes the namespace's overrides.
pub(crate) type OverrideCache = TtlCache<Box<str>, (Arc<OverrideSet>, u64)>;

impl OverrideCache {
    /// The override for `identifier` (if any) and the epoch, from a live entry. Under the
    /// cache's lock only the exact lookup runs (one hash lookup, no reference count
    /// touched); when patterns must be matched, the set is taken out (one reference count)
    /// and matched after the lock is released, so no namespace's patterns hold up the
    /// lookups of others.
    pub fn find(
        &self,
        namespace_id: &str,
        identifier: &str,
        now: u64,
    ) -> Option<Cached<(Option<Effective>, u64)>> {
        let hit = self.lookup(namespace_id, now, |(set, epoch)| match set.find_exact(identifier) {
            Some(e) => Ok((Some(e), *epoch)),
            None if !set.has_patterns() => Ok((None, *epoch)),
            None => Err((set.clone(), *epoch)),
        })?;
        let value = match hit.value {
            Ok(found) => found,
            Err((set, epoch)) => (set.find_pattern(identifier), epoch),
        };
        Some(Cached { value, refresh: hit.refresh })
    }
}

/// (workspace id, namespace name) -> namespace id. Namespaces are never renamed or
/// deleted, so a positive entry stays valid.
/// namespace name -> namespace id, within one workspace.
type NamespaceIds = HashMap<Box<str>, Arc<String>>;

#[derive(Debug)]
pub(crate) struct NamespaceCache {
    by_workspace: RwLock<HashMap<Box<str>, NamespaceIds>>,
    stats: HitCounts,
}

impl Default for NamespaceCache {
    fn default() -> Self {
        Self { by_workspace: RwLock::new(HashMap::new()), stats: HitCounts::default() }
    }
}

impl NamespaceCache {
    pub fn get(&self, workspace_id: &str, name: &str) -> Option<Arc<String>> {
        let found = self.by_workspace.read().get(workspace_id).and_then(|names| names.get(name).cloned());
        self.stats.count(found.is_some());
        found
    }

    /// (hits, misses) of the lookups so far.
    pub fn hit_counts(&self) -> (u64, u64) {
        self.stats.get()
    }

    pub fn put(&self, workspace_id: &str, name: &str, id: Arc<String>) {
        let mut map = self.by_workspace.write();
        if map.values().map(HashMap::len).sum::<usize>() >= MAX_ENTRIES {
            map.clear();
        }
        map.entry(workspace_id.into()).or_default().insert(name.into(), id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(id: &str) -> Option<Arc<Principal>> {
        Some(Arc::new(Principal::new(id.into(), "ws_1".into(), ["*".to_string()])))
    }

    fn get(c: &AuthCache, key: &Digest, now: u64) -> Option<Cached<Option<String>>> {
        c.lookup(key, now, |p| p.as_ref().map(|p| p.root_key_id.clone()))
    }

    fn hit(id: Option<&str>, refresh: bool) -> Option<Cached<Option<String>>> {
        Some(Cached { value: id.map(str::to_string), refresh })
    }

    #[test]
    fn auth_entries_expire_after_ttl_and_evict_by_id() {
        let c = AuthCache::for_root_keys(10_000);
        let (h, bad) = ([1u8; 32], [2u8; 32]);
        c.put(h, principal("rk_1"), 1_000, c.generation());
        c.put(bad, None, 1_000, c.generation());
        assert_eq!(get(&c, &h, 1_000), hit(Some("rk_1"), false));
        assert_eq!(get(&c, &bad, 2_000), hit(None, false));
        assert!(get(&c, &h, 10_999).is_some());
        assert_eq!(get(&c, &h, 11_000), None, "served for at most the lifetime");
        assert_eq!(get(&c, &h, 999), None, "an entry from the future (clock moved back) is not served");
        c.evict_root_key("rk_1");
        assert_eq!(get(&c, &h, 1_001), None);
        assert_eq!(get(&c, &bad, 1_001), hit(None, false), "other entries stay");
    }

    #[test]
    fn one_caller_is_told_to_refresh_once_an_entry_is_past_half_its_lifetime() {
        let c = AuthCache::for_root_keys(10_000);
        let h = [1u8; 32];
        c.put(h, principal("rk_1"), 1_000, c.generation());
        assert_eq!(get(&c, &h, 5_999), hit(Some("rk_1"), false));
        let peeked = c.peek(&h, 6_000, |p| p.as_ref().map(|p| p.root_key_id.clone()));
        assert_eq!(peeked, Some(Some("rk_1".to_string())), "a loading caller sees the entry...");
        assert_eq!(get(&c, &h, 6_000), hit(Some("rk_1"), true), "...without taking its refresh");
        assert_eq!(get(&c, &h, 6_001), hit(Some("rk_1"), false), "claimed already");
        assert_eq!(get(&c, &h, 10_999), hit(Some("rk_1"), false));
        // The refresh stores a new entry: served for a whole lifetime again, claimable again.
        c.put(h, principal("rk_1"), 7_000, c.generation());
        assert_eq!(get(&c, &h, 11_000), hit(Some("rk_1"), false));
        assert_eq!(get(&c, &h, 12_000), hit(Some("rk_1"), true));
    }

    #[test]
    fn a_load_that_raced_an_eviction_does_not_store_its_answer() {
        let c = AuthCache::for_root_keys(10_000);
        let (h, other) = ([1u8; 32], [3u8; 32]);
        c.put(other, principal("rk_2"), 1_000, c.generation());
        assert_eq!(get(&c, &other, 6_000), hit(Some("rk_2"), true), "a refresh of rk_2 is claimed");
        // A load of rk_1 and the refresh of rk_2 read the store...
        let generation = c.generation();
        // ...rk_1 is revoked through this instance meanwhile...
        c.evict_root_key("rk_1");
        // ...and their (older) answers arrive after the eviction: neither is stored.
        c.put(h, principal("rk_1"), 6_000, generation);
        c.put(other, principal("rk_2"), 6_000, generation);
        assert_eq!(get(&c, &h, 6_001), None, "the revoked key does not come back");
        assert_eq!(get(&c, &other, 6_001), hit(Some("rk_2"), true), "its refresh can be claimed again");
        c.put(h, principal("rk_1"), 6_002, c.generation());
        assert!(get(&c, &h, 6_003).is_some(), "a load begun after the eviction is stored");
    }

    #[test]
    fn loads_of_one_key_take_one_lock() {
        let c = OverrideCache::new(1_000);
        let held = c.load_lock("rlns_a");
        assert_eq!(c.load_locks.iter().filter(|l| l.is_locked()).count(), 1);
        let i = c.load_locks.iter().position(|l| l.is_locked());
        drop(held);
        let again = c.load_lock("rlns_a");
        assert_eq!(c.load_locks.iter().position(|l| l.is_locked()), i, "the same key, the same lock");
        drop(again);
    }

    #[test]
    fn override_entries_are_found_by_namespace_and_evicted_alone() {
        let c = OverrideCache::new(1_000);
        let set = Arc::new(OverrideSet::new(Vec::new()));
        c.put("rlns_a".into(), (set.clone(), 7), 100, c.generation());
        c.put("rlns_b".into(), (set, 0), 100, c.generation());
        assert_eq!(c.find("rlns_a", "user", 100), Some(Cached { value: (None, 7), refresh: false }));
        c.evict("rlns_a");
        assert_eq!(c.find("rlns_a", "user", 100), None);
        assert!(c.find("rlns_b", "user", 100).is_some());
        assert_eq!(c.find("rlns_b", "user", 1_100), None);
    }

    #[test]
    fn namespaces_are_per_workspace() {
        let c = NamespaceCache::default();
        c.put("ws_a", "default", Arc::new("rlns_a".into()));
        assert_eq!(c.get("ws_a", "default").as_deref().map(String::as_str), Some("rlns_a"));
        assert!(c.get("ws_b", "default").is_none());
    }

    #[test]
    fn random_tokens_never_evict_a_valid_root_key() {
        let c = AuthCache::for_root_keys(10_000);
        let valid = [7u8; 32];
        c.put(valid, principal("rk_valid"), 1_000, c.generation());
        // 100k distinct unknown tokens, each cached as unknown after its (one) store read.
        let mut loads = 0;
        for i in 0..100_000u32 {
            let mut digest = [0u8; 32];
            digest[..4].copy_from_slice(&i.to_le_bytes());
            digest[31] = 1;
            if get(&c, &digest, 1_001).is_none() {
                loads += 1;
                c.put(digest, None, 1_001, c.generation());
            }
            // The valid key is a hit throughout: no load.
            assert_eq!(get(&c, &valid, 1_001), hit(Some("rk_valid"), false), "after {i} random tokens");
        }
        assert_eq!(loads, 100_000, "each random token is read once");
        let entries = c.entries.read();
        assert!(entries.negatives <= MAX_NEGATIVE_ENTRIES, "{}", entries.negatives);
        assert_eq!(entries.map.len(), entries.negatives + 1);
    }

    #[test]
    fn the_negative_count_follows_replacements_and_evictions() {
        let c = AuthCache::for_root_keys(10_000);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        c.put(a, None, 0, c.generation());
        c.put(b, None, 0, c.generation());
        assert_eq!(c.entries.read().negatives, 2);
        c.put(a, principal("rk_a"), 0, c.generation());
        assert_eq!(c.entries.read().negatives, 1, "a key created since: no longer negative");
        c.evict(&b);
        assert_eq!(c.entries.read().negatives, 0);
        c.put(b, None, 0, c.generation());
        c.evict_root_key("rk_a");
        assert_eq!((c.entries.read().negatives, c.entries.read().map.len()), (1, 1));
    }
}
