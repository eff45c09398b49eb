/// The least `limit` a rate limit takes (API.md, `ratelimits.limit`).
pub const MIN_LIMIT: u64 = 1;
/// The shortest window, in ms (API.md, `ratelimits.limit`).
pub const MIN_DURATION_MS: u64 = 1_000;

/// One rate-limit request, already validated (`limit >= 1`, `duration >= 1000`:
/// [`LimitRequest::checked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRequest {
    pub limit: u64,
    pub duration: u64,
    pub cost: u64,
}

impl LimitRequest {
    /// The request, its numbers checked as the API checks a `ratelimits.limit` body's:
    /// `limit` at least [`MIN_LIMIT`], `duration` at least [`MIN_DURATION_MS`], each (and
    /// `cost`) at most 2^53-1; the error names the field, as the API's 400 does.
    pub fn checked(limit: u64, duration: u64, cost: u64) -> Result<Self, keygate_domain::ValidationError> {
        use keygate_domain::{MAX_SAFE_INTEGER, ValidationError};
        for (field, value, least) in
            [("limit", limit, MIN_LIMIT), ("duration", duration, MIN_DURATION_MS), ("cost", cost, 0)]
        {
            if value < least {
                return Err(ValidationError::new(field, format!("must be >= {least}")));
            }
            if value > MAX_SAFE_INTEGER {
                return Err(ValidationError::new(field, format!("must be <= {MAX_SAFE_INTEGER}")));
            }
        }
        Ok(Self { limit, duration, cost })
    }
}

/// The answer to a request (the body of a `ratelimits.limit` response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub success: bool,
    pub limit: u64,
    pub remaining: u64,
    /// Unix ms at which the current window ends.
    pub reset: u64,
}

/// What a store keeps for one budget: the start of its window (Unix ms, a multiple of the
/// duration) and the tokens used in it. Keeping the start rather than the window's index
/// lets the common case (same window) decide without a division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    pub start: u64,
    pub used: u64,
}

impl WindowState {
    /// Whether this state's window `[start, start + duration)` has ended at `now_ms`.
    /// A `now_ms` before the window's start (the clock stepped back, e.g. by NTP) counts
    /// in this window: failing closed, since starting a new window there would admit up
    /// to twice the limit once the clock is back where it was.
    #[inline]
    pub fn is_expired(&self, duration: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.start) >= duration
    }
}

/// The start (Unix ms) of the window holding `now_ms`: `floor(now / duration) * duration`.
#[inline]
pub fn window_start(now_ms: u64, duration: u64) -> u64 {
    now_ms - now_ms % duration.max(1)
}

/// The answer given without a store when the operator chose to fail open (contract §5.12):
/// the request passes; `remaining` is what would be left of an untouched budget.
pub fn fail_open_decision(req: LimitRequest, now_ms: u64) -> Decision {
    let duration = req.duration.max(1);
    Decision {
        success: true,
        limit: req.limit,
        remaining: req.limit.saturating_sub(req.cost),
        reset: window_start(now_ms, duration).saturating_add(duration),
    }
}

/// A denial decided from a count known to be at most the budget's real one (a shared
/// store's earlier answer: within a window a count only grows): `Some` only when the real
/// count would deny too, i.e. never a denial that the store would pass. `remaining` is
/// from the known count, so it may be above the store's.
#[inline]
pub fn deny_from_known(known: WindowState, req: LimitRequest, now_ms: u64) -> Option<Decision> {
    let duration = req.duration.max(1);
    if known.is_expired(duration, now_ms) {
        return None;
    }
    let denied = if req.cost == 0 {
        known.used >= req.limit
    } else {
        known.used.checked_add(req.cost).is_none_or(|after| after > req.limit)
    };
    denied.then(|| Decision {
        success: false,
        limit: req.limit,
        remaining: req.limit.saturating_sub(known.used),
        reset: known.start.saturating_add(duration),
    })
}

