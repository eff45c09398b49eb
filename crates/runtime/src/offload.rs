//! How the runtime's asynchronous hot paths ([`crate::Runtime::limit`]) reach blocking work
//! (the store: diesel underneath) without knowing the caller's executor: the caller says
//! ([`Offload`]): keygate-http hands it to actix's blocking pool and counts the wait, the
//! embedded client to tokio's.

use keygate_domain::ErrorCode;
use keygate_ratelimit::StoreError;
use keygate_rbac::RbacError;
use std::sync::Arc;

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

/// A job of a [`LoadQueue`]: answers its caller through a channel of its own.
type Job = Box<dyn FnOnce() + Send>;

/// Loads of uncached keys (SQLite's: CPU, not waiting): queued in the order they came and
/// run by at most `n` drainers at once on the blocking pool, each running queued loads
/// until none is left. A load is never overtaken by one that came after it, and at most
/// `n` run at once (their thread's CPU is the cached verifications'), as with a fair
/// semaphore; but a drainer that finds more loads queued runs them without going back to
/// sleep, so loads queued together cost one hand-off to the pool and back rather than one
/// each (a thread switch each way, which on some VMs was a third of a miss's CPU).
#[derive(Debug)]
pub struct LoadQueue {
    state: parking_lot::Mutex<Queued>,
    max: usize,
}

#[derive(Default)]
struct Queued {
    jobs: std::collections::VecDeque<Job>,
    drainers: usize,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("jobs", &self.jobs.len()).field("drainers", &self.drainers).finish()
    }
}

impl LoadQueue {
    /// At most `n` loads at once (at least one).
    pub fn new(n: usize) -> Self {
        Self { state: Default::default(), max: n.max(1) }
    }

    /// Runs `f` once the loads queued before it have started, on the blocking pool through
    /// `offload`, and answers its result.
    pub(crate) async fn run<O, T, F>(self: &Arc<Self>, offload: &O, f: F) -> Result<T, CallError>
    where
        O: Offload + ?Sized,
        F: FnOnce() -> Result<T, CallError> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = futures_channel::oneshot::channel();
        let start = {
            let mut s = self.state.lock();
            s.jobs.push_back(Box::new(move || drop(tx.send(f()))));
            let start = s.drainers < self.max;
            s.drainers += usize::from(start);
            start
        };
        if start {
            let drainer = Drainer(Some(self.clone()));
            offload.spawn_blocking(Box::new(move || drainer.drain()));
        }
        rx.await.map_err(|_| CallError::Offload("the blocking work did not run to its end".into()))?
    }

    /// Loads queued or running now.
    pub fn queued(&self) -> usize {
        let s = self.state.lock();
        s.jobs.len() + s.drainers
    }
}

/// A drainer of a [`LoadQueue`], counted among its drainers until it finds the queue empty.
/// Dropped without running (the pool shut down) it gives its place back and fails the
/// queued loads if no other drainer is left to run them.
struct Drainer(Option<Arc<LoadQueue>>);

impl Drainer {
    fn drain(mut self) {
        let Some(queue) = self.0.take() else { return };
        loop {
            let job = {
                let mut s = queue.state.lock();
                match s.jobs.pop_front() {
                    Some(job) => job,
                    None => {
                        s.drainers -= 1;
                        return;
                    }
                }
            };
            // A load that panics fails its own call (its answer's sender is dropped), not
            // the drainer: the loads queued after it still run.
            drop(std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)));
        }
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        if let Some(queue) = self.0.take() {
            let orphans = {
                let mut s = queue.state.lock();
                s.drainers -= 1;
                match s.drainers {
                    0 => std::mem::take(&mut s.jobs),
                    _ => Default::default(),
                }
            };
            drop(orphans);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Runs each job on a thread of its own.
    struct Threads;
    impl Offload for Threads {
        fn spawn_blocking(&self, job: Box<dyn FnOnce() + Send>) {
            std::thread::spawn(job);
        }
    }

    /// A pool that has shut down: drops every job unrun.
    struct ShutDown;
    impl Offload for ShutDown {
        fn spawn_blocking(&self, job: Box<dyn FnOnce() + Send>) {
            drop(job);
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(f)
    }

    /// `n` loads through `queue`, each noting its start and how many ran with it.
    fn loads(queue: &Arc<LoadQueue>, n: usize) -> (Vec<Result<usize, CallError>>, Vec<usize>, usize) {
        let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let started = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let calls = (0..n).map(|i| {
            let (running, peak, started) = (running.clone(), peak.clone(), started.clone());
            queue.run(&Threads, move || {
                peak.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                started.lock().push(i);
                std::thread::sleep(std::time::Duration::from_millis(1));
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(i)
            })
        });
        let answers = block_on(futures_util::future::join_all(calls));
        let started = started.lock().clone();
        (answers, started, peak.load(Ordering::SeqCst))
    }

    #[test]
    fn loads_run_in_the_order_they_came_at_most_n_at_once() {
        let (answers, started, peak) = loads(&Arc::new(LoadQueue::new(1)), 20);
        assert_eq!(answers.into_iter().map(Result::unwrap).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());
        assert_eq!(started, (0..20).collect::<Vec<_>>(), "one at a time: in the order they came");
        assert_eq!(peak, 1);
        let (answers, started, peak) = loads(&Arc::new(LoadQueue::new(3)), 30);
        assert!(answers.iter().enumerate().all(|(i, a)| matches!(a, Ok(n) if *n == i)));
        assert_eq!(started.len(), 30);
        assert!(peak <= 3, "{peak} loads at once");
    }

    #[test]
    fn a_load_that_panics_fails_its_own_call_only() {
        let queue = Arc::new(LoadQueue::new(1));
        let calls = (0..3).map(|i| {
            queue.run(&Threads, move || match i {
                1 => panic!("a load that panics"),
                _ => Ok(i),
            })
        });
        let answers = block_on(futures_util::future::join_all(calls));
        assert!(matches!(answers[0], Ok(0)));
        assert!(matches!(answers[1], Err(CallError::Offload(_))), "{:?}", answers[1]);
        assert!(matches!(answers[2], Ok(2)), "the loads after it still run");
    }

    #[test]
    fn loads_a_shut_down_pool_drops_fail_and_leave_the_queue_usable() {
        let queue = Arc::new(LoadQueue::new(1));
        let answer = block_on(queue.run(&ShutDown, || Ok(1)));
        assert!(matches!(answer, Err(CallError::Offload(_))), "{answer:?}");
        assert_eq!(queue.queued(), 0, "its place is given back");
        assert!(matches!(block_on(queue.run(&Threads, || Ok(2))), Ok(2)));
    }
}
