//! The memory ledger: counters in memory, written to the database by a group commit that
//! the waiting verifications lead themselves (one process owns the database).

pub(crate) use super::counter::Counter;
pub(super) use super::counter::CounterValue;
use super::journaling::Journaling;
use super::{SpendAsk, Spent, rows::CreditQueue, storage};
use crate::store::{CreditSpend, UsageStore};
use keygate_rbac::StorageError;
use std::collections::HashMap;
use std::sync::Arc;

/// How the memory ledger's write of a spend went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    Yes,
    /// The row was not as this process last saw it (another process on the database
    /// changed it): nothing written; spend on the row instead.
    Conflict,
}

/// A paid spend's commit: its answer, and the spend again on the row for a conflict.
pub(crate) struct Commit {
    pub(crate) reply: tokio::sync::oneshot::Receiver<Result<Committed, StorageError>>,
    pub(crate) retry: Retry,
    /// Whose leader commits it.
    pub(crate) ledger: Arc<MemoryLedger>,
    /// Its write's sequence number.
    pub(crate) seq: u64,
}

impl Commit {
    /// The commit's answer, blocking (leading the commits up to it if need be).
    pub(crate) fn wait(self) -> (Result<Result<Committed, StorageError>, RecvError>, Retry) {
        self.ledger.commit_up_to(self.seq);
        (self.reply.blocking_recv(), self.retry)
    }

    /// The commit's answer, awaited: the tasks ready on this thread run first (the
    /// verifications among them queue their writes), then this one leads the batch
    /// unless another leads, and waits for its answer.
    pub(crate) fn committing(self) -> (Committing, Retry) {
        (Committing { reply: self.reply, ledger: self.ledger, yielded: false }, self.retry)
    }
}

type RecvError = tokio::sync::oneshot::error::RecvError;

/// See [`Commit::committing`].
pub(crate) struct Committing {
    reply: tokio::sync::oneshot::Receiver<Result<Committed, StorageError>>,
    ledger: Arc<MemoryLedger>,
    yielded: bool,
}

impl std::future::Future for Committing {
    type Output = Result<Result<Committed, StorageError>, RecvError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = &mut *self;
        if !this.yielded {
            // To the back of the thread's queue, once.
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            if let Poll::Ready(answer) = std::pin::Pin::new(&mut this.reply).poll(cx) {
                return Poll::Ready(answer);
            }
            // Woken by the answer, or to lead the next batch if one waits after the current
            // leader's (registered before trying to lead: a leader that passes on after this
            // try sees it).
            this.ledger.followers.lock().push(cx.waker().clone());
            if !this.ledger.lead() {
                return Poll::Pending;
            }
        }
    }
}

/// The spend again, on the key's row (after a [`Committed::Conflict`]).
pub(crate) struct Retry {
    counter: Arc<Counter>,
    cost: u64,
    refill_at: Option<i64>,
    ledger: Arc<MemoryLedger>,
}

impl Retry {
    pub(crate) fn spend(self) -> tokio::sync::oneshot::Receiver<Result<CreditSpend, StorageError>> {
        match self.ledger.retrier.get() {
            Some(spend) => spend(&self.counter.key_id, self.cost, self.refill_at),
            // Set with the committer, before any write is queued.
            None => {
                let (reply, answer) = tokio::sync::oneshot::channel();
                let _ = reply.send(Err(StorageError::Internal("no credit retrier".into())));
                answer
            }
        }
    }
}

