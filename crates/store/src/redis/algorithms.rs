//! Sliding windows and token buckets (API-v2.md §26) in Redis: decided by the same script
//! as fixed windows (`decide.lua`, after `algorithms.lua`'s functions), batched with them on
//! the hot path ([`RedisStore::limit_batched`]), with the same checks (the namespace's
//! overrides epoch, the caller's change counter). What the script answers is turned into
//! the decision by the same arithmetic as the in-process store's
//! (`keygate_ratelimit::algorithm`), so both stores answer alike.
//!
//! A sliding window's counts live in the fixed windows' keys (`<budget>:<window start>`)
//! under the algorithm's mark, each kept for two windows; once a window has settled, the
//! previous one's count is kept by the instance that read it (`finished.rs`) and not read
//! again. A bucket's instant lives in one key
//! (`<budget>:b`), kept until the bucket is full. A budget's keys share its slot.

use super::finished::Finished;
use super::{Answer, Call, CounterGuard, EXPIRY_SLACK_MS, Guard, RedisStore};
use keygate_ratelimit::{
    Algorithm, AllOrNothing, BudgetKey, Checked, Decision, Entry, LimitRequest, StoreError, window_start,
};

/// The give-back script (its layout is at the top of `give_back.lua`).
pub(super) const GIVE_BACK: &str = concat!(include_str!("algorithms.lua"), include_str!("give_back.lua"));

/// What a sliding window's or a bucket's decision adds to its [`Call`] (`decide.lua`).
#[derive(Debug, Clone)]
pub(crate) struct AlgorithmArgs {
    /// Sliding, when the previous window's count is to be read: that window's key.
    pub(super) second: Option<Vec<u8>>,
    /// Sliding: ms into the current window, 0; bucket: the cost as floor(cost·D/L) ms and
    /// cost·D mod L.
    pub(super) x: u64,
    pub(super) r: u64,
    /// One token, as `(x, r)` are the cost (bucket).
    pub(super) one: (u64, u64),
    /// Sliding: the previous window's count when this instance kept it (`finished.rs`).
    pub(super) known: Option<u64>,
    /// Sliding: the length of the budget's part of the keys (up to the window start), when
    /// the previous window's count this call reads is to be kept.
    pub(super) learns: Option<usize>,
    pub(super) shape: Shape,
}

/// What turns the script's answer into the decision.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(super) algorithm: Algorithm,
    pub(super) duration: u64,
    pub(super) now: u64,
    /// The current window's start (sliding).
    pub(super) start: u64,
}

impl AlgorithmArgs {
    pub(super) fn kind(&self) -> &'static str {
        if self.shape.algorithm == Algorithm::Sliding { "s" } else { "b" }
    }
}

impl Shape {
    /// The decision from the script's answer `x`, `y`, by the in-process store's arithmetic.
    pub(super) fn decision(&self, req: LimitRequest, success: bool, x: u64, y: u64) -> Decision {
        match self.algorithm {
            Algorithm::Sliding => {
                // `x` is the previous window's count, weighed as `decide_sliding` does.
                let into = self.now.saturating_sub(self.start).min(self.duration);
                let weighted = u128::from(x) * u128::from(self.duration - into) / u128::from(self.duration);
                Decision {
                    success,
                    limit: req.limit,
                    remaining: req.limit.saturating_sub(weighted as u64).saturating_sub(y),
                    reset: self.start.saturating_add(self.duration),
                }
            }
            _ => {
                // The bucket's state after the call; a cost-0 read of it gives remaining and
                // reset exactly as `decide_bucket` computes them.
                let state = keygate_ratelimit::WindowState { start: x, used: y };
                let read = LimitRequest { cost: 0, ..req };
                let (_, d) = keygate_ratelimit::decide_bucket(Some(state), read, self.now);
                Decision { success, ..d }
            }
        }
    }
}

