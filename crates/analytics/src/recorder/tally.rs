//! Counts kept beside a found key's cache entry (its `keygate_cache::verify::Tally`):
//! a verification of a key the cache holds, made without tags, adds to its tally, found
//! with the key, at no lookup in the table of series; the drains take due tallies as they
//! take due series.

use super::{MINUTE_MS, Outcome, Recorder, SHARDS, SeriesCount, SeriesRef, owned};
use keygate_rbac::{Snapshot, VerifyCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Recorder {
    /// Counts one verification of a found key, made without tags, beside the key's cache
    /// entry (its `keygate_cache::verify::Tally`): found with the key, no lookup
    /// of its own; the entry is queued for the drains when its tally gets its first count
    /// not yet taken. The entry's first verification (which makes the tally), one that
    /// finds the tally holding another minute's counts still, and one whose spent credits
    /// the tally's cannot add up to (past `u32::MAX`) are counted in the table
    /// ([`Self::record`]). `outcome` must be `key`'s.
    pub fn record_beside(&self, key: &Snapshot, outcome: &Outcome<'_>) {
        let (Some(tally), Ok(spent)) = (key.tally(), u32::try_from(outcome.spent_credits)) else {
            return self.record(outcome);
        };
        let minute = u32::try_from(outcome.at_ms / MINUTE_MS).unwrap_or(u32::MAX);
        let mut t = tally.0.lock();
        let new_minute = t.minute != minute;
        if new_minute {
            if t.queued {
                drop(t);
                return self.record(outcome);
            }
            t.minute = minute;
        }
        let Some(spent) = t.spent.checked_add(spent) else {
            drop(t);
            return self.record(outcome);
        };
        t.spent = spent;
        let count = &mut t.counts[outcome.code as usize];
        *count = count.saturating_add(1);
        let queue = !t.queued;
        if queue {
            t.queued = true;
            t.since = self.drains.load(Ordering::Relaxed) as u16;
        }
        drop(t);
        if queue {
            let at = Arc::as_ptr(key.entry()) as usize;
            self.queued[(at >> 7) % SHARDS].lock().push(key.clone());
        }
        if new_minute {
            self.note_minute(outcome.key_id, u64::from(minute) * MINUTE_MS);
        }
    }

    /// Takes the counts of the queued tallies whose first count not yet taken came at
    /// least `rounds` drains before `drain` (all with `None`), as series without tags (the
    /// spent credits with the VALID one: only a VALID verification is charged); the others
    /// stay queued.
    pub(super) fn drain_tallies(&self, drain: u64, rounds: Option<u64>, out: &mut Vec<SeriesCount>) {
        for shard in self.queued.iter() {
            let taken = std::mem::take(&mut *shard.lock());
            let mut kept = Vec::new();
            for key in taken {
                // (Queued, so its tally was made.)
                let Some(tally) = key.tally() else { continue };
                let mut t = tally.0.lock();
                let waited = u64::from((drain as u16).wrapping_sub(t.since));
                if rounds.is_some_and(|r| waited < r) {
                    drop(t);
                    kept.push(key);
                    continue;
                }
                let (minute, counts, spent) =
                    (t.minute, std::mem::take(&mut t.counts), std::mem::take(&mut t.spent));
                t.queued = false;
                drop(t);
                let k = key.key();
                let charged = |code: VerifyCode| if code == VerifyCode::Valid { u64::from(spent) } else { 0 };
                for (code, n) in
                    VerifyCode::ALL.into_iter().zip(counts).filter(|(c, n)| *n > 0 || charged(*c) > 0)
                {
                    let outcome = Outcome {
                        workspace_id: k.workspace_id(),
                        api_id: k.api_id(),
                        key_id: k.id(),
                        identity_id: k.identity_id(),
                        code,
                        tags: &[],
                        at_ms: u64::from(minute) * MINUTE_MS,
                        spent_credits: charged(code),
                    };
                    let series = SeriesRef { outcome: &outcome, tags: &[], minute: outcome.at_ms };
                    let hash = series.hash(&self.hasher);
                    out.push(SeriesCount {
                        series: owned(&series, hash),
                        count: u64::from(n),
                        spent_credits: charged(code),
                    });
                }
            }
            if !kept.is_empty() {
                shard.lock().extend(kept);
            }
        }
    }

    /// Lets go of the keys' latest minutes noted for tallies (whose counts are not let go
    /// series by series) once the minute is two behind `now_ms`: its counts were taken
    /// within seconds of its end, so the database tells it.
    pub(super) fn sweep_minutes(&self, now_ms: u64) {
        for shard in self.last_minutes.iter() {
            shard.lock().retain(|_, m| *m + 2 * MINUTE_MS > now_ms);
        }
    }
}
