//! Where the credit counters that verifications spend are kept (API-v2.md §13.5), one of
//! three ledgers: `memory` (one process owns the database: counters in memory, a group
//! commit led by the waiting verifications, to the credit journal beside a database file
//! (`journal`, `fold`) or to the rows), `rows` (several instances: each spend a
//! statement on the key's row, by a writer thread's group commit) or [`shared`] (several
//! instances: counters in Redis, written behind to the rows). Every spend is committed
//! (or journaled) before its verification answers.
//!
//! The memory ledger's files, from the bottom up: `counter` (a key's counter),
//! `journal` (the file), `journaling` (the journal's state and its replay), `memory` (the
//! ledger and its group commit, which knows the journal's state but not the fold) and
//! `fold` (the journaled counters written to the rows; it builds the memory ledger and
//! hands it its commit and fold), each importing only from the ones below it.

mod counter;
pub(crate) mod fold;
pub(crate) mod journal;
pub(crate) mod journaling;
pub(crate) mod memory;
pub(crate) mod rows;
pub mod shared;

use crate::store::UsageTx;
use crate::store::{CreditSpend, UsageStore};
use keygate_domain::Clock;
use keygate_ratelimit::{Decision, Entry};
use keygate_rbac::{
    Assumed, CachedKey, CounterSource, CreditChange, CreditCounters, Key, KeyEvents, RbacError, StorageError,
    Tag,
};
use memory::{Commit, Counter, MemoryLedger};
use rows::CreditQueue;
use shared::{SharedCredits, SharedLedger, SharedRefill};
use std::sync::Arc;

/// The ledger of a service: its kind, over the store its counters are written to.
#[derive(Debug)]
pub(crate) struct Ledger<S> {
    pub(crate) store: Arc<S>,
    pub(crate) kind: Kind,
}

/// Which ledger.
#[derive(Debug)]
pub(crate) enum Kind {
    /// In memory, written to the database by group commit: one process owns the database
    /// (the embedded default, with local change counters).
    Memory(Arc<MemoryLedger>),
    /// The key's row, spent by group commit: any number of instances share the database.
    Rows(Arc<CreditQueue>),
    /// In a shared store (Redis), written behind to the rows: any number of instances.
    Shared(SharedLedger),
}

impl<S: UsageStore + 'static> Ledger<S> {
    /// The ledger that fits: `shared` when given; else in memory when the change counters
    /// are local (the database is this process's alone), else on the rows. Each tells
    /// `events` of the counters it writes.
    pub(crate) fn new(
        store: Arc<S>,
        counters: &CounterSource,
        shared: Option<Arc<dyn SharedCredits>>,
        events: SpendEvents,
    ) -> Self {
        let kind = match (shared, counters) {
            (Some(shared), _) => Kind::Shared(SharedLedger::new(shared, events)),
            (None, CounterSource::Local(_)) => Kind::Memory(fold::memory_ledger(&store, events)),
            (None, _) => Kind::Rows(Arc::new(CreditQueue::with_events(events))),
        };
        Self { store, kind }
    }
}

/// Where a ledger tells of the credit counters it writes to the rows (rbac's
/// [`KeyEvents`]: the webhook outbox's credit events), in the transaction that writes them.
#[derive(Clone, Default)]
pub(crate) struct SpendEvents {
    to: Option<(Arc<dyn KeyEvents>, Arc<dyn Clock>)>,
}

impl std::fmt::Debug for SpendEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpendEvents").field("on", &self.to.is_some()).finish()
    }
}

impl SpendEvents {
    pub(crate) fn new(events: Option<Arc<dyn KeyEvents>>, clock: Arc<dyn Clock>) -> Self {
        Self { to: events.map(|e| (e, clock)) }
    }

    /// Whether anything is told (else a writer need not read what it overwrites).
    pub(crate) fn on(&self) -> bool {
        self.to.is_some()
    }

    /// The changes between two reads of the same rows (`before` and `after`, each by key
    /// id), told as [`Self::written`].
    pub(crate) fn rows_written(
        &self,
        tx: &mut dyn UsageTx,
        before: &[crate::store::CreditRow],
        after: &[crate::store::CreditRow],
    ) -> Result<(), RbacError> {
        let changes: Vec<CreditChange<'_>> = after
            .iter()
            .filter_map(|a| {
                let b = before.iter().find(|b| b.key_id == a.key_id)?;
                let was = (b.remaining?, b.last_refill_at);
                let now = (a.remaining?, a.last_refill_at);
                (was != now).then(|| CreditChange::of(&a.key_id, was, now))
            })
            .collect();
        self.written(tx, &changes)
    }

