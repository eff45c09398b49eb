//! The in-memory caches that keep SQL off the rate-limit hot path.

use crate::{Effective, OverrideSet, Principal};
use foldhash::HashMap;
use foldhash::HashMapExt;
use parking_lot::RwLock;
use std::sync::Arc;

/// SHA-256 digest of a root key: the cache key (never the secret itself).
pub(crate) type Digest = [u8; 32];

/// Bound on cached entries; a full cache is cleared rather than grown.
const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Clone)]
struct AuthEntry {
    principal: Option<Arc<Principal>>,
    fetched_at: u64,
}

/// Root-key hash -> principal (or "unknown"), each entry valid for `ttl_ms`.
#[derive(Debug)]
pub(crate) struct AuthCache {
    ttl_ms: u64,
    entries: RwLock<HashMap<Digest, AuthEntry>>,
}

impl AuthCache {
    pub fn new(ttl_ms: u64) -> Self {
        Self { ttl_ms, entries: RwLock::new(HashMap::new()) }
    }

    /// `Some(Some(p))`: a known root key; `Some(None)`: known to be invalid; `None`: ask
    /// the store.
    pub fn get(&self, digest: &Digest, now: u64) -> Option<Option<Arc<Principal>>> {
        let entries = self.entries.read();
        let e = entries.get(digest)?;
        (now >= e.fetched_at && now - e.fetched_at < self.ttl_ms).then(|| e.principal.clone())
    }

    pub fn put(&self, digest: Digest, principal: Option<Arc<Principal>>, now: u64) {
        let mut entries = self.entries.write();
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(digest, AuthEntry { principal, fetched_at: now });
    }

    /// Forgets a root key at once (revocation through this instance).
    pub fn evict_root_key(&self, root_key_id: &str) {
        self.entries.write().retain(|_, e| e.principal.as_ref().is_none_or(|p| p.root_key_id != root_key_id));
    }
}

/// (workspace id, namespace name) -> namespace id. Namespaces are never renamed or
/// deleted, so a positive entry stays valid.
/// namespace name -> namespace id, within one workspace.
type NamespaceIds = HashMap<Box<str>, Arc<String>>;

#[derive(Debug)]
pub(crate) struct NamespaceCache {
    by_workspace: RwLock<HashMap<Box<str>, NamespaceIds>>,
}

impl Default for NamespaceCache {
    fn default() -> Self {
        Self { by_workspace: RwLock::new(HashMap::new()) }
    }
}

impl NamespaceCache {
    pub fn get(&self, workspace_id: &str, name: &str) -> Option<Arc<String>> {
        self.by_workspace.read().get(workspace_id)?.get(name).cloned()
    }

    pub fn put(&self, workspace_id: &str, name: &str, id: Arc<String>) {
        let mut map = self.by_workspace.write();
        if map.values().map(HashMap::len).sum::<usize>() >= MAX_ENTRIES {
            map.clear();
        }
        map.entry(workspace_id.into()).or_default().insert(name.into(), id);
    }
}

/// A namespace's overrides, when they were read (Unix ms), and the overrides epoch the
/// shared rate-limit store had for the namespace just before (see `RbacService::load_overrides`).
type CachedOverrides = (Arc<OverrideSet>, u64, u64);

/// Namespace id -> its overrides, each entry valid for `ttl_ms` (and dropped at once when
/// this instance changes the namespace's overrides).
#[derive(Debug)]
pub(crate) struct OverrideCache {
    ttl_ms: u64,
    entries: RwLock<HashMap<Box<str>, CachedOverrides>>,
}

impl OverrideCache {
    pub fn new(ttl_ms: u64) -> Self {
        Self { ttl_ms, entries: RwLock::new(HashMap::new()) }
    }

    /// `Some((found, epoch))` from a live entry (found: the override for `identifier`, if
    /// any); `None` when the namespace's overrides must be loaded. Looks up under the read
    /// lock, without touching the set's reference count (the hot path).
    pub fn find(&self, namespace_id: &str, identifier: &str, now: u64) -> Option<(Option<Effective>, u64)> {
        let entries = self.entries.read();
        let (set, fetched_at, epoch) = entries.get(namespace_id)?;
        (now >= *fetched_at && now - fetched_at < self.ttl_ms).then(|| (set.find(identifier), *epoch))
    }

    pub fn put(&self, namespace_id: &str, set: Arc<OverrideSet>, now: u64, epoch: u64) {
        let mut entries = self.entries.write();
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(namespace_id.into(), (set, now, epoch));
    }

    pub fn evict(&self, namespace_id: &str) {
        self.entries.write().remove(namespace_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_entries_expire_after_ttl_and_evict_by_id() {
        let c = AuthCache::new(10_000);
        let p = Arc::new(Principal::new("rk_1".into(), "ws_1".into(), ["*".to_string()]));
        let (h, bad) = ([1u8; 32], [2u8; 32]);
        c.put(h, Some(p), 1_000);
        c.put(bad, None, 1_000);
        assert!(c.get(&h, 10_999).is_some_and(|p| p.is_some()));
        assert!(c.get(&bad, 2_000).is_some_and(|p| p.is_none()));
        assert!(c.get(&h, 11_000).is_none());
        c.evict_root_key("rk_1");
        assert!(c.get(&h, 1_001).is_none());
        assert!(c.get(&bad, 1_001).is_some());
    }

    #[test]
    fn namespaces_are_per_workspace() {
        let c = NamespaceCache::default();
        c.put("ws_a", "default", Arc::new("rlns_a".into()));
        assert_eq!(c.get("ws_a", "default").as_deref().map(String::as_str), Some("rlns_a"));
        assert!(c.get("ws_b", "default").is_none());
    }
}
