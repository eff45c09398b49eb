//! Credits (API-v2.md §12.1, §12.4): a key's remaining uses and how they refill; the rules
//! of a credit setting, and `keys.updateCredits` on the key's counter.

use super::*;
use crate::{Credits, Refill, RefillInterval};

mod shared;
pub(crate) use shared::SharedLedger;
pub use shared::{Installed, SharedCredits, SharedRefill, SharedSpend, SharedSpendAsk};

/// What `keys.updateCredits` does with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditOp {
    /// `remaining` becomes the value (`None`: unlimited, refill cleared).
    Set,
    Increment,
    /// Floors at 0.
    Decrement,
}

/// A refill as a request gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillSpec {
    pub interval: RefillInterval,
    pub amount: u64,
    pub day: Option<u64>,
}

/// The credit setting a request asks for (`path`: the field, `credits`): `remaining`
/// `None` is unlimited, which takes no refill; `refillDay` (1–31) is monthly only; an
/// amount is at least 1.
pub fn credit_setting(
    path: &str,
    remaining: Option<u64>,
    refill: Option<RefillSpec>,
) -> Result<Option<Credits>, ValidationError> {
    let Some(remaining) = remaining else {
        return match refill {
            Some(_) => {
                Err(ValidationError::new(format!("{path}.refill"), "needs remaining credits (not null)"))
            }
            None => Ok(None),
        };
    };
    let refill = refill.map(|r| check_refill(&format!("{path}.refill"), r)).transpose()?;
    Ok(Some(Credits { remaining, refill }))
}

/// A refill's own rules.
pub fn check_refill(path: &str, r: RefillSpec) -> Result<Refill, ValidationError> {
    if r.amount < 1 {
        return Err(ValidationError::new(format!("{path}.amount"), "must be >= 1"));
    }
    let day = match (r.interval, r.day) {
        (RefillInterval::Daily, Some(_)) => {
            return Err(ValidationError::new(format!("{path}.refillDay"), "is for monthly refills only"));
        }
        (_, Some(d)) if !(1..=31).contains(&d) => {
            return Err(ValidationError::new(format!("{path}.refillDay"), "must be 1 to 31"));
        }
        (RefillInterval::Monthly, day) => Some(day.unwrap_or(1) as u8),
        (RefillInterval::Daily, None) => None,
    };
    Ok(Refill { interval: r.interval, amount: r.amount, day, last_refill_at: None })
}

impl<S: RbacStore> RbacService<S> {
    /// `keys.updateCredits`: on the key's counter in one statement, so that concurrent
    /// changes never lose one. `Set` takes a value or `None` (unlimited); `Increment` and
    /// `Decrement` need a value and a key with credits (400 otherwise). Needs `update_key`
    /// for the key's API. Answers the key's credits after (`None`: unlimited).
    pub fn update_credits(
        &self,
        p: &Principal,
        key_id: &str,
        op: CreditOp,
        value: Option<u64>,
    ) -> Result<Option<Credits>, RbacError> {
        validate_key_id("keyId", key_id)?;
        if op != CreditOp::Set && value.is_none() {
            return Err(ValidationError::new("value", "is required to increment or decrement").into());
        }
        let access = ApiAccess::of(p, "update_key").ok_or_else(|| ApiAccess::denied("update_key", None))?;
        let ws = p.workspace_id.as_str();
        self.write_holding_credits(key_id, |tx, changes| {
            let missing = || RbacError::not_found(Resource::Key, key_id);
            if !has_prefix(key_id, IdPrefix::Key) || !tx.lock_key(ws, key_id)? {
                return Err(missing());
            }
            let key = tx.get_key(ws, key_id)?.ok_or_else(missing)?;
            if !access.admits(key.api_id.as_deref()) {
                return Err(ApiAccess::denied("update_key", key.api_id.as_deref()));
            }
            changes.touch(Scope::Key(key_id));
            let after = match (op, value, key.credits) {
                (CreditOp::Set, None, _) => None,
                (CreditOp::Set, Some(n), current) => {
                    Some(Credits { remaining: n, refill: current.and_then(|c| c.refill) })
                }
                (_, _, None) => {
                    let msg = "the key has unlimited credits: set a value first (operation set)";
                    return Err(ValidationError::new("operation", msg).into());
                }
                (op, Some(v), Some(current)) => {
                    let v = i64::try_from(v).unwrap_or(i64::MAX);
                    let delta = if op == CreditOp::Increment { v } else { -v };
                    let remaining = tx.add_key_credits(key_id, delta)?.unwrap_or(0);
                    Some(Credits { remaining, refill: current.refill })
                }
                (_, None, Some(_)) => return Err(ValidationError::new("value", "is required").into()),
            };
            if op == CreditOp::Set {
                tx.set_key_credits(key_id, after.as_ref())?;
            }
            tx.insert_audit_events(&[AuditEvent {
                workspace_id: ws.to_string(),
                actor_id: p.root_key_id.clone(),
                action: "key.update_credits",
                resource_type: "key",
                resource_id: key_id.to_string(),
                key_id: Some(key_id.to_string()),
                role_id: None,
                at: self.now(),
            }])?;
            Ok(after)
        })
    }
}

