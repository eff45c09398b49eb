//! The memory ledger's credit journal at work ([`super::journal`] is the file,
//! [`super::journaling`] its state): a paid spend is answered once appended to the journal
//! (as it is decided, under its counter's lock: no wait for a commit), and the counters are
//! folded into the keys' rows behind, every [`FOLD_EVERY`] and before anything reads or
//! writes a row the journal is ahead of ([`MemoryLedger::flush`]). Where there is no journal
//! (a database that is not a file), where another process owns it, or once this process
//! stepped aside for another, each batch is committed to the rows before its answer
//! ([`commit_counters`]).

use super::SpendEvents;
use super::counter::{Counter, CounterValue, Folding};
use super::journal::{COMPACT_AT, FOLD_EVERY, Journal};
use super::journaling::{Journaling, applied, value};
use super::memory::{CounterWrite, MemoryLedger, commit_counters};
use crate::store::UsageStore;
use keygate_rbac::{CreditChange, RbacError, StorageError};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The memory ledger of `store`'s keys, with the credit journal of its database where it
/// has one and no other process owns it (what the journal holds replayed onto the rows
/// first), folded behind by a thread of its own.
pub(crate) fn memory_ledger<S: UsageStore + 'static>(
    store: &Arc<S>,
    events: SpendEvents,
) -> Arc<MemoryLedger> {
    let (s, t) = (store.clone(), store.clone());
    let (commit_events, fold_events) = (events.clone(), events.clone());
    let ledger = MemoryLedger::new(
        store,
        Journaling::open(&**store, events.clone()),
        Box::new(move |l: &MemoryLedger, batch| commit(l, &*s, batch, &commit_events)),
        Box::new(move |l: &MemoryLedger| {
            fold(l, &*t, &fold_events);
        }),
    );
    ledger.set_row_events(events);
    start(&ledger);
    ledger
}

/// The memory ledger's commit of a batch of spends, to the rows (spends queued while the
/// journal is off; a journaled spend is not queued).
pub(super) fn commit<S: UsageStore>(
    l: &MemoryLedger,
    store: &S,
    batch: Vec<CounterWrite>,
    events: &SpendEvents,
) {
    let j = &l.journaling;
    // The journaled counters reach the rows before any later value does.
    if !j.pending.lock().is_empty() && !fold(l, store, events) {
        let e = StorageError::Unavailable("the credit journal could not be folded".into());
        for w in batch {
            w.counter.stale.store(true, Ordering::Release);
            if let Some(reply) = w.reply {
                let _ = reply.send(Err(e.clone()));
            }
        }
        return;
    }
    commit_counters(l, store, batch, events)
}

/// Folds the journaled counters into the rows, in one transaction: each where the row
/// is as this process last wrote it, else (another process wrote it since) this process's
/// spends applied to what the row holds. Whether it went (else they wait for the next).
pub(super) fn fold<S: UsageStore>(l: &MemoryLedger, store: &S, events: &SpendEvents) -> bool {
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
        if events.on() {
            let changes: Vec<CreditChange<'_>> = written
                .iter()
                .filter_map(|(counter, f, v, conflict)| {
                    let before = if *conflict { None } else { Some(f.before) };
                    Some(CreditChange::of(&counter.key_id, value(before?), value((*v)?)))
                })
                .collect();
            events.written(tx, &changes)?;
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
