//! What the copy copies: every table keygate keeps, parents before the tables that refer
//! to them, and what each holds on either backend (its columns, its rows).

use super::CopyError;
use crate::DbConn;
use diesel::RunQueryDsl;
use diesel::sql_types::{BigInt, Text};

/// Every table, in an order where each table's foreign keys point to tables before it
/// (`__diesel_schema_migrations` is the target's own). A table a migration adds must be
/// added here: the copy refuses a database holding a table this list does not name.
pub const TABLES: [&str; 32] = [
    "workspaces",
    "root_keys",
    "apis",
    "permissions",
    "roles",
    "roles_permissions",
    "identities",
    "keys",
    "keys_permissions",
    "keys_roles",
    "leaked_keys",
    "legacy_keys",
    "ratelimit_namespaces",
    "ratelimit_overrides",
    "ratelimits",
    "audit_events",
    "verification_counts",
    "api_verification_counts",
    "ratelimit_counts",
    "ratelimit_identifiers",
    "analytics_flushes",
    "verification_journal",
    "dashboard_sessions",
    "portals",
    "portal_sessions",
    "webhook_endpoints",
    "webhook_events",
    "webhook_deliveries",
    "webhook_attempts",
    "webhook_expiry_notices",
    "usage_export_marks",
    "change_counters",
];

/// The migrations' own bookkeeping, which each side keeps for itself.
const MIGRATIONS_TABLE: &str = "__diesel_schema_migrations";

/// One column: its name, and on PostgreSQL its type (`text`, `int8`, `bool`), which the
/// rows written there are cast to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Column {
    pub name: String,
    pub kind: String,
}

impl Column {
    /// A column of bytes (SQLite's `BLOB`, PostgreSQL's `bytea`).
    pub(super) fn is_binary(&self) -> bool {
        self.kind.eq_ignore_ascii_case("blob") || self.kind == "bytea"
    }
}

#[derive(diesel::QueryableByName)]
struct Name {
    #[diesel(sql_type = Text)]
    name: String,
}

#[derive(diesel::QueryableByName)]
struct NamedColumn {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    kind: String,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// `"name"`: an identifier quoted (names come from [`TABLES`] and the catalog).
pub(super) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The database holds exactly the tables of [`TABLES`] (and the migrations' table).
pub(super) fn check_tables(conn: &mut DbConn, side: &str) -> Result<(), CopyError> {
    let names: Vec<Name> = match conn {
        #[cfg(feature = "sqlite")]
        DbConn::Sqlite(c) => diesel::sql_query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )
        .load(c),
        #[cfg(feature = "postgres")]
        DbConn::Pg(c) => diesel::sql_query(
            "SELECT table_name::text AS name FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
        )
        .load(c),
    }
    .map_err(|e| CopyError::database(side, e))?;
    if let Some(unknown) =
        names.iter().find(|n| n.name != MIGRATIONS_TABLE && !TABLES.contains(&n.name.as_str()))
    {
        return Err(CopyError::Schema(format!(
            "the {side} holds table {}, which the copy does not know",
            unknown.name
        )));
    }
    if let Some(missing) = TABLES.iter().find(|t| !names.iter().any(|n| n.name == **t)) {
        return Err(CopyError::Schema(format!("the {side} has no table {missing}")));
    }
    Ok(())
}

/// A table's columns, in the database's order.
pub(super) fn columns(conn: &mut DbConn, side: &str, table: &str) -> Result<Vec<Column>, CopyError> {
    let rows: Vec<NamedColumn> = match conn {
        #[cfg(feature = "sqlite")]
        DbConn::Sqlite(c) => {
            diesel::sql_query("SELECT name, type AS kind FROM pragma_table_info(?) ORDER BY cid")
                .bind::<Text, _>(table)
                .load(c)
        }
        #[cfg(feature = "postgres")]
        DbConn::Pg(c) => diesel::sql_query(
            "SELECT column_name::text AS name, udt_name::text AS kind FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind::<Text, _>(table)
        .load(c),
    }
    .map_err(|e| CopyError::database(side, e))?;
    Ok(rows.into_iter().map(|r| Column { name: r.name, kind: r.kind }).collect())
}

/// How many rows a table holds.
pub(super) fn count(conn: &mut DbConn, side: &str, table: &str) -> Result<u64, CopyError> {
    let sql = format!("SELECT COUNT(*) AS n FROM {}", quoted(table));
    let row: Count = match conn {
        #[cfg(feature = "sqlite")]
        DbConn::Sqlite(c) => diesel::sql_query(sql).get_result(c),
        #[cfg(feature = "postgres")]
        DbConn::Pg(c) => diesel::sql_query(sql).get_result(c),
    }
    .map_err(|e| CopyError::database(side, e))?;
    Ok(u64::try_from(row.n).unwrap_or(0))
}
