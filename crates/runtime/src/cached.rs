//! The hot paths' cache misses, written once: a root key ([`Runtime::authenticate`]), a
//! namespace and a namespace's overrides ([`crate::limit`]) are each looked up in rbac's
//! caches inline; on a miss the caller waits at the key's gate ([`crate::LoadGates`]: one
//! load per key at a time), looks again (the load before it may have filled the cache) and
//! only then reads the store, through the caller's blocking pool ([`Offload`]).

use crate::Runtime;
use crate::offload::{CallError, Offload, background, blocking};
use keygate_rbac::Principal;
use std::sync::Arc;

impl Runtime {
    /// A miss of one of the hot paths' caches: waits for `key`'s gate, answers `cached()`
    /// when the load before filled it, else `load()` on the blocking pool.
    pub(crate) async fn load_once<O, K, T, C, L>(
        &self,
        offload: &O,
        key: &K,
        cached: C,
        load: L,
    ) -> Result<T, CallError>
    where
        O: Offload,
        K: std::hash::Hash + ?Sized,
        C: Fn() -> Option<Result<T, CallError>>,
        L: FnOnce() -> Result<T, CallError> + Send + 'static,
        T: Send + 'static,
    {
        let _turn = self.loads.enter(key).await;
        if let Some(found) = cached() {
            return found;
        }
        blocking(offload, load).await
    }

    /// The root key `token` is: from the cache inline (renewed in the background once past
    /// half its lifetime), else from the store, one load per key at a time.
    pub async fn authenticate<O: Offload>(
        &self,
        offload: &O,
        token: &str,
    ) -> Result<Arc<Principal>, CallError> {
        if let Some(hit) = self.rbac.authenticate_cached(token) {
            if hit.refresh {
                let (rbac, token) = (self.rbac.clone(), token.to_string());
                background(offload, "root key refresh", move || Ok(rbac.refresh_root_key(&token)?));
            }
            return Ok(hit.value?);
        }
        let cached = || self.rbac.authenticate_cached(token).map(|hit| hit.value.map_err(CallError::from));
        let (rbac, owned) = (self.rbac.clone(), token.to_string());
        self.load_once(offload, token, cached, move || Ok(rbac.authenticate(&owned)?)).await
    }
}
