//! The rows ledger: each spend a statement on the key's row, committed by a writer
//! thread's group commit (several instances share the database).

use super::SpendEvents;
use crate::store::{CreditRow, CreditSpend, UsageStore, UsageTx};
use keygate_rbac::{CreditChange, RbacError, StorageError};
use std::collections::HashMap;
use std::sync::Arc;

/// The group commit of credit spends (API-v2.md §13.5): verifications queue their spends,
/// and one writer thread takes every spend waiting at that moment, runs them in one
/// transaction ([`spend_on_rows`]: the keys' rows locked and read in one statement, written
/// in one), commits, then answers each. No verification answers before its spend is committed, and
/// none pays a transaction of its own: the batch grows with the load.
///
/// The counter is the key's row, so spends on every instance, `updateCredits` and
/// `updateKey` serialize on it (none is lost), a restart finds every committed spend, and
/// nothing needs reloading after a change. The rows are locked in key-id order
/// (PostgreSQL writers of several instances then never wait on each other in a cycle).
#[derive(Debug, Default)]
pub(crate) struct CreditQueue {
    waiting: Batches<QueuedSpend>,
    /// Whether the writer thread started.
    writer: std::sync::OnceLock<bool>,
    /// Told of the counters each batch writes.
    events: std::sync::OnceLock<SpendEvents>,
}

#[derive(Debug)]
struct QueuedSpend {
    key_id: String,
    cost: u64,
    refill_at: Option<i64>,
    queued: std::time::Instant,
    reply: tokio::sync::oneshot::Sender<Result<CreditSpend, StorageError>>,
}

impl CreditQueue {
    /// A queue whose batches tell `events` of the counters they write.
    pub(crate) fn with_events(events: SpendEvents) -> Self {
        let queue = Self::default();
        queue.set_events(events);
        queue
    }

    /// Sets what the batches tell of the counters they write (once).
    pub(crate) fn set_events(&self, events: SpendEvents) {
        let _ = self.events.set(events);
    }

    /// Queues a spend; the answer comes once it is committed.
    pub(crate) fn spend<S: UsageStore + 'static>(
        self: &Arc<Self>,
        store: &Arc<S>,
        key_id: &str,
        cost: u64,
        refill_at: Option<i64>,
    ) -> tokio::sync::oneshot::Receiver<Result<CreditSpend, StorageError>> {
        let started = self.writer.get() == Some(&true) || {
            let (queue, store) = (Arc::downgrade(self), store.clone());
            start_writer(&self.writer, move || write_spends(&queue, &*store))
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        if !started {
            let _ = reply.send(Err(no_writer()));
            return answer;
        }
        let spend = QueuedSpend {
            key_id: key_id.to_string(),
            cost,
            refill_at,
            queued: std::time::Instant::now(),
            reply,
        };
        self.waiting.push(spend);
        answer
    }
}

/// Starts a service's writer thread once (`started`: whether it runs); a writer that could
/// not start answers every spend 503 rather than leaving it waiting.
pub(crate) fn start_writer(started: &std::sync::OnceLock<bool>, run: impl FnOnce() + Send + 'static) -> bool {
    *started.get_or_init(|| match std::thread::Builder::new().name("keygate-credits".into()).spawn(run) {
        Ok(_) => true,
        Err(e) => {
            log::error!("the credit writer thread did not start: {e}");
            false
        }
    })
}

pub(crate) fn no_writer() -> StorageError {
    StorageError::Unavailable("the credit writer thread did not start".into())
}

/// What the queue's batches tell of the counters they write.
fn q_events(queue: &std::sync::Weak<CreditQueue>) -> Option<SpendEvents> {
    queue.upgrade().and_then(|q| q.events.get().cloned())
}

