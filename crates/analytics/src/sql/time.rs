//! Constant times: parsed literals, shifted by an `INTERVAL` (fixed milliseconds or
//! calendar months, UTC).

use super::ir::{E, K};
use super::{R, SqlError, Ty, at};
use sqlparser::ast::{DateTimeField, Expr, Spanned, Value};

/// `YYYY-MM-DD`, `YYYY-MM-DD hh:mm:ss` or `YYYY-MM-DDThh:mm:ss[Z]` (UTC) as Unix ms.
pub(super) fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    if let Ok(d) = s.parse::<jiff::civil::Date>()
        && s.len() == 10
    {
        return d.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|z| z.timestamp().as_millisecond());
    }
    let dt = s.replacen(' ', "T", 1).parse::<jiff::civil::DateTime>().ok()?;
    dt.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|z| z.timestamp().as_millisecond())
}

/// `t` moved by `ms` and `months` (calendar months, UTC; the day clamped to the month's
/// last, as ClickHouse does).
pub(super) fn shift(t: i64, ms: i64, months: i32) -> Option<i64> {
    let z = jiff::Timestamp::from_millisecond(t).ok()?.to_zoned(jiff::tz::TimeZone::UTC);
    let z = z.checked_add(jiff::Span::new().try_months(months).ok()?).ok()?;
    z.timestamp().as_millisecond().checked_add(ms)
}

/// `INTERVAL n unit` or `INTERVAL 'n unit'`.
pub(super) fn interval(i: &sqlparser::ast::Interval, e: &Expr) -> R<E> {
    let bad = || SqlError::Invalid(at("an INTERVAL is a whole number and a unit (SECOND … YEAR)", e.span()));
    if i.last_field.is_some() || i.leading_precision.is_some() || i.fractional_seconds_precision.is_some() {
        return Err(bad());
    }
    let (n, unit): (i64, String) = match (&*i.value, &i.leading_field) {
        (Expr::Value(v), Some(f)) => match &v.value {
            Value::Number(n, _) | Value::SingleQuotedString(n) => {
                (n.trim().parse().map_err(|_| bad())?, field_name(f))
            }
            _ => return Err(bad()),
        },
        (Expr::Value(v), None) => match &v.value {
            Value::SingleQuotedString(s) => {
                let mut parts = s.split_whitespace();
                let n = parts.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
                let unit = parts.next().ok_or_else(bad)?.to_ascii_lowercase();
                if parts.next().is_some() {
                    return Err(bad());
                }
                (n, unit)
            }
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    let unit = unit.trim_end_matches('s');
    let (ms, months) = match unit {
        "second" => (1_000, 0),
        "minute" => (60_000, 0),
        "hour" => (3_600_000, 0),
        "day" => (86_400_000, 0),
        "week" => (7 * 86_400_000, 0),
        "month" => (0, 1),
        "quarter" => (0, 3),
        "year" => (0, 12),
        _ => return Err(bad()),
    };
    if n.unsigned_abs() > 1_000_000 {
        return Err(bad());
    }
    Ok(E { k: K::Interval { ms: ms * n, months: (months * n) as i32 }, ty: Ty::Null, agg: false })
}

fn field_name(f: &DateTimeField) -> String {
    f.to_string().to_ascii_lowercase()
}
