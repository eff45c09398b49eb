//! The functions a query may call (API-v2.md §18's list, ClickHouse's names), each written
//! for SQLite and PostgreSQL so that both compute the same value. Times are Unix ms; a
//! constant time (`now()`, `today()`, a literal) is computed here, so that calendar
//! arithmetic on it is the same everywhere.

use super::ir::{E, K, Tr, single_name, unify};
use super::tables::{floor_calendar, floor_width};
use super::time::parse_time;
use super::{Dialect, Param, R, SqlError, Ty, at, invalid};
use sqlparser::ast::{
    DuplicateTreatment, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Spanned,
};

const DAY: i64 = 86_400_000;

/// Every function name allowed, as the error for an unknown one lists them.
const ALLOWED: &str = "count, sum, avg, min, max, uniq, uniqExact, if, coalesce, now, today, toDate, toDateTime, \
     toStartOfMinute, toStartOfHour, toStartOfDay, toStartOfWeek, toStartOfMonth, toStartOfYear, toUnixTimestamp, \
     toUnixTimestamp64Milli, fromUnixTimestamp64Milli, has, lower, upper, length, concat, round, floor, ceil, abs, \
     toString, toInt64, toFloat64";

impl Tr<'_> {
    pub(super) fn function(&mut self, f: &Function, e: &Expr) -> R<E> {
        let name = single_name(&f.name)?;
        if f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() || f.null_treatment.is_some()
        {
            return invalid(at(format!("{name}: OVER, FILTER and WITHIN GROUP are not allowed"), e.span()));
        }
        if !matches!(f.parameters, FunctionArguments::None) || f.uses_odbc_syntax {
            return invalid(at(format!("{name}: parametric functions are not allowed"), e.span()));
        }
        let (distinct, args) = match &f.args {
            FunctionArguments::None => (false, &[][..]),
            FunctionArguments::List(l) => {
                if !l.clauses.is_empty() {
                    return invalid(at(format!("{name}: clauses inside the call are not allowed"), e.span()));
                }
                (matches!(l.duplicate_treatment, Some(DuplicateTreatment::Distinct)), &l.args[..])
            }
            FunctionArguments::Subquery(_) => {
                return invalid(at(format!("{name}: a subquery as arguments"), e.span()));
            }
        };
        let lower = name.to_ascii_lowercase();
        // count(*) and count() first: the only calls taking a wildcard or nothing.
        if lower == "count" {
            let star = match args {
                [] => true,
                [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] => true,
                [FunctionArg::Unnamed(FunctionArgExpr::Expr(_))] => false,
                _ => return invalid(at("count takes *, nothing or one value", e.span())),
            };
            if star {
                if distinct {
                    return invalid(at("count(DISTINCT *) is not allowed", e.span()));
                }
                return Ok(E::sql("COUNT(*)".into(), Ty::Int).with_agg(true));
            }
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => vals.push(self.value(x)?),
                _ => return invalid(at(format!("{name}: only plain arguments are allowed"), e.span())),
            }
        }
        if distinct && !matches!(lower.as_str(), "count" | "sum" | "avg" | "uniq" | "uniqexact") {
            return invalid(at(format!("{name}(DISTINCT …) is not allowed"), e.span()));
        }
        let inner_agg = vals.iter().any(|v| v.agg);
        let arity = |n: usize| -> R<()> {
            if vals.len() == n {
                Ok(())
            } else {
                invalid(at(format!("{name} takes {n} argument{}", if n == 1 { "" } else { "s" }), e.span()))
            }
        };
        let d = self.d;
        let dist = if distinct { "DISTINCT " } else { "" };
        let v = match lower.as_str() {
            "count" | "uniq" | "uniqexact" => {
                arity(1)?;
                if inner_agg {
                    return invalid(at("an aggregate inside an aggregate", e.span()));
                }
                let s = self.operand(&vals[0])?;
                let dist = if lower == "count" { dist } else { "DISTINCT " };
                E::sql(format!("COUNT({dist}{s})"), Ty::Int).with_agg(true)
            }
            "sum" | "avg" | "min" | "max" => {
                arity(1)?;
                if inner_agg {
                    return invalid(at("an aggregate inside an aggregate", e.span()));
                }
                let x = &vals[0];
                let s = self.operand(x)?;
                let numeric = matches!(x.ty, Ty::Int | Ty::Float | Ty::Bool | Ty::Null);
                match lower.as_str() {
                    "sum" if numeric => {
                        if x.ty == Ty::Float {
                            E::sql(format!("COALESCE(SUM({dist}{s}), 0)"), Ty::Float)
                        } else {
                            let sum = match d {
                                Dialect::Sqlite => format!("SUM({dist}{s})"),
                                Dialect::Postgres => format!("CAST(SUM({dist}{s}) AS BIGINT)"),
                            };
                            E::sql(format!("COALESCE({sum}, 0)"), Ty::Int)
                        }
                    }
                    "avg" if numeric => {
                        let float = self.float_type();
                        E::sql(format!("CAST(AVG({dist}{s}) AS {float})"), Ty::Float)
                    }
                    "min" | "max" if x.ty != Ty::Array => {
                        let ty = if x.ty == Ty::Bool { Ty::Int } else { x.ty };
                        E::sql(format!("{}({s})", lower.to_uppercase()), ty)
                    }
                    _ => return invalid(at(format!("{name} of a {}", x.ty.name()), e.span())),
                }
                .with_agg(true)
            }
            "if" => {
                arity(3)?;
                let c = self.as_bool(vals[0].clone())?;
                let (a, at_) = self.as_value(vals[1].clone())?;
                let (b, bt) = self.as_value(vals[2].clone())?;
                let ty = unify(at_, bt)
                    .ok_or_else(|| SqlError::Invalid(at("if: both results must have one type", e.span())))?;
                E::sql(format!("(CASE WHEN {c} THEN {a} ELSE {b} END)"), ty).with_agg(inner_agg)
            }
            "coalesce" => {
                if vals.is_empty() {
                    return invalid(at("coalesce takes at least one argument", e.span()));
                }
                let mut ty = Ty::Null;
                let mut parts = Vec::new();
                for v in vals {
                    let (s, t) = self.as_value(v)?;
                    ty = unify(ty, t).ok_or_else(|| {
                        SqlError::Invalid(at("coalesce: the arguments must have one type", e.span()))
                    })?;
                    parts.push(s);
                }
                if parts.len() == 1 {
                    parts.push("NULL".into());
                }
                E::sql(format!("COALESCE({})", parts.join(", ")), ty).with_agg(inner_agg)
            }
            "now" => {
                arity(0)?;
                E { k: K::Time(self.now), ty: Ty::Time, agg: false }
            }
            "today" => {
                arity(0)?;
                E { k: K::Time(floor_to(self.now, DAY).unwrap_or(self.now)), ty: Ty::Time, agg: false }
            }
            "todate" | "todatetime" => {
                arity(1)?;
                let day = lower == "todate";
                let x = &vals[0];
                if let Some(s) = x.text_literal() {
                    let t = parse_time(s).ok_or_else(|| {
                        SqlError::Invalid(at(format!("{name}: '{s}' is not a date or date-time"), e.span()))
                    })?;
                    return Ok(E {
                        k: K::Time(if day { floor_to(t, DAY).ok_or_else(|| out_of_range(e))? } else { t }),
                        ty: Ty::Time,
                        agg: false,
                    });
                }
                if let K::Time(t) = x.k {
                    return Ok(E {
                        k: K::Time(if day { floor_to(t, DAY).ok_or_else(|| out_of_range(e))? } else { t }),
                        ty: Ty::Time,
                        agg: false,
                    });
                }
                let s = self.operand(x)?;
                let ms = match x.ty {
                    Ty::Time => s,
                    // A number is seconds since the epoch, as in ClickHouse.
                    Ty::Int => format!("({s} * 1000)"),
                    t => return invalid(at(format!("{name} of a {}", t.name()), e.span())),
                };
                E::sql(if day { floor_width(&ms, DAY) } else { ms }, Ty::Time).with_agg(inner_agg)
            }
            "tostartofminute" | "tostartofhour" | "tostartofday" | "tostartofweek" | "tostartofmonth"
            | "tostartofyear" => {
                arity(1)?;
                let x = &vals[0];
                if x.ty != Ty::Time {
                    return invalid(at(format!("{name} takes a time, not a {}", x.ty.name()), e.span()));
                }
                if let K::Time(t) = x.k {
                    let t = start_of(t, &lower)
                        .ok_or_else(|| SqlError::Invalid(at("the time is out of range", e.span())))?;
                    return Ok(E { k: K::Time(t), ty: Ty::Time, agg: false });
                }
                let s = self.raw(x)?;
                let out = match lower.as_str() {
                    "tostartofminute" => floor_width(&s, 60_000),
                    "tostartofhour" => floor_width(&s, 3_600_000),
                    "tostartofday" => floor_width(&s, DAY),
                    // Weeks start on Sunday (ClickHouse's default mode); day 0 was a Thursday.
                    "tostartofweek" => format!("(((({s}) / {DAY}) - ((({s}) / {DAY} + 4) % 7)) * {DAY})"),
                    "tostartofmonth" => floor_calendar(d, &s, "month"),
                    _ => floor_calendar(d, &s, "year"),
                };
                E::sql(out, Ty::Time).with_agg(inner_agg)
            }
            "tounixtimestamp" | "tounixtimestamp64milli" => {
                arity(1)?;
                let x = &vals[0];
                if x.ty != Ty::Time {
                    return invalid(at(format!("{name} takes a time, not a {}", x.ty.name()), e.span()));
                }
                let s = self.raw(x)?;
                let out = if lower == "tounixtimestamp" { format!("(({s}) / 1000)") } else { s };
                E::sql(out, Ty::Int).with_agg(inner_agg)
            }
            "fromunixtimestamp64milli" => {
                arity(1)?;
                let x = &vals[0];
                if !matches!(x.ty, Ty::Int | Ty::Time) {
                    return invalid(at(
                        format!("{name} takes a whole number, not a {}", x.ty.name()),
                        e.span(),
                    ));
                }
                if let K::Lit(Param::Int(t)) = x.k {
                    return Ok(E { k: K::Time(t), ty: Ty::Time, agg: false });
                }
                E { ty: Ty::Time, ..x.clone() }
            }
            "has" => {
                arity(2)?;
                if vals[0].ty != Ty::Array {
                    return invalid(at("has takes tags first: has(tags, 'value')", e.span()));
                }
                if !matches!(vals[1].ty, Ty::Text | Ty::Null) {
                    return invalid(at("has looks for a String", e.span()));
                }
                let arr = self.raw(&vals[0])?;
                let needle = self.raw(&vals[1])?;
                let out = match d {
                    Dialect::Sqlite => {
                        format!("EXISTS (SELECT 1 FROM json_each({arr}) WHERE json_each.value = {needle})")
                    }
                    Dialect::Postgres => format!("(CAST({arr} AS JSONB) ? CAST({needle} AS TEXT))"),
                };
                E::sql(out, Ty::Bool).with_agg(inner_agg)
            }
            "lower" | "upper" => {
                arity(1)?;
                if !matches!(vals[0].ty, Ty::Text | Ty::Null) {
                    return invalid(at(format!("{name} takes a String"), e.span()));
                }
                let s = self.raw(&vals[0])?;
                E::sql(format!("{}({s})", lower.to_uppercase()), Ty::Text).with_agg(inner_agg)
            }
            "length" => {
                arity(1)?;
                let s = self.raw(&vals[0])?;
                let out = match (vals[0].ty, d) {
                    (Ty::Array, Dialect::Sqlite) => format!("json_array_length({s})"),
                    (Ty::Array, Dialect::Postgres) => {
                        format!("CAST(jsonb_array_length(CAST({s} AS JSONB)) AS BIGINT)")
                    }
                    // Bytes, as ClickHouse counts.
                    (Ty::Text | Ty::Null, Dialect::Sqlite) => format!("length(CAST({s} AS BLOB))"),
                    (Ty::Text | Ty::Null, Dialect::Postgres) => format!("CAST(octet_length({s}) AS BIGINT)"),
                    (t, _) => return invalid(at(format!("length of a {}", t.name()), e.span())),
                };
                E::sql(out, Ty::Int).with_agg(inner_agg)
            }
            "concat" => {
                if vals.is_empty() {
                    return invalid(at("concat takes at least one argument", e.span()));
                }
                self.concat(&vals)?
            }
            "round" | "floor" | "ceil" | "ceiling" => {
                if vals.is_empty() || vals.len() > 2 || (lower != "round" && vals.len() > 1) {
                    return invalid(at(
                        format!("{name} takes a number (and, for round, the decimals)"),
                        e.span(),
                    ));
                }
                let places = match vals.get(1).map(|p| &p.k) {
                    None => 0,
                    Some(K::Lit(Param::Int(n))) if (0..=15).contains(n) => *n,
                    Some(_) => return invalid(at("round's decimals are a whole number 0…15", e.span())),
                };
                self.rounding(&lower, &vals[0], places, e)?
            }
            "abs" => {
                arity(1)?;
                let x = &vals[0];
                if !matches!(x.ty, Ty::Int | Ty::Float | Ty::Bool | Ty::Null) {
                    return invalid(at(format!("abs of a {}", x.ty.name()), e.span()));
                }
                let s = self.operand(x)?;
                E::sql(format!("ABS({s})"), if x.ty == Ty::Float { Ty::Float } else { Ty::Int })
                    .with_agg(inner_agg)
            }
            "tostring" => {
                arity(1)?;
                let x = &vals[0];
                let s = self.operand(x)?;
                let out = match (x.ty, d) {
                    (Ty::Text, _) => s,
                    (Ty::Time, Dialect::Sqlite) => {
                        format!("strftime('%Y-%m-%d %H:%M:%S', ({s}) / 1000, 'unixepoch')")
                    }
                    (Ty::Time, Dialect::Postgres) => {
                        format!(
                            "to_char(to_timestamp(({s}) / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"
                        )
                    }
                    _ => format!("CAST({s} AS TEXT)"),
                };
                E::sql(out, Ty::Text).with_agg(inner_agg)
            }
            "toint64" => {
                arity(1)?;
                let x = &vals[0];
                let s = self.operand(x)?;
                let out = match (x.ty, d) {
                    (Ty::Int | Ty::Bool | Ty::Time | Ty::Null, _) => s,
                    (Ty::Float, Dialect::Postgres) => format!("CAST(TRUNC({s}) AS BIGINT)"),
                    (Ty::Text, Dialect::Postgres) => format!("CAST({s} AS BIGINT)"),
                    (Ty::Float | Ty::Text, Dialect::Sqlite) => format!("CAST({s} AS INTEGER)"),
                    (t, _) => return invalid(at(format!("toInt64 of a {}", t.name()), e.span())),
                };
                E::sql(out, Ty::Int).with_agg(inner_agg)
            }
            "tofloat64" => {
                arity(1)?;
                let x = &vals[0];
                if x.ty == Ty::Array {
                    return invalid(at("toFloat64 of an array", e.span()));
                }
                let s = self.operand(x)?;
                let float = self.float_type();
                E::sql(format!("CAST({s} AS {float})"), Ty::Float).with_agg(inner_agg)
            }
            _ => {
                return invalid(at(
                    format!("the function {name} is not allowed; the functions are: {ALLOWED}"),
                    e.span(),
                ));
            }
        };
        Ok(v)
    }
}