    /// Tells of `changes`, written in `tx`, when credits went out in any.
    pub(crate) fn written(
        &self,
        tx: &mut dyn UsageTx,
        changes: &[CreditChange<'_>],
    ) -> Result<(), RbacError> {
        let Some((events, clock)) = &self.to else { return Ok(()) };
        if !changes.iter().any(CreditChange::spent) {
            return Ok(());
        }
        events.credits_spent(tx, changes, clock.now_ms() as i64)
    }
}

/// A spend a verification asks for: `cost` of `key`'s credits, as the caller may
/// (`may_wait` false never reads the database); `tag`: the change counters the key's
/// snapshot was loaded under (a counter loaded under others is read again); `limits`: the
/// key's own rate limits, taken with the spend, all or nothing, by a ledger that
/// [takes limits](Ledger::takes_limits) (empty for the others).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpendAsk<'a> {
    pub(crate) key: &'a CachedKey,
    pub(crate) cost: u64,
    pub(crate) may_wait: bool,
    pub(crate) tag: Tag,
    pub(crate) limits: &'a [Entry<'a>],
    /// The change counters the caller's answer holds under, checked with the spend by a
    /// ledger that [assumes counters](Ledger::assumes_counters) ([`Spent::Stale`]).
    pub(crate) assumed: Option<&'a Assumed>,
}

/// What a spend came to. `limits`: the decisions on the ask's limits, in order (taken when
/// it paid, or the key is unlimited; else nothing taken, and each budget as it is).
pub(crate) enum Spent {
    /// The key has no credits (any more): nothing to spend.
    Unlimited { limits: Vec<Decision> },
    /// Decided: `paid` or not, `remaining` after; a paid spend is answered once `commit`
    /// says it is committed, or, when `commit` says another process changed the counter,
    /// spent again on the row through `retry`.
    Decided { paid: bool, remaining: u64, commit: Option<Commit>, limits: Vec<Decision> },
    /// One of the ask's limits did not fit: nothing spent, nothing taken.
    RateLimited { limits: Vec<Decision> },
    /// A change counter the ask assumed moved: nothing done.
    Stale,
    /// Decided by the writer, with the commit (the rows ledger).
    Later(tokio::sync::oneshot::Receiver<Result<CreditSpend, StorageError>>),
    /// The counter is not in memory yet and the caller may not wait for the database.
    NeedsLoad,
}

impl std::fmt::Debug for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spent::Unlimited { .. } => f.write_str("Unlimited"),
            Spent::RateLimited { .. } => f.write_str("RateLimited"),
            Spent::Stale => f.write_str("Stale"),
            Spent::Decided { paid, remaining, .. } => {
                write!(f, "Decided(paid: {paid}, remaining: {remaining})")
            }
            Spent::Later(_) => f.write_str("Later"),
            Spent::NeedsLoad => f.write_str("NeedsLoad"),
        }
    }
}