impl<S: RbacStore> RbacService<S> {
    /// [`Self::write`], with the key's credit counter held still around it: a write that
    /// changes (or copies) the key's credits.
    pub(super) fn write_holding_credits<T>(
        &self,
        key_id: &str,
        f: impl FnOnce(&mut dyn RbacTx, &mut super::verify::Changes) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        self.credits.hold(&*self.store, key_id, || self.write(f))
    }

    /// Keys as the database holds them, with their live credit counters where those are
    /// ahead of the rows (the scale-out ledger writes the rows behind).
    pub(super) fn live_credits(&self, keys: &mut [&mut Key]) {
        if let CreditLedger::Shared(ledger) = &self.credits {
            ledger.overlay(keys);
        }
    }

    /// Writes the live credit counters changed since the last pass to their rows (the
    /// scale-out ledger, `credits::shared`; run about once a second by every instance, and
    /// at shutdown): how many it wrote. Nothing to do for the other ledgers, which write
    /// every spend before answering it.
    pub fn write_behind_credits(&self) -> Result<usize, RbacError> {
        match &self.credits {
            CreditLedger::Shared(ledger) => ledger.write_behind(&*self.store),
            _ => Ok(0),
        }
    }
}

/// A key's credits after an update's `credits` (`current`: before): cleared or `remaining`
/// cleared is unlimited; `remaining` set sets the counter (keeping the refill unless the
/// update names one); `refill` alone changes the refill and keeps the counter, which
/// needs credits (400 on an unlimited key).
pub(super) fn updated_credits(
    current: Option<Credits>,
    update: Patch<crate::CreditsUpdate>,
) -> Result<Option<Credits>, ValidationError> {
    let u = match update {
        Patch::Absent => return Ok(current),
        Patch::Clear => return Ok(None),
        Patch::Set(u) => u,
    };
    let remaining = match u.remaining {
        Patch::Clear => None,
        Patch::Set(n) => Some(n),
        Patch::Absent => current.as_ref().map(|c| c.remaining),
    };
    let refill = match u.refill {
        Patch::Clear => None,
        Patch::Set(r) => Some(check_refill("credits.refill", r)?),
        Patch::Absent => current.and_then(|c| c.refill),
    };
    match (remaining, refill) {
        (None, Some(_)) => Err(ValidationError::new("credits.refill", "needs remaining credits (not null)")),
        (None, None) => Ok(None),
        (Some(remaining), refill) => Ok(Some(Credits { remaining, refill })),
    }
}

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
}

#[derive(Debug)]
struct QueuedSpend {
    key_id: String,
    cost: u64,
    refill_at: Option<i64>,
    queued: std::time::Instant,
    reply: tokio::sync::oneshot::Sender<Result<crate::store::CreditSpend, StorageError>>,
}

