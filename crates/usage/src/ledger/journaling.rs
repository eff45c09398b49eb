//! The memory ledger's credit journal, its state ([`Journaling`]: the journal this process
//! owns, the counters journaled and not folded yet) and its replay onto the rows when a
//! process opens a database another left. The file is [`super::journal`]; the fold that
//! writes the journaled counters to the rows is [`super::fold`].

use super::SpendEvents;
use super::counter::{Counter, CounterValue, Folding};
use super::journal::{self, Journal, Record, Value};
use crate::store::UsageStore;
use keygate_rbac::{CreditChange, Key, RbacError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The journal side of a memory ledger.
#[derive(Debug, Default)]
pub(crate) struct Journaling {
    /// The journal, when this process owns it (from the start, or taken over from an
    /// owner that stopped, [`Self::join`]).
    pub(super) journal: OnceLock<parking_lot::Mutex<Journal>>,
    /// Spends go to the journal (owned, and not stepped aside for another process).
    pub(super) on: AtomicBool,
    /// The counters journaled and not folded into the rows yet, each once (what it
    /// folds to is the counter's own [`Counter::folding`], written under this lock: a
    /// spend touches its counter, already in the CPU's cache, not a table of them all).
    pub(super) pending: parking_lot::Mutex<Vec<Arc<Counter>>>,
    /// Held by the fold under way.
    pub(super) folding: parking_lot::Mutex<()>,
    /// Every journaled write up to this sequence number is folded.
    pub(super) folded: AtomicU64,
    /// The journal another process owns: asked to step aside before this one's first spend.
    pub(super) others: Option<std::path::PathBuf>,
    /// This process's shared lock of the processes that spend, once it asked.
    pub(super) joined: OnceLock<Option<std::fs::File>>,
    /// Told of the counters a replay writes.
    events: SpendEvents,
}

pub(super) fn value(v: CounterValue) -> Value {
    (v.remaining, v.last_refill_at)
}

impl Journaling {
    /// Takes the journal of `store`'s database when it has one and no other process owns
    /// it, and replays what it holds onto the rows first (what a process that stopped
    /// without folding left).
    pub(super) fn open<S: UsageStore>(store: &S, events: SpendEvents) -> Self {
        let Some(path) = store.credit_journal() else { return Self { events, ..Self::default() } };
        match own_and_replay(store, &path, &events) {
            Ok(Some((journal, n))) => {
                if n > 0 {
                    log::info!("{}: the spends of {n} keys replayed onto their rows", path.display());
                }
                let on = AtomicBool::new(!journal.shared);
                Self {
                    journal: OnceLock::from(parking_lot::Mutex::new(journal)),
                    on,
                    events,
                    ..Self::default()
                }
            }
            Ok(None) => Self { others: Some(path), events, ..Self::default() },
            Err(e) => {
                log::error!("{e}: each spend is committed to the database before its answer");
                Self { events, ..Self::default() }
            }
        }
    }

    /// Whether this process owns the journal (and so folds it behind).
    pub(super) fn owned(&self) -> bool {
        self.journal.get().is_some()
    }

    /// Before this process's first spend: asks the journal's owner, if another process,
    /// to step aside (waiting for it); where the owner is gone (stopped since this
    /// process started), takes the journal over and replays what it left (this process
    /// spends on the rows all the same: it is not alone).
    pub(super) fn join<S: UsageStore>(&self, store: &S) {
        let Some(path) = &self.others else { return };
        self.joined.get_or_init(|| {
            let (users, yielded) = match journal::ask_owner_to_yield(path) {
                Ok(asked) => asked,
                Err(e) => {
                    log::warn!("{}: could not ask the owner of the credit journal: {e}", path.display());
                    return None;
                }
            };
            if !yielded {
                match own_and_replay(store, path, &self.events) {
                    Ok(Some((journal, n))) => {
                        log::info!("{}: the journal of a stopped process taken over, the spends of {n} keys replayed", path.display());
                        let _ = self.journal.set(parking_lot::Mutex::new(journal));
                    }
                    Ok(None) => {}
                    Err(e) => log::error!("{e}"),
                }
            }
            Some(users)
        });
    }

    /// Whether writes up to `seq` may wait in the journal, not folded yet.
    pub(super) fn unfolded(&self, seq: u64) -> bool {
        seq > self.folded.load(Ordering::Acquire) && !self.pending.lock().is_empty()
    }

    /// Empties the journal when everything it holds is folded (a ledger that stops).
    pub(super) fn empty_if_folded(&self) {
        if let Some(journal) = self.journal.get() {
            let mut journal = journal.lock();
            if self.pending.lock().is_empty() {
                let len = journal.len();
                if let Err(e) = journal.compact(len) {
                    log::warn!("credit journal: not emptied: {e}");
                }
            }
        }
    }

    /// Voids `key_id`'s journaled spends up to `seq` (its row is about to be written
    /// otherwise, with them folded).
    pub(super) fn reset(&self, seq: u64, key_id: &str) {
        if let (true, Some(journal)) = (self.on.load(Ordering::Acquire), self.journal.get())
            && let Err(e) = journal.lock().push_reset(seq, key_id)
        {
            log::warn!("credit journal: a reset of {key_id} not written: {e}");
        }
    }

    /// The live counters of `keys`' credits where the rows are behind them (`counter`:
    /// the counter of a key id, where this process has one).
    pub(super) fn overlay(&self, keys: &mut [&mut Key], counter: impl Fn(&str) -> Option<Arc<Counter>>) {
        let pending = self.pending.lock();
        if pending.is_empty() {
            return;
        }
        for key in keys.iter_mut() {
            let Some(c) = key.credits.as_mut() else { continue };
            let Some(f) = counter(&key.id).and_then(|counter| *counter.folding.lock()) else {
                continue;
            };
            c.remaining = f.after.remaining;
            if let Some(r) = c.refill.as_mut() {
                r.last_refill_at = f.after.last_refill_at;
            }
        }
    }

    /// Appends a spend of `counter` (`before` -> `after`; `key_id`: its key's, the caller's
    /// copy, already in cache) to the journal while spends go there, and keeps the counter
    /// to fold: its sequence number (`queued`: the ledger's last; `committed` up to it).
    /// `None`: the caller queues it for the rows (the journal is not on, or could not take
    /// it, and is off from now on).
    /// Called under the counter's lock: the journal holds each key's spends in order.
    pub(super) fn append(
        &self,
        (queued, committed): (&AtomicU64, &AtomicU64),
        counter: &Arc<Counter>,
        key_id: &str,
        before: CounterValue,
        after: CounterValue,
    ) -> Option<u64> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        let mut journal = self.journal.get()?.lock();
        // Turned off under the journal's lock: nothing is appended after.
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        let seq = queued.fetch_add(1, Ordering::AcqRel) + 1;
        if let Err(e) = journal.push_spend(seq, key_id, value(before), value(after)) {
            log::error!(
                "credit journal: not written ({e}): spends are committed to the database from now on"
            );
            self.on.store(false, Ordering::Release);
            // `seq` is committed with the caller's queued write, which comes after it.
            return None;
        }
        let mut pending = self.pending.lock();
        let mut folding = counter.folding.lock();
        match &mut *folding {
            Some(f) => (f.after, f.seq) = (after, seq),
            None => {
                *folding = Some(Folding { before, after, seq });
                pending.push(counter.clone());
            }
        }
        committed.fetch_max(seq, Ordering::AcqRel);
        Some(seq)
    }

    /// Turns spends to the journal off (this process steps aside for another): a spend
    /// appended before is in `pending`, none is after.
    pub(super) fn turn_off(&self) {
        let _journal = self.journal.get().map(|j| j.lock());
        self.on.store(false, Ordering::Release);
    }
}