impl<S: UsageStore + 'static> Ledger<S> {
    /// Spends what `ask` says at `now` (a due refill first).
    /// `counter`: where the caller keeps the key's counter once found (the memory ledger's).
    pub(crate) fn spend(
        &self,
        ask: SpendAsk<'_>,
        now: i64,
        counter: &std::sync::OnceLock<Arc<Counter>>,
    ) -> Result<Spent, StorageError> {
        let (key, cost) = (ask.key, ask.cost);
        let Some(kc) = key.credits() else { return Ok(Spent::Unlimited { limits: Vec::new() }) };
        let credits = &kc.credits;
        debug_assert!(
            (ask.limits.is_empty() && ask.assumed.is_none()) || self.takes_limits(),
            "only the shared ledger takes limits and checks counters"
        );
        let refill_at = credits.refill.as_ref().map(|r| crate::refill::last_boundary(r.interval, r.day, now));
        let store = &self.store;
        match &self.kind {
            Kind::Rows(queue) => Ok(Spent::Later(queue.spend(store, key.id(), cost, refill_at))),
            // A round trip to the shared store: only where the caller may wait.
            Kind::Shared(_) if !ask.may_wait => Ok(Spent::NeedsLoad),
            Kind::Shared(ledger) => {
                let refill = credits.refill.as_ref().zip(refill_at).map(|(r, at)| SharedRefill {
                    at,
                    amount: r.amount,
                    since: kc.created_at,
                });
                ledger.spend(&**store, key, cost, refill, (ask.limits, now.max(0) as u64), ask.assumed)
            }
            Kind::Memory(ledger) => {
                let counter = counter.get_or_init(|| ledger.counter(key.id()));
                ledger.spend(store, ask, counter, refill_at)
            }
        }
    }

    /// [`Self::spend`] sent with the round trips of other requests, to await on the
    /// caller's tokio runtime: the shared ledger's spend of a counter the store holds
    /// (one it must load, or one an update holds, answers [`Spent::NeedsLoad`]: spend it
    /// the blocking way). `None`: this ledger (or store) has no such path.
    pub(crate) fn spend_queued(&self, ask: SpendAsk<'_>, now: i64) -> Option<shared::Queued<Spent>> {
        let Kind::Shared(ledger) = &self.kind else { return None };
        let key = ask.key;
        let kc = key.credits()?;
        let refill = kc.credits.refill.as_ref().map(|r| SharedRefill {
            at: crate::refill::last_boundary(r.interval, r.day, now),
            amount: r.amount,
            since: kc.created_at,
        });
        ledger.spend_queued(key, ask.cost, refill, (ask.limits, now.max(0) as u64), ask.assumed)
    }

    /// Whether it takes a key's own rate limits with its credit spend, in one step (the
    /// shared ledger: one Redis script, in the slot of the key's counter).
    pub(crate) fn takes_limits(&self) -> bool {
        matches!(self.kind, Kind::Shared(_))
    }

    /// Whether a spend can check the change counters its verification's answer assumed,
    /// in the same step ([`SpendAsk::assumed`]): the shared ledger on a single Redis.
    pub(crate) fn assumes_counters(&self) -> bool {
        matches!(&self.kind, Kind::Shared(l) if l.checks_counters())
    }

    /// The namespace of `key_id`'s own rate limits when the ledger takes them (the shared
    /// ledger: in the slot of its credit counter, so that [`SpendAsk::limits`] can be taken
    /// with the spend); `None` for the others.
    pub(crate) fn limits_namespace(&self, key_id: &str) -> Option<String> {
        match &self.kind {
            Kind::Shared(ledger) => Some(ledger.limits_namespace(key_id)),
            _ => None,
        }
    }

    /// Runs `write` (which changes `key_id`'s credits in the database) with the key's
    /// counter held still: its spends committed first, none taken meanwhile, and read
    /// from the database again after.
    pub(crate) fn hold<T>(
        &self,
        key_id: &str,
        write: impl FnOnce() -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        match &self.kind {
            Kind::Rows(_) => write(),
            Kind::Memory(ledger) => ledger.hold(key_id, write),
            Kind::Shared(ledger) => ledger.hold(&*self.store, key_id, write),
        }
    }
}

/// rbac's writes of a key's credits (`updateKey`, `rerollKey`) hold the counter, and its
/// reads of keys show the live counters (the shared ledger writes the rows behind).
impl<S: UsageStore + 'static> CreditCounters for Ledger<S> {
    fn hold(&self, key_id: &str, write: &mut dyn FnMut() -> Result<(), RbacError>) -> Result<(), RbacError> {
        Ledger::hold(self, key_id, write)
    }

    fn overlay(&self, keys: &mut [&mut Key]) -> Result<(), RbacError> {
        match &self.kind {
            Kind::Shared(ledger) => ledger.overlay(keys)?,
            Kind::Memory(ledger) => ledger.journaling.overlay(keys, |id| ledger.find(id)),
            Kind::Rows(_) => {}
        }
        Ok(())
    }
}

/// A service error where a storage error is answered.
pub(crate) fn storage(e: RbacError) -> StorageError {
    match e {
        RbacError::Storage(e) => e,
        other => StorageError::Internal(other.to_string()),
    }
}
