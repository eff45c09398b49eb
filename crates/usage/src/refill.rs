//! When a key's credits refill (API-v2.md §13.1): daily at 00:00 UTC; monthly at 00:00 UTC
//! on the refill day, or on the month's last day when it is shorter. Pure arithmetic on
//! Unix milliseconds (UTC has no daylight saving), for whichever caller applies refills
//! with the clock it was given.

use keygate_domain::calendar;
use keygate_rbac::{Refill, RefillInterval};

/// The latest refill instant at or before `now` (Unix ms).
pub fn last_boundary(interval: RefillInterval, day: Option<u8>, now: i64) -> i64 {
    match interval {
        RefillInterval::Daily => calendar::day_start(now),
        RefillInterval::Monthly => calendar::last_monthly(day.unwrap_or(1), now),
    }
}

/// The refill due at `now` for credits refilled last at `refill.last_refill_at` (or, never
/// refilled, set at `since`): the refill instant to record, once per period, or `None`. A
/// key idle for several periods is refilled once (the refill sets `remaining` to the amount).
pub fn due(refill: &Refill, since: i64, now: i64) -> Option<i64> {
    let last = refill.last_refill_at.unwrap_or(since);
    let boundary = last_boundary(refill.interval, refill.day, now);
    (boundary > last).then_some(boundary)
}

/// The refill a counter takes at `at` (a period's start, [`last_boundary`]): to `amount`,
/// recorded at `at`, when its last refill (or, never refilled, `since`: the key's creation)
/// is before `at`; `None` when this period's refill happened already. Whoever applies it
/// does so under the counter's lock, so that it happens once per period.
pub fn refill_at(last_refill_at: Option<i64>, since: i64, amount: u64, at: i64) -> Option<(u64, i64)> {
    (last_refill_at.unwrap_or(since) < at).then_some((amount, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keygate_domain::calendar::{DAY_MS, days_from_civil};

    fn at(year: i64, month: u32, day: u32, hour: i64) -> i64 {
        days_from_civil(year, month, day) * DAY_MS + hour * 3_600_000
    }

    fn monthly(day: u8, last: Option<i64>) -> Refill {
        Refill { interval: RefillInterval::Monthly, amount: 10, day: Some(day), last_refill_at: last }
    }

    #[test]
    fn a_refill_applies_once_per_period_counting_from_creation() {
        let created = at(2026, 11, 25, 10);
        let today = at(2026, 11, 25, 0);
        assert_eq!(refill_at(None, created, 5, today), None, "created after this period's start");
        let tomorrow = at(2026, 11, 26, 0);
        assert_eq!(refill_at(None, created, 5, tomorrow), Some((5, tomorrow)));
        assert_eq!(refill_at(Some(tomorrow), created, 5, tomorrow), None, "already refilled");
        assert_eq!(refill_at(Some(today), created, 7, tomorrow), Some((7, tomorrow)));
    }

    #[test]
    fn daily_refills_at_midnight_utc_once_per_day() {
        let daily =
            |last| Refill { interval: RefillInterval::Daily, amount: 5, day: None, last_refill_at: last };
        let created = at(2026, 11, 25, 10);
        assert_eq!(due(&daily(None), created, at(2026, 11, 25, 23)), None, "the same day");
        assert_eq!(due(&daily(None), created, at(2026, 11, 26, 0)), Some(at(2026, 11, 26, 0)));
        let refilled = Some(at(2026, 11, 26, 0));
        assert_eq!(due(&daily(refilled), created, at(2026, 11, 26, 18)), None, "once per period");
        assert_eq!(
            due(&daily(refilled), created, at(2026, 11, 29, 7)),
            Some(at(2026, 11, 29, 0)),
            "idle: once"
        );
    }

    #[test]
    fn monthly_refills_on_the_day_or_the_last_day_of_a_shorter_month() {
        let created = at(2026, 1, 10, 12);
        // Day 31: February refills on its 28th (29th in a leap year), April on the 30th.
        assert_eq!(last_boundary(RefillInterval::Monthly, Some(31), at(2026, 3, 1, 0)), at(2026, 2, 28, 0));
        assert_eq!(last_boundary(RefillInterval::Monthly, Some(31), at(2028, 3, 1, 0)), at(2028, 2, 29, 0));
        assert_eq!(last_boundary(RefillInterval::Monthly, Some(31), at(2026, 5, 2, 0)), at(2026, 4, 30, 0));
        // Before this month's day: last month's.
        assert_eq!(last_boundary(RefillInterval::Monthly, Some(15), at(2026, 3, 14, 23)), at(2026, 2, 15, 0));
        assert_eq!(last_boundary(RefillInterval::Monthly, Some(15), at(2026, 1, 1, 0)), at(2025, 12, 15, 0));
        assert_eq!(due(&monthly(15, None), created, at(2026, 1, 14, 0)), None);
        assert_eq!(due(&monthly(15, None), created, at(2026, 1, 15, 0)), Some(at(2026, 1, 15, 0)));
        let last = Some(at(2026, 1, 15, 0));
        assert_eq!(due(&monthly(15, last), created, at(2026, 2, 14, 23)), None);
        assert_eq!(
            due(&monthly(15, last), created, at(2026, 6, 20, 0)),
            Some(at(2026, 6, 15, 0)),
            "idle: once"
        );
    }

    #[test]
    fn a_boundary_is_never_after_now_nor_a_period_before_it() {
        let mut now = at(1999, 12, 31, 23);
        while now < at(2031, 1, 1, 0) {
            for day in [1u8, 15, 28, 29, 30, 31] {
                let b = last_boundary(RefillInterval::Monthly, Some(day), now);
                assert!(b <= now && now - b < 32 * DAY_MS, "day {day} at {now}: {b}");
            }
            let d = last_boundary(RefillInterval::Daily, None, now);
            assert!(d <= now && now - d < DAY_MS);
            now += 17 * 3_600_000 + 1;
        }
    }
}