impl CreditQueue {
    /// Queues a spend; the answer comes once it is committed.
    pub(crate) fn spend<S: RbacStore + 'static>(
        self: &Arc<Self>,
        store: &Arc<S>,
        key_id: &str,
        cost: u64,
        refill_at: Option<i64>,
    ) -> tokio::sync::oneshot::Receiver<Result<crate::store::CreditSpend, StorageError>> {
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
fn start_writer(started: &std::sync::OnceLock<bool>, run: impl FnOnce() + Send + 'static) -> bool {
    *started.get_or_init(|| match std::thread::Builder::new().name("keygate-credits".into()).spawn(run) {
        Ok(_) => true,
        Err(e) => {
            log::error!("the credit writer thread did not start: {e}");
            false
        }
    })
}

fn no_writer() -> StorageError {
    StorageError::Unavailable("the credit writer thread did not start".into())
}

/// The writer: while the service lives, commits whatever waits, one transaction at a time.
fn write_spends<S: RbacStore>(queue: &std::sync::Weak<CreditQueue>, store: &S) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let batch = q.waiting.take();
        drop(q);
        if batch.is_empty() {
            continue;
        }
        let done = store.transaction(|tx| spend_on_rows(tx, &batch));
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
    tx: &mut dyn RbacTx,
    batch: &[QueuedSpend],
) -> Result<Vec<crate::store::CreditSpend>, RbacError> {
    let mut ids: Vec<&str> = batch.iter().map(|s| s.key_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut rows: HashMap<String, (crate::store::CreditRow, bool)> =
        tx.lock_key_credits(&ids)?.into_iter().map(|r| (r.key_id.clone(), (r, false))).collect();
    let mut results = Vec::with_capacity(batch.len());
    for s in batch {
        let Some((row, changed)) = rows.get_mut(&s.key_id) else {
            results.push(crate::store::CreditSpend { paid: false, remaining: None });
            continue;
        };
        let Some(mut remaining) = row.remaining else {
            results.push(crate::store::CreditSpend { paid: false, remaining: None });
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
        results.push(crate::store::CreditSpend { paid, remaining: Some(remaining) });
    }
    let writes: Vec<(&str, u64, Option<i64>)> = rows
        .values()
        .filter(|(_, changed)| *changed)
        .filter_map(|(r, _)| r.remaining.map(|n| (r.key_id.as_str(), n, r.last_refill_at)))
        .collect();
    if !writes.is_empty() {
        tx.write_key_credits(&writes)?;
    }
    Ok(results)
}

/// Where a service keeps the credit counters that verifications spend.
#[derive(Debug)]
pub(crate) enum CreditLedger {
    /// In memory, written to the database by group commit: one process owns the database
    /// (the embedded default, with local change counters).
    Memory(Arc<MemoryLedger>),
    /// The key's row, spent by group commit: any number of instances share the database.
    Rows(Arc<CreditQueue>),
    /// In a shared store (Redis), written behind to the rows: any number of instances.
    Shared(SharedLedger),
}

/// A spend a verification asks for: `cost` of `key`'s credits, as the caller may
/// (`may_wait` false never reads the database); `tag`: the change counters the key's
/// snapshot was loaded under (a counter loaded under others is read again).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpendAsk<'a> {
    pub(crate) key: &'a Key,
    pub(crate) cost: u64,
    pub(crate) may_wait: bool,
    pub(crate) tag: crate::counters::Tag,
}

/// What a spend came to.
pub(crate) enum Spent {
    /// The key has no credits (any more): nothing to spend.
    Unlimited,
    /// Decided: `paid` or not, `remaining` after; a paid spend is answered once `commit`
    /// says it is committed, or, when `commit` says another process changed the counter,
    /// spent again on the row through `retry`.
    Decided { paid: bool, remaining: u64, commit: Option<Commit> },
    /// Decided by the writer, with the commit (the rows ledger).
    Later(tokio::sync::oneshot::Receiver<Result<crate::store::CreditSpend, StorageError>>),
    /// The counter is not in memory yet and the caller may not wait for the database.
    NeedsLoad,
}

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
        self.ledger.flush(self.seq);
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
    pub(crate) fn spend(
        self,
    ) -> tokio::sync::oneshot::Receiver<Result<crate::store::CreditSpend, StorageError>> {
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

impl std::fmt::Debug for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spent::Unlimited => f.write_str("Unlimited"),
            Spent::Decided { paid, remaining, .. } => {
                write!(f, "Decided(paid: {paid}, remaining: {remaining})")
            }
            Spent::Later(_) => f.write_str("Later"),
            Spent::NeedsLoad => f.write_str("NeedsLoad"),
        }
    }
}

