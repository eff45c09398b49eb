//! The bridge to blocking (diesel) work.

use crate::error::ApiError;
use crate::state::AppState;
use actix_web::web;
use keygate_runtime::Offload;

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
    run(queued, f).await.map_err(ApiError::internal)?
}

/// [`blocking`] whatever `f` answers; `Err` when it did not run to its end. Handed to the
/// pool now, as this is called (not when the answer is first awaited).
fn run<R, F>(
    queued: crate::metrics::Queued,
    f: F,
) -> impl std::future::Future<Output = Result<R, actix_web::error::BlockingError>>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let parent = keygate_domain::trace::current_span();
    // A disabled span (no tracing, or not sampled) is neither made nor entered.
    let wait = (!parent.is_disabled())
        .then(|| tracing::info_span!(target: "keygate::http", parent: &parent, "blocking pool wait"));
    web::block(move || {
        queued.started();
        drop(wait);
        match parent.is_disabled() {
            true => f(),
            false => parent.in_scope(f),
        }
    })
}

/// The runtime's hot paths ([`keygate_runtime::Runtime::limit`]) reach the store through
/// actix's blocking pool, their wait counted and traced as the handlers' (`blocking`);
/// their background refreshes too.
impl Offload for AppState {
    fn spawn_blocking(&self, job: Box<dyn FnOnce() + Send>) {
        // Detached: the runtime awaits the job's answer, not the handle.
        drop(run(self.metrics.queued(), job));
    }
}
