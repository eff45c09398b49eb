//! The counts of sliding windows that have ended, kept by the instance that read them, so
//! that a sliding decision costs Redis one command (the current window's `INCRBY`) like a
//! fixed window's, rather than two (the previous window's `GET` too).
//!
//! A window's count stops changing when the window ends: every instance then counts in the
//! next one. The count a decision read from Redis is kept once the decision's window is
//! [`SETTLED_MS`] old (so an instance whose clock is up to that much behind has stopped
//! adding to the previous window too) and sent with the budget's later decisions in that
//! window, which then leave the previous window unread. A budget keeps one count (the
//! window before its latest), forgotten when this instance's clock comes back into that
//! window (a clock stepped back adds to it again) and when its window is over. A count
//! kept higher than Redis's (Redis restarted or evicted the key) only denies sooner.
//!
//! Memory is bounded: [`SHARDS`] × [`PER_SHARD`] budgets, past which a shard drops the
//! counts whose window is over, and when none is, keeps no more (those budgets read
//! Redis, as before). A full shard is swept only when its earliest count is over, and at
//! most once every [`SWEEP_MS`]: a decision never pays for scanning a full shard of live
//! budgets (one tenant's many budgets cannot make every other decision slower).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// How old a decision's window must be before the previous window's count it read is
/// kept and used: the most the instances' clocks may disagree for sliding windows to stay
/// exact across them (docs/operations.md).
pub const SETTLED_MS: u64 = 1_000;

const SHARDS: usize = 16;
const PER_SHARD: usize = 4_096;
/// The least time between two sweeps of one shard.
const SWEEP_MS: u64 = 1_000;

#[derive(Debug, Clone, Copy)]
struct Ended {
    /// The window's start and its count.
    start: u64,
    count: u64,
    /// When the window after it ends: past that the count is of no use.
    until: u64,
}

/// Per budget (its keys' common part, up to the window start), the count of a window
/// that has ended; and when a sweep of a full shard may free room.
#[derive(Debug, Default)]
struct Counts {
    ended: HashMap<Box<[u8]>, Ended>,
    /// No count is over before this (the least `until` at the last sweep, lowered by
    /// inserts), and no sweep runs before `next_sweep` either.
    earliest_until: u64,
    next_sweep: u64,
    sweeps: usize,
}

impl Counts {
    /// Drops the counts whose window is over, when some may be and the last sweep is
    /// [`SWEEP_MS`] old.
    fn sweep(&mut self, now_ms: u64) {
        if now_ms < self.earliest_until || now_ms < self.next_sweep {
            return;
        }
        self.sweeps += 1;
        self.next_sweep = now_ms.saturating_add(SWEEP_MS);
        self.ended.retain(|_, e| e.until > now_ms);
        self.earliest_until = self.ended.values().map(|e| e.until).min().unwrap_or(0);
    }
}

type Shard = Mutex<Counts>;

/// The counts kept, in shards by budget.
#[derive(Debug)]
pub(super) struct Finished {
    shards: Box<[Shard]>,
    hasher: foldhash::fast::FixedState,
}

impl Default for Finished {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::FixedState::default(),
        }
    }
}

impl Finished {
    fn shard(&self, budget: &[u8]) -> &Shard {
        &self.shards[self.hasher.hash_one(budget) as usize % SHARDS]
    }

    /// The count of `budget`'s window before the one starting at `start` (of `duration`)
    /// when kept and `now_ms` is [`SETTLED_MS`] into that window. Forgets a count of the
    /// window starting at `start` or later (the clock came back into it).
    pub(super) fn previous(&self, budget: &[u8], start: u64, duration: u64, now_ms: u64) -> Option<u64> {
        let mut shard = self.shard(budget).lock();
        let ended = *shard.ended.get(budget)?;
        if ended.start >= start {
            shard.ended.remove(budget);
            return None;
        }
        let settled = now_ms.saturating_sub(start) >= SETTLED_MS;
        (settled && ended.start.saturating_add(duration) == start).then_some(ended.count)
    }

    /// Whether a decision at `now_ms` in the window starting at `start` keeps the previous
    /// window's count it reads.
    pub(super) fn keeps(start: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(start) >= SETTLED_MS
    }

