//! Authentication: root keys, from the cache or the store.

use super::*;

impl<S: RbacStore> RbacService<S> {
    pub(super) fn check_principal(&self, p: Option<Arc<Principal>>) -> Result<Arc<Principal>, RbacError> {
        p.ok_or_else(|| RbacError::Unauthorized("the root key is unknown or revoked".into()))
    }

    /// Answers from the cache only: `None` means the store must be asked
    /// ([`Self::authenticate`]). Never blocks on I/O. When the answer says `refresh`, the
    /// caller should call [`Self::refresh_root_key`] off the request path.
    pub fn authenticate_cached(&self, token: &str) -> Option<Cached<Result<Arc<Principal>, RbacError>>> {
        let digest = secret_digest(token);
        self.auth.lookup(&digest, self.clock.monotonic_ms(), |p| self.check_principal(p.clone()))
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
        self.check_principal(self.load_root_key(&digest)?)
    }

    /// Reads a cached root key again (revoked or changed since?), for
    /// [`Self::authenticate_cached`]'s `refresh`.
    pub fn refresh_root_key(&self, token: &str) -> Result<(), RbacError> {
        let digest = secret_digest(token);
        let _loading = self.auth.load_lock(&digest);
        self.load_root_key(&digest).map(drop)
    }

    /// The root key from the store, into the cache. An expired key is 403 and not cached.
    pub(super) fn load_root_key(&self, digest: &cache::Digest) -> Result<Option<Arc<Principal>>, RbacError> {
        let generation = self.auth.generation();
        let (now, age_origin) = (self.clock.now_ms(), self.clock.monotonic_ms());
        let hash = digest_hex(digest);
        let found = self.store.read(|tx| Ok(tx.root_key_by_hash(&hash)?))?;
        if found.as_ref().is_some_and(|rk| rk.expires_at.is_some_and(|e| e <= now as i64)) {
            self.auth.evict(digest);
            return Err(RbacError::Forbidden("the root key has expired".into()));
        }
        let principal = found.map(|rk| Arc::new(Principal::new(rk.id, rk.workspace_id, rk.permissions)));
        self.auth.put(*digest, principal.clone(), age_origin, generation);
        Ok(principal)
    }
}
