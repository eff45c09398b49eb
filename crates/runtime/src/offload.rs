//! How the runtime's asynchronous hot paths ([`crate::Runtime::limit`]) reach blocking work
//! (the store: diesel underneath) without knowing the caller's executor: the caller says
//! ([`Offload`]): keygate-http hands it to actix's blocking pool and counts the wait, the
//! embedded client to tokio's.

use keygate_domain::ErrorCode;
use keygate_ratelimit::StoreError;
use keygate_rbac::RbacError;

/// Runs blocking work off the async side, as the caller's executor does it.
pub trait Offload: Sync {
    /// Runs `job` on a blocking pool. A job dropped unrun (the pool shut down) or one that
    /// panics fails its call with [`CallError::Offload`].
    fn spawn_blocking(&self, job: Box<dyn FnOnce() + Send>);
}

/// Runs `f` through `offload` and answers its result.
pub(crate) async fn blocking<O, T, F>(offload: &O, f: F) -> Result<T, CallError>
where
    O: Offload + ?Sized,
    F: FnOnce() -> Result<T, CallError> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = futures_channel::oneshot::channel();
    offload.spawn_blocking(Box::new(move || drop(tx.send(f()))));
    rx.await.map_err(|_| CallError::Offload("the blocking work did not run to its end".into()))?
}

/// Runs `f` through `offload` without waiting for it (a cache refresh); a failure is only
/// logged (the entry it meant to renew expires as usual, and the request that then misses
/// reports the outage).
pub(crate) fn background<O, F>(offload: &O, what: &'static str, f: F)
where
    O: Offload + ?Sized,
    F: FnOnce() -> Result<(), CallError> + Send + 'static,
{
    offload.spawn_blocking(Box::new(move || {
        if let Err(e) = f() {
            log::warn!("{what} failed: {e}");
        }
    }));
}

/// Why a hot path's call failed; nothing was decided or counted.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The service refused (unknown namespace, missing permission, a revoked root key...)
    /// or its store failed.
    #[error(transparent)]
    Rbac(#[from] RbacError),
    /// The rate-limit store failed (unreachable, or a multi-limit it cannot take at once).
    #[error(transparent)]
    Limiter(#[from] StoreError),
    /// The blocking work did not run to its end.
    #[error("the work did not finish: {0}")]
    Offload(String),
}

impl CallError {
    /// The stable code (its HTTP status: [`ErrorCode::http_status`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            CallError::Rbac(e) => e.code(),
            CallError::Limiter(e) => e.code(),
            CallError::Offload(_) => ErrorCode::InternalServerError,
        }
    }
}