/// Credit counters in memory (API-v2.md §13.5, the embedded mode): a verification decides
/// on the key's counter under its lock, and a paid spend is answered once it is committed.
/// With the credit journal ([`Journaling::append`]), a spend is committed as it is
/// decided: its record appended under the counter's lock. Without it (no database file,
/// or another process spends on the file too), the commit is a group commit to the rows
/// without a thread of its own: a verification waiting for
/// its commit lets the other requests its thread has in hand decide theirs first, then
/// the first waiter to find no commit running leads: it takes every counter value waiting
/// at that moment, writes each key's last one (its `remaining` and `lastRefillAt`,
/// absolute) in one transaction, answers them all and goes on while values wait; the
/// others wait for their answer. A counter is read from the database on first use, and
/// again after any other change to the key's credits, which waits for the key's spends to
/// be committed first ([`Self::hold`]).
pub(crate) struct MemoryLedger {
    shards: Box<[CounterShard]>,
    /// Spends on the row, after a conflict.
    rows: Arc<CreditQueue>,
    hasher: std::collections::hash_map::RandomState,
    waiting: parking_lot::Mutex<Vec<CounterWrite>>,
    /// Held by the verification that commits (the leader).
    leader: parking_lot::Mutex<()>,
    /// The verifications waiting for a leader's batch, to wake if writes are left after it.
    followers: parking_lot::Mutex<Vec<std::task::Waker>>,
    /// Commits a batch (set by the first spend, which knows the store).
    committer: std::sync::OnceLock<Committer>,
    /// Spends on the row after a conflict (set with `committer`).
    retrier: std::sync::OnceLock<Retrier>,
    /// The sequence number of the last write queued, and of the last committed (or failed).
    pub(super) queued: std::sync::atomic::AtomicU64,
    pub(super) committed: std::sync::atomic::AtomicU64,
    /// The credit journal and the counters waiting to be folded into the rows.
    pub(super) journaling: Journaling,
    /// Folds the journaled counters into the rows (set with `committer`).
    pub(super) folder: std::sync::OnceLock<Folder>,
}

pub(super) type Folder = Box<dyn Fn(&MemoryLedger) + Send + Sync>;
pub(super) type Committer = Box<dyn Fn(&MemoryLedger, Vec<CounterWrite>) + Send + Sync>;
type Retrier = Box<
    dyn Fn(&str, u64, Option<i64>) -> tokio::sync::oneshot::Receiver<Result<CreditSpend, StorageError>>
        + Send
        + Sync,
>;

impl std::fmt::Debug for MemoryLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLedger")
            .field("queued", &self.queued)
            .field("committed", &self.committed)
            .finish_non_exhaustive()
    }
}

/// Counters by key id.
type CounterShard = parking_lot::Mutex<HashMap<String, Arc<Counter>>>;

#[derive(Debug)]
pub(super) struct CounterWrite {
    /// The counter after the spend.
    pub(super) value: CounterValue,
    pub(super) seq: u64,
    pub(super) counter: Arc<Counter>,
    pub(super) queued: std::time::Instant,
    pub(super) reply: Option<tokio::sync::oneshot::Sender<Result<Committed, StorageError>>>,
}

impl Default for MemoryLedger {
    fn default() -> Self {
        Self {
            shards: (0..64).map(|_| Default::default()).collect(),
            rows: Arc::default(),
            hasher: Default::default(),
            waiting: Default::default(),
            leader: Default::default(),
            followers: Default::default(),
            committer: Default::default(),
            retrier: Default::default(),
            queued: Default::default(),
            committed: Default::default(),
            journaling: Default::default(),
            folder: Default::default(),
        }
    }
}

impl MemoryLedger {
    /// What the inner rows queue (spends on the rows while another process owns the
    /// journal) tells of the counters it writes.
    pub(super) fn set_row_events(&self, events: super::SpendEvents) {
        self.rows.set_events(events);
    }

