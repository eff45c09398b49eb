//! The rate-limit algorithms a namespace (API-v2.md §26) can choose, each a pure function
//! of (stored state, request, now), written once for every store.
//!
//! # `fixed` ([`decide`])
//! Epoch-aligned windows (API.md §5): `used` counts the tokens taken in the window holding
//! `now`; a request passes if `used + cost <= limit`.
//!
//! # `sliding` ([`decide_sliding`])
//! The weighted two-window count (Cloudflare's and Unkey's): the same fixed windows count
//! the tokens, and a request `t` ms into the window also pays for the previous window's
//! `p` tokens, weighted by how much of that window still lies within the last `duration`:
//!
//! ```text
//! weighted  = floor(p × (duration − t) / duration)
//! passes   ⇔ weighted + c + cost <= limit      (c: the current window's count)
//! remaining = max(0, limit − weighted − c')    (c': after the decision)
//! reset     = the current window's end
//! ```
//!
//! A store keeps each window's count as a fixed window does (so one window's state is the
//! same [`WindowState`]) and keeps it for two windows instead of one.
//!
//! # `token_bucket` ([`decide_bucket`])
//! GCRA: a bucket of `limit` tokens refilled evenly, one token every `duration / limit`
//! ms. The state is one instant, `z`: when the bucket will be full again (`z <= now`: it
//! is full). With `L = limit`, `D = duration`, the debt `b = max(0, z − now)` (ms) is what
//! the bucket lacks, in time; it holds `L − b·L/D` tokens. So:
//!
//! ```text
//! passes   ⇔ b + cost·D/L <= D                  (cost 0: b + D/L <= D, one token left)
//! z'        = max(z, now) + cost·D/L            (on a pass)
//! remaining = L − ceil(b'·L/D)                  (whole tokens left)
//! reset     = z' rounded up to the ms            (when the bucket is full again)
//! ```
//!
//! `D/L` is rarely a whole number of ms, so `z` is kept exactly, in units of `1/L` ms:
//! [`WindowState::start`] holds `floor(z)` and [`WindowState::used`] the remainder
//! `(z − floor(z))·L` (below `L`). A remainder not below a new, smaller limit (the limit
//! changed) rounds `z` up to the next ms: the bucket is never fuller than it was. Only a
//! pass writes `z`: a denial or a read leaves the stored state as it was (rewritten under
//! the call's limit, that rounding would take a part of a ms from the bucket). A clock
//! that steps back sees a larger debt: it fails closed, as fixed windows do.

use crate::{Decision, LimitRequest, WindowState, decide, window_start};

pub use keygate_domain::Algorithm;

/// Whether a stored state of `algorithm` no longer matters at `now_ms` (a store may drop
/// it): a fixed window's matters for its duration, a sliding window's for two (the next
/// window weighs it), a bucket's until it is full.
#[inline]
pub fn is_spent(algorithm: Algorithm, state: &WindowState, duration: u64, now_ms: u64) -> bool {
    match algorithm {
        Algorithm::Fixed => state.is_expired(duration, now_ms),
        Algorithm::Sliding => now_ms.saturating_sub(state.start) >= duration.saturating_mul(2),
        Algorithm::TokenBucket => now_ms >= state.start.saturating_add(u64::from(state.used > 0)),
    }
}

/// The sliding-window decision: `current` is the stored count of the window holding
/// `now_ms` (or an older one, or none), `previous` the stored count of the window before
/// it (a state of another window counts as none). The returned state is the current
/// window's, what the store must hold afterwards.
#[inline]
pub fn decide_sliding(
    current: Option<WindowState>,
    previous: Option<WindowState>,
    req: LimitRequest,
    now_ms: u64,
) -> (WindowState, Decision) {
    let duration = req.duration.max(1);
    // The window the decision counts in: `now`'s, or the stored one when the clock stepped
    // back before it (fail closed, as `decide` does).
    let start = match current {
        Some(s) if s.start > now_ms => s.start,
        _ => window_start(now_ms, duration),
    };
    let into = now_ms.saturating_sub(start).min(duration);
    let before = start.checked_sub(duration);
    let p = previous.filter(|s| Some(s.start) == before).map_or(0, |s| s.used);
    let weighted = (u128::from(p) * u128::from(duration - into) / u128::from(duration)) as u64;
    let used = match current {
        Some(s) if s.start == start => s.used,
        _ => 0,
    };
    let (success, used) = if req.cost == 0 {
        (weighted.saturating_add(used) < req.limit, used)
    } else {
        match weighted.checked_add(used).and_then(|n| n.checked_add(req.cost)) {
            Some(after) if after <= req.limit => (true, used + req.cost),
            _ => (false, used),
        }
    };
    let decision = Decision {
        success,
        limit: req.limit,
        remaining: req.limit.saturating_sub(weighted).saturating_sub(used),
        reset: start.saturating_add(duration),
    };
    (WindowState { start, used }, decision)
}