/// The writer: while the service lives, commits whatever waits, one transaction at a time.
fn write_spends<S: UsageStore>(queue: &std::sync::Weak<CreditQueue>, store: &S) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let batch = q.waiting.take();
        drop(q);
        if batch.is_empty() {
            continue;
        }
        let done = store.usage_transaction(|tx| spend_on_rows(tx, &batch, q_events(queue).as_ref()));
        metrics::counter!("keygate_credit_commits_total").increment(1);
        metrics::histogram!("keygate_credit_commit_batch_size").record(batch.len() as f64);
        match done {
            Ok(results) => {
                for (s, r) in batch.into_iter().zip(results) {
                    metrics::histogram!("keygate_credit_wait_seconds")
                        .record(s.queued.elapsed().as_secs_f64());
                    let _ = s.reply.send(Ok(r));
                }
            }
            Err(e) => {
                log::warn!("credit spends not committed ({} answered 503): {e}", batch.len());
                let e = match e {
                    RbacError::Storage(e) => e,
                    other => StorageError::Internal(other.to_string()),
                };
                for s in batch {
                    let _ = s.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// A batch of spends on the keys' rows, in one transaction: the rows read and locked in
/// one statement, each spend decided in arrival order (a due refill first, as
/// [`crate::refill::refill_at`] says), the changed counters written in one statement
/// (PostgreSQL; SQLite: one per key).
fn spend_on_rows(
    tx: &mut dyn UsageTx,
    batch: &[QueuedSpend],
    events: Option<&SpendEvents>,
) -> Result<Vec<CreditSpend>, RbacError> {
    let mut ids: Vec<&str> = batch.iter().map(|s| s.key_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let locked = tx.lock_key_credits(&ids)?;
    let before: HashMap<String, (Option<u64>, Option<i64>)> =
        locked.iter().map(|r| (r.key_id.clone(), (r.remaining, r.last_refill_at))).collect();
    let mut rows: HashMap<String, (CreditRow, bool)> =
        locked.into_iter().map(|r| (r.key_id.clone(), (r, false))).collect();
    let mut results = Vec::with_capacity(batch.len());
    for s in batch {
        let Some((row, changed)) = rows.get_mut(&s.key_id) else {
            results.push(CreditSpend { paid: false, remaining: None });
            continue;
        };
        let Some(mut remaining) = row.remaining else {
            results.push(CreditSpend { paid: false, remaining: None });
            continue;
        };
        if let (Some(at), Some(amount)) = (s.refill_at, row.refill_amount)
            && let Some((to, at)) = crate::refill::refill_at(row.last_refill_at, row.created_at, amount, at)
        {
            remaining = to;
            row.last_refill_at = Some(at);
            *changed = true;
        }
        let paid = remaining > 0 && remaining >= s.cost;
        if paid && s.cost > 0 {
            remaining -= s.cost;
            *changed = true;
        }
        row.remaining = Some(remaining);
        results.push(CreditSpend { paid, remaining: Some(remaining) });
    }
    let writes: Vec<(&str, u64, Option<i64>)> = rows
        .values()
        .filter(|(_, changed)| *changed)
        .filter_map(|(r, _)| r.remaining.map(|n| (r.key_id.as_str(), n, r.last_refill_at)))
        .collect();
    if !writes.is_empty() {
        tx.write_key_credits(&writes)?;
        if let Some(events) = events {
            let changes: Vec<CreditChange<'_>> = writes
                .iter()
                .filter_map(|(id, remaining, at)| {
                    let (was, was_at) = before.get(*id)?;
                    Some(CreditChange::of(id, ((*was)?, *was_at), (*remaining, *at)))
                })
                .collect();
            events.written(tx, &changes)?;
        }
    }
    Ok(results)
}

/// The queue between verifications and a writer thread. After a batch the writer waits
/// [`GATHER`] before it takes the next, so that the requests that arrive meanwhile share
/// one commit (on a machine whose worker and writer share a core, the writer would
/// otherwise wake at every request and commit batches of one); after an idle spell it
/// takes the first request at once. Pushers wake the writer
/// only when it sleeps: no system call per request under load.
#[derive(Debug)]
struct Batches<T> {
    waiting: parking_lot::Mutex<Vec<T>>,
    wake: parking_lot::Condvar,
    /// The writer sleeps on `wake` (with nothing waiting).
    idle: std::sync::atomic::AtomicBool,
    /// The writer's last batch was not empty.
    busy: std::sync::atomic::AtomicBool,
}

/// How long a writer under load lets requests gather before it commits them.
const GATHER: std::time::Duration = std::time::Duration::from_micros(250);

impl<T> Default for Batches<T> {
    fn default() -> Self {
        Self {
            waiting: parking_lot::Mutex::new(Vec::new()),
            wake: parking_lot::Condvar::new(),
            idle: std::sync::atomic::AtomicBool::new(false),
            busy: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<T> Batches<T> {
    fn push(&self, item: T) {
        self.push_with(|| item);
    }

    /// Pushes what `make` makes, under the queue's lock (its order is the queue's).
    fn push_with(&self, make: impl FnOnce() -> T) {
        self.waiting.lock().push(make());
        if self.idle.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }

    /// The next batch (empty after half a second with nothing: the caller checks whether
    /// to go on).
    fn take(&self) -> Vec<T> {
        if self.busy.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(GATHER);
        }
        let mut waiting = self.waiting.lock();
        if waiting.is_empty() {
            self.idle.store(true, std::sync::atomic::Ordering::Release);
            self.wake.wait_for(&mut waiting, std::time::Duration::from_millis(500));
            self.idle.store(false, std::sync::atomic::Ordering::Release);
        }
        let batch = std::mem::take(&mut *waiting);
        drop(waiting);
        self.busy.store(!batch.is_empty(), std::sync::atomic::Ordering::Release);
        batch
    }
}
