//! Rows as they travel: read from either backend as JSON arrays (one text per row, the
//! columns in a given order), written to either backend a batch at a time from a JSON
//! array of such rows (one statement, one bound text, per batch).

use super::CopyError;
use super::tables::{Column, quoted};
use crate::DbConn;
use diesel::RunQueryDsl;
use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;

#[derive(diesel::QueryableByName)]
struct JsonRow {
    #[diesel(sql_type = Text)]
    r: String,
}

/// Calls `each` with every row of `table` as a JSON array of `columns`, streamed (never the
/// whole table in memory), in the connection's current transaction.
pub(super) fn for_each_row(
    conn: &mut DbConn,
    side: &str,
    table: &str,
    columns: &[Column],
    mut each: impl FnMut(&str) -> Result<(), CopyError>,
) -> Result<(), CopyError> {
    // Bytes travel as lowercase hex (JSON holds no bytes), the same text on either side.
    let list = |hex: fn(String) -> String| {
        let name = |c: &Column| if c.is_binary() { hex(quoted(&c.name)) } else { quoted(&c.name) };
        columns.iter().map(name).collect::<Vec<_>>().join(", ")
    };
    let db = |e| CopyError::database(side, e);
    match conn {
        #[cfg(feature = "sqlite")]
        DbConn::Sqlite(c) => {
            let list = list(|c| format!("lower(hex({c}))"));
            let sql = format!("SELECT json_array({list}) AS r FROM {}", quoted(table));
            let rows = diesel::sql_query(sql)
                .load_iter::<JsonRow, diesel::connection::DefaultLoadingMode>(c)
                .map_err(db)?;
            for row in rows {
                each(&row.map_err(db)?.r)?;
            }
        }
        #[cfg(feature = "postgres")]
        DbConn::Pg(c) => {
            let list = list(|c| format!("encode({c}, 'hex')"));
            let sql = format!("SELECT json_build_array({list})::text AS r FROM {}", quoted(table));
            let rows = diesel::sql_query(sql)
                .load_iter::<JsonRow, diesel::pg::PgRowByRowLoadingMode>(c)
                .map_err(db)?;
            for row in rows {
                each(&row.map_err(db)?.r)?;
            }
        }
    }
    Ok(())
}

/// Writes `batch`, a JSON array of rows as [`for_each_row`] reads them, into `table`'s
/// `columns` (PostgreSQL: each value cast to its column's type; `0`/`1` read from SQLite
/// are booleans there, and `true`/`false` are 1/0 in SQLite).
pub(super) fn insert_batch(
    conn: &mut DbConn,
    table: &str,
    columns: &[Column],
    batch: &str,
) -> Result<(), CopyError> {
    let names = columns.iter().map(|c| quoted(&c.name)).collect::<Vec<_>>().join(", ");
    match conn {
        #[cfg(feature = "sqlite")]
        DbConn::Sqlite(c) => {
            let values = columns
                .iter()
                .enumerate()
                .map(|(i, col)| match col.is_binary() {
                    true => format!("unhex(json_extract(value, '$[{i}]'))"),
                    false => format!("json_extract(value, '$[{i}]')"),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!("INSERT INTO {} ({names}) SELECT {values} FROM json_each(?)", quoted(table));
            diesel::sql_query(sql).bind::<Text, _>(batch).execute(c).map(drop)
        }
        #[cfg(feature = "postgres")]
        DbConn::Pg(c) => {
            let values = columns
                .iter()
                .enumerate()
                .map(|(i, col)| match col.is_binary() {
                    true => format!("decode(e->>{i}, 'hex')"),
                    false => format!("(e->>{i})::{}", quoted(&col.kind)),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "INSERT INTO {} ({names}) SELECT {values} FROM json_array_elements($1::json) AS e",
                quoted(table)
            );
            diesel::sql_query(sql).bind::<Text, _>(batch).execute(c).map(drop)
        }
    }
    .map_err(|e| CopyError::database("target", e))
}

/// Removes every row of `table` (the target, `--replace`).
pub(super) fn delete_all(conn: &mut DbConn, table: &str) -> Result<(), CopyError> {
    conn.batch_execute(&format!("DELETE FROM {}", quoted(table)))
        .map_err(|e| CopyError::database("target", e))
}

/// A transaction on a raw connection, rolled back when dropped unfinished.
pub(super) struct Transaction<'c> {
    conn: &'c mut DbConn,
    side: &'static str,
    open: bool,
}

impl<'c> Transaction<'c> {
    /// A write transaction (SQLite: the write lock taken at once).
    pub fn write(conn: &'c mut DbConn, side: &'static str) -> Result<Self, CopyError> {
        let begin = match conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(_) => "BEGIN IMMEDIATE",
            #[cfg(feature = "postgres")]
            DbConn::Pg(_) => "BEGIN",
        };
        Self::begin(conn, side, begin)
    }

    /// Reads of one snapshot, every table as it was at the first read (SQLite in WAL mode:
    /// a deferred transaction; PostgreSQL: repeatable read). Writers go on meanwhile.
    pub fn snapshot(conn: &'c mut DbConn, side: &'static str) -> Result<Self, CopyError> {
        let begin = match conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(_) => "BEGIN",
            #[cfg(feature = "postgres")]
            DbConn::Pg(_) => "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        };
        Self::begin(conn, side, begin)
    }

    fn begin(conn: &'c mut DbConn, side: &'static str, begin: &str) -> Result<Self, CopyError> {
        conn.batch_execute(begin).map_err(|e| CopyError::database(side, e))?;
        let tx = Self { conn, side, open: true };
        // A table is read, or written, by one statement that takes as long as the table is
        // big: no statement timeout for this transaction (the pool's setting is for requests).
        match &mut *tx.conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => {
                c.batch_execute("SET LOCAL statement_timeout = 0")
                    .map_err(|e| CopyError::database(side, e))?;
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        Ok(tx)
    }

    pub fn conn(&mut self) -> &mut DbConn {
        self.conn
    }

    pub fn commit(mut self) -> Result<(), CopyError> {
        self.open = false;
        self.conn.batch_execute("COMMIT").map_err(|e| CopyError::database(self.side, e))
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.batch_execute("ROLLBACK");
        }
    }
}
