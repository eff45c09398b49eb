//! UTC calendar arithmetic on Unix milliseconds (UTC has no daylight saving): civil dates,
//! and the latest day or month boundary at or before an instant. Credit refills and the
//! monthly slices of analytics both count periods this way.

/// A day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil (year, month, day) of a count of days since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
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

pub fn days_in_month(year: i64, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    (days_from_civil(next_year, next_month, 1) - days_from_civil(year, month, 1)) as u32
}

/// The instant (Unix ms) of the month's refill: 00:00 UTC on `day`, or on the month's
/// last day when it is shorter.
fn monthly_at(year: i64, month: u32, day: u8) -> i64 {
    let d = u32::from(day.max(1)).min(days_in_month(year, month));
    days_from_civil(year, month, d) * DAY_MS
}

/// 00:00 UTC of the day of `now`.
pub fn day_start(now: i64) -> i64 {
    now.div_euclid(DAY_MS) * DAY_MS
}

/// The latest 00:00 UTC on `day` of a month (or on the month's last day when it is
/// shorter) at or before `now`.
pub fn last_monthly(day: u8, now: i64) -> i64 {
    let (year, month, _) = civil_from_days(now.div_euclid(DAY_MS));
    let this_month = monthly_at(year, month, day);
    if this_month <= now {
        return this_month;
    }
    let (py, pm) = if month == 1 { (year - 1, 12) } else { (year, month - 1) };
    monthly_at(py, pm, day)
}

/// 00:00 UTC on the first day of the month of `now`.
pub fn month_start(now: i64) -> i64 {
    last_monthly(1, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(year: i64, month: u32, day: u32, hour: i64) -> i64 {
        days_from_civil(year, month, day) * DAY_MS + hour * 3_600_000
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
    fn month_boundaries_fall_on_the_day_or_a_shorter_months_last_day() {
        assert_eq!(last_monthly(31, at(2026, 3, 1, 0)), at(2026, 2, 28, 0));
        assert_eq!(last_monthly(31, at(2028, 3, 1, 0)), at(2028, 2, 29, 0));
        assert_eq!(last_monthly(15, at(2026, 1, 1, 0)), at(2025, 12, 15, 0));
        assert_eq!(month_start(at(2026, 11, 26, 19)), at(2026, 11, 1, 0));
        assert_eq!(day_start(at(2026, 11, 26, 19)), at(2026, 11, 26, 0));
    }
}