/// `before` -> `after` (one process's spends, and a refill among them) applied to a row
/// another process wrote since (`now`): the refill where the row was not refilled as late,
/// and the credits spent.
pub(super) fn applied(before: CounterValue, after: CounterValue, now: CounterValue) -> CounterValue {
    if after.last_refill_at != before.last_refill_at && now.last_refill_at < after.last_refill_at {
        return after;
    }
    let spent = before.remaining.saturating_sub(after.remaining);
    CounterValue { remaining: now.remaining.saturating_sub(spent), last_refill_at: now.last_refill_at }
}

/// Takes the journal at `path` (`None`: another process owns it) and replays what it holds
/// onto the rows, emptying it: with how many keys' rows it wrote. On an error the journal
/// is left as it is (for the next process that opens the database) and not taken.
fn own_and_replay<S: UsageStore>(
    store: &S,
    path: &std::path::Path,
    events: &SpendEvents,
) -> Result<Option<(Journal, usize)>, String> {
    let at = path.display();
    let (mut journal, records) = match Journal::own(path) {
        Ok(Some(owned)) => owned,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("{at}: the credit journal cannot be opened: {e}")),
    };
    let n = replay(store, records, events)
        .map_err(|e| format!("{at}: the credit journal could not be replayed: {e}"))?;
    let len = journal.len();
    journal
        .compact(len)
        .map_err(|e| format!("{at}: the replayed credit journal could not be emptied: {e}"))?;
    Ok(Some((journal, n)))
}

