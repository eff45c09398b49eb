//! The diesel implementation of the capabilities' transaction traits (`keygate_rbac::store`,
//! `keygate_usage::store`, `keygate_analytics::store`), one file per resource: what they
//! share is here.
//!
//! A lookup by a unique key reads with `get_result`, not `first`: `first` binds its
//! `LIMIT 1` as a parameter, and SQLite (3.47 and later) marks a statement whose LIMIT is
//! a bound parameter to be compiled again whenever it is bound again, so the prepared
//! statement cache would save nothing (measured: a quarter of a verification miss's CPU).

use crate::conn::DbConn;
use crate::schema::*;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use keygate_domain::Named;
use keygate_rbac::{Credits, Entity, EntityKind, Key, Refill, RefillInterval, RootKey, StorageError};

/// Maps a diesel error onto the service's storage error (the one place that does).
pub(crate) fn db_err(e: DieselError) -> StorageError {
    match &e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
            StorageError::Conflict(info.message().to_string())
        }
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        )
        | DieselError::BrokenTransactionManager => unavailable(e.to_string()),
        DieselError::DatabaseError(_, info)
            if {
                let m = info.message();
                m.contains("database is locked")
                    || m.contains("statement timeout")
                    || m.contains("canceling statement")
                    || m.contains("terminating connection")
                    || m.contains("server closed the connection")
                    || m.contains("deadlock detected")
                    || m.contains("could not connect")
                    || m.contains("Connection refused")
            } =>
        {
            unavailable(e.to_string())
        }
        _ => StorageError::Internal(e.to_string()),
    }
}

/// The database did not answer (counted: `keygate_store_errors_total{store="database"}`).
pub(crate) fn unavailable(why: String) -> StorageError {
    metrics::counter!("keygate_store_errors_total", "store" => "database").increment(1);
    StorageError::Unavailable(why)
}

type R<T> = Result<T, StorageError>;

/// Rows per multi-row insert: 1,000 rows of at most 8 columns stay well under SQLite's
/// (32,766) and PostgreSQL's (65,535) bind-parameter limits.
const BATCH_ROWS: usize = 1_000;
/// Values per `IN (...)` lookup by a unique index when there may be many (see
/// `existing_hashes`).
const PROBE_ROWS: usize = 100;

/// Runs `$body` with `$c` bound to the inner connection of either backend. For the few
/// statements diesel cannot build for the `MultiConnection` enum (multi-row inserts,
/// `ON CONFLICT`, `RETURNING`): the same code is compiled once per backend.
macro_rules! on_each_backend {
    ($conn:expr, $c:ident => $body:expr) => {
        match &mut *$conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg($c) => $body,
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite($c) => $body,
        }
    };
}

/// SQL for keyset pages over a text column, in byte order (the order v2's cursors use), per
/// backend: SQLite's default collation (BINARY) compares bytes; PostgreSQL's depends on the
/// database, so there the column is compared `COLLATE "C"` (indexed so by migration 8).
pub(crate) struct Keyset {
    /// What follows a column to compare and sort it by bytes: nothing, or `COLLATE "C"`.
    pub(crate) by_bytes: &'static str,
    /// How a column is lowered, ASCII letters only (both backends' `lower` agree on those).
    pub(crate) ascii_lower: &'static str,
}

impl Keyset {
    #[cfg(feature = "postgres")]
    pub(crate) const PG: Self = Self {
        by_bytes: "COLLATE \"C\"",
        ascii_lower: "translate({}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')",
    };
    #[cfg(feature = "sqlite")]
    pub(crate) const SQLITE: Self = Self { by_bytes: "", ascii_lower: "lower({})" };

    /// `column` in byte order.
    pub(crate) fn col(&self, column: &str) -> String {
        format!("{column} {}", self.by_bytes).trim_end().to_string()
    }

    /// `column`, ASCII-lowered.
    pub(crate) fn lower(&self, column: &str) -> String {
        self.ascii_lower.replace("{}", column)
    }
}

/// Runs `$page!(backend type, its Keyset, connection)` on the connection's backend: a keyset
/// query whose SQL differs per backend (the `Keyset` fragments).
macro_rules! on_each_keyset {
    ($conn:expr, $page:ident) => {
        match &mut *$conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => $page!(diesel::pg::Pg, Keyset::PG, c),
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => $page!(diesel::sqlite::Sqlite, Keyset::SQLITE, c),
        }
    };
}

/// The `LIKE` pattern (escape `\`) matching any text that contains `search`, ASCII
/// case-insensitively (the caller lowers the column the same way).
pub(crate) fn contains_pattern(search: &str) -> String {
    format!("%{}%", like_literal(&search.to_ascii_lowercase()))
}

