//! The memory ledger's credit journal at work ([`super::journal`] is the file): a paid
//! spend is answered once appended to the journal (as it is decided, under its counter's
//! lock: no wait for a commit), and the counters are folded into the keys' rows behind, every [`FOLD_EVERY`] and before anything reads or writes a row
//! the journal is ahead of ([`MemoryLedger::flush`]). Where there is no journal (a
//! database that is not a file), where another process owns it, or once this process
//! stepped aside for another, each batch is committed to the rows before its answer
//! ([`commit_counters`]).

use super::journal::{self, COMPACT_AT, FOLD_EVERY, Journal, Record, Value};
use super::memory::{Counter, CounterValue, CounterWrite, MemoryLedger, commit_counters};
use crate::store::UsageStore;
use keygate_rbac::{Key, RbacError, StorageError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The journal side of a memory ledger.
#[derive(Debug, Default)]
pub(crate) struct Journaling {
    /// The journal, when this process owns it (from the start, or taken over from an
    /// owner that stopped, [`Self::join`]).
    journal: OnceLock<parking_lot::Mutex<Journal>>,
    /// Spends go to the journal (owned, and not stepped aside for another process).
    on: AtomicBool,
    /// The counters journaled and not folded into the rows yet, each once (what it
    /// folds to is the counter's own [`Counter::folding`], written under this lock: a
    /// spend touches its counter, already in the CPU's cache, not a table of them all).
    pending: parking_lot::Mutex<Vec<Arc<Counter>>>,
    /// Held by the fold under way.
    folding: parking_lot::Mutex<()>,
    /// Every journaled write up to this sequence number is folded.
    folded: AtomicU64,
    /// The journal another process owns: asked to step aside before this one's first spend.
    others: Option<std::path::PathBuf>,
    /// This process's shared lock of the processes that spend, once it asked.
    joined: OnceLock<Option<std::fs::File>>,
}

/// What a counter waiting to be folded folds: its value before its first journaled spend
/// since the last fold, and after its last (the sequence number of that one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Folding {
    before: CounterValue,
    after: CounterValue,
    seq: u64,
}

fn value(v: CounterValue) -> Value {
    (v.remaining, v.last_refill_at)
}