impl RedisStore {
    /// The script call of a sliding window's or a bucket's decision (`key.algorithm` is not
    /// fixed). `epoch` and `guard` as in [`RedisStore::limit_batched`].
    pub(super) fn algorithm_call(
        &self,
        key: &BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        epoch: Option<u64>,
        guard: Option<CounterGuard<'_>>,
    ) -> Call {
        let duration = req.duration.max(1);
        let limit = req.limit.max(1);
        let start = window_start(now_ms, duration);
        let (mut known, mut learns) = (None, None);
        let (first, second, x, r, one, ttl) = match key.algorithm {
            Algorithm::Sliding => {
                let current = self.algorithm_key(key, start);
                let budget = current.len() - decimal_digits(start);
                known = self.finished.previous(&current[..budget], start, duration, now_ms);
                let mut previous = None;
                if known.is_none() {
                    previous = Some(self.algorithm_key(key, start.saturating_sub(duration)));
                    learns = Finished::keeps(start, now_ms).then_some(budget);
                }
                let ttl = start.saturating_add(2 * duration).saturating_sub(now_ms) + EXPIRY_SLACK_MS;
                (current, previous, now_ms - start, 0, (0, 0), ttl)
            }
            _ => {
                let (q, r) = ratio(req.cost, duration, limit);
                // The script sets the instant's expiry (`bucket` in algorithms.lua).
                (self.algorithm_key(key, "b"), None, q, r, ratio(1, duration, limit), 0)
            }
        };
        let shape = Shape { algorithm: key.algorithm, duration, now: now_ms, start };
        let algorithm = AlgorithmArgs { second, x, r, one, known, learns, shape };
        Call {
            key: first,
            namespace_id: key.namespace_id.clone(),
            epoch,
            guard: guard.map(|g| Guard { key: self.counter_key(g.name), epoch: g.epoch, value: g.value }),
            limit,
            cost: req.cost,
            ttl,
            flush: false,
            deferred: false,
            algorithm: Some(algorithm),
        }
    }

    /// What a sliding decision that reads the previous window's count keeps of its call
    /// (before it is queued): the budget's part of its keys.
    pub(super) fn lesson(call: &Call) -> Option<Box<[u8]>> {
        call.algorithm.as_ref().and_then(|a| a.learns).map(|len| call.key[..len].into())
    }

    /// Keeps the previous window's count a sliding decision read (its [`Self::lesson`]).
    pub(super) fn learn(&self, lesson: Option<Box<[u8]>>, shape: Option<Shape>, answer: &Answer) {
        if let (Some(budget), Some(shape), Answer::Weighed { x, .. }) = (lesson, shape, answer) {
            self.finished.learn(&budget, shape.start, shape.duration, *x, shape.now);
        }
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
            Algorithm::Sliding => ("sliding", self.algorithm_key(key, window_start(now_ms, duration)), 0, 0),
            Algorithm::TokenBucket => {
                let (q, r) = ratio(req.cost, duration, limit);
                ("bucket", self.algorithm_key(key, "b"), q, r)
            }
            Algorithm::Fixed => return Ok(()),
        };
        let mut call = self.algorithm_script.prepare_invoke();
        call.key(target);
        call.arg(mode).arg(limit).arg(req.cost).arg(now_ms).arg(q).arg(r);
        self.pool.with_conn(|c| super::script::invoke_loaded::<u64>(&call, c)).map(drop)
    }

    /// `<prefix>{<namespace>:<duration>:<identifier>}:<algorithm>:<part>`: in the budget's
    /// slot, apart from its fixed windows' keys.
    fn algorithm_key(&self, key: &BudgetKey<'_>, part: impl std::fmt::Display) -> Vec<u8> {
        use std::io::Write as _;
        let mut k = self.key(key, 0);
        // `key` ends in ":0" (the window start given): replace it by the algorithm's mark.
        k.truncate(k.len() - 1);
        k.extend_from_slice(key.algorithm.as_str().as_bytes());
        k.push(b':');
        let _ = write!(k, "{part}"); // writing to a Vec cannot fail
        k
    }
}

/// The decision from the script's answer: a fixed window's (`shape` `None`; its window
/// starts at `start`), or a sliding window's or a bucket's.
pub(super) fn checked(req: LimitRequest, start: u64, shape: Option<Shape>, answer: Answer) -> Checked {
    match answer {
        Answer::Stale => Checked::StaleOverrides,
        Answer::StaleCounter => Checked::StaleCounter,
        Answer::Decided { success, used } => Checked::Decided(Decision {
            success,
            limit: req.limit,
            remaining: req.limit.saturating_sub(used),
            reset: start.saturating_add(req.duration.max(1)),
        }),
        Answer::Weighed { success, x, y } => match shape {
            Some(shape) => Checked::Decided(shape.decision(req, success, x, y)),
            None => Checked::StaleOverrides,
        },
    }
}

/// How many decimal digits `n` is written with.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `x·D / L` as whole ms and a remainder in 1/L ms (u128: no overflow).
fn ratio(x: u64, duration: u64, limit: u64) -> (u64, u64) {
    let n = u128::from(x) * u128::from(duration);
    let l = u128::from(limit);
    (u64::try_from(n / l).unwrap_or(u64::MAX), (n % l) as u64)
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

    #[test]
    fn decimal_digits_are_those_to_string_writes() {
        for n in [0, 1, 9, 10, 99, 100, 1_799_999_999_999, u64::MAX] {
            assert_eq!(decimal_digits(n), n.to_string().len(), "{n}");
        }
    }
}