/// `text` for a `LIKE` pattern (escape `\`): `%`, `_` and `\` taken literally.
pub(crate) fn like_literal(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    for ch in text.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(ch);
    }
    p
}

/// [`RbacTx`] over one diesel connection (inside a transaction when the store began one).
pub(crate) struct DieselTx<'c> {
    conn: &'c mut DbConn,
}

impl<'c> DieselTx<'c> {
    pub(crate) fn new(conn: &'c mut DbConn) -> Self {
        Self { conn }
    }
}

/// Runs `$body` with `$ent` bound to the entity table module of `$kind`, `$link` to its
/// key-link table module and `$link_col` to the link table's entity column.
macro_rules! by_kind {
    ($kind:expr, $ent:ident, $link:ident, $link_col:ident, $body:block) => {
        match $kind {
            EntityKind::Permission => {
                #[allow(unused_imports)]
                use keys_permissions as $link;
                #[allow(unused_imports)]
                use keys_permissions::permission_id as $link_col;
                #[allow(unused_imports)]
                use permissions as $ent;
                $body
            }
            EntityKind::Role => {
                #[allow(unused_imports)]
                use keys_roles as $link;
                #[allow(unused_imports)]
                use keys_roles::role_id as $link_col;
                #[allow(unused_imports)]
                use roles as $ent;
                $body
            }
        }
    };
}

/// `$body` with `$c` the backend's own connection rather than `DbConn`: a query of static
/// type run there finds its prepared statement by that type, where through `DbConn` its SQL
/// is written out again on every call to look the statement up (for the reads of a
/// verification's miss).
macro_rules! on_backend {
    ($conn:expr, |$c:ident| $body:expr) => {
        match &mut *$conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg($c) => $body,
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite($c) => $body,
        }
    };
}

/// The first id a one-column select finds, locking its row until the transaction ends:
/// `FOR NO KEY UPDATE` on PostgreSQL (a row lock without a new row version, so the FK checks
/// of link rows inserted next do not lock a tuple this transaction wrote); on SQLite the
/// transaction began with BEGIN IMMEDIATE and already holds the write lock.
macro_rules! lock_first {
    ($conn:expr, $query:expr) => {
        match &mut *$conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => $query.for_no_key_update().first::<String>(c).optional(),
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => $query.first::<String>(c).optional(),
        }
        .map_err(db_err)
    };
}

type EntityRow = (String, String, Option<String>, Option<String>);

fn entity((id, name, description, title): EntityRow) -> Entity {
    Entity { id, name, description, title }
}

fn named((id, name): (String, String)) -> Named {
    Named { id, name }
}

/// A key's row: the columns of [`key_columns!`], in order.
type KeyRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    bool,
    Option<i64>,
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    i64,
    Option<String>,
);

/// The columns a [`Key`] is read from, in [`KeyRow`]'s order.
macro_rules! key_columns {
    () => {
        (
            keys::id,
            keys::workspace_id,
            keys::prefix,
            keys::name,
            keys::meta,
            keys::enabled,
            keys::expires,
            keys::created_at,
            keys::api_id,
            keys::identity_id,
            keys::credits_remaining,
            keys::refill_interval,
            keys::refill_amount,
            keys::refill_day,
            keys::last_refill_at,
            keys::key_prefix,
            keys::byte_length,
            keys::updated_at,
            keys::allowed_ips,
        )
    };
}

fn key_from_row(
    (
        id,
        workspace_id,
        start,
        name,
        meta,
        enabled,
        expires,
        created_at,
        api_id,
        identity_id,
        remaining,
        interval,
        amount,
        day,
        last_refill_at,
        prefix,
        byte_length,
        updated_at,
        allowed_ips,
    ): KeyRow,
) -> Key {
    let refill = match (interval.as_deref().and_then(RefillInterval::parse), amount) {
        (Some(interval), Some(amount)) => Some(Refill {
            interval,
            amount: u64::try_from(amount).unwrap_or(0),
            day: day.and_then(|d| u8::try_from(d).ok()),
            last_refill_at,
        }),
        _ => None,
    };
    let credits = remaining.map(|r| Credits { remaining: u64::try_from(r).unwrap_or(0), refill });
    Key {
        id,
        workspace_id,
        api_id,
        identity_id,
        credits,
        prefix,
        byte_length: byte_length.and_then(|b| u32::try_from(b).ok()),
        start,
        name,
        meta,
        enabled,
        expires,
        allowed_ips: allowed_ips.as_deref().map(keygate_domain::AllowedIps::from_stored),
        created_at,
        updated_at,
    }
}

type RootKeyRow =
    (String, String, String, String, String, Option<String>, bool, i64, Option<i64>, Option<i64>);

