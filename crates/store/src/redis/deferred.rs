//! `async: true` (contract §5.8): decisions answered from local state at once, reconciled
//! with Redis in the background.
//!
//! # What is kept
//! For each budget window an async request has touched, this instance keeps:
//! - `redis`: the count Redis answered for the newest of this instance's calls on that
//!   window (calls are numbered in the order they reach Redis: one budget, one lane, one
//!   connection, see `batch.rs`);
//! - `sent`: the tokens admitted here and sent (a flush) but not in that answer;
//! - `pending`: the tokens admitted here and not sent yet;
//! - how many synchronous decisions on it are in flight.
//!
//! `redis + sent + pending` is what this instance knows to be used. An async request is
//! decided on it by [`keygate_ratelimit::decide`] (the one decision rule), and a passing one
//! adds its cost to `pending`. A flush, every sync interval while anything is pending, sends
//! the pending tokens of every window as an unconditional add, many in one script call
//! (`decide.lua` with a limit no count reaches).
//!
//! # Exact on one instance
//! With one instance every token is counted here, so the view is the true count and an
//! async answer is what a sync one would be. To keep that when sync and async requests mix:
//! - a sync decision on a window with pending tokens sends them first, on the same
//!   connection, so Redis decides it with them counted;
//! - while a sync decision on a window is in flight (its cost may or may not be charged),
//!   async requests on that window wait for Redis like sync ones;
//! - a window this instance has no answer for yet (the first request, or the first after a
//!   window rolled over) is decided in Redis, which tells the count;
//! - every sync decision is queued under its window's lock here, so one that was queued
//!   before this instance started keeping the window comes before the answer it learns
//!   the window from (and so is counted in it).
//!
//! # Several instances: the bound on over-admission
//! Each instance counts the others' tokens only once they reach Redis and an answer on that
//! window brings them back. An instance that admits tokens flushes within the sync interval
//! `T` and has the answer after one round trip `r`, so its view misses at most what the
//! other instances admitted during the last `T + r` and had not flushed yet (their own
//! `T + r`). With `N` instances, each receiving async requests for one budget at up to `ρ`
//! tokens per millisecond, the tokens passed in a window exceed `limit` by at most
//! `(N - 1) · min(limit, 2 · ρ · (T + r))`; never by more than `(N - 1) · limit` (no instance
//! passes more than `limit` itself, since its view counts all its own tokens). With `N = 1`
//! the bound is zero. `docs/api.md` states it, and a three-instance test measures it.
//!
//! # Failures
//! While Redis is unreachable (the shared outage mark), async requests go the sync way (503,
//! or the fail-open pass). A flush that fails puts its tokens back into `pending`: they
//! are sent by a later flush. Windows are dropped by the sweep once ended.

use super::{Answer, Call};
use keygate_ratelimit::{Decision, LimitRequest, WindowState, decide};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Shards of the windows' map (one lock each).
const SHARDS: usize = 64;

/// One shard of the windows, by their Redis key.
pub(super) type Shard = HashMap<Box<[u8]>, Window>;

/// The windows async requests have touched.
#[derive(Debug)]
pub(super) struct Deferred {
    shards: Box<[Mutex<Shard>]>,
    hasher: foldhash::fast::RandomState,
    /// How many windows are kept (0: an answer skips the lookup).
    windows: AtomicUsize,
    /// Windows with pending tokens, for the next flush.
    dirty: Mutex<Vec<Box<[u8]>>>,
    /// Whether a flush task is running.
    pub(super) flushing: AtomicBool,
    /// Flush calls queued and not answered yet (see [`Self::take_dirty`]).
    unanswered: AtomicUsize,
}

#[derive(Debug, Default)]
pub(super) struct Window {
    /// The call number of the newest answer in `redis` (0: none yet).
    redis_seq: u64,
    redis: u64,
    /// Flushes in flight: call number and tokens.
    sent: Vec<(u64, u64)>,
    pending: u64,
    syncs_in_flight: u32,
    /// The window's end (ms since the epoch), for the sweep.
    reset: u64,
    /// How long Redis keeps the window's key (as of the latest async request), for a flush.
    ttl: u64,
}