    /// Keeps `count`, read by a decision in the window starting at `start`, as the count
    /// of `budget`'s window before it.
    pub(super) fn learn(&self, budget: &[u8], start: u64, duration: u64, count: u64, now_ms: u64) {
        let Some(previous) = start.checked_sub(duration) else { return };
        let ended = Ended { start: previous, count, until: start.saturating_add(duration) };
        let mut shard = self.shard(budget).lock();
        if let Some(kept) = shard.ended.get_mut(budget) {
            if kept.start <= previous {
                *kept = ended;
            }
            return;
        }
        if shard.ended.len() >= PER_SHARD {
            shard.sweep(now_ms);
            if shard.ended.len() >= PER_SHARD {
                return;
            }
        }
        if shard.ended.is_empty() || ended.until < shard.earliest_until {
            shard.earliest_until = ended.until;
        }
        shard.ended.insert(budget.into(), ended);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().ended.len()).sum()
    }

    #[cfg(test)]
    fn sweeps(&self) -> usize {
        self.shards.iter().map(|s| s.lock().sweeps).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: u64 = 60_000;

    #[test]
    fn a_count_is_used_once_settled_in_the_next_window_only() {
        let f = Finished::default();
        f.learn(b"a", 120_000, D, 7, 121_500);
        assert_eq!(f.previous(b"a", 120_000, D, 120_999), None, "not yet settled");
        assert_eq!(f.previous(b"a", 120_000, D, 121_000), Some(7));
        assert_eq!(f.previous(b"a", 180_000, D, 181_000), None, "two windows on: another previous");
        assert_eq!(f.previous(b"b", 120_000, D, 121_000), None);
        // A later window's count replaces it; an earlier one does not.
        f.learn(b"a", 180_000, D, 3, 181_000);
        f.learn(b"a", 120_000, D, 9, 181_000);
        assert_eq!(f.previous(b"a", 180_000, D, 181_000), Some(3));
    }

    #[test]
    fn a_clock_back_in_the_kept_window_forgets_it() {
        let f = Finished::default();
        f.learn(b"a", 120_000, D, 7, 121_500);
        // The clock stepped back into the window of the kept count: it changes again.
        assert_eq!(f.previous(b"a", 60_000, D, 61_500), None);
        assert_eq!(f.previous(b"a", 120_000, D, 121_500), None, "forgotten");
    }

    #[test]
    fn memory_is_bounded_and_ended_counts_make_room() {
        let f = Finished::default();
        for i in 0..(SHARDS * PER_SHARD * 2) as u64 {
            f.learn(&i.to_be_bytes(), 120_000, D, i, 121_000);
        }
        assert!(f.len() <= SHARDS * PER_SHARD);
        // Once those windows are over (after 180 s), new budgets take their places.
        for i in 0..1_000u64 {
            f.learn(format!("n{i}").as_bytes(), 240_000, D, i, 241_000);
        }
        assert_eq!(f.previous(b"n999", 240_000, D, 241_000), Some(999));
    }

    #[test]
    fn a_full_shard_of_live_counts_is_not_swept_for_each_new_budget() {
        let f = Finished::default();
        for i in 0..(SHARDS * PER_SHARD * 2) as u64 {
            f.learn(&i.to_be_bytes(), 120_000, D, i, 121_000);
        }
        assert_eq!(f.sweeps(), 0, "no count was over: nothing to sweep");
        // Counts of a shorter window end sooner; once they are over a full shard is swept
        // once, not again while its earliest count is live, however many budgets come.
        let f = Finished::default();
        for i in 0..(SHARDS * PER_SHARD) as u64 {
            let duration = if i % 2 == 0 { 1_000 } else { D };
            f.learn(&i.to_be_bytes(), 120_000, duration, i, 120_000);
        }
        for i in 0..100_000u64 {
            f.learn(format!("n{i}").as_bytes(), 120_000, D, i, 121_000 + i / 2_000);
        }
        assert_eq!(f.sweeps(), SHARDS, "each shard swept once");
        assert!(f.len() <= SHARDS * PER_SHARD);
        assert_eq!(f.previous(b"n0", 120_000, D, 121_000), Some(0), "the short windows made room");
    }
}