fn root_key(row: RootKeyRow) -> R<RootKey> {
    let (id, workspace_id, prefix, end, permissions, name, enabled, created_at, expires_at, last_used_at) =
        row;
    let permissions: Vec<String> = serde_json::from_str(&permissions)
        .map_err(|e| StorageError::Internal(format!("root key {id}: bad permissions column: {e}")))?;
    Ok(RootKey {
        id,
        workspace_id,
        prefix,
        end,
        name,
        enabled,
        permissions,
        created_at,
        expires_at,
        last_used_at,
    })
}

const ROOT_KEY_COLUMNS: (
    root_keys::id,
    root_keys::workspace_id,
    root_keys::prefix,
    root_keys::end_chars,
    root_keys::permissions,
    root_keys::name,
    root_keys::enabled,
    root_keys::created_at,
    root_keys::expires_at,
    root_keys::last_used_at,
) = (
    root_keys::id,
    root_keys::workspace_id,
    root_keys::prefix,
    root_keys::end_chars,
    root_keys::permissions,
    root_keys::name,
    root_keys::enabled,
    root_keys::created_at,
    root_keys::expires_at,
    root_keys::last_used_at,
);

/// The column an entity lookup matches on.
#[derive(Debug, Clone, Copy)]
enum Column {
    Id,
    Name,
}

impl DieselTx<'_> {
    /// The entities of a workspace whose id (or name) is one of `values`.
    fn entities_matching(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        by: Column,
        values: &[String],
    ) -> R<Vec<Named>> {
        // On PostgreSQL the rows found are locked FOR KEY SHARE until the transaction ends:
        // a concurrent delete of a permission or role this call is about to link waits for
        // it (and then takes the new links with it) instead of making the link insert fail
        // its foreign key. SQLite transactions are serialized already.
        by_kind!(kind, ent, link, link_col, {
            let in_ws = ent::table.filter(ent::workspace_id.eq(workspace_id)).select((ent::id, ent::name));
            let rows: Vec<(String, String)> = match (&mut *self.conn, by) {
                #[cfg(feature = "postgres")]
                (DbConn::Pg(c), Column::Id) => in_ws.filter(ent::id.eq_any(values)).for_key_share().load(c),
                #[cfg(feature = "postgres")]
                (DbConn::Pg(c), Column::Name) => {
                    in_ws.filter(ent::name.eq_any(values)).for_key_share().load(c)
                }
                #[cfg(feature = "sqlite")]
                (DbConn::Sqlite(c), Column::Id) => in_ws.filter(ent::id.eq_any(values)).load(c),
                #[cfg(feature = "sqlite")]
                (DbConn::Sqlite(c), Column::Name) => in_ws.filter(ent::name.eq_any(values)).load(c),
            }
            .map_err(db_err)?;
            Ok(rows.into_iter().map(named).collect())
        })
    }

    /// Inserts inside a savepoint; a unique violation rolls back only the savepoint, so
    /// the enclosing transaction stays usable (PostgreSQL aborts it otherwise).
    fn insert_in_savepoint(&mut self, insert: impl FnOnce(&mut DbConn) -> QueryResult<usize>) -> R<bool> {
        match self.conn.transaction(insert) {
            Ok(_) => Ok(true),
            Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
            Err(e) => Err(db_err(e)),
        }
    }
}

// One file per resource, named as in the other layers. The modules take a `_tx` suffix
// because `keys`, `root_keys` and `workspaces` already name the schema's tables here.
#[path = "analytics.rs"]
mod analytics_tx;
#[path = "apis.rs"]
mod apis_tx;
#[path = "audit.rs"]
mod audit_tx;
#[path = "counters.rs"]
mod counters_tx;
#[path = "credits.rs"]
mod credits_tx;
#[path = "entities.rs"]
mod entities_tx;
#[path = "identities.rs"]
mod identities_tx;
#[path = "keys.rs"]
mod keys_tx;
#[cfg(feature = "postgres")]
pub(crate) use keys_tx::pg_verification_read;
#[path = "legacy.rs"]
mod legacy_tx;
#[path = "metering.rs"]
mod metering_tx;
#[path = "namespaces.rs"]
mod namespaces_tx;
#[path = "outbox.rs"]
mod outbox_tx;
#[path = "portal.rs"]
mod portal_tx;
#[path = "ratelimit_analytics.rs"]
mod ratelimit_analytics_tx;
#[path = "root_keys.rs"]
mod root_keys_tx;
#[path = "scanning.rs"]
mod scanning_tx;
#[path = "sessions.rs"]
mod sessions_tx;
#[path = "sql.rs"]
mod sql_tx;
#[path = "vault.rs"]
mod vault_tx;
#[path = "webhook_retention.rs"]
mod webhook_retention_tx;
#[path = "webhooks.rs"]
mod webhooks_tx;
#[path = "workspaces.rs"]
mod workspaces_tx;
