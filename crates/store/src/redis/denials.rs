//! The local cache of denials: exact, because within a window a budget's count only grows.
//!
//! Once Redis has answered that a budget is exhausted (a denial, or a pass that used the
//! last token), the count it reported is kept here (an in-process [`MemoryStore`] of
//! reported counts). A later request on the same budget and window whose cost does not fit
//! in `limit - reported` would be denied by Redis too, so it is denied here without a round
//! trip ([`deny_from_known`]). It never denies what Redis would pass; only `remaining` may
//! be above Redis's (it is computed from the reported count).
//!
//! The request's limit comes from the namespace's overrides as this instance loaded them,
//! under an overrides epoch; Redis checks that epoch on every decision it makes. A local
//! denial checks it against the epoch Redis last confirmed, by an answer or by the poll
//! ([`RedisStore::poll_overrides_epochs`], every 50 ms in the server), and only while that
//! confirmation is at most [`MAX_EPOCH_AGE`] old. So an override changed on another
//! instance reaches the budgets this one denies locally within one poll (and when Redis is
//! unreachable, local denials stop after [`MAX_EPOCH_AGE`]: requests go to Redis and get
//! its 503, or the fail-open pass).

use super::{Answer, RedisStore};
use keygate_ratelimit::{
    BudgetKey, Decision, LimitRequest, MemoryStore, RateLimitStore as _, StoreError, deny_from_known,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an epoch confirmation lets local denials go on.
pub const MAX_EPOCH_AGE: Duration = Duration::from_millis(250);

/// How long a namespace stays watched (its epoch polled) after its last recorded denial.
const WATCH_FOR: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
pub(super) struct Denials {
    counts: MemoryStore,
    epochs: Mutex<HashMap<Arc<String>, Confirmed>>,
}

#[derive(Debug, Clone, Copy)]
struct Confirmed {
    epoch: u64,
    at: Instant,
    last_recorded: Instant,
}

impl Denials {
    /// The denial Redis would give, when it can be known here.
    pub(super) fn deny(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        epoch: Option<u64>,
    ) -> Option<Decision> {
        let epoch = epoch?;
        let known = self.counts.known(key, now_ms)?;
        let confirmed = *self.epochs.lock().get(key.namespace_id)?;
        if confirmed.epoch != epoch || confirmed.at.elapsed() > MAX_EPOCH_AGE {
            return None;
        }
        deny_from_known(known, req, now_ms)
    }

    /// Keeps what Redis answered for an exhausted budget (`start`: its window's start).
    pub(super) fn record(
        &self,
        key: BudgetKey<'_>,
        start: u64,
        req: LimitRequest,
        epoch: Option<u64>,
        answer: Answer,
    ) {
        let (Answer::Decided { success, used }, Some(epoch)) = (answer, epoch) else { return };
        if success && used < req.limit {
            return;
        }
        self.counts.observe(key, start, used);
        let now = Instant::now();
        let mut epochs = self.epochs.lock();
        match epochs.get_mut(key.namespace_id) {
            // An answer only confirms its own epoch; epochs rise, so one older than the
            // confirmed one is an answer that was overtaken.
            Some(c) if c.epoch > epoch => c.last_recorded = now,
            Some(c) => *c = Confirmed { epoch, at: now, last_recorded: now },
            None => {
                epochs.insert(key.namespace_id.clone(), Confirmed { epoch, at: now, last_recorded: now });
            }
        }
    }

    pub(super) fn sweep(&self, now_ms: u64) {
        self.counts.sweep(now_ms);
    }
}

impl RedisStore {
    /// Reads the overrides epochs of the namespaces with local denials (one `MGET`) and
    /// confirms them; namespaces without a denial for a while are no longer watched. The
    /// server calls this every 50 ms.
    pub fn poll_overrides_epochs(&self) -> Result<(), StoreError> {
        let Some(denials) = &self.denials else { return Ok(()) };
        let watched: Vec<Arc<String>> = {
            let mut epochs = denials.epochs.lock();
            epochs.retain(|_, c| c.last_recorded.elapsed() < WATCH_FOR);
            epochs.keys().cloned().collect()
        };
        if watched.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = watched.iter().map(|ns| super::epoch_key(&self.prefix, ns)).collect();
        let values: Vec<Option<u64>> = self.pool.with_conn(|c| redis::cmd("MGET").arg(&keys).query(c))?;
        let now = Instant::now();
        let mut epochs = denials.epochs.lock();
        for (ns, value) in watched.iter().zip(values) {
            if let Some(c) = epochs.get_mut(ns) {
                c.epoch = value.unwrap_or(0);
                c.at = now;
            }
        }
        Ok(())
    }
}
