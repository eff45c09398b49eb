//! The public tables of §18 and what each is in keygate: a subquery over the count tables
//! (`verification_counts`, `ratelimit_counts`) that already holds the caller's workspace
//! and, for a root key scoped to some APIs or namespaces, only those; minute, hour and day
//! rows summed into the table's time grain.

use super::{Binds, Dialect, Family, Scope, SqlError, Ty};

/// A table's time grain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grain {
    Minute,
    Hour,
    Day,
    Month,
}

/// The grain of the public table `name` of `family`.
pub(super) fn lookup(name: &str, family: Family) -> Result<Option<Grain>, SqlError> {
    let (prefix, events, other) = match family {
        Family::Verifications => ("key_verifications_per_", "key_verifications_v1", "ratelimits_"),
        Family::Ratelimits => ("ratelimits_per_", "ratelimits_v1", "key_verifications_"),
    };
    if name == events {
        return Err(SqlError::NotSupported(format!(
            "{name} (one row per event) is not kept: keygate keeps counts, not events; use {prefix}minute_v1, \
             which holds the last 24 hours per minute"
        )));
    }
    let grain = match name.strip_prefix(prefix) {
        Some("minute_v1") => Grain::Minute,
        Some("hour_v1") => Grain::Hour,
        Some("day_v1") => Grain::Day,
        Some("month_v1") => Grain::Month,
        _ if name.starts_with(other) => {
            return Err(SqlError::Invalid(format!(
                "{name} is not read by this method: {} reads {prefix}minute_v1, …_hour_v1, …_day_v1 and …_month_v1",
                match family {
                    Family::Verifications => "analytics.getVerifications",
                    Family::Ratelimits => "analytics.getRatelimits",
                }
            )));
        }
        _ => return Ok(None),
    };
    Ok(Some(grain))
}

/// The names of the tables of `family`, for error messages.
pub(super) fn names(family: Family) -> &'static str {
    match family {
        Family::Verifications => {
            "key_verifications_per_minute_v1, key_verifications_per_hour_v1, key_verifications_per_day_v1, \
             key_verifications_per_month_v1"
        }
        Family::Ratelimits => {
            "ratelimits_per_minute_v1, ratelimits_per_hour_v1, ratelimits_per_day_v1, ratelimits_per_month_v1"
        }
    }
}

/// A public column: its name, the subquery's column it reads, its type, and whether
/// `SELECT *` leaves it out (the virtual ones).
pub(super) struct PublicColumn {
    pub name: &'static str,
    pub internal: &'static str,
    pub ty: Ty,
    pub hidden: bool,
}

const fn col(name: &'static str, ty: Ty) -> PublicColumn {
    PublicColumn { name, internal: name, ty, hidden: false }
}

const fn virt(name: &'static str, internal: &'static str) -> PublicColumn {
    PublicColumn { name, internal, ty: Ty::Text, hidden: true }
}

const VERIFICATION_COLUMNS: &[PublicColumn] = &[
    col("time", Ty::Time),
    col("workspace_id", Ty::Text),
    col("key_space_id", Ty::Text),
    col("identity_id", Ty::Text),
    col("external_id", Ty::Text),
    col("key_id", Ty::Text),
    col("outcome", Ty::Text),
    col("tags", Ty::Array),
    col("count", Ty::Int),
    col("spent_credits", Ty::Int),
    virt("apiId", "key_space_id"),
    virt("api_id", "key_space_id"),
    virt("externalId", "external_id"),
];

const RATELIMIT_COLUMNS: &[PublicColumn] = &[
    col("time", Ty::Time),
    col("workspace_id", Ty::Text),
    col("namespace_id", Ty::Text),
    col("namespace_name", Ty::Text),
    col("passed", Ty::Int),
    col("total", Ty::Int),
];

pub(super) fn columns(family: Family) -> &'static [PublicColumn] {
    match family {
        Family::Verifications => VERIFICATION_COLUMNS,
        Family::Ratelimits => RATELIMIT_COLUMNS,
    }
}

const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;

