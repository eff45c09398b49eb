//! Analytics in SQL (API-v2.md §18): runs the statement `keygate_analytics::sql` compiled
//! (keygate's text, the query's literals bound), one JSON array text per row, stopped at
//! its deadline: PostgreSQL's `statement_timeout` for the transaction; on SQLite, the
//! `kg_deadline` function the statement calls per row it reads or joins.

use crate::DbConn;
use crate::tx::{DieselTx, db_err};
use diesel::prelude::*;
use diesel::result::Error as DieselError;
use diesel::sql_types::{BigInt, Double};
use keygate_analytics::sql::{Compiled, DEADLINE_MARKER, Param, SqlRunError};
use keygate_analytics::store::SqlQueryTx;
use keygate_rbac::StorageError;
use std::time::Instant;

#[derive(QueryableByName)]
struct JsonRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    row: String,
}

/// Binds `q`'s parameters to its text, for backend `$db`.
macro_rules! bound {
    ($q:expr, $db:ty) => {{
        let mut query = diesel::sql_query($q.sql.as_str()).into_boxed::<$db>();
        for p in &$q.params {
            query = match p {
                Param::Int(v) => query.bind::<BigInt, _>(*v),
                Param::Float(v) => query.bind::<Double, _>(*v),
                Param::Text(v) => query.bind::<diesel::sql_types::Text, _>(v.as_str()),
            };
        }
        query
    }};
}

/// How a statement failed: past its deadline, refused by the database, or the database
/// unreachable.
fn failed(e: DieselError) -> SqlRunError {
    let m = e.to_string();
    if m.contains(DEADLINE_MARKER) || m.contains("canceling statement due to statement timeout") {
        return SqlRunError::TooExpensive;
    }
    match db_err(e) {
        StorageError::Internal(m) => SqlRunError::Rejected(m),
        other => SqlRunError::Storage(other),
    }
}

#[cfg(feature = "sqlite")]
diesel::define_sql_function! {
    /// Raises an error once the running analytics query is past its deadline (SQLite).
    fn kg_deadline(x: diesel::sql_types::Integer) -> diesel::sql_types::Integer;
}

/// `kg_deadline`'s answer: 1, or (past the deadline) an error that stops the statement.
#[cfg(feature = "sqlite")]
#[derive(Debug)]
struct Tick(bool);

#[cfg(feature = "sqlite")]
impl diesel::serialize::ToSql<diesel::sql_types::Integer, diesel::sqlite::Sqlite> for Tick {
    fn to_sql<'b>(
        &'b self,
        out: &mut diesel::serialize::Output<'b, '_, diesel::sqlite::Sqlite>,
    ) -> diesel::serialize::Result {
        if self.0 {
            out.set_value(1);
            Ok(diesel::serialize::IsNull::No)
        } else {
            Err(DEADLINE_MARKER.into())
        }
    }
}

impl SqlQueryTx for DieselTx<'_> {
    fn run_analytics_sql(&mut self, q: &Compiled, deadline: Instant) -> Result<Vec<String>, SqlRunError> {
        let rows: Vec<JsonRow> = match &mut *self.conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => {
                let ms = deadline.saturating_duration_since(Instant::now()).as_millis().max(1);
                diesel::sql_query(format!("SET LOCAL statement_timeout = {ms}"))
                    .execute(c)
                    .map_err(failed)?;
                bound!(q, diesel::pg::Pg).load(c).map_err(failed)?
            }
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => {
                // Checked every 256 rows: a clock read each time would cost more than the row.
                let mut calls = 0u32;
                kg_deadline_utils::register_nondeterministic_impl(c, move |_: i32| {
                    calls = calls.wrapping_add(1);
                    Tick(!calls.is_multiple_of(256) || Instant::now() < deadline)
                })
                .map_err(failed)?;
                bound!(q, diesel::sqlite::Sqlite).load(c).map_err(failed)?
            }
        };
        Ok(rows.into_iter().map(|r| r.row).collect())
    }
}