impl Window {
    /// What this instance knows to be used.
    fn used(&self) -> u64 {
        let unanswered: u64 = self.sent.iter().filter(|(seq, _)| *seq > self.redis_seq).map(|(_, n)| n).sum();
        self.redis.saturating_add(unanswered).saturating_add(self.pending)
    }

    fn answered(&mut self, seq: u64, used: u64) {
        if seq > self.redis_seq {
            (self.redis_seq, self.redis) = (seq, used);
        }
    }
}

/// What [`Deferred::decide`] found.
#[derive(Debug)]
pub(super) enum Local {
    /// Decided here; `flush`: the caller must make sure a flush runs.
    Decided { decision: Decision, flush: bool },
    /// Ask Redis (as a sync decision would).
    AskRedis,
}

impl Default for Deferred {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Default::default(),
            windows: AtomicUsize::new(0),
            dirty: Mutex::default(),
            flushing: AtomicBool::new(false),
            unanswered: AtomicUsize::new(0),
        }
    }
}

impl Deferred {
    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// An async request on the window `key` (which starts at `start`).
    pub(super) fn decide(&self, key: &[u8], start: u64, req: LimitRequest, now_ms: u64) -> Local {
        let mut shard = self.shard(key).lock();
        let window = match shard.get_mut(key) {
            Some(w) => w,
            None => {
                self.windows.fetch_add(1, Ordering::Relaxed);
                let reset = start.saturating_add(req.duration.max(1));
                shard.entry(key.into()).or_insert(Window { reset, ..Window::default() })
            }
        };
        if window.redis_seq == 0 || window.syncs_in_flight > 0 {
            return Local::AskRedis;
        }
        let used = window.used();
        let (after, decision) = decide(Some(WindowState { start, used }), req, now_ms);
        let charged = after.used.saturating_sub(used);
        let flush = charged > 0 && window.pending == 0;
        window.pending += charged;
        window.ttl = window.reset.saturating_sub(now_ms) + super::EXPIRY_SLACK_MS;
        drop(shard);
        if flush {
            self.dirty.lock().push(key.into());
        }
        Local::Decided { decision, flush }
    }

    /// Takes a window's pending tokens for a flush (`None`: none, or no such window).
    pub(super) fn take_pending(shard: &mut Shard, key: &[u8]) -> Option<(u64, u64)> {
        let window = shard.get_mut(key)?;
        if window.pending == 0 {
            return None;
        }
        Some((std::mem::take(&mut window.pending), window.ttl))
    }

    /// A flush of `tokens` on `key` could not be queued: they stay pending.
    pub(super) fn flush_refused(&self, shard: &mut Shard, key: &[u8], tokens: u64) {
        if let Some(w) = shard.get_mut(key) {
            w.pending += tokens;
            self.dirty.lock().push(key.into());
        }
    }

    /// A flush of `tokens` on `key` was queued as call `seq`.
    pub(super) fn flush_queued(&self, shard: &mut Shard, key: &[u8], seq: u64, tokens: u64) {
        self.unanswered.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = shard.get_mut(key) {
            w.sent.push((seq, tokens));
        }
    }

    /// A sync decision on `key` was queued.
    pub(super) fn sync_queued(shard: &mut Shard, key: &[u8]) {
        if let Some(w) = shard.get_mut(key) {
            w.syncs_in_flight += 1;
        }
    }

    /// Windows with pending tokens, taken for a flush: the oldest first, so many that at
    /// most `most` flush calls are unanswered at once (the rest wait for a later flush).
    pub(super) fn take_dirty(&self, most: usize) -> Vec<Box<[u8]>> {
        let most = most.saturating_sub(self.unanswered.load(Ordering::Relaxed));
        let mut dirty = self.dirty.lock();
        match dirty.len() <= most {
            true => std::mem::take(&mut *dirty),
            false => dirty.drain(..most).collect(),
        }
    }

    /// A flush found nothing to send: clears [`Self::flushing`], unless a window became
    /// dirty meanwhile (whoever dirtied it found a flush running and started none) and
    /// this flush takes it on. Whether to go on.
    pub(super) fn flush_goes_on(&self) -> bool {
        self.flushing.store(false, Ordering::Release);
        !self.dirty.lock().is_empty() && !self.flushing.swap(true, Ordering::AcqRel)
    }

