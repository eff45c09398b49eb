//! Sliding windows and token buckets (API-v2.md §26) in Redis: one script call per
//! decision (`algorithms.lua`), on a blocking connection of the pool, with the same checks
//! as a fixed window's (the namespace's overrides epoch, the caller's change counter).
//! What the script answers is turned into the decision by the same arithmetic as the
//! in-process store's (`keygate_ratelimit::algorithm`), so both stores answer alike.
//!
//! A sliding window's counts live in the fixed windows' keys (`<budget>:<window start>`)
//! under the algorithm's mark, each kept for two windows; a bucket's instant in one key
//! (`<budget>:b`), kept until the bucket is full. On a Redis Cluster the checks are read
//! first, apart, as `limit_blocking` does; a budget's keys share its slot.

use super::{CounterGuard, EXPIRY_SLACK_MS, RedisStore, epoch_key};
use keygate_ratelimit::{
    Algorithm, AllOrNothing, BudgetKey, Checked, Decision, Entry, LimitRequest, StoreError, window_start,
};

/// The script (its layout is at its top).
pub(super) const ALGORITHMS: &str = include_str!("algorithms.lua");

impl RedisStore {
    /// The decision of a sliding or token-bucket budget, blocking. `overrides_epoch` and
    /// `guard` as in [`RedisStore::limit_batched`].
    pub fn decide_algorithm(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: Option<u64>,
        guard: Option<CounterGuard<'_>>,
    ) -> Result<Checked, StoreError> {
        let duration = req.duration.max(1);
        let limit = req.limit.max(1);
        let start = window_start(now_ms, duration);
        let mut checks: Vec<(char, String, u64)> = Vec::new();
        if let Some(g) = guard {
            checks.push(('c', self.counter_key(g.name), g.value));
            checks.push(('c', super::counters_epoch_key(&self.prefix), g.epoch));
        }
        if let Some(e) = overrides_epoch {
            checks.push(('o', epoch_key(&self.prefix, key.namespace_id), e));
        }
        let mut call = self.algorithm_script.prepare_invoke();
        let (first, second, into_or_q, r, ttl) = match key.algorithm {
            Algorithm::Sliding => {
                let current = self.algorithm_key(&key, &start.to_string());
                let previous = self.algorithm_key(&key, &start.saturating_sub(duration).to_string());
                let ttl = start.saturating_add(2 * duration).saturating_sub(now_ms) + EXPIRY_SLACK_MS;
                (current, previous, now_ms - start, 0, ttl)
            }
            Algorithm::TokenBucket => {
                let bucket = self.algorithm_key(&key, "b");
                let (q, r) = ratio(req.cost, duration, limit);
                // The bucket is full again at most a duration after its instant, which is at
                // most a duration (and this call's cost) after now.
                let ttl = duration.saturating_mul(2).saturating_add(q) + EXPIRY_SLACK_MS;
                (bucket.clone(), bucket, q, r, ttl)
            }
            Algorithm::Fixed => {
                return Err(StoreError::Unavailable("fixed windows decide in decide.lua".into()));
            }
        };
        let (one_q, one_r) = ratio(1, duration, limit);
        let name = if key.algorithm == Algorithm::Sliding { "sliding" } else { "bucket" };
        call.key(first).key(second);
        call.arg(name).arg(limit).arg(req.cost).arg(duration).arg(now_ms);
        call.arg(into_or_q).arg(r).arg(one_q).arg(one_r).arg(ttl);
        let reply: Vec<u64> = self.pool.with_conn(|c| {
            if self.cluster && !checks.is_empty() {
                // A cluster: the checks first (they live in the `{cc}` slot), then the
                // decision in the budget's slot.
                let keys: Vec<&str> = checks.iter().map(|(_, k, _)| k.as_str()).collect();
                let values: Vec<Option<u64>> = redis::cmd("MGET").arg(keys).query(c)?;
                let stale =
                    checks.iter().zip(&values).filter(|((_, _, want), got)| got.unwrap_or(0) != *want);
                if let Some(worst) = stale.map(|((kind, _, _), _)| if *kind == 'c' { 3 } else { 2 }).max() {
                    return Ok(vec![worst, 0, 0]);
                }
                return super::script::invoke_loaded(&call, c);
            }
            let kinds: String = checks.iter().map(|(kind, _, _)| *kind).collect();
            call.arg(kinds);
            for (_, k, value) in &checks {
                call.key(k.as_str()).arg(*value);
            }
            super::script::invoke_loaded(&call, c)
        })?;
        let &[answer, a, b] = reply.as_slice() else {
            return Err(StoreError::Unavailable("Redis: unexpected script answer".into()));
        };
        Ok(match answer {
            2 => Checked::StaleOverrides,
            3 => Checked::StaleCounter,
            _ => Checked::Decided(decision(key.algorithm, req, now_ms, start, answer == 1, a, b)),
        })
    }