/// The token-bucket (GCRA) decision on the stored instant (see the module's docs for how a
/// [`WindowState`] holds it). The returned state is what the store must hold afterwards.
#[inline]
pub fn decide_bucket(state: Option<WindowState>, req: LimitRequest, now_ms: u64) -> (WindowState, Decision) {
    let limit = u128::from(req.limit.max(1));
    let duration = u128::from(req.duration.max(1));
    // Instants in units of 1/L ms.
    let now = u128::from(now_ms) * limit;
    let full_at = state.map_or(now, |s| bucket_instant(s, limit)).max(now);
    let debt = full_at - now;
    let cost = u128::from(req.cost) * duration;
    let capacity = duration * limit;
    let (success, full_at) = if req.cost == 0 {
        (debt + duration <= capacity, full_at)
    } else if debt + cost <= capacity {
        (true, full_at + cost)
    } else {
        (false, full_at)
    };
    let debt = full_at - now;
    let decision = Decision {
        success,
        limit: req.limit,
        remaining: (limit - debt.div_ceil(duration).min(limit)) as u64,
        reset: u64::try_from(full_at.div_ceil(limit)).unwrap_or(u64::MAX),
    };
    // A denial or a read leaves a stored instant as it was: rewritten under this call's
    // limit, a remainder not below it would round up, and the denial would take a part of
    // a ms from the bucket.
    let stored = match state {
        Some(s) if !success || req.cost == 0 => s,
        _ => WindowState {
            start: u64::try_from(full_at / limit).unwrap_or(u64::MAX),
            used: (full_at % limit) as u64,
        },
    };
    (stored, decision)
}

/// The instant a bucket's state holds, in units of 1/`limit` ms (a remainder not below
/// `limit` rounds up to the next ms).
#[inline]
fn bucket_instant(s: WindowState, limit: u128) -> u128 {
    let ms = u128::from(s.start);
    match u128::from(s.used) {
        r if r < limit => ms * limit + r,
        _ => (ms + 1) * limit,
    }
}

/// Gives back `cost` tokens a bucket took at a pass (a caller whose next step failed): the
/// instant moves back by `cost·D/L`, never before `now` (the bucket is at most full).
pub fn bucket_give_back(state: WindowState, req: LimitRequest, now_ms: u64) -> WindowState {
    let limit = u128::from(req.limit.max(1));
    let now = u128::from(now_ms) * limit;
    let back = u128::from(req.cost) * u128::from(req.duration.max(1));
    let full_at = bucket_instant(state, limit).saturating_sub(back).max(now);
    WindowState { start: u64::try_from(full_at / limit).unwrap_or(u64::MAX), used: (full_at % limit) as u64 }
}