impl Journaling {
    /// Takes the journal of `store`'s database when it has one and no other process owns
    /// it, and replays what it holds onto the rows first (what a process that stopped
    /// without folding left).
    pub(super) fn open<S: UsageStore>(store: &S) -> Self {
        let Some(path) = store.credit_journal() else { return Self::default() };
        match own_and_replay(store, &path) {
            Ok(Some((journal, n))) => {
                if n > 0 {
                    log::info!("{}: the spends of {n} keys replayed onto their rows", path.display());
                }
                let on = AtomicBool::new(!journal.shared);
                Self { journal: OnceLock::from(parking_lot::Mutex::new(journal)), on, ..Self::default() }
            }
            Ok(None) => Self { others: Some(path), ..Self::default() },
            Err(e) => {
                log::error!("{e}: each spend is committed to the database before its answer");
                Self::default()
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
                match own_and_replay(store, path) {
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
    /// to fold: its sequence number, written (and [`MemoryLedger::committed`] up to it).
    /// `None`: the caller queues it for the rows (the journal is not on, or could not take
    /// it, and is off from now on).
    /// Called under the counter's lock: the journal holds each key's spends in order.
    pub(super) fn append(
        &self,
        l: &MemoryLedger,
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
        let seq = l.queued.fetch_add(1, Ordering::AcqRel) + 1;
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
        l.committed.fetch_max(seq, Ordering::AcqRel);
        Some(seq)
    }

    /// Turns spends to the journal off (this process steps aside for another): a spend
    /// appended before is in `pending`, none is after.
    fn turn_off(&self) {
        let _journal = self.journal.get().map(|j| j.lock());
        self.on.store(false, Ordering::Release);
    }
}

/// The memory ledger's commit of a batch of spends, to the rows (spends queued while the
/// journal is off; a journaled spend is not queued).
pub(super) fn commit<S: UsageStore>(l: &MemoryLedger, store: &S, batch: Vec<CounterWrite>) {
    let j = &l.journaling;
    // The journaled counters reach the rows before any later value does.
    if !j.pending.lock().is_empty() && !fold(l, store) {
        let e = StorageError::Unavailable("the credit journal could not be folded".into());
        for w in batch {
            w.counter.stale.store(true, Ordering::Release);
            if let Some(reply) = w.reply {
                let _ = reply.send(Err(e.clone()));
            }
        }
        return;
    }
    commit_counters(l, store, batch)
}

/// Folds the journaled counters into the rows, in one transaction: each where the row
/// is as this process last wrote it, else (another process wrote it since) this process's
/// spends applied to what the row holds. Whether it went (else they wait for the next).
pub(super) fn fold<S: UsageStore>(l: &MemoryLedger, store: &S) -> bool {
    let j = &l.journaling;
    let _folding = j.folding.lock();
    // The next fold's list made here, as long as this one's: spends after this fold do
    // not grow it (on the worker) while they fill it.
    let fresh = Vec::with_capacity(j.pending.lock().len());
    let (entries, upto) = {
        let journal = j.journal.get().map(|m| m.lock());
        let counters = std::mem::replace(&mut *j.pending.lock(), fresh);
        // Taken with the list, under its lock: the journal up to `upto` and no further.
        let entries: Vec<(Arc<Counter>, Folding)> = counters
            .into_iter()
            .filter_map(|c| {
                let f = c.folding.lock().take();
                f.map(|f| (c, f))
            })
            .collect();
        (entries, journal.map(|j| j.len()))
    };
    if entries.is_empty() {
        return true;
    }
    let done = store.usage_transaction(|tx| {
        let mut written = Vec::with_capacity(entries.len());
        for (counter, f) in &entries {
            let key_id = &*counter.key_id;
            let expected = *counter.stored.lock();
            let (remaining, at) = value(f.after);
            // The counter went on from what this process last wrote (else a write of
            // another process, found at an earlier fold, put the row elsewhere), and the
            // row still holds that.
            let landed = match expected {
                Some(e) if e == f.before => tx.set_key_credit_counter(key_id, value(e), remaining, at)?,
                _ => false,
            };
            if landed {
                written.push((counter, f, Some(f.after), false));
                continue;
            }
            // Another process wrote the row: the spends answered here apply to its value.
            let row = tx.key_credit_row(key_id)?;
            let now = row.and_then(|r| {
                Some(CounterValue { remaining: r.remaining?, last_refill_at: r.last_refill_at })
            });
            let next = now.map(|now| applied(f.before, f.after, now));
            if let Some(v) = next {
                tx.write_key_credits(&[(key_id, v.remaining, v.last_refill_at)])?;
            }
            written.push((counter, f, next, true));
        }
        Ok::<_, RbacError>(
            written.into_iter().map(|(counter, f, v, c)| (counter.clone(), f.seq, v, c)).collect::<Vec<_>>(),
        )
    });
    let written = match done {
        Ok(w) => w,
        Err(e) => {
            log::warn!("credit journal: {} counters not folded yet: {e}", entries.len());
            let mut pending = j.pending.lock();
            for (counter, f) in entries {
                let mut folding = counter.folding.lock();
                match &mut *folding {
                    Some(newer) => newer.before = f.before,
                    None => {
                        *folding = Some(f);
                        drop(folding);
                        pending.push(counter);
                    }
                }
            }
            return false;
        }
    };
    let mut max_seq = 0;
    let mut resets = Vec::new();
    for (counter, seq, v, conflict) in written {
        *counter.stored.lock() = v;
        max_seq = max_seq.max(seq);
        if conflict {
            counter.stale.store(true, Ordering::Release);
            resets.push((seq, counter));
        }
    }
    j.folded.fetch_max(max_seq, Ordering::AcqRel);
    // A fold is the journal's commit to the rows: its counters, one transaction.
    metrics::counter!("keygate_credit_commits_total").increment(1);
    metrics::histogram!("keygate_credit_commit_batch_size").record(entries.len() as f64);
    if let Some(journal) = j.journal.get() {
        let (path, len) = {
            let mut journal = journal.lock();
            for (seq, counter) in &resets {
                if let Err(e) = journal.push_reset(*seq, &counter.key_id) {
                    log::warn!("credit journal: a reset of {} not written: {e}", counter.key_id);
                }
            }
            (journal.path().to_path_buf(), journal.len())
        };
        // Compacted into a file made ready outside the journal's lock (spends go on
        // meanwhile); under it only what follows `upto` is copied, and the old file is
        // let go after it.
        if let Some(upto) = upto.filter(|upto| *upto > COMPACT_AT) {
            let compacted = Journal::spare(&path, len.saturating_sub(upto) as usize)
                .and_then(|spare| journal.lock().compact_into(upto, spare));
            if let Err(e) = compacted {
                log::warn!("credit journal: not compacted: {e}");
            }
        }
    }
    true
}

/// `before` -> `after` (one process's spends, and a refill among them) applied to a row
/// another process wrote since (`now`): the refill where the row was not refilled as late,
/// and the credits spent.
fn applied(before: CounterValue, after: CounterValue, now: CounterValue) -> CounterValue {
    if after.last_refill_at != before.last_refill_at && now.last_refill_at < after.last_refill_at {
        return after;
    }
    let spent = before.remaining.saturating_sub(after.remaining);
    CounterValue { remaining: now.remaining.saturating_sub(spent), last_refill_at: now.last_refill_at }
}

/// Every [`FOLD_EVERY`], while the ledger lives: folds, and steps aside when another
/// process asked.
pub(super) fn start(l: &Arc<MemoryLedger>) {
    if !l.journaling.owned() {
        return;
    }
    let weak = Arc::downgrade(l);
    let spawned = std::thread::Builder::new().name("keygate-fold".into()).spawn(move || {
        loop {
            std::thread::sleep(FOLD_EVERY);
            let Some(l) = weak.upgrade() else { return };
            tick(&l);
        }
    });
    if let Err(e) = spawned {
        log::error!("credit journal: no fold thread ({e}): counters are folded when read");
    }
}

fn tick(l: &MemoryLedger) {
    let j = &l.journaling;
    let Some(fold) = l.folder.get() else { return };
    let asked = j.on.load(Ordering::Acquire) && j.journal.get().is_some_and(|m| m.lock().asked());
    if !asked {
        return fold(l);
    }
    // Between two batches: the ones after are committed to the rows, after this fold.
    l.between_batches(|| {
        j.turn_off();
        fold(l);
    });
    j.empty_if_folded();
    if let Some(journal) = j.journal.get() {
        match journal.lock().stepped_aside() {
            Ok(()) => log::info!(
                "credit journal: another process spends on this database; spends are committed before their answers"
            ),
            Err(e) => log::warn!("credit journal: could not step aside: {e}"),
        }
    }
}

/// Takes the journal at `path` (`None`: another process owns it) and replays what it holds
/// onto the rows, emptying it: with how many keys' rows it wrote. On an error the journal
/// is left as it is (for the next process that opens the database) and not taken.
fn own_and_replay<S: UsageStore>(
    store: &S,
    path: &std::path::Path,
) -> Result<Option<(Journal, usize)>, String> {
    let at = path.display();
    let (mut journal, records) = match Journal::own(path) {
        Ok(Some(owned)) => owned,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("{at}: the credit journal cannot be opened: {e}")),
    };
    let n =
        replay(store, records).map_err(|e| format!("{at}: the credit journal could not be replayed: {e}"))?;
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
    Ok(own_and_replay(store, &path)?.map(|(_, n)| n))
}

/// Replays a journal's records onto the rows: for each key, its spends since its last
/// reset from where its row is ([`replayed`]): how many keys' rows it wrote.
fn replay<S: UsageStore>(store: &S, records: Vec<Record>) -> Result<usize, RbacError> {
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