/// `t` (Unix ms) floored to the start of its month (`unit` "month") or year ("year"), UTC.
pub(super) fn floor_calendar(d: Dialect, t: &str, unit: &str) -> String {
    match d {
        Dialect::Sqlite => {
            format!("(CAST(strftime('%s', ({t}) / 1000, 'unixepoch', 'start of {unit}') AS INTEGER) * 1000)")
        }
        Dialect::Postgres => format!(
            "(CAST(EXTRACT(EPOCH FROM date_trunc('{unit}', to_timestamp(({t}) / 1000) AT TIME ZONE 'UTC')) AS BIGINT) * 1000)"
        ),
    }
}

/// `t` (Unix ms, not negative) floored to a multiple of `width` ms.
pub(super) fn floor_width(t: &str, width: i64) -> String {
    format!("((({t}) / {width}) * {width})")
}

/// A text column compared and sorted byte by byte on both backends.
fn text(d: Dialect, column: &str) -> String {
    match d {
        Dialect::Sqlite => column.to_string(),
        Dialect::Postgres => format!("{column} COLLATE \"C\""),
    }
}

/// The subquery that is the table of `family` and `grain` for `scope`. `tick` (SQLite) is
/// the deadline check, called per row read.
pub(super) fn subquery(family: Family, grain: Grain, scope: &Scope, d: Dialect, binds: &mut Binds) -> String {
    let ws = binds.bind(super::Param::Text(scope.workspace_id.clone()));
    let (table, alias, scoped) = match family {
        Family::Verifications => ("verification_counts", "v", "api_id"),
        Family::Ratelimits => ("ratelimit_counts", "r", "namespace_id"),
    };
    let mut filter = format!("{alias}.workspace_id = {ws}");
    if let Some(only) = &scope.only {
        let list: Vec<String> = only.iter().map(|id| binds.bind(super::Param::Text(id.clone()))).collect();
        filter.push_str(&format!(" AND {alias}.{scoped} IN ({})", list.join(", ")));
    }
    let bucket = format!("{alias}.bucket");
    let (time, widths) = match grain {
        Grain::Minute => (bucket.clone(), format!("{alias}.width = {MINUTE}")),
        Grain::Hour => (floor_width(&bucket, HOUR), format!("{alias}.width <= {HOUR}")),
        Grain::Day => (floor_width(&bucket, DAY), format!("{alias}.width <= {DAY}")),
        Grain::Month => (floor_calendar(d, &bucket, "month"), "1 = 1".to_string()),
    };
    if d == Dialect::Sqlite {
        filter.push_str(&format!(" AND kg_deadline({alias}.bucket IS NULL) = 1"));
    }
    let sum = |e: &str| match d {
        Dialect::Sqlite => format!("SUM({e})"),
        Dialect::Postgres => format!("CAST(SUM({e}) AS BIGINT)"),
    };
    match family {
        Family::Verifications => format!(
            "SELECT {time} AS \"time\", {} AS \"workspace_id\", {} AS \"key_space_id\", {} AS \"identity_id\", \
             {} AS \"external_id\", {} AS \"key_id\", {} AS \"outcome\", v.tags AS \"tags\", {} AS \"count\", \
             {} AS \"spent_credits\" \
             FROM {table} v LEFT JOIN identities i ON i.id = v.identity_id AND i.workspace_id = v.workspace_id \
             WHERE {filter} AND {widths} GROUP BY 1, 2, 3, 4, 5, 6, 7, 8",
            text(d, "v.workspace_id"),
            text(d, "v.api_id"),
            text(d, "v.identity_id"),
            text(d, "COALESCE(i.external_id, '')"),
            text(d, "v.key_id"),
            text(d, "v.outcome"),
            sum("v.count"),
            sum("v.spent_credits"),
        ),
        Family::Ratelimits => format!(
            "SELECT {time} AS \"time\", {} AS \"workspace_id\", {} AS \"namespace_id\", {} AS \"namespace_name\", \
             {} AS \"passed\", {} AS \"total\" \
             FROM {table} r LEFT JOIN ratelimit_namespaces n ON n.id = r.namespace_id AND n.workspace_id = r.workspace_id \
             WHERE {filter} AND {widths} GROUP BY 1, 2, 3, 4",
            text(d, "r.workspace_id"),
            text(d, "r.namespace_id"),
            text(d, "COALESCE(n.name, r.namespace_id)"),
            sum("r.passed"),
            sum("r.passed + r.denied"),
        ),
    }
}
