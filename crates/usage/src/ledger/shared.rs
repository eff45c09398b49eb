//! Credit counters in a shared store (API-v2.md §13.5, scale-out): the live counter of a
//! key is in the store every instance reaches (Redis, `keygate-store`), spent there by one
//! atomic step ("take `cost` if at least `cost` is left", a due refill first), so a VALID
//! answer leaves once its spend is in the store. The database's row is brought up to date
//! behind it ([`crate::UsageService::write_behind_credits`], every instance, about once a second).
//!
//! - **Load**: a counter the store does not hold is read from the row and set there only if
//!   it is still absent (two instances loading at once keep one).
//! - **Write-behind**: a spend marks the counter changed (in a set per shard); the
//!   write-behind writes the changed counters' values to their rows, each only on the row's
//!   credit version it was loaded from and only when its change number is above the row's,
//!   then marks each clean unless it changed meanwhile. Any instance may do it (a lease per
//!   shard keeps them from doing the same work), so a `kill -9` loses no answered spend:
//!   the store holds it and another instance, or the restarted one, writes it behind.
//! - **Updates** (`updateCredits`, `updateKey`, `rerollKey`: `SharedLedger::hold`): the
//!   counter is locked against spends (a lease), its live value written to the row, the
//!   update made on the row (which raises its credit version), and the row's new credits
//!   put in the store in place of the counter before the lock ends: no spend is lost and
//!   none is made on the value from before the update.
//! - **Losing the store** (a Redis restart without persistence): counters are loaded from
//!   the rows again, which lack at most the spends of the last write-behind interval per
//!   key: those credits are granted again (the bound `docs/operations.md` states).

use super::{Spent, storage};
use crate::store::{LiveCredits, UsageStore, WrittenBehind};
use keygate_ratelimit::{Decision, Entry};
use keygate_rbac::{Assumed, CachedKey, Key, RbacError, StorageError};
use std::sync::Arc;
use std::time::Duration;

/// A spend as the shared store takes it.
#[derive(Debug, Clone, Copy)]
pub struct SharedSpendAsk<'a> {
    pub key_id: &'a str,
    pub cost: u64,
    /// The key's own rate limits, in the namespace [`SharedCredits::limits_namespace`]
    /// names: taken with the spend, all or nothing (none taken when one does not fit or
    /// the credits do not pay; all taken when it pays or the key has no credits), at
    /// `now_ms`.
    pub limits: &'a [Entry<'a>],
    pub now_ms: u64,
    /// Change counters the caller's answer holds under: nothing is done unless the store
    /// holds them at these values ([`SharedSpend::Stale`]). Only for a store that
    /// [checks counters](SharedCredits::checks_counters).
    pub assumed: Option<&'a Assumed>,
    /// The refill due at the start of the current period, if the key refills.
    pub refill: Option<SharedRefill>,
    /// The counter as the key's row holds it, set only where the store holds none (without
    /// it, such a spend answers [`SharedSpend::Missing`]).
    pub load: Option<LiveCredits>,
}

/// A refill rule as the store applies it ([`crate::refill::refill_at`]): to `amount` at `at`
/// (the current period's start) unless the counter's last refill (or, never refilled, the
/// key's creation `since`) is at or after `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRefill {
    pub at: i64,
    pub amount: u64,
    pub since: i64,
}

/// What a spend in the shared store came to. `limits`: a decision per limit of the ask, in
/// order (when nothing was taken, each budget as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedSpend {
    /// Decided: `paid` or not, `remaining` after.
    Decided { paid: bool, remaining: u64, limits: Vec<Decision> },
    /// The key has no credits (an update made it unlimited): the limits were taken.
    Unlimited { limits: Vec<Decision> },
    /// A limit did not fit: nothing spent, nothing taken.
    RateLimited { limits: Vec<Decision> },
    /// A change counter of [`SharedSpendAsk::assumed`] moved: nothing done.
    Stale,
    /// The store holds no counter for the key: load it ([`SharedSpendAsk::load`]).
    Missing,
    /// An update holds the counter: ask again shortly.
    Locked,
}

/// A counter put in the store by an update, as the row holds it after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    Credits(LiveCredits),
    /// The key has no credits (any more): `version` is the row's.
    Unlimited {
        version: i64,
    },
}