impl CreditLedger {
    /// Spends what `ask` says at `now` (a due refill first).
    /// `counter`: where the caller keeps the key's counter once found (the memory ledger's).
    pub(crate) fn spend<S: RbacStore + 'static>(
        &self,
        store: &Arc<S>,
        ask: SpendAsk<'_>,
        now: i64,
        counter: &std::sync::OnceLock<Arc<Counter>>,
    ) -> Result<Spent, StorageError> {
        let (key, cost) = (ask.key, ask.cost);
        let Some(credits) = &key.credits else { return Ok(Spent::Unlimited) };
        let refill_at = credits.refill.as_ref().map(|r| crate::refill::last_boundary(r.interval, r.day, now));
        match self {
            CreditLedger::Rows(queue) => Ok(Spent::Later(queue.spend(store, &key.id, cost, refill_at))),
            // A round trip to the shared store: only where the caller may wait.
            CreditLedger::Shared(_) if !ask.may_wait => Ok(Spent::NeedsLoad),
            CreditLedger::Shared(ledger) => {
                let refill = credits.refill.as_ref().zip(refill_at).map(|(r, at)| SharedRefill {
                    at,
                    amount: r.amount,
                    since: key.created_at,
                });
                ledger.spend(&**store, key, cost, refill)
            }
            CreditLedger::Memory(ledger) => {
                let counter = counter.get_or_init(|| ledger.counter(&key.id));
                ledger.spend(store, ask, counter, refill_at)
            }
        }
    }

    /// Runs `write` (which changes `key_id`'s credits in the database) with the key's
    /// counter held still: its spends committed first, none taken meanwhile, and read
    /// from the database again after.
    pub(crate) fn hold<S: RbacStore, T>(
        &self,
        store: &S,
        key_id: &str,
        write: impl FnOnce() -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        match self {
            CreditLedger::Rows(_) => write(),
            CreditLedger::Memory(ledger) => ledger.hold(key_id, write),
            CreditLedger::Shared(ledger) => ledger.hold(store, key_id, write),
        }
    }
}

/// Credit counters in memory (API-v2.md §13.5, the embedded mode): a verification decides
/// on the key's counter under its lock, and a paid spend is answered once it is committed.
/// The commit is a group commit without a thread of its own: a verification waiting for
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
    queued: std::sync::atomic::AtomicU64,
    committed: std::sync::atomic::AtomicU64,
}

type Committer = Box<dyn Fn(&MemoryLedger, Vec<CounterWrite>) + Send + Sync>;
type Retrier = Box<
    dyn Fn(
            &str,
            u64,
            Option<i64>,
        ) -> tokio::sync::oneshot::Receiver<Result<crate::store::CreditSpend, StorageError>>
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
pub(crate) struct Counter {
    key_id: Box<str>,
    state: parking_lot::Mutex<CounterState>,
    /// A write of this counter failed or conflicted: its value is not what the database
    /// holds.
    stale: std::sync::atomic::AtomicBool,
    /// What the database holds, as far as this process knows (read, or last written):
    /// the writer's condition (apart from `state`, which [`MemoryLedger::hold`] keeps
    /// locked while it waits for the writer).
    stored: parking_lot::Mutex<Option<CounterValue>>,
}

#[derive(Debug, Default)]
struct CounterState {
    /// `None`: not read from the database yet (or again).
    value: Option<Option<CounterValue>>,
    /// The change counters of the key when it was read.
    tag: Option<crate::counters::Tag>,
    /// The sequence number of this counter's last queued write.
    pending: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CounterValue {
    remaining: u64,
    last_refill_at: Option<i64>,
}

#[derive(Debug)]
struct CounterWrite {
    value: CounterValue,
    seq: u64,
    counter: Arc<Counter>,
    queued: std::time::Instant,
    reply: Option<tokio::sync::oneshot::Sender<Result<Committed, StorageError>>>,
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
        }
    }
}

