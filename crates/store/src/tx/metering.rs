//! The usage export's rows (keygate_metering::store): each sink's mark, and identities'
//! usage summed from `verification_counts`' minute rows.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use keygate_metering::{IdentityUsage, MeteringRows};

/// An identity's usage in a period, as the query sums it.
#[derive(diesel::QueryableByName)]
struct UsageRow {
    #[diesel(sql_type = Text)]
    workspace_id: String,
    #[diesel(sql_type = Text)]
    identity_id: String,
    #[diesel(sql_type = Text)]
    external_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    meta: Option<String>,
    #[diesel(sql_type = BigInt)]
    verifications: i64,
    #[diesel(sql_type = BigInt)]
    spent_credits: i64,
}

/// Minute rows' width in `verification_counts`.
const MINUTE: i64 = 60_000;

/// `$4`: a workspace id, or '' for every workspace.
const USAGE_SQL: &str = "SELECT c.workspace_id AS workspace_id, c.identity_id AS identity_id, \
     i.external_id AS external_id, i.meta AS meta, \
     CAST(SUM(c.count) AS BIGINT) AS verifications, \
     CAST(SUM(c.spent_credits) AS BIGINT) AS spent_credits \
     FROM verification_counts c JOIN identities i ON i.id = c.identity_id \
     WHERE c.width = $1 AND c.bucket >= $2 AND c.bucket < $3 AND c.identity_id <> '' \
     AND ($4 = '' OR c.workspace_id = $4) \
     GROUP BY c.workspace_id, c.identity_id, i.external_id, i.meta \
     ORDER BY c.workspace_id, i.external_id";

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl MeteringRows for DieselTx<'_> {
    fn export_mark(&mut self, sink: &str) -> R<Option<i64>> {
        usage_export_marks::table
            .filter(usage_export_marks::sink.eq(sink))
            .select(usage_export_marks::exported_until)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)
    }

    fn hold_export_mark(&mut self, sink: &str, initial: i64, now: i64) -> R<i64> {
        // Written if missing, then read under a row lock on PostgreSQL (SQLite's write
        // transaction holds the database's).
        on_each_backend!(self.conn, c => diesel::insert_into(usage_export_marks::table)
            .values((
                usage_export_marks::sink.eq(sink),
                usage_export_marks::exported_until.eq(initial),
                usage_export_marks::updated_at.eq(now),
            ))
            .on_conflict_do_nothing()
            .execute(c))
        .map_err(db_err)?;
        let q = usage_export_marks::table
            .filter(usage_export_marks::sink.eq(sink))
            .select(usage_export_marks::exported_until);
        match &mut *self.conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => q.for_update().get_result(c),
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => q.get_result(c),
        }
        .map_err(db_err)
    }

    fn set_export_mark(&mut self, sink: &str, until: i64, now: i64) -> R<()> {
        diesel::update(usage_export_marks::table.filter(usage_export_marks::sink.eq(sink)))
            .set((usage_export_marks::exported_until.eq(until), usage_export_marks::updated_at.eq(now)))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn identity_usage(&mut self, from: i64, to: i64, workspace_id: Option<&str>) -> R<Vec<IdentityUsage>> {
        let ws = workspace_id.unwrap_or("");
        let rows: Vec<UsageRow> = on_each_backend!(self.conn, c => diesel::sql_query(USAGE_SQL)
            .bind::<BigInt, _>(MINUTE)
            .bind::<BigInt, _>(from)
            .bind::<BigInt, _>(to)
            .bind::<Text, _>(ws)
            .load(c))
        .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .map(|r| IdentityUsage {
                workspace_id: r.workspace_id,
                identity_id: r.identity_id,
                external_id: r.external_id,
                meta: r.meta,
                verifications: count(r.verifications),
                spent_credits: count(r.spent_credits),
            })
            .collect())
    }
}