impl Tr<'_> {
    /// `round(x, places)`, `floor(x)`, `ceil(x)`: a whole number stays as it is; a float
    /// is rounded half away from zero on both backends.
    pub(super) fn rounding(&mut self, f: &str, x: &E, places: i64, e: &Expr) -> R<E> {
        if !matches!(x.ty, Ty::Int | Ty::Float | Ty::Bool | Ty::Null) {
            return invalid(at(format!("{f} of a {}", x.ty.name()), e.span()));
        }
        let s = self.operand(x)?;
        if x.ty != Ty::Float {
            return Ok(E::sql(s, Ty::Int).with_agg(x.agg));
        }
        let out = match (f, self.d) {
            ("round", Dialect::Sqlite) => format!("ROUND({s}, {places})"),
            ("round", Dialect::Postgres) => {
                format!("CAST(ROUND(CAST({s} AS NUMERIC), {places}) AS DOUBLE PRECISION)")
            }
            // SQLite is built without its math functions: truncation, corrected.
            ("floor", Dialect::Sqlite) => {
                format!("CAST(CAST({s} AS INTEGER) - ({s} < CAST({s} AS INTEGER)) AS REAL)")
            }
            (_, Dialect::Sqlite) => {
                format!("CAST(CAST({s} AS INTEGER) + ({s} > CAST({s} AS INTEGER)) AS REAL)")
            }
            ("floor", Dialect::Postgres) => format!("floor({s})"),
            (_, Dialect::Postgres) => format!("ceil({s})"),
        };
        Ok(E::sql(out, Ty::Float).with_agg(x.agg))
    }
}