impl MemoryLedger {
    fn counter(&self, key_id: &str) -> Arc<Counter> {
        use std::hash::BuildHasher;
        let mut shard = self.shards[self.hasher.hash_one(key_id) as usize % self.shards.len()].lock();
        match shard.get(key_id) {
            Some(c) => c.clone(),
            None => shard
                .entry(key_id.to_string())
                .or_insert_with(|| {
                    Arc::new(Counter {
                        key_id: key_id.into(),
                        state: Default::default(),
                        stale: Default::default(),
                        stored: Default::default(),
                    })
                })
                .clone(),
        }
    }

    fn spend<S: RbacStore + 'static>(
        self: &Arc<Self>,
        store: &Arc<S>,
        ask: SpendAsk<'_>,
        counter: &Arc<Counter>,
        refill_at: Option<i64>,
    ) -> Result<Spent, StorageError> {
        let SpendAsk { key, cost, may_wait, tag } = ask;
        self.committer.get_or_init(|| {
            let (rows, row_store) = (self.rows.clone(), store.clone());
            let _ = self.retrier.set(Box::new(move |key_id, cost, refill_at| {
                rows.spend(&row_store, key_id, cost, refill_at)
            }));
            let store = store.clone();
            Box::new(move |ledger: &MemoryLedger, batch| commit_counters(ledger, &*store, batch))
        });
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
                // Every write of this process is in the database before it is read.
                self.flush(state.pending);
                let row = store.read(|tx| Ok(tx.get_key(&key.workspace_id, &key.id)?)).map_err(storage)?;
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
        let Some(mut value) = value else { return Ok(Spent::Unlimited) };
        let mut changed = false;
        if let (Some(r), Some(at)) = (key.credits.as_ref().and_then(|c| c.refill.as_ref()), refill_at)
            && let Some((to, at)) =
                crate::refill::refill_at(value.last_refill_at, key.created_at, r.amount, at)
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
        let commit = match changed {
            false => None,
            true => {
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
        Ok(Spent::Decided { paid, remaining: value.remaining, commit })
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
        self.commit_waiting();
        drop(leading);
        self.pass_on();
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

    /// Blocks until every write up to `seq` is committed (or failed), leading if need be.
    pub(crate) fn flush(&self, seq: u64) {
        while self.committed.load(std::sync::atomic::Ordering::Acquire) < seq {
            let leading = self.leader.lock();
            self.commit_waiting();
            drop(leading);
            self.pass_on();
        }
    }

    fn hold<T>(&self, key_id: &str, write: impl FnOnce() -> T) -> T {
        let counter = self.counter(key_id);
        let mut state = counter.state.lock();
        self.flush(state.pending);
        let out = write();
        state.value = None;
        out
    }
}

fn storage(e: RbacError) -> StorageError {
    match e {
        RbacError::Storage(e) => e,
        other => StorageError::Internal(other.to_string()),
    }
}

/// The memory ledger's commit of a batch: each key's last value written in one
/// transaction, then every spend answered.
fn commit_counters<S: RbacStore>(l: &MemoryLedger, store: &S, batch: Vec<CounterWrite>) {
    {
        let Some(last_seq) = batch.last().map(|w| w.seq) else { return };
        // Each key's last value (the queue holds them in each key's order), written where
        // the row is still what this process last saw.
        let mut last: HashMap<&str, (usize, CounterValue)> = HashMap::with_capacity(batch.len());
        for (i, w) in batch.iter().enumerate() {
            last.insert(&*w.counter.key_id, (i, w.value));
        }
        let done = store.transaction(|tx| {
            let mut conflicts = Vec::new();
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
                }
            }
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
        l.committed.store(last_seq, std::sync::atomic::Ordering::Release);
    }
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
