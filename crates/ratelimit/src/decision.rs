/// One rate-limit request, already validated (`limit >= 1`, `duration >= 1000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRequest {
    pub limit: u64,
    pub duration: u64,
    pub cost: u64,
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

/// What a store keeps for one budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    pub window: u64,
    pub used: u64,
}

impl WindowState {
    /// Whether this state belongs to a window that has ended at `now_ms`.
    pub fn is_expired(&self, duration: u64, now_ms: u64) -> bool {
        now_ms / duration.max(1) != self.window
    }
}

/// The decision, as a pure function. `state` is what the store holds for the budget (or
/// `None`); the returned state is what it must hold afterwards.
pub fn decide(
    state: Option<WindowState>,
    req: LimitRequest,
    now_ms: u64,
) -> (WindowState, Decision) {
    let duration = req.duration.max(1);
    let window = now_ms / duration;
    let used = match state {
        Some(s) if s.window == window => s.used,
        _ => 0,
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
        reset: window.saturating_add(1).saturating_mul(duration),
    };
    (WindowState { window, used }, decision)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: u64 = 10_000;

    fn req(limit: u64, cost: u64) -> LimitRequest {
        LimitRequest {
            limit,
            duration: D,
            cost,
        }
    }

    #[test]
    fn fresh_budget_passes_and_reset_is_window_end() {
        let (s, d) = decide(None, req(3, 1), 123_456);
        assert_eq!(
            s,
            WindowState {
                window: 12,
                used: 1
            }
        );
        assert_eq!(
            d,
            Decision {
                success: true,
                limit: 3,
                remaining: 2,
                reset: 130_000
            }
        );
    }

    #[test]
    fn denial_deducts_nothing() {
        let s = WindowState { window: 0, used: 2 };
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
        let full = WindowState { window: 0, used: 2 };
        let (s, d) = decide(Some(full), req(2, 0), 1);
        assert!(
            !d.success,
            "cost 0 on an exhausted budget says success=false"
        );
        assert_eq!((s, d.remaining), (full, 0));
    }

    #[test]
    fn window_edges() {
        let s = WindowState { window: 0, used: 3 };
        // Last millisecond of window 0: still exhausted.
        let (_, d) = decide(Some(s), req(3, 1), D - 1);
        assert!(!d.success);
        assert_eq!(d.reset, D);
        // First millisecond of window 1: fresh budget.
        let (s1, d) = decide(Some(s), req(3, 1), D);
        assert!(d.success);
        assert_eq!(s1, WindowState { window: 1, used: 1 });
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
        let big = LimitRequest {
            limit: max,
            duration: max,
            cost: max,
        };
        let (s, d) = decide(Some(WindowState { window: 0, used: 1 }), big, max - 1);
        assert!(!d.success);
        assert_eq!(s.used, 1);
        assert_eq!(d.reset, max);
        let (_, d) = decide(
            Some(WindowState {
                window: 0,
                used: u64::MAX,
            }),
            req(u64::MAX, 1),
            0,
        );
        assert!(!d.success);
    }
}