    /// The ledger of `store`'s keys: `journaling` its credit journal's side, `committer`
    /// and `folder` what commits a batch and folds the journal ([`super::fold`] wires them).
    pub(super) fn new<S: UsageStore + 'static>(
        store: &Arc<S>,
        journaling: Journaling,
        committer: Committer,
        folder: Folder,
    ) -> Arc<Self> {
        let mut ledger = Self::default();
        ledger.journaling = journaling;
        let ledger = Arc::new(ledger);
        let (rows, row_store) = (ledger.rows.clone(), store.clone());
        let _ = ledger
            .retrier
            .set(Box::new(move |key_id, cost, refill_at| rows.spend(&row_store, key_id, cost, refill_at)));
        let _ = ledger.committer.set(committer);
        let _ = ledger.folder.set(folder);
        ledger
    }

    /// Runs `f` while no batch is committed (holding the leader's lock, passed on after).
    pub(super) fn between_batches(&self, f: impl FnOnce()) {
        self.as_leader(self.leader.lock(), f)
    }

    /// Runs `f` holding the leader's lock (`leading`), then lets it go and passes the lead
    /// on ([`Self::pass_on`]): every holder does, or a waiter that found the lock taken
    /// while it was held would wait for a leader that never comes.
    fn as_leader<T>(&self, leading: parking_lot::MutexGuard<'_, ()>, f: impl FnOnce() -> T) -> T {
        let out = f();
        drop(leading);
        self.pass_on();
        out
    }

    /// The shard that holds `key_id`'s counter.
    fn shard(&self, key_id: &str) -> &CounterShard {
        use std::hash::BuildHasher;
        &self.shards[self.hasher.hash_one(key_id) as usize % self.shards.len()]
    }

    /// The counter of `key_id`, where this process has one.
    pub(super) fn find(&self, key_id: &str) -> Option<Arc<Counter>> {
        self.shard(key_id).lock().get(key_id).cloned()
    }

    pub(crate) fn counter(&self, key_id: &str) -> Arc<Counter> {
        let mut shard = self.shard(key_id).lock();
        match shard.get(key_id) {
            Some(c) => c.clone(),
            None => shard.entry(key_id.to_string()).or_insert_with(|| Arc::new(Counter::new(key_id))).clone(),
        }
    }

    pub(crate) fn spend<S: UsageStore + 'static>(
        self: &Arc<Self>,
        store: &Arc<S>,
        ask: SpendAsk<'_>,
        counter: &Arc<Counter>,
        refill_at: Option<i64>,
    ) -> Result<Spent, StorageError> {
        let SpendAsk { key, cost, may_wait, tag, .. } = ask;
        let mut state = match may_wait {
            true => counter.state.lock(),
            false => match counter.state.try_lock() {
                Some(s) => s,
                None => return Ok(Spent::NeedsLoad),
            },
        };
        if counter.stale.load(std::sync::atomic::Ordering::Acquire) {
            if !may_wait {
                return Ok(Spent::NeedsLoad);
            }
            self.flush(state.pending);
            counter.stale.store(false, std::sync::atomic::Ordering::Release);
            state.value = None;
        }
        let value = match state.value {
            Some(v) if state.tag == Some(tag) => v,
            _ if !may_wait => return Ok(Spent::NeedsLoad),
            _ => {
                // Another process that owns the credit journal spends on the rows first.
                self.journaling.join(&**store);
                // Every write of this process is in the database before it is read.
                self.flush(state.pending);
                let row =
                    store.usage_read(|tx| Ok(tx.get_key(key.workspace_id(), key.id())?)).map_err(storage)?;
                let v = row.and_then(|k| k.credits).map(|c| CounterValue {
                    remaining: c.remaining,
                    last_refill_at: c.refill.and_then(|r| r.last_refill_at),
                });
                *counter.stored.lock() = v;
                state.value = Some(v);
                state.tag = Some(tag);
                v
            }
        };
        let Some(mut value) = value else { return Ok(Spent::Unlimited { limits: Vec::new() }) };
        let before = value;
        let mut changed = false;
        if let (Some(kc), Some(at)) = (key.credits(), refill_at)
            && let Some(r) = kc.credits.refill.as_ref()
            && let Some((to, at)) =
                crate::refill::refill_at(value.last_refill_at, kc.created_at, r.amount, at)
        {
            value = CounterValue { remaining: to, last_refill_at: Some(at) };
            changed = true;
        }
        let paid = value.remaining > 0 && value.remaining >= cost;
        if paid {
            value.remaining -= cost;
            changed |= cost > 0;
        }
        state.value = Some(Some(value));
        let journaled = changed
            .then(|| {
                self.journaling.append((&self.queued, &self.committed), counter, key.id(), before, value)
            })
            .flatten();
        let commit = match (changed, journaled) {
            (false, _) => None,
            // In the journal: answered now.
            (true, Some(seq)) => {
                state.pending = seq;
                None
            }
            (true, None) => {
                // Queued under the counter's lock: the queue holds each key's values in order.
                let (reply, commit) = match paid {
                    true => {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        (Some(tx), Some(rx))
                    }
                    // A refill alone: written, nobody waits (a lost one is applied again).
                    false => (None, None),
                };
                state.pending = self.queue(CounterWrite {
                    value,
                    seq: 0,
                    counter: counter.clone(),
                    queued: std::time::Instant::now(),
                    reply,
                });
                commit
            }
        };
        let state_pending = state.pending;
        drop(state);
        let commit = commit.map(|reply| {
            let retry = Retry { counter: counter.clone(), cost, refill_at, ledger: self.clone() };
            Commit { reply, retry, ledger: self.clone(), seq: state_pending }
        });
        Ok(Spent::Decided { paid, remaining: value.remaining, commit, limits: Vec::new() })
    }

    fn queue(&self, mut write: CounterWrite) -> u64 {
        let mut waiting = self.waiting.lock();
        let seq = self.queued.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
        write.seq = seq;
        waiting.push(write);
        seq
    }

    /// Commits one batch of what waits, as the leader, unless another thread leads:
    /// whether this caller led. One batch, then the lead passes on (to a waiter
    /// [`Self::followers`] names): no thread commits for the others for long.
    fn lead(&self) -> bool {
        let Some(leading) = self.leader.try_lock() else { return false };
        self.as_leader(leading, || self.commit_waiting());
        true
    }

    /// After a leader's batch: the waiters are woken to lead the next if writes wait.
    fn pass_on(&self) {
        let followers = std::mem::take(&mut *self.followers.lock());
        if !self.waiting.lock().is_empty() {
            followers.into_iter().for_each(std::task::Waker::wake);
        }
    }

    /// Commits one batch of what waits: whether there was one.
    fn commit_waiting(&self) -> bool {
        let batch = std::mem::take(&mut *self.waiting.lock());
        if batch.is_empty() {
            return false;
        }
        match self.committer.get() {
            Some(commit) => commit(self, batch),
            // Nothing is queued before the committer is set.
            None => drop(batch),
        }
        true
    }

    /// Blocks until every write up to `seq` is committed (or failed), leading if need be:
    /// to the rows (a journaled write is committed as it is appended).
    fn commit_up_to(&self, seq: u64) {
        while self.committed.load(std::sync::atomic::Ordering::Acquire) < seq {
            self.as_leader(self.leader.lock(), || self.commit_waiting());
        }
    }

    /// Blocks until every write up to `seq` is in the rows: committed, and the journaled
    /// counters folded.
    pub(crate) fn flush(&self, seq: u64) {
        self.commit_up_to(seq);
        if self.journaling.unfolded(seq)
            && let Some(fold) = self.folder.get()
        {
            fold(self);
        }
    }

    pub(crate) fn hold<T>(&self, key_id: &str, write: impl FnOnce() -> T) -> T {
        let counter = self.counter(key_id);
        let mut state = counter.state.lock();
        self.flush(state.pending);
        // The key's journaled spends are void from here (its row is written otherwise).
        self.journaling.reset(self.queued.load(std::sync::atomic::Ordering::Acquire), key_id);
        let out = write();
        state.value = None;
        out
    }
}

