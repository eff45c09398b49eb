//! When a key's credits refill (API-v2.md §13.1): daily at 00:00 UTC; monthly at 00:00 UTC
//! on the refill day, or on the month's last day when it is shorter. Pure arithmetic on
//! Unix milliseconds (UTC has no daylight saving), for whichever caller applies refills
//! with the clock it was given.

use crate::{Refill, RefillInterval};

const DAY_MS: i64 = 86_400_000;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil (year, month, day) of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    (days_from_civil(next_year, next_month, 1) - days_from_civil(year, month, 1)) as u32
}

/// The instant (Unix ms) of the month's refill: 00:00 UTC on `day`, or on the month's
/// last day when it is shorter.
fn monthly_at(year: i64, month: u32, day: u8) -> i64 {
    let d = u32::from(day.max(1)).min(days_in_month(year, month));
    days_from_civil(year, month, d) * DAY_MS
}

/// The latest refill instant at or before `now` (Unix ms).
pub fn last_boundary(interval: RefillInterval, day: Option<u8>, now: i64) -> i64 {
    match interval {
        RefillInterval::Daily => now.div_euclid(DAY_MS) * DAY_MS,
        RefillInterval::Monthly => {
            let day = day.unwrap_or(1);
            let (year, month, _) = civil_from_days(now.div_euclid(DAY_MS));
            let this_month = monthly_at(year, month, day);
            if this_month <= now {
                return this_month;
            }
            let (py, pm) = if month == 1 { (year - 1, 12) } else { (year, month - 1) };
            monthly_at(py, pm, day)
        }
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
    fn civil_dates_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for days in [-800_000, -1, 0, 1, 59, 60, 11_016, 19_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2026, 11), 30);
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
