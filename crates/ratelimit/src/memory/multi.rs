//! All-or-nothing decisions over several budgets (Unkey v2's `ratelimit.multiLimit`,
//! API-v2.md §5.2), in the in-process store.
//!
//! The shards of every budget named are locked together, in ascending shard order (so two
//! calls never wait on each other in a cycle; [`MemoryStore::check`] and the sweep hold one
//! lock at a time), and held while the entries are decided and, when all fit, written.
//! Nothing else sees a state in between: the call is atomic.

use super::{MemoryStore, key_hash, parity};
use crate::{Algorithm, BudgetKey, Decision, LimitRequest, WindowState, bucket_give_back, decide_as};

/// What [`MemoryStore::limit_all`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllOrNothing {
    /// Every entry fitted, and all were consumed.
    pub passed: bool,
    /// Per entry, in order: `success` says whether it fitted (on top of the earlier
    /// entries of the call). When the call passed, `remaining` is after the entry; when it
    /// did not, nothing was consumed and `remaining` is the budget as it is.
    pub decisions: Vec<Decision>,
}

impl MemoryStore {
    /// Decides `entries` in order, each on top of the earlier ones (two entries on one
    /// budget add up), by its algorithm's decision ([`decide_as`]); consumes them all if every
    /// entry fits, else nothing anywhere. Entries on the same budget are found by
    /// comparing keys (quadratic in the number of entries: callers bound it, the API at
    /// 100).
    pub fn limit_all(&self, entries: &[(BudgetKey<'_>, LimitRequest)], now_ms: u64) -> AllOrNothing {
        let hashes: Vec<u64> =
            entries.iter().map(|(key, _)| key_hash(&self.hasher, key.identifier.as_bytes())).collect();
        let mut shards: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut guards: Vec<_> = shards.iter().map(|&i| self.shards[i].lock()).collect();
        let locked =
            |hash: u64| shards.binary_search(&self.shard_index(hash)).expect("every entry's shard is locked");

        // Per entry: the budget's state before the call, and after this entry if it fits
        // (a sliding budget's current window; its previous one, which no entry changes,
        // beside).
        let mut before: Vec<Option<WindowState>> = Vec::with_capacity(entries.len());
        let mut after: Vec<Option<WindowState>> = Vec::with_capacity(entries.len());
        let mut previous: Vec<Option<WindowState>> = Vec::with_capacity(entries.len());
        let mut decisions = Vec::with_capacity(entries.len());
        for (i, (key, req)) in entries.iter().enumerate() {
            let earlier = (0..i).rev().find(|&j| entries[j].0 == *key);
            let (original, current, prev) = match earlier {
                Some(j) => (before[j], after[j], previous[j]),
                None => {
                    let shard = &guards[locked(hashes[i])];
                    let (state, prev) = match key.algorithm {
                        Algorithm::Sliding => self.sliding_in(shard, key, hashes[i], now_ms),
                        _ => (self.read_in(shard, key, 0, hashes[i]), None),
                    };
                    (state, state, prev)
                }
            };
            let (next, decision) = decide_as(key.algorithm, current, prev, *req, now_ms);
            before.push(original);
            after.push(if decision.success { Some(next) } else { current });
            previous.push(prev);
            decisions.push(decision);
        }

        let passed = decisions.iter().all(|d| d.success);
        if passed {
            // The last entry on each budget holds its final state.
            for (i, (key, _)) in entries.iter().enumerate() {
                let last = !entries[i + 1..].iter().any(|(k, _)| k == key);
                if let (true, Some(state)) = (last, after[i]) {
                    let shard = &mut guards[locked(hashes[i])];
                    let at = class_parity(key, &state);
                    self.update_in(shard, *key, at, hashes[i], now_ms, |_| (state, ()));
                }
            }
        } else {
            // Nothing consumed: each entry reports its budget as it is.
            for (i, d) in decisions.iter_mut().enumerate() {
                let (key, req) = &entries[i];
                let read = LimitRequest { cost: 0, ..*req };
                let (_, as_it_is) = decide_as(key.algorithm, before[i], previous[i], read, now_ms);
                *d = Decision { success: d.success, ..as_it_is };
            }
        }
        AllOrNothing { passed, decisions }
    }

    /// Gives back what a passed [`Self::limit_all`] of `entries` at `now_ms` consumed: each
    /// budget's count goes down by the cost, in the window that took it (one that has ended
    /// since is left alone, as is a count that would go below zero).
    pub fn give_back(&self, entries: &[(BudgetKey<'_>, LimitRequest)], now_ms: u64) {
        for (key, req) in entries.iter().filter(|(_, r)| r.cost > 0) {
            let start = crate::window_start(now_ms, req.duration.max(1));
            if key.algorithm == Algorithm::TokenBucket {
                self.update(*key, now_ms, |state| match state {
                    Some(s) => (bucket_give_back(s, *req, now_ms), ()),
                    None => (WindowState { start: now_ms, used: 0 }, ()),
                });
                continue;
            }
            let hash = key_hash(&self.hasher, key.identifier.as_bytes());
            let at = class_parity(key, &WindowState { start, used: 0 });
            self.update_in(&mut self.shard(hash).lock(), *key, at, hash, now_ms, |state| match state {
                Some(s) if s.start == start => {
                    (WindowState { start, used: s.used.saturating_sub(req.cost) }, ())
                }
                Some(s) => (s, ()),
                None => (WindowState { start, used: 0 }, ()),
            });
        }
    }
}

/// The class of windows a state of `key` lives in (see `Class`): by its window's parity
/// for a sliding budget, else the one class.
fn class_parity(key: &BudgetKey<'_>, state: &WindowState) -> u8 {
    match key.algorithm {
        Algorithm::Sliding => parity(state.start, key.duration),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    const NOW: u64 = 1_800_000_000_000;

    fn req(limit: u64, cost: u64) -> LimitRequest {
        LimitRequest { limit, duration: 60_000, cost }
    }

    fn key<'a>(ns: &'a Arc<String>, id: &'a str) -> BudgetKey<'a> {
        BudgetKey { namespace_id: ns, identifier: id, duration: 60_000, algorithm: Default::default() }
    }

    #[test]
    fn what_a_passed_call_took_is_given_back_in_its_window_only() {
        let (s, ns) = (MemoryStore::new(), Arc::new("ns".to_string()));
        let entries = [(key(&ns, "a"), req(5, 2)), (key(&ns, "b"), req(3, 1)), (key(&ns, "a"), req(5, 1))];
        assert!(s.limit_all(&[(key(&ns, "a"), req(5, 1))], NOW).passed);
        assert!(s.limit_all(&entries, NOW).passed);
        s.give_back(&entries, NOW);
        assert_eq!(s.check(key(&ns, "a"), req(5, 0), NOW).remaining, 4, "the earlier call's token stays");
        assert_eq!(s.check(key(&ns, "b"), req(3, 0), NOW).remaining, 3);
        // A window that has ended is left alone; nothing goes below zero.
        assert!(s.limit_all(&entries, NOW).passed);
        s.give_back(&entries, NOW + 60_000);
        assert_eq!(s.check(key(&ns, "a"), req(5, 0), NOW).remaining, 1);
        s.give_back(&entries, NOW);
        s.give_back(&entries, NOW);
        assert_eq!(s.check(key(&ns, "a"), req(5, 0), NOW).remaining, 5);
    }

    #[test]
    fn every_entry_fits_and_all_are_consumed_entries_on_one_budget_adding_up() {
        let (s, ns) = (MemoryStore::new(), Arc::new("ns".to_string()));
        let out = s.limit_all(
            &[(key(&ns, "a"), req(5, 2)), (key(&ns, "b"), req(3, 1)), (key(&ns, "a"), req(5, 3))],
            NOW,
        );
        assert!(out.passed);
        let remaining: Vec<u64> = out.decisions.iter().map(|d| d.remaining).collect();
        assert_eq!(remaining, [3, 2, 0]);
        assert_eq!(s.check(key(&ns, "a"), req(5, 0), NOW).remaining, 0);
        assert_eq!(s.check(key(&ns, "b"), req(3, 0), NOW).remaining, 2);
    }

    #[test]
    fn one_entry_that_does_not_fit_consumes_nothing_anywhere() {
        let (s, ns) = (MemoryStore::new(), Arc::new("ns".to_string()));
        s.check(key(&ns, "b"), req(3, 2), NOW);
        let out = s.limit_all(
            &[(key(&ns, "a"), req(5, 2)), (key(&ns, "b"), req(3, 2)), (key(&ns, "a"), req(5, 3))],
            NOW,
        );
        assert!(!out.passed);
        let fitted: Vec<bool> = out.decisions.iter().map(|d| d.success).collect();
        assert_eq!(fitted, [true, false, true]);
        let remaining: Vec<u64> = out.decisions.iter().map(|d| d.remaining).collect();
        assert_eq!(remaining, [5, 1, 5], "each budget as it is");
        assert_eq!(s.check(key(&ns, "a"), req(5, 0), NOW).remaining, 5, "nothing consumed");
        assert_eq!(s.check(key(&ns, "b"), req(3, 0), NOW).remaining, 1);
        // cost 0 on an exhausted budget does not fit either.
        s.check(key(&ns, "c"), req(1, 1), NOW);
        assert!(!s.limit_all(&[(key(&ns, "a"), req(5, 1)), (key(&ns, "c"), req(1, 0))], NOW).passed);
        assert_eq!(s.check(key(&ns, "a"), req(5, 0), NOW).remaining, 5);
    }

    /// The reference: a map of counts, the calls applied one after the other.
    fn reference(model: &mut HashMap<String, u64>, entries: &[(String, LimitRequest)]) -> (bool, Vec<bool>) {
        let mut tentative = model.clone();
        let fits: Vec<bool> = entries
            .iter()
            .map(|(id, r)| {
                let used = tentative.entry(id.clone()).or_insert(0);
                let fits = if r.cost == 0 { *used < r.limit } else { *used + r.cost <= r.limit };
                if fits {
                    *used += r.cost;
                }
                fits
            })
            .collect();
        let passed = fits.iter().all(|&f| f);
        if passed {
            *model = tentative;
        }
        (passed, fits)
    }

    proptest! {
        #[test]
        fn calls_answer_what_the_reference_answers(calls in prop::collection::vec(
            prop::collection::vec((0..4u8, 1..6u64, 0..3u64), 1..5), 1..40)) {
            let (s, ns) = (MemoryStore::with_shards(2), Arc::new("ns".to_string()));
            let mut model = HashMap::new();
            for call in calls {
                let ids: Vec<String> = call.iter().map(|(id, _, _)| format!("id{id}")).collect();
                let entries: Vec<(BudgetKey<'_>, LimitRequest)> =
                    call.iter().zip(&ids).map(|((_, limit, cost), id)| (key(&ns, id), req(*limit, *cost))).collect();
                let named: Vec<(String, LimitRequest)> = ids.iter().cloned().zip(entries.iter().map(|(_, r)| *r)).collect();
                let (passed, fits) = reference(&mut model, &named);
                let out = s.limit_all(&entries, NOW);
                prop_assert_eq!(out.passed, passed);
                prop_assert_eq!(out.decisions.iter().map(|d| d.success).collect::<Vec<_>>(), fits);
                for (id, used) in &model {
                    prop_assert_eq!(s.known(key(&ns, id), NOW).map_or(0, |w| w.used), *used);
                }
            }
        }
    }

    #[test]
    fn concurrent_calls_sharing_budgets_are_atomic() {
        let (s, ns) = (MemoryStore::with_shards(8), Arc::new("ns".to_string()));
        let ids: Vec<String> = (0..6).map(|i| format!("budget-{i}")).collect();
        let passed = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for t in 0..8 {
                let (s, ns, ids, passed) = (&s, &ns, &ids, &passed);
                scope.spawn(move || {
                    for i in 0..2_000usize {
                        // Each call takes one token from two budgets, in varying order.
                        let (a, b) = ((t + i) % 6, (t * 7 + i * 5 + 1) % 6);
                        let b = if a == b { (b + 1) % 6 } else { b };
                        let out = s.limit_all(
                            &[(key(ns, &ids[a]), req(1_000, 1)), (key(ns, &ids[b]), req(1_000, 1))],
                            NOW,
                        );
                        passed.fetch_add(u64::from(out.passed), std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        });
        // Never over a limit, and every call took both of its tokens or neither: the
        // tokens taken add up to twice the calls that passed.
        let used: Vec<u64> = ids.iter().map(|id| s.known(key(&ns, id), NOW).map_or(0, |w| w.used)).collect();
        let passed = passed.load(std::sync::atomic::Ordering::Relaxed);
        assert!(used.iter().all(|&u| u <= 1_000), "{used:?}");
        assert_eq!(used.iter().sum::<u64>(), 2 * passed, "{used:?}, {passed} calls passed");
        assert!(passed >= 2_500, "most budgets filled: {used:?}");
    }
}
