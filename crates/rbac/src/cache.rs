//! The caches that keep SQL off the hot paths, typed: root keys' principals, namespaces'
//! overrides and namespace ids. How they load, refresh and bound their entries is
//! `keygate_cache`'s [`TtlCache`].

use crate::{Effective, OverrideSet, Principal};
use foldhash::HashMap;
use foldhash::HashMapExt;
use keygate_cache::{Cached, Digest, HitCounts, MAX_ENTRIES, TtlCache};
use keygate_ratelimit::Algorithm;
use parking_lot::RwLock;
use std::sync::Arc;

/// Root-key digest -> its principal, or `None` for a key known to be invalid.
pub(crate) type AuthCache = TtlCache<Digest, Option<Arc<Principal>>>;

/// What the root keys' cache adds to a [`TtlCache`].
pub(crate) trait RootKeyEntries {
    /// Caches "unknown root key" answers apart ([`TtlCache::with_negatives`]).
    fn for_root_keys(ttl_ms: u64) -> Self;
    /// Forgets a root key at once (revocation through this instance).
    fn evict_root_key(&self, root_key_id: &str);
}

impl RootKeyEntries for AuthCache {
    fn for_root_keys(ttl_ms: u64) -> Self {
        Self::with_negatives(ttl_ms, Option::is_none)
    }

    fn evict_root_key(&self, root_key_id: &str) {
        self.evict_where(|p| p.as_ref().is_some_and(|p| p.root_key_id == root_key_id));
    }
}

/// Namespace id -> its overrides, and the overrides epoch the shared rate-limit store had
/// for the namespace just before they were read (see `RbacService::load_overrides`).
/// Dropped at once when this instance changes the namespace's overrides.
pub(crate) type OverrideCache = TtlCache<Box<str>, (Arc<OverrideSet>, u64)>;

/// What the overrides' cache adds to a [`TtlCache`].
pub(crate) trait OverrideEntries {
    /// The override for `identifier` (if any) and the epoch, from a live entry. Under the
    /// cache's lock only the exact lookup runs (one hash lookup, no reference count
    /// touched); when patterns must be matched, the set is taken out (one reference count)
    /// and matched after the lock is released, so no namespace's patterns hold up the
    /// lookups of others.
    fn find(
        &self,
        namespace_id: &str,
        identifier: &str,
        now: u64,
    ) -> Option<Cached<(Option<Effective>, u64, Algorithm)>>;
}

impl OverrideEntries for OverrideCache {
    fn find(
        &self,
        namespace_id: &str,
        identifier: &str,
        now: u64,
    ) -> Option<Cached<(Option<Effective>, u64, Algorithm)>> {
        let hit = self.lookup(namespace_id, now, |(set, epoch)| match set.find_exact(identifier) {
            Some(e) => Ok((Some(e), *epoch, set.algorithm)),
            None if !set.has_patterns() => Ok((None, *epoch, set.algorithm)),
            None => Err((set.clone(), *epoch)),
        })?;
        let value = match hit.value {
            Ok(found) => found,
            Err((set, epoch)) => (set.find_pattern(identifier), epoch, set.algorithm),
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
    fn override_entries_are_found_by_namespace_and_evicted_alone() {
        let c = OverrideCache::new(1_000);
        let set = Arc::new(OverrideSet::new(Vec::new()).under(Algorithm::Sliding));
        c.put("rlns_a".into(), (set.clone(), 7), 100, c.generation());
        c.put("rlns_b".into(), (set, 0), 100, c.generation());
        let found = Some(Cached { value: (None, 7, Algorithm::Sliding), refresh: false });
        assert_eq!(c.find("rlns_a", "user", 100), found, "with the namespace's algorithm");
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
}