/// The decision, as a pure function. `state` is what the store holds for the budget (or
/// `None`); the returned state is what it must hold afterwards.
#[inline]
pub fn decide(state: Option<WindowState>, req: LimitRequest, now_ms: u64) -> (WindowState, Decision) {
    let duration = req.duration.max(1);
    let (start, used) = match state {
        Some(s) if !s.is_expired(duration, now_ms) => (s.start, s.used),
        _ => (window_start(now_ms, duration), 0),
    };
    let (success, used) = if req.cost == 0 {
        (used < req.limit, used)
    } else {
        match used.checked_add(req.cost) {
            Some(after) if after <= req.limit => (true, after),
            _ => (false, used),
        }
    };
    let decision = Decision {
        success,
        limit: req.limit,
        remaining: req.limit.saturating_sub(used),
        reset: start.saturating_add(duration),
    };
    (WindowState { start, used }, decision)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: u64 = 10_000;

    fn req(limit: u64, cost: u64) -> LimitRequest {
        LimitRequest { limit, duration: D, cost }
    }

    #[test]
    fn fresh_budget_passes_and_reset_is_window_end() {
        let (s, d) = decide(None, req(3, 1), 123_456);
        assert_eq!(s, WindowState { start: 120_000, used: 1 });
        assert_eq!(d, Decision { success: true, limit: 3, remaining: 2, reset: 130_000 });
    }

    #[test]
    fn denial_deducts_nothing() {
        let s = WindowState { start: 0, used: 2 };
        let (s2, d) = decide(Some(s), req(3, 2), 5);
        assert!(!d.success);
        assert_eq!(s2, s);
        assert_eq!(d.remaining, 1);
        // A smaller request still fits afterwards.
        let (_, d) = decide(Some(s2), req(3, 1), 6);
        assert!(d.success);
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn cost_above_limit_is_denied_on_an_empty_budget() {
        let (s, d) = decide(None, req(5, 6), 0);
        assert!(!d.success);
        assert_eq!(s.used, 0);
        assert_eq!(d.remaining, 5);
    }

    #[test]
    fn cost_zero_reports_without_changing() {
        let (s, d) = decide(None, req(2, 0), 0);
        assert!(d.success);
        assert_eq!((s.used, d.remaining), (0, 2));
        let full = WindowState { start: 0, used: 2 };
        let (s, d) = decide(Some(full), req(2, 0), 1);
        assert!(!d.success, "cost 0 on an exhausted budget says success=false");
        assert_eq!((s, d.remaining), (full, 0));
    }

    #[test]
    fn window_edges() {
        let s = WindowState { start: 0, used: 3 };
        // Last millisecond of window 0: still exhausted.
        let (_, d) = decide(Some(s), req(3, 1), D - 1);
        assert!(!d.success);
        assert_eq!(d.reset, D);
        // First millisecond of window 1: fresh budget.
        let (s1, d) = decide(Some(s), req(3, 1), D);
        assert!(d.success);
        assert_eq!(s1, WindowState { start: D, used: 1 });
        assert_eq!(d.reset, 2 * D);
        assert!(s.is_expired(D, D) && !s.is_expired(D, D - 1));
    }

    #[test]
    fn changing_the_limit_keeps_the_count() {
        let (s, _) = decide(None, req(10, 4), 0);
        let (s, d) = decide(Some(s), req(5, 1), 1);
        assert!(d.success);
        assert_eq!((s.used, d.remaining, d.limit), (5, 0, 5));
        let (_, d) = decide(Some(s), req(3, 0), 2);
        assert!(!d.success, "lowering the limit below the count denies");
        assert_eq!((d.remaining, d.limit), (0, 3));
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        let max = (1u64 << 53) - 1;
        let big = LimitRequest { limit: max, duration: max, cost: max };
        let (s, d) = decide(Some(WindowState { start: 0, used: 1 }), big, max - 1);
        assert!(!d.success);
        assert_eq!(s.used, 1);
        assert_eq!(d.reset, max);
        let (_, d) = decide(Some(WindowState { start: 0, used: u64::MAX }), req(u64::MAX, 1), 0);
        assert!(!d.success);
    }

    /// The contract's formula, with window indexes and divisions, as a reference.
    fn reference(prev: Option<(u64, u64)>, req: LimitRequest, now: u64) -> (u64, Decision) {
        // A time before the budget's window counts in that window (fail closed).
        let window = match prev {
            Some((w, _)) if now / req.duration < w => w,
            _ => now / req.duration,
        };
        let used = match prev {
            Some((w, u)) if w == window => u,
            _ => 0,
        };
        let (success, used) = if req.cost == 0 {
            (used < req.limit, used)
        } else if used + req.cost <= req.limit {
            (true, used + req.cost)
        } else {
            (false, used)
        };
        let d = Decision {
            success,
            limit: req.limit,
            remaining: req.limit.saturating_sub(used),
            reset: (window + 1) * req.duration,
        };
        (used, d)
    }

    #[test]
    fn matches_the_contract_formula_on_a_grid() {
        for duration in [1_000u64, 1_500, 60_000] {
            for limit in [1u64, 2, 5] {
                for cost in [0u64, 1, 2, 6] {
                    let req = LimitRequest { limit, duration, cost };
                    // A sequence of calls at increasing (and one decreasing) times.
                    let times =
                        [0u64, 1, 999, 1_000, 1_499, 1_500, 2_999, 3_000, 2_000, 59_999, 60_000, 61_234];
                    let (mut ours, mut theirs): (Option<WindowState>, Option<(u64, u64)>) = (None, None);
                    for &t in &times {
                        let (s, d) = decide(ours, req, t);
                        let (used, expected) = reference(theirs, req, t);
                        assert_eq!(d, expected, "d={duration} l={limit} c={cost} t={t}");
                        assert_eq!(s.used, used);
                        assert_eq!(s.start, d.reset - duration);
                        ours = Some(s);
                        theirs = Some((s.start / duration, used));
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Any sequence of requests at any times, the clock stepping back included: no
        /// window admits more than its limit, a denial or a cost of 0 changes nothing, and
        /// `remaining` is what is left.
        #[test]
        fn no_window_admits_more_than_its_limit(
            limit in 1u64..6,
            duration in proptest::sample::select(vec![1_000u64, 1_500, 60_000]),
            steps in proptest::collection::vec((0u64..4, -3_000i64..5_000), 1..60),
        ) {
            let mut state: Option<WindowState> = None;
            let mut now: u64 = 1_700_000_000_000;
            let mut admitted: std::collections::HashMap<u64, u64> = Default::default();
            for (cost, step) in steps {
                now = now.saturating_add_signed(step);
                let (next, d) = decide(state, LimitRequest { limit, duration, cost }, now);
                let before = state.filter(|s| !s.is_expired(duration, now)).map_or(0, |s| s.used);
                if d.success {
                    *admitted.entry(d.reset).or_default() += cost;
                    proptest::prop_assert_eq!(next.used, before + cost);
                } else {
                    proptest::prop_assert_eq!(next.used, before, "a denial deducts nothing");
                }
                proptest::prop_assert_eq!(d.remaining, limit - next.used);
                proptest::prop_assert_eq!(d.reset, next.start + duration);
                proptest::prop_assert!(now < d.reset, "the answer's window has not ended");
                state = Some(next);
            }
            for (reset, total) in admitted {
                proptest::prop_assert!(total <= limit, "window ending {} admitted {} > {}", reset, total, limit);
            }
        }
    }

    proptest::proptest! {
        /// A denial from a known count (at most the real one, same window) is always a
        /// denial the real count gives too; and with the real count known it is exactly
        /// the decision's denial.
        #[test]
        fn a_denial_from_a_known_count_is_never_a_pass_of_the_real_one(
            limit in 1u64..20,
            cost in 0u64..25,
            real in 0u64..25,
            behind in 0u64..25,
            at in 0u64..3_000,
        ) {
            let req = LimitRequest { limit, duration: D, cost };
            let now = 1_000_000 + at;
            let start = window_start(1_000_000, D);
            let real_state = WindowState { start, used: real };
            let known = WindowState { start, used: real.saturating_sub(behind) };
            let (_, truth) = decide(Some(real_state), req, now);
            if let Some(d) = deny_from_known(known, req, now) {
                proptest::prop_assert!(!truth.success);
                proptest::prop_assert_eq!((d.limit, d.reset), (truth.limit, truth.reset));
            }
            let exact = deny_from_known(real_state, req, now);
            proptest::prop_assert_eq!(exact.is_some(), !truth.success);
            if let Some(d) = exact {
                proptest::prop_assert_eq!(d, truth);
            }
            // An ended window tells nothing.
            proptest::prop_assert!(deny_from_known(known, req, start + D).is_none());
        }
    }
}