/// `t` floored to a multiple of `w` (None: out of range).
fn floor_to(t: i64, w: i64) -> Option<i64> {
    t.checked_sub(t.rem_euclid(w))
}

fn out_of_range(e: &Expr) -> SqlError {
    SqlError::Invalid(at("the time is out of range", e.span()))
}

/// The start of `t`'s minute, hour, day, week (Sunday), month or year (UTC).
fn start_of(t: i64, f: &str) -> Option<i64> {
    Some(match f {
        "tostartofminute" => floor_to(t, 60_000)?,
        "tostartofhour" => floor_to(t, 3_600_000)?,
        "tostartofday" => floor_to(t, DAY)?,
        "tostartofweek" => {
            let d = t.div_euclid(DAY);
            (d - (d + 4).rem_euclid(7)).checked_mul(DAY)?
        }
        _ => {
            let z = jiff::Timestamp::from_millisecond(t).ok()?.to_zoned(jiff::tz::TimeZone::UTC);
            let date = z.date();
            let first = if f == "tostartofmonth" { date.first_of_month() } else { date.first_of_year() };
            first.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp().as_millisecond()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::time::shift;
    use super::*;

    #[test]
    fn constant_times_are_parsed_shifted_and_floored_in_utc() {
        let t = parse_time("2026-01-31 12:30:00").unwrap();
        assert_eq!(t, 1_769_862_600_000);
        assert_eq!(parse_time("2026-01-31"), Some(1_769_817_600_000));
        assert_eq!(parse_time("2026-13-01"), None);
        // One month after January 31st is February 28th.
        assert_eq!(shift(parse_time("2026-01-31").unwrap(), 0, 1), parse_time("2026-02-28"));
        assert_eq!(start_of(t, "tostartofmonth"), parse_time("2026-01-01"));
        assert_eq!(start_of(t, "tostartofyear"), parse_time("2026-01-01"));
        // 2026-01-31 is a Saturday: its week began on Sunday the 25th.
        assert_eq!(start_of(t, "tostartofweek"), parse_time("2026-01-25"));
    }
}