/// Replays the credit journal of `store`'s database onto the keys' rows when no running
/// process owns it (one stopped by `kill -9` leaves the spends it answered since its last
/// fold there; the next process that opens the database replays them): how many keys'
/// rows it wrote, `None` when a running process owns it (and folds it into the rows every
/// 200 ms). For tools that read the rows without serving: `keygate backup`, `store copy`.
pub fn replay_credit_journal<S: UsageStore>(store: &S) -> Result<Option<usize>, String> {
    let Some(path) = store.credit_journal() else { return Ok(Some(0)) };
    Ok(own_and_replay(store, &path, &SpendEvents::default())?.map(|(_, n)| n))
}

/// Replays a journal's records onto the rows: for each key, its spends since its last
/// reset from where its row is ([`replayed`]): how many keys' rows it wrote.
fn replay<S: UsageStore>(store: &S, records: Vec<Record>, events: &SpendEvents) -> Result<usize, RbacError> {
    let mut keys: HashMap<String, Vec<(u64, Value, Value)>> = HashMap::new();
    for r in records {
        match r {
            Record::Spend { seq, key_id, before, after } => {
                keys.entry(key_id).or_default().push((seq, before, after))
            }
            Record::Reset { seq, key_id } => {
                if let Some(spends) = keys.get_mut(&key_id) {
                    spends.retain(|s| s.0 > seq);
                }
            }
        }
    }
    store.usage_transaction(|tx| {
        let mut written = 0;
        for (key_id, spends) in &keys {
            let pairs: Vec<(Value, Value)> = spends.iter().map(|s| (s.1, s.2)).collect();
            let Some(row) = tx.key_credit_row(key_id)? else { continue };
            let Some(now) = row.remaining else { continue };
            if let Some((remaining, at)) = replayed(&pairs, (now, row.last_refill_at)) {
                tx.write_key_credits(&[(key_id, remaining, at)])?;
                let change = CreditChange::of(key_id, (now, row.last_refill_at), (remaining, at));
                events.written(tx, &[change])?;
                written += 1;
            }
        }
        Ok(written)
    })
}

/// What a key's row holds once its journaled spends since its last reset (`records`) are
/// replayed onto it (`row`): where the row is on their chain ([`journal::replay_from`]),
/// the last one's value (`None`: the row holds it already); else (another process wrote
/// the row since: while a fold found that write, spends were answered on the counter's
/// value before it) the spends applied to the row, as a fold applies them.
fn replayed(records: &[(Value, Value)], row: Value) -> Option<Value> {
    let (first, last) = (records.first()?, records.last()?);
    let counter = |(remaining, last_refill_at): Value| CounterValue { remaining, last_refill_at };
    match journal::replay_from(records, row) {
        Some(from) if from < records.len() => Some(last.1),
        Some(_) => None,
        None => Some(value(applied(counter(first.0), counter(last.1), counter(row)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_goes_on_from_the_row_or_applies_the_spends_to_a_row_written_since() {
        let chain = [((10, None), (9, None)), ((9, None), (8, None)), ((8, None), (7, None))];
        // On the chain: from the last record the row is at.
        assert_eq!(replayed(&chain, (10, None)), Some((7, None)));
        assert_eq!(replayed(&chain, (8, None)), Some((7, None)));
        assert_eq!(replayed(&chain, (7, None)), None, "the row holds them all");
        // Written since (50 set by another process): the three spends apply to it.
        assert_eq!(replayed(&chain, (50, None)), Some((47, None)));
        assert_eq!(replayed(&chain, (2, None)), Some((0, None)), "never below zero");
        // A refill among the spends applies where the row was not refilled as late.
        let refilled = [((1, Some(100)), (20, Some(200))), ((20, Some(200)), (19, Some(200)))];
        assert_eq!(replayed(&refilled, (5, Some(100))), Some((19, Some(200))));
        // Refilled later by the other process: its refill sets the row, after the spends.
        assert_eq!(replayed(&refilled, (5, Some(300))), Some((5, Some(300))));
        assert_eq!(replayed(&[], (5, None)), None);
    }
}
