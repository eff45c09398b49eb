//! The bridge to blocking (diesel) work.

use crate::error::ApiError;
use actix_web::web;

/// Runs blocking work (diesel) off the async workers. `queued` ([`Metrics::queued`],
/// taken as the work is handed over) counts its wait for a thread of the pool
/// (`keygate_blocking_wait_seconds`). Traced, the work runs in the request's span, after a
/// `blocking pool wait` span for that wait.
///
/// [`Metrics::queued`]: crate::metrics::Metrics::queued
pub async fn blocking<T, F>(queued: crate::metrics::Queued, f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    let parent = keygate_domain::trace::current_span();
    if parent.is_disabled() {
        return web::block(move || {
            queued.started();
            f()
        })
        .await
        .map_err(ApiError::internal)?;
    }
    let wait = tracing::info_span!(target: "keygate::http", parent: &parent, "blocking pool wait");
    web::block(move || {
        queued.started();
        drop(wait);
        parent.in_scope(f)
    })
    .await
    .map_err(ApiError::internal)?
}

/// Runs blocking work (a cache refresh) on the blocking pool without waiting for it; a
/// failure is logged (the entry it meant to renew expires as usual, and the request that
/// then misses reports the outage).
pub fn in_background<F>(what: &'static str, f: F)
where
    F: FnOnce() -> Result<(), ApiError> + Send + 'static,
{
    // Dropping the handle detaches the task; it still runs.
    drop(actix_web::rt::task::spawn_blocking(move || {
        if let Err(e) = f() {
            log::warn!("{what} failed: {}", e.message);
        }
    }));
}