/// The decision under `algorithm` for a store that holds one state per budget (`previous`
/// is read only by `sliding`: the count of the window before the current one).
#[inline]
pub fn decide_as(
    algorithm: Algorithm,
    state: Option<WindowState>,
    previous: Option<WindowState>,
    req: LimitRequest,
    now_ms: u64,
) -> (WindowState, Decision) {
    match algorithm {
        Algorithm::Fixed => decide(state, req, now_ms),
        Algorithm::Sliding => decide_sliding(state, previous, req, now_ms),
        Algorithm::TokenBucket => decide_bucket(state, req, now_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: u64 = 1_800_000_000_000;

    fn req(limit: u64, duration: u64, cost: u64) -> LimitRequest {
        LimitRequest { limit, duration, cost }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::parse(a.as_str()), Some(a));
        }
        assert_eq!(Algorithm::default(), Algorithm::Fixed);
        for bad in ["", "Fixed", "token-bucket", "leaky", "sliding "] {
            let e = Algorithm::parse_field("algorithm", bad).unwrap_err();
            assert_eq!(e.path, "algorithm");
        }
    }

    #[test]
    fn sliding_weighs_the_previous_window_by_what_is_left_of_it() {
        let d = 10_000;
        let prev = WindowState { start: T0 - d, used: 10 };
        // 2.5 s into the window: 10 × 0.75 = 7.5 → 7 of the previous window still count.
        let (s, dec) = decide_sliding(None, Some(prev), req(10, d, 3), T0 + 2_500);
        assert!(dec.success);
        assert_eq!((s.start, s.used, dec.remaining, dec.reset), (T0, 3, 0, T0 + d));
        let (_, dec) = decide_sliding(Some(s), Some(prev), req(10, d, 1), T0 + 2_500);
        assert!(!dec.success, "7 + 3 = 10: full");
        // Later in the window the previous one weighs less.
        let (s2, dec) = decide_sliding(Some(s), Some(prev), req(10, d, 1), T0 + 5_000);
        assert!(dec.success, "5 + 3 + 1 <= 10");
        assert_eq!((s2.used, dec.remaining), (4, 1));
        // A previous state of another window counts for nothing.
        let old = WindowState { start: T0 - 2 * d, used: 10 };
        let (_, dec) = decide_sliding(None, Some(old), req(10, d, 10), T0);
        assert!(dec.success);
        // cost 0 reads; a denial consumes nothing.
        let (s3, dec) = decide_sliding(Some(s), Some(prev), req(10, d, 0), T0);
        assert!(!dec.success && s3 == s, "10 + 3 >= 10");
        let (s4, dec) = decide_sliding(Some(s), Some(prev), req(10, d, 8), T0 + 9_999);
        assert!(!dec.success && s4 == s);
    }

    #[test]
    fn a_bucket_holds_limit_tokens_and_refills_one_every_duration_over_limit() {
        let (d, l) = (1_000, 3);
        let mut state = None;
        for i in 0..3 {
            let (s, dec) = decide_bucket(state, req(l, d, 1), T0);
            assert!(dec.success, "token {i} of a full bucket");
            assert_eq!(dec.remaining, 2 - i);
            state = Some(s);
        }
        let (_, dec) = decide_bucket(state, req(l, d, 1), T0);
        assert!(!dec.success);
        assert_eq!(dec.reset, T0 + 1_000, "full again after the whole duration");
        // One token every 333⅓ ms.
        assert!(!decide_bucket(state, req(l, d, 1), T0 + 333).1.success);
        let (s, dec) = decide_bucket(state, req(l, d, 1), T0 + 334);
        assert!(dec.success);
        assert_eq!(dec.remaining, 0);
        assert!(!decide_bucket(Some(s), req(l, d, 1), T0 + 666).1.success);
        assert!(decide_bucket(Some(s), req(l, d, 1), T0 + 667).1.success);
        // cost 0 reads; a cost above the capacity never passes.
        assert!(!decide_bucket(Some(s), req(l, d, 0), T0 + 334).1.success);
        assert!(decide_bucket(None, req(l, d, 0), T0).1.success);
        assert!(!decide_bucket(None, req(l, d, 4), T0).1.success);
        assert!(decide_bucket(None, req(l, d, 3), T0).1.success);
    }

    #[test]
    fn a_bucket_gives_back_up_to_full() {
        let (s, _) = decide_bucket(None, req(4, 1_000, 3), T0);
        let back = bucket_give_back(s, req(4, 1_000, 2), T0);
        assert_eq!(decide_bucket(Some(back), req(4, 1_000, 0), T0).1.remaining, 3);
        let back = bucket_give_back(back, req(4, 1_000, 9), T0);
        assert_eq!(decide_bucket(Some(back), req(4, 1_000, 0), T0).1.remaining, 4, "never above full");
        assert!(is_spent(Algorithm::TokenBucket, &back, 1_000, T0));
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        let max = (1u64 << 53) - 1;
        for a in Algorithm::ALL {
            let big = req(max, max, max);
            let (s, d) = decide_as(a, None, None, big, max);
            assert!(d.success, "{a}");
            let (_, d) = decide_as(a, Some(s), Some(s), big, max);
            assert!(!d.success, "{a}");
            let far = WindowState { start: u64::MAX, used: u64::MAX };
            let (_, d) = decide_as(a, Some(far), Some(far), req(1, 1_000, 1), 0);
            assert!(!d.success, "{a}: a state far in the future (clock stepped back) fails closed");
        }
    }

    /// The reference bucket, from the definition: tokens as an exact fraction (numerator
    /// over `duration`), refilled by `elapsed × limit / duration` up to `limit`.
    #[derive(Debug, Clone, Copy)]
    struct RefBucket {
        /// Tokens × duration.
        tokens: u128,
        at: u64,
    }

    impl RefBucket {
        fn decide(&mut self, r: LimitRequest, now: u64) -> (bool, u64) {
            let (l, d) = (u128::from(r.limit), u128::from(r.duration));
            if now > self.at {
                self.tokens = (self.tokens + u128::from(now - self.at) * l).min(l * d);
                self.at = now;
            } else {
                // The clock stepped back: the bucket waits for it (nothing refills).
            }
            let need = if r.cost == 0 { d } else { u128::from(r.cost) * d };
            let pass = self.tokens >= need;
            if pass && r.cost > 0 {
                self.tokens -= need;
            }
            (pass, (self.tokens / d) as u64)
        }
    }

    proptest! {
        /// Any sequence of requests at increasing times: the bucket answers what the
        /// reference answers, and admits at most `limit + rate × t` in any span `t`.
        #[test]
        fn the_bucket_answers_as_the_reference(
            limit in 1u64..8,
            duration in prop::sample::select(vec![1_000u64, 1_500, 7_000, 60_000]),
            steps in prop::collection::vec((0u64..4, 0u64..3_000), 1..80),
        ) {
            let r = |cost| LimitRequest { limit, duration, cost };
            let mut now = T0;
            let mut refb = RefBucket { tokens: u128::from(limit) * u128::from(duration), at: now };
            let mut state = None;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            for (cost, step) in steps {
                now += step;
                let (next, d) = decide_bucket(state, r(cost), now);
                let (pass, remaining) = refb.decide(r(cost), now);
                prop_assert_eq!(d.success, pass, "at +{}", now - T0);
                prop_assert_eq!(d.remaining, remaining);
                prop_assert!(d.reset >= now);
                if d.success && cost > 0 {
                    admitted.push((now, cost));
                }
                state = Some(next);
            }
            for (i, &(from, _)) in admitted.iter().enumerate() {
                let mut total = 0u128;
                for &(at, cost) in &admitted[i..] {
                    total += u128::from(cost);
                    // limit + (at - from) × limit / duration, exactly.
                    let allowed = u128::from(limit) * u128::from(duration) + u128::from(at - from) * u128::from(limit);
                    prop_assert!(total * u128::from(duration) <= allowed);
                }
            }
        }

        /// The sliding count answers the contract's formula, with the windows' counts
        /// kept by a reference map; and it never admits more than the limit in any
        /// `duration`-long span that starts on a window's boundary plus the weighted rest.
        #[test]
        fn sliding_answers_the_contract_formula(
            limit in 1u64..8,
            duration in prop::sample::select(vec![1_000u64, 1_500, 60_000]),
            steps in prop::collection::vec((0u64..4, 0u64..2_500), 1..80),
        ) {
            let mut now = T0;
            let mut counts: std::collections::HashMap<u64, u64> = Default::default();
            let mut states: std::collections::HashMap<u64, WindowState> = Default::default();
            for (cost, step) in steps {
                now += step;
                let start = now - now % duration;
                let p = counts.get(&(start - duration)).copied().unwrap_or(0);
                let c = counts.get(&start).copied().unwrap_or(0);
                let t = now - start;
                let weighted = p * (duration - t) / duration;
                let pass = if cost == 0 { weighted + c < limit } else { weighted + c + cost <= limit };
                let (next, d) = decide_sliding(
                    states.get(&start).copied(),
                    states.get(&(start - duration)).copied(),
                    LimitRequest { limit, duration, cost },
                    now,
                );
                prop_assert_eq!(d.success, pass);
                let c = if pass { c + cost } else { c };
                prop_assert_eq!(d.remaining, limit.saturating_sub(weighted + c));
                prop_assert_eq!(d.reset, start + duration);
                prop_assert_eq!(next, WindowState { start, used: c });
                counts.insert(start, c);
                states.insert(start, next);
            }
        }
    }

    #[test]
    fn at_a_window_boundary_fixed_admits_twice_the_limit_and_the_others_do_not() {
        let (limit, d) = (100, 60_000);
        let admitted = |a: Algorithm| {
            let (mut cur, mut prev): (Option<WindowState>, Option<WindowState>) = (None, None);
            let mut n = 0;
            // 100 asked 1 ms before a window ends, then 100 at its first ms.
            for now in [T0 + d - 1, T0 + d] {
                for _ in 0..limit {
                    if let Some(s) = cur
                        && a == Algorithm::Sliding
                        && s.start + d <= now
                    {
                        prev = cur.take();
                    }
                    let (s, dec) = decide_as(a, cur, prev, req(limit, d, 1), now);
                    n += u64::from(dec.success);
                    cur = Some(s);
                }
            }
            n
        };
        assert_eq!(admitted(Algorithm::Fixed), 200);
        assert_eq!(admitted(Algorithm::Sliding), 100);
        assert_eq!(admitted(Algorithm::TokenBucket), 100);
    }
}