/// A shared store of credit counters (Redis), implemented outside this crate. Counters are
/// split in [`Self::shards`] shards (the write-behind works shard by shard).
pub trait SharedCredits: Send + Sync + std::fmt::Debug {
    /// Spends as `ask` says, atomically: its limits decided, a due refill, then `cost` if
    /// at least `cost` is left (and more than 0), and the limits taken if it paid.
    fn spend(&self, ask: &SharedSpendAsk<'_>) -> Result<SharedSpend, StorageError>;
    /// [`Self::spend`] of a counter the store holds ([`SharedSpendAsk::load`] is `None`),
    /// sent with the round trips of other callers, on the caller's tokio runtime. `None`:
    /// this store cannot (no runtime).
    fn spend_queued(&self, ask: &SharedSpendAsk<'_>) -> Option<Queued<SharedSpend>> {
        let _ = ask;
        None
    }
    /// The rate-limit namespace whose budgets share the place (a Redis Cluster's slot) of
    /// `key_id`'s counter: where the key's own limits live, so that [`Self::spend`] takes
    /// them with the spend and the rate-limit store finds them there too.
    fn limits_namespace(&self, key_id: &str) -> String;
    /// Whether [`Self::spend`] can check change counters in the same atomic step
    /// ([`SharedSpendAsk::assumed`]): the counters and the credits are in one place (a
    /// single Redis, not a cluster, where they are in different slots).
    fn checks_counters(&self) -> bool;
    /// Locks a key's counter against spends for at most `lease`, for `token`: `None` when
    /// another holds the lock; else the live counter (`None`: the store holds none).
    fn lock(
        &self,
        key_id: &str,
        token: u64,
        lease: Duration,
    ) -> Result<Option<Option<LiveCredits>>, StorageError>;
    /// Ends the lock `token` holds, putting `install` in place of the counter (the row's
    /// credits after an update; `None`: the counter stays as it is). Whether the lock was
    /// still held (else nothing changed).
    fn unlock(&self, key_id: &str, token: u64, install: Option<Installed>) -> Result<bool, StorageError>;
    /// The live counters of `key_ids`, in order (`None`: not held, or unlimited).
    fn read(&self, key_ids: &[&str]) -> Result<Vec<Option<LiveCredits>>, StorageError>;
    /// How many shards the counters are split in.
    fn shards(&self) -> u16;
    /// Up to `max` counters of `shard` changed since they were last written behind, when
    /// no other caller holds the shard's write-behind lease (then taken for `lease`, for
    /// `token`); nothing otherwise.
    fn dirty(
        &self,
        shard: u16,
        token: u64,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<(String, LiveCredits)>, StorageError>;
    /// After a write-behind of `shard`: a counter written is marked clean unless it changed
    /// since (its change number); a superseded one is removed if it is still of that
    /// version (the next spend loads the row).
    fn settle(
        &self,
        shard: u16,
        outcomes: &[(String, LiveCredits, WrittenBehind)],
    ) -> Result<(), StorageError>;
}

/// An answer to come from a queued call ([`SharedCredits::spend_queued`]).
pub type Queued<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StorageError>> + Send + 'static>>;

/// How long an update may hold a counter (its lock's lease).
const LOCK_LEASE: Duration = Duration::from_secs(30);
/// How long a spend waits for an update that holds its counter before it answers 503.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// How long a write-behind lease on a shard lasts.
const WRITE_BEHIND_LEASE: Duration = Duration::from_millis(500);
/// The most counters of one shard a write-behind pass writes in one transaction.
const WRITE_BEHIND_BATCH: usize = 500;

/// The scale-out ledger: the counters in a [`SharedCredits`] store.
#[derive(Debug)]
pub(crate) struct SharedLedger {
    store: Arc<dyn SharedCredits>,
    /// This instance's write-behind leases (its own passes never wait for each other's).
    token: u64,
    /// Told of the counters written behind.
    events: super::SpendEvents,
}

impl SharedLedger {
    pub(crate) fn new(store: Arc<dyn SharedCredits>, events: super::SpendEvents) -> Self {
        Self { store, token: rand::random(), events }
    }

    /// Writes live counters behind in `tx` (see [`crate::store::CreditTx::write_behind_credits`]),
    /// telling the events of what the rows went from and to (read before and after, locked).
    fn write_behind_in(
        &self,
        tx: &mut dyn crate::store::UsageTx,
        counters: &[(&str, LiveCredits)],
    ) -> Result<Vec<WrittenBehind>, RbacError> {
        if !self.events.on() {
            return Ok(tx.write_behind_credits(counters)?);
        }
        let mut ids: Vec<&str> = counters.iter().map(|c| c.0).collect();
        ids.sort_unstable();
        ids.dedup();
        let before = tx.lock_key_credits(&ids)?;
        let outcomes = tx.write_behind_credits(counters)?;
        let after = tx.lock_key_credits(&ids)?;
        self.events.rows_written(tx, &before, &after)?;
        Ok(outcomes)
    }

    /// See [`SharedCredits::checks_counters`].
    pub(crate) fn checks_counters(&self) -> bool {
        self.store.checks_counters()
    }

    /// See [`SharedCredits::limits_namespace`].
    pub(crate) fn limits_namespace(&self, key_id: &str) -> String {
        self.store.limits_namespace(key_id)
    }

    /// Spends `cost` of `key`'s credits in the store with its own `limits` (loading the
    /// counter from the row first where the store holds none).
    pub(crate) fn spend<S: UsageStore>(
        &self,
        db: &S,
        key: &CachedKey,
        cost: u64,
        refill: Option<SharedRefill>,
        (limits, now_ms): (&[Entry<'_>], u64),
        assumed: Option<&Assumed>,
    ) -> Result<Spent, StorageError> {
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut load = None;
        loop {
            let ask = SharedSpendAsk { key_id: key.id(), cost, refill, load, limits, now_ms, assumed };
            match self.store.spend(&ask)? {
                SharedSpend::Decided { paid, remaining, limits } => {
                    return Ok(Spent::Decided { paid, remaining, commit: None, limits });
                }
                SharedSpend::Unlimited { limits } => return Ok(Spent::Unlimited { limits }),
                SharedSpend::RateLimited { limits } => return Ok(Spent::RateLimited { limits }),
                SharedSpend::Stale => return Ok(Spent::Stale),
                SharedSpend::Missing => match row_counter(db, key.id())? {
                    Some(live) => load = Some(live),
                    None if assumed.is_some() => return Ok(Spent::Stale),
                    None if limits.is_empty() => return Ok(Spent::Unlimited { limits: Vec::new() }),
                    // The row lost its credits since the key was read (an update racing this
                    // verification, which the next request sees): nothing taken; retry.
                    None => {
                        return Err(StorageError::Unavailable("the key's credits changed; try again".into()));
                    }
                },
                SharedSpend::Locked => {
                    if std::time::Instant::now() >= deadline {
                        return Err(StorageError::Unavailable(
                            "the key's credits are being updated; try again".into(),
                        ));
                    }
                    // The update may change the row: read it again if still missing after.
                    load = None;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }

    /// [`Self::spend`] through the store's queued path: a counter it must load, or one an
    /// update holds, answers [`Spent::NeedsLoad`] (the caller spends it the blocking way).
    pub(crate) fn spend_queued(
        &self,
        key: &CachedKey,
        cost: u64,
        refill: Option<SharedRefill>,
        (limits, now_ms): (&[Entry<'_>], u64),
        assumed: Option<&Assumed>,
    ) -> Option<Queued<Spent>> {
        let ask = SharedSpendAsk { key_id: key.id(), cost, refill, load: None, limits, now_ms, assumed };
        let queued = self.store.spend_queued(&ask)?;
        Some(Box::pin(async move {
            Ok(match queued.await? {
                SharedSpend::Decided { paid, remaining, limits } => {
                    Spent::Decided { paid, remaining, commit: None, limits }
                }
                SharedSpend::Unlimited { limits } => Spent::Unlimited { limits },
                SharedSpend::RateLimited { limits } => Spent::RateLimited { limits },
                SharedSpend::Stale => Spent::Stale,
                SharedSpend::Missing | SharedSpend::Locked => Spent::NeedsLoad,
            })
        }))
    }

    /// Runs `write` (an update of `key_id` that may change its credits in the database)
    /// with the key's counter locked: its live value written to the row first, the row's
    /// credits after put in the store in its place.
    pub(crate) fn hold<S: UsageStore, T>(
        &self,
        db: &S,
        key_id: &str,
        write: impl FnOnce() -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let token = rand::random::<u64>();
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let live = loop {
            match self.store.lock(key_id, token, LOCK_LEASE)? {
                Some(live) => break live,
                None if std::time::Instant::now() >= deadline => {
                    return Err(StorageError::Unavailable(
                        "the key's credits are being updated by another request; try again".into(),
                    )
                    .into());
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let out = (|| {
            if let Some(live) = live {
                // Whatever it says: written, or superseded (then the row is newer).
                db.usage_transaction(|tx| self.write_behind_in(tx, &[(key_id, live)]))?;
            }
            write()
        })();
        let install = match &out {
            Err(_) => Ok(None),
            Ok(_) => row_counter_or_version(db, key_id),
        };
        let install = match install {
            Ok(i) => i,
            Err(e) => {
                // The update is committed; the counter cannot be replaced: forget it.
                log::warn!("credits of {key_id}: reading the row after an update failed: {e}");
                let _ = self.store.unlock(key_id, token, None);
                return out;
            }
        };
        match self.store.unlock(key_id, token, install) {
            Ok(true) => {}
            Ok(false) => log::warn!(
                "credits of {key_id}: an update outlived its lock's lease ({LOCK_LEASE:?}); \
                 the write-behind replaces the counter"
            ),
            Err(e) => {
                log::warn!("credits of {key_id}: ending an update's lock failed (its lease ends it): {e}")
            }
        }
        out
    }

    /// The live counters of `keys`' credits, where the store holds them, in place of the
    /// rows' (which lag by at most the write-behind interval). A store out of reach is
    /// an error (503), not the rows' values answered as live.
    pub(crate) fn overlay(&self, keys: &mut [&mut Key]) -> Result<(), StorageError> {
        let ids: Vec<&str> = keys.iter().filter(|k| k.credits.is_some()).map(|k| k.id.as_str()).collect();
        if ids.is_empty() {
            return Ok(());
        }
        // A connection a failover broke fails its first call: once more, on another.
        let live = self.store.read(&ids).or_else(|e| {
            log::debug!("credits: reading live counters failed, once more: {e}");
            self.store.read(&ids)
        })?;
        let mut live = live.into_iter();
        for key in keys.iter_mut().filter(|k| k.credits.is_some()) {
            if let (Some(Some(l)), Some(c)) = (live.next(), key.credits.as_mut()) {
                c.remaining = l.remaining;
                if let Some(r) = c.refill.as_mut() {
                    r.last_refill_at = l.last_refill_at;
                }
            }
        }
        Ok(())
    }

    /// One write-behind pass over every shard with changed counters and no other
    /// instance's pass under way (a shard's lease lasts [`WRITE_BEHIND_LEASE`] after its
    /// last batch, or ends when a pass finds nothing to write): how many counters it wrote.
    pub(crate) fn write_behind<S: UsageStore>(&self, db: &S) -> Result<usize, RbacError> {
        let mut written = 0;
        for shard in 0..self.store.shards() {
            loop {
                let dirty = self.store.dirty(shard, self.token, WRITE_BEHIND_LEASE, WRITE_BEHIND_BATCH)?;
                if dirty.is_empty() {
                    break;
                }
                let rows: Vec<(&str, LiveCredits)> = dirty.iter().map(|(id, l)| (id.as_str(), *l)).collect();
                let outcomes = db.usage_transaction(|tx| self.write_behind_in(tx, &rows))?;
                let settled: Vec<(String, LiveCredits, WrittenBehind)> =
                    dirty.into_iter().zip(outcomes).map(|((id, l), o)| (id, l, o)).collect();
                self.store.settle(shard, &settled)?;
                written += settled.len();
                metrics::counter!("keygate_credit_writebehind_total").increment(settled.len() as u64);
                if settled.len() < WRITE_BEHIND_BATCH {
                    // The rest (counters changed again meanwhile) waits for the next pass.
                    break;
                }
            }
        }
        Ok(written)
    }
}

/// The key's counter as its row holds it (`None`: no such key, or no credits).
fn row_counter<S: UsageStore>(db: &S, key_id: &str) -> Result<Option<LiveCredits>, StorageError> {
    let row = db.usage_read(|tx| Ok(tx.key_credit_row(key_id)?)).map_err(storage)?;
    Ok(row.and_then(|r| {
        r.remaining.map(|remaining| LiveCredits {
            remaining,
            last_refill_at: r.last_refill_at,
            version: r.version,
            seq: r.seq,
        })
    }))
}

/// What an update leaves in the store: the row's counter, or that it has none (`None`: the
/// key is gone; the counter stays until the write-behind drops it).
fn row_counter_or_version<S: UsageStore>(db: &S, key_id: &str) -> Result<Option<Installed>, StorageError> {
    let row = db.usage_read(|tx| Ok(tx.key_credit_row(key_id)?)).map_err(storage)?;
    Ok(row.map(|r| match r.remaining {
        Some(remaining) => Installed::Credits(LiveCredits {
            remaining,
            last_refill_at: r.last_refill_at,
            version: r.version,
            seq: r.seq,
        }),
        None => Installed::Unlimited { version: r.version },
    }))
}