    /// Several budgets all or nothing when some are sliding windows or buckets: taken one
    /// at a time, each in one script call (any slots), and on the first that does not fit
    /// the ones taken before it are given back, the ones after it only read (cost 0: the
    /// decision says whether their cost would have fitted). The outcome is all or nothing;
    /// a concurrent decision may see a budget taken for an instant and given back (a
    /// denial, never an admission: no budget ever holds more than its algorithm allows).
    /// `None` when a namespace's overrides changed since the caller read them (what was
    /// taken given back).
    pub(super) fn limit_all_in_turn(
        &self,
        entries: &[Entry<'_>],
        epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<AllOrNothing>, StoreError> {
        let epoch =
            |key: &BudgetKey<'_>| epochs.iter().find(|(ns, _)| *ns == key.namespace_id.as_str()).map(|e| e.1);
        let mut decisions: Vec<Decision> = Vec::with_capacity(entries.len());
        let mut failed = None;
        for (i, (key, req)) in entries.iter().enumerate() {
            let req = if failed.is_some() { LimitRequest { cost: 0, ..*req } } else { *req };
            let checked = match self.limit_blocking(*key, req, now_ms, epoch(key)) {
                Ok(c) => c,
                Err(e) => {
                    self.give_back_blocking(&entries[..failed.unwrap_or(i)], now_ms)?;
                    return Err(e);
                }
            };
            match checked {
                Checked::Decided(d) if failed.is_some() => {
                    let cost = entries[i].1.cost;
                    decisions.push(Decision { success: d.remaining >= cost.max(1), ..d });
                }
                Checked::Decided(d) => {
                    if !d.success {
                        failed = Some(i);
                    }
                    decisions.push(d);
                }
                Checked::StaleOverrides | Checked::StaleCounter => {
                    self.give_back_blocking(&entries[..failed.unwrap_or(i)], now_ms)?;
                    return Ok(None);
                }
            }
        }
        if let Some(f) = failed {
            self.give_back_blocking(&entries[..f], now_ms)?;
            for (d, (_, req)) in decisions.iter_mut().zip(entries).take(f) {
                d.remaining = d.remaining.saturating_add(req.cost).min(d.limit);
            }
        }
        Ok(Some(AllOrNothing { passed: failed.is_none(), decisions }))
    }

    /// Gives back the tokens a sliding window or a bucket took (`req.cost`, at `now_ms`: the
    /// decision's), one script call.
    pub(super) fn give_back_algorithm(
        &self,
        key: &BudgetKey<'_>,
        req: &LimitRequest,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let (duration, limit) = (req.duration.max(1), req.limit.max(1));
        let (mode, target, q, r) = match key.algorithm {
            Algorithm::Sliding => {
                ("sliding_back", self.algorithm_key(key, &window_start(now_ms, duration).to_string()), 0, 0)
            }
            Algorithm::TokenBucket => {
                let (q, r) = ratio(req.cost, duration, limit);
                ("bucket_back", self.algorithm_key(key, "b"), q, r)
            }
            Algorithm::Fixed => return Ok(()),
        };
        let mut call = self.algorithm_script.prepare_invoke();
        call.key(target.clone()).key(target);
        call.arg(mode).arg(limit).arg(req.cost).arg(duration).arg(now_ms).arg(q).arg(r);
        self.pool.with_conn(|c| super::script::invoke_loaded::<Vec<u64>>(&call, c)).map(drop)
    }

    /// `<prefix>{<namespace>:<duration>:<identifier>}:<algorithm>:<part>`: in the budget's
    /// slot, apart from its fixed windows' keys.
    fn algorithm_key(&self, key: &BudgetKey<'_>, part: &str) -> Vec<u8> {
        let mut k = self.key(key, 0);
        // `key` ends in ":0" (the window start given): replace it by the algorithm's mark.
        k.truncate(k.len() - 1);
        k.extend_from_slice(key.algorithm.as_str().as_bytes());
        k.push(b':');
        k.extend_from_slice(part.as_bytes());
        k
    }
}

/// The batched path decides fixed windows only: a budget of another algorithm (`sliding`,
/// `token_bucket`: API-v2.md §26) is refused there, nothing decided, rather than decided
/// under the wrong rule (the server sends those to [`RedisStore::decide_algorithm`]).
pub(super) fn fixed_only(key: &BudgetKey<'_>) -> Result<(), StoreError> {
    match key.algorithm {
        keygate_ratelimit::Algorithm::Fixed => Ok(()),
        other => Err(StoreError::CannotAtomically(format!(
            "namespace {}: the {other} algorithm is decided one budget at a time",
            key.namespace_id
        ))),
    }
}

/// `x·D / L` as whole ms and a remainder in 1/L ms (u128: no overflow).
fn ratio(x: u64, duration: u64, limit: u64) -> (u64, u64) {
    let n = u128::from(x) * u128::from(duration);
    let l = u128::from(limit);
    (u64::try_from(n / l).unwrap_or(u64::MAX), (n % l) as u64)
}

/// The decision from the script's answer, by the in-process store's arithmetic.
fn decision(
    algorithm: Algorithm,
    req: LimitRequest,
    now_ms: u64,
    start: u64,
    success: bool,
    a: u64,
    b: u64,
) -> Decision {
    let duration = req.duration.max(1);
    match algorithm {
        Algorithm::Sliding => Decision {
            success,
            limit: req.limit,
            remaining: req.limit.saturating_sub(a).saturating_sub(b),
            reset: start.saturating_add(duration),
        },
        _ => {
            // The bucket's state after the call; a cost-0 read of it gives remaining and
            // reset exactly as `decide_bucket` computes them.
            let state = keygate_ratelimit::WindowState { start: a, used: b };
            let read = LimitRequest { cost: 0, ..req };
            let (_, d) = keygate_ratelimit::decide_bucket(Some(state), read, now_ms);
            Decision { success, ..d }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_exact_for_the_largest_numbers() {
        let max = (1u64 << 53) - 1;
        assert_eq!(ratio(max, 2_592_000_000, max), (2_592_000_000, 0));
        assert_eq!(ratio(1, 1_000, 3), (333, 1));
        assert_eq!(ratio(2, 1_000, 3), (666, 2));
    }
}