/// A ledger dropped (its service stops) folds what its journal holds ahead of the rows.
impl Drop for MemoryLedger {
    fn drop(&mut self) {
        if let Some(fold) = self.folder.get() {
            fold(self);
            self.journaling.empty_if_folded();
        }
    }
}

/// The memory ledger's commit of a batch: each key's last value written in one
/// transaction, then every spend answered.
pub(super) fn commit_counters<S: UsageStore>(
    l: &MemoryLedger,
    store: &S,
    batch: Vec<CounterWrite>,
    events: &super::SpendEvents,
) {
    {
        let Some(last_seq) = batch.last().map(|w| w.seq) else { return };
        // Each key's last value (the queue holds them in each key's order), written where
        // the row is still what this process last saw.
        let mut last: HashMap<&str, (usize, CounterValue)> = HashMap::with_capacity(batch.len());
        for (i, w) in batch.iter().enumerate() {
            last.insert(&*w.counter.key_id, (i, w.value));
        }
        let done = store.usage_transaction(|tx| {
            let mut conflicts = Vec::new();
            let mut changes = Vec::new();
            for (key_id, (i, v)) in &last {
                let expected = *batch[*i].counter.stored.lock();
                let written = match expected {
                    Some(e) => tx.set_key_credit_counter(
                        key_id,
                        (e.remaining, e.last_refill_at),
                        v.remaining,
                        v.last_refill_at,
                    )?,
                    None => false,
                };
                if !written {
                    conflicts.push(*key_id);
                } else if let Some(e) = expected.filter(|_| events.on()) {
                    changes.push(keygate_rbac::CreditChange::of(
                        key_id,
                        (e.remaining, e.last_refill_at),
                        (v.remaining, v.last_refill_at),
                    ));
                }
            }
            events.written(tx, &changes)?;
            Ok(conflicts.into_iter().map(str::to_string).collect::<Vec<String>>())
        });
        metrics::counter!("keygate_credit_commits_total").increment(1);
        metrics::histogram!("keygate_credit_commit_batch_size").record(batch.len() as f64);
        let (conflicts, failed) = match done {
            Ok(c) => (c, None),
            Err(e) => (Vec::new(), Some(storage(e))),
        };
        if let Some(e) = &failed {
            log::warn!("credit spends not committed ({} answered 503): {e}", batch.len());
        }
        if failed.is_none() {
            for (key_id, (i, v)) in &last {
                if !conflicts.iter().any(|c| c == key_id) {
                    *batch[*i].counter.stored.lock() = Some(*v);
                }
            }
        }
        drop(last);
        let (wait, committed_at) =
            (metrics::histogram!("keygate_credit_wait_seconds"), std::time::Instant::now());
        for w in batch {
            let conflict = conflicts.iter().any(|c| **c == *w.counter.key_id);
            if failed.is_some() || conflict {
                w.counter.stale.store(true, std::sync::atomic::Ordering::Release);
            }
            if let Some(reply) = w.reply {
                wait.record(committed_at.duration_since(w.queued).as_secs_f64());
                let answer = match (&failed, conflict) {
                    (Some(e), _) => Err(e.clone()),
                    (None, true) => Ok(Committed::Conflict),
                    (None, false) => Ok(Committed::Yes),
                };
                let _ = reply.send(answer);
            }
        }
        l.committed.fetch_max(last_seq, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::task::{Context, Poll, Wake, Waker};

    /// A waker that says on a channel that it was woken.
    struct Woken(parking_lot::Mutex<mpsc::Sender<()>>);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().send(());
        }
    }

    /// A verification that found the leader's lock held by the fold thread stepping aside
    /// (between two batches) is woken when it is let go, and leads its own batch: no
    /// answer waits for a leader that never comes (the hang of a 3-instance run).
    #[test]
    fn a_waiter_that_found_the_lead_taken_between_batches_is_woken_to_lead() {
        let ledger = Arc::new(MemoryLedger::default());
        let _ = ledger.committer.set(Box::new(|l: &MemoryLedger, batch: Vec<CounterWrite>| {
            let last = batch.last().map_or(0, |w| w.seq);
            for w in batch {
                let _ = w.reply.map(|r| r.send(Ok(Committed::Yes)));
            }
            l.committed.store(last, std::sync::atomic::Ordering::Release);
        }));
        let counter = ledger.counter("key_a");
        let (reply, answer) = tokio::sync::oneshot::channel();
        let value = CounterValue { remaining: 9, last_refill_at: None };
        let seq = ledger.queue(CounterWrite {
            value,
            seq: 0,
            counter: counter.clone(),
            queued: std::time::Instant::now(),
            reply: Some(reply),
        });
        let retry = Retry { counter, cost: 1, refill_at: None, ledger: ledger.clone() };
        let (mut committing, _retry) =
            Commit { reply: answer, retry, ledger: ledger.clone(), seq }.committing();
        let (woke, woken) = mpsc::channel();
        let waker = Waker::from(Arc::new(Woken(parking_lot::Mutex::new(woke))));
        let mut cx = Context::from_waker(&waker);
        let mut poll = |cx: &mut Context<'_>| std::pin::Pin::new(&mut committing).poll(cx);
        assert!(poll(&mut cx).is_pending(), "the first poll yields");
        woken.recv().unwrap();
        let ((holds, held), (release, released)) = (mpsc::channel(), mpsc::channel::<()>());
        std::thread::scope(|scope| {
            let ledger = &ledger;
            scope.spawn(move || {
                ledger.between_batches(|| {
                    holds.send(()).unwrap();
                    released.recv().unwrap();
                })
            });
            held.recv().unwrap();
            assert!(poll(&mut cx).is_pending(), "the lead is taken: it waits");
            release.send(()).unwrap();
        });
        woken.recv_timeout(std::time::Duration::from_secs(10)).expect("woken once the lead is let go");
        match poll(&mut cx) {
            Poll::Ready(Ok(Ok(Committed::Yes))) => {}
            other => panic!("its batch committed by itself: {other:?}"),
        }
    }
}
