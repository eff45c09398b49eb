//! When credit events fire (API-v2.md §23): `key.credits.low` the first time the spent share
//! of the key's base (its refill amount, else its credits when last set) reaches one of an
//! endpoint's `creditsLow` percents, `key.credits.exhausted` when the remaining credits
//! reach 0. Decided on a counter's write (what it was, what it is): each write of a key's
//! counter follows the one before it, so each crossing is in exactly one write; a refill or
//! an update of the credits starts the shares afresh.

use keygate_rbac::CreditChange;

/// The share of `base` spent when `remaining` are left, in parts of `base * 100`.
fn spent(base: u64, remaining: u64) -> u128 {
    u128::from(base.saturating_sub(remaining)) * 100
}

/// Whether the change took the spent share of `base` from below `percent` to it or past.
pub fn crossed_low(base: u64, change: &CreditChange<'_>, percent: u8) -> bool {
    if base == 0 || !change.spent() {
        return false;
    }
    let line = u128::from(base) * u128::from(percent);
    let before = if change.refilled { 0 } else { spent(base, change.before) };
    before < line && spent(base, change.after) >= line
}

/// Whether the change took the remaining credits to 0.
pub fn exhausted(change: &CreditChange<'_>) -> bool {
    change.after == 0 && (change.before > 0 || change.refilled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(before: u64, after: u64) -> CreditChange<'static> {
        CreditChange { key_id: "k", before, after, refilled: false }
    }

    #[test]
    fn a_threshold_is_crossed_by_the_one_write_that_reaches_it() {
        assert!(!crossed_low(100, &change(100, 21), 80));
        assert!(crossed_low(100, &change(21, 20), 80), "80 spent of 100");
        assert!(!crossed_low(100, &change(20, 19), 80), "past it already");
        assert!(crossed_low(100, &change(90, 5), 80), "a write that jumps past it");
        assert!(!crossed_low(100, &change(5, 5), 80), "nothing spent");
        assert!(!crossed_low(0, &change(1, 0), 80), "no base");
        // Credits above the base (a refill amount below the remaining): nothing spent yet.
        assert!(!crossed_low(100, &change(500, 30), 80));
        assert!(crossed_low(100, &change(30, 20), 80));
        // Odd bases: 80% of 7 is 5.6 spent, reached at 6 spent (1 left).
        assert!(!crossed_low(7, &change(7, 2), 80));
        assert!(crossed_low(7, &change(2, 1), 80));
    }

    #[test]
    fn a_refill_between_starts_the_share_afresh() {
        let refilled = CreditChange { key_id: "k", before: 10, after: 15, refilled: true };
        assert!(crossed_low(100, &refilled, 80), "refilled to 100, then 85 spent");
        assert!(!crossed_low(100, &CreditChange { after: 50, ..refilled }, 80));
        assert!(exhausted(&CreditChange { before: 0, after: 0, ..refilled }), "refilled, then all spent");
    }

    #[test]
    fn exhausted_is_reaching_zero_once() {
        assert!(exhausted(&change(3, 0)));
        assert!(!exhausted(&change(0, 0)));
        assert!(!exhausted(&change(3, 1)));
    }
}
