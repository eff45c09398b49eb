//! Authentication: root keys, from the cache or the store.

use crate::cache::RootKeyEntries;
use crate::{Cached, Principal, RbacError, RbacService, RbacStore, Scope};
use keygate_domain::{digest_hex, secret_digest};
use std::sync::Arc;

impl<S: RbacStore> RbacService<S> {
    pub(super) fn check_principal(&self, p: Option<Arc<Principal>>) -> Result<Arc<Principal>, RbacError> {
        p.ok_or_else(|| RbacError::Unauthorized("the root key is unknown or revoked".into()))
    }

    /// Answers from the cache only: `None` means the store must be asked
    /// ([`Self::authenticate`]). Never blocks on I/O. When the answer says `refresh`, the
    /// caller should call [`Self::refresh_root_key`] off the request path.
    pub fn authenticate_cached(&self, token: &str) -> Option<Cached<Result<Arc<Principal>, RbacError>>> {
        let digest = secret_digest(token);
        let monotonic = self.clock.monotonic_ms();
        let hit = self.auth.lookup(&digest, monotonic, |p| self.check_principal(p.clone()))?;
        if let Ok(p) = &hit.value {
            self.note_root_key_use(p, monotonic);
        }
        Some(hit)
    }

    /// Verifies a root key: cache first, then the store (one read per key at a time).
    pub fn authenticate(&self, token: &str) -> Result<Arc<Principal>, RbacError> {
        let digest = secret_digest(token);
        // This caller loads on a miss: it never takes an entry's refresh (see TtlCache::peek).
        let cached =
            || self.auth.peek(&digest, self.clock.monotonic_ms(), |p| self.check_principal(p.clone()));
        if let Some(answer) = cached() {
            return answer;
        }
        let _loading = self.auth.load_lock(&digest);
        if let Some(answer) = cached() {
            return answer;
        }
        let p = self.check_principal(self.load_root_key(&digest)?)?;
        self.note_root_key_use(&p, self.clock.monotonic_ms());
        Ok(p)
    }

    /// Whether the root key behind `p` is still valid, for every request but the rate-limit
    /// hot path: with counters in memory the cache is exact already (own revocations evict
    /// at once, other processes' within the 50 ms poll); with counters in the database or
    /// Redis, the root key's counter is read (one indexed read, or one round trip) and
    /// compared with the one it was loaded under. When they differ the store says whether
    /// the key is still active, and the cached entry is dropped so that the next request
    /// loads it under the current counter. Runs on the blocking pool.
    pub fn ensure_root_key_current(&self, p: &Principal) -> Result<(), RbacError> {
        self.current_root_key(p).map(drop)
    }

    /// [`Self::ensure_root_key_current`], answering the root key as it is now when it
    /// changed since `p` was loaded (its permissions, say), for the request to run with.
    pub fn current_root_key(&self, p: &Principal) -> Result<Option<Arc<Principal>>, RbacError> {
        let (crate::counters::CounterSource::Store | crate::counters::CounterSource::Shared(_)) =
            &self.counters
        else {
            return Ok(None);
        };
        let Some(tag) = p.tag() else { return Ok(None) };
        if self.read_counters(&[Scope::RootKey(&p.root_key_id)])? == tag {
            return Ok(None);
        }
        self.root_key_changed(p).map(Some)
    }

    /// The root key `p` changed since it was loaded: it is forgotten (the next request
    /// loads it again), and this one is refused unless it is still usable (not deleted,
    /// disabled or expired); if it is, the key as it is now.
    pub(super) fn root_key_changed(&self, p: &Principal) -> Result<Arc<Principal>, RbacError> {
        let id = p.root_key_id.as_str();
        self.auth.evict_root_key(id);
        let Some(rk) = self.store.read(|tx| Ok(tx.root_key_by_id(id)?))? else {
            return self.check_principal(None);
        };
        rk.usable_at(self.now())?;
        Ok(Arc::new(Principal::new(rk.id, rk.workspace_id, rk.permissions)))
    }

    /// Reads a cached root key again (revoked or changed since?), for
    /// [`Self::authenticate_cached`]'s `refresh`.
    pub fn refresh_root_key(&self, token: &str) -> Result<(), RbacError> {
        let digest = secret_digest(token);
        let _loading = self.auth.load_lock(&digest);
        self.load_root_key(&digest).map(drop)
    }

    /// The root key from the store, into the cache. An expired or disabled key is 403 and
    /// not cached.
    pub(super) fn load_root_key(
        &self,
        digest: &keygate_cache::Digest,
    ) -> Result<Option<Arc<Principal>>, RbacError> {
        let generation = self.auth.generation();
        let (now, age_origin) = (self.clock.now_ms(), self.clock.monotonic_ms());
        let hash = digest_hex(digest);
        let mut found = self.store.read(|tx| Ok(tx.root_key_by_hash(&hash)?))?;
        if let Some(Err(refused)) = found.as_ref().map(|rk| rk.usable_at(now as i64)) {
            self.auth.evict(digest);
            return Err(refused);
        }
        // With counters in the database or Redis (checked per request by
        // `ensure_root_key_current`): the root key's counter, read after the key (its id is
        // needed) and before the key is read again, so a revocation committed around the
        // first read is either seen by the second or bumps the counter past the tag. With
        // counters in memory the poll's evictions keep the cache exact: no tag.
        let mut tag = None;
        let checked = !matches!(self.counters, crate::counters::CounterSource::Local(_));
        if let Some(rk) = found.as_ref().filter(|_| checked) {
            tag = Some(self.read_counters(&[Scope::RootKey(&rk.id)])?);
            if !self.store.read(|tx| Ok(tx.root_key_active(&rk.id)?))? {
                found = None;
            }
        }
        let principal = found.map(|rk| {
            let p = Principal::new(rk.id, rk.workspace_id, rk.permissions);
            Arc::new(match tag {
                Some(tag) => p.loaded_under(tag),
                None => p,
            })
        });
        self.auth.put(*digest, principal.clone(), age_origin, generation);
        Ok(principal)
    }
}