    pub(super) fn shard_of(&self, key: &[u8]) -> parking_lot::MutexGuard<'_, Shard> {
        self.shard(key).lock()
    }

    /// Redis answered call `call` (numbered `seq`), or it failed; the batcher calls this in
    /// the order its calls were sent, before answering them.
    pub(super) fn observe(&self, call: &Call, seq: u64, answer: Option<Answer>) {
        if call.flush {
            self.unanswered.fetch_sub(1, Ordering::Relaxed);
        }
        if self.windows.load(Ordering::Relaxed) == 0 || !(call.flush || call.deferred) {
            return;
        }
        let mut shard = self.shard(&call.key).lock();
        let Some(window) = shard.get_mut(call.key.as_slice()) else { return };
        if call.flush {
            window.sent.retain(|(s, _)| *s != seq);
            if answer.is_none() {
                // The next flush sends the tokens again. (A call whose reply was lost may
                // have counted: sending again can count them twice, which denies more,
                // never fewer.)
                let first = window.pending == 0;
                window.pending += call.cost;
                drop(shard);
                if first {
                    self.dirty.lock().push(call.key.as_slice().into());
                }
                return;
            }
        } else {
            window.syncs_in_flight = window.syncs_in_flight.saturating_sub(1);
        }
        if let Some(Answer::Decided { used, .. }) = answer {
            window.answered(seq, used);
        }
    }

    /// Drops the windows that ended by `now_ms`.
    pub(super) fn sweep(&self, now_ms: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(|_, w| w.reset > now_ms || w.syncs_in_flight > 0 || !w.sent.is_empty());
            self.windows.fetch_sub(before - shard.len(), Ordering::Relaxed);
        }
    }
}

/// The bound on over-admission by `async: true` requests (see the module docs): how many
/// tokens a window may pass over `limit` with `instances` instances, each passing async
/// requests for the budget at up to `rate_per_ms` tokens per millisecond, sync interval
/// `sync_interval_ms` and Redis round trip `round_trip_ms`:
/// `(N - 1) · min(limit, 2 · ρ · (T + r))`.
pub fn async_overshoot_bound(
    instances: u64,
    limit: u64,
    rate_per_ms: f64,
    sync_interval_ms: f64,
    round_trip_ms: f64,
) -> f64 {
    let per_instance = (2.0 * rate_per_ms * (sync_interval_ms + round_trip_ms)).min(limit as f64);
    instances.saturating_sub(1) as f64 * per_instance
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_takes_no_more_than_its_share_of_unanswered_calls() {
        let d = Deferred::default();
        d.dirty.lock().extend((0..10u32).map(|i| i.to_be_bytes().to_vec().into_boxed_slice()));
        assert_eq!(d.take_dirty(4).len(), 4, "at most the share");
        d.unanswered.store(3, Ordering::Relaxed);
        assert_eq!(d.take_dirty(4).len(), 1, "less what is still unanswered");
        d.unanswered.store(9, Ordering::Relaxed);
        assert!(d.take_dirty(4).is_empty());
        d.unanswered.store(0, Ordering::Relaxed);
        assert_eq!(d.take_dirty(100).len(), 5, "the rest, oldest first");
        assert!(d.dirty.lock().is_empty());
    }

    #[test]
    fn the_overshoot_bound_is_zero_on_one_instance_and_at_most_a_limit_per_other_instance() {
        assert_eq!(async_overshoot_bound(1, 1_000, 50.0, 10.0, 1.0), 0.0);
        // 2 tokens/ms for 10 + 1 ms: 44 tokens per other instance.
        assert_eq!(async_overshoot_bound(3, 1_000, 2.0, 10.0, 1.0), 88.0);
        assert_eq!(async_overshoot_bound(3, 10, 2.0, 10.0, 1.0), 20.0, "capped at the limit");
        assert_eq!(async_overshoot_bound(0, 10, 2.0, 10.0, 1.0), 0.0);
    }
}
