//! A key's credits (the credit columns of `keys`).

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_rbac::Credits;
use keygate_usage::{CreditRow, CreditTx, LiveCredits, WrittenBehind};

/// remaining, refill interval, amount, day, last refill: the credit columns' values.
pub(super) type CreditValues = (Option<i64>, Option<&'static str>, Option<i64>, Option<i64>, Option<i64>);

/// The credit columns' values of a key's credits, in [`CreditsRow`]'s first five.
pub(super) fn credit_values(credits: Option<&Credits>) -> CreditValues {
    let Some(c) = credits else { return (None, None, None, None, None) };
    let remaining = Some(i64::try_from(c.remaining).unwrap_or(i64::MAX));
    match &c.refill {
        None => (remaining, None, None, None, None),
        Some(r) => (
            remaining,
            Some(r.interval.as_str()),
            Some(i64::try_from(r.amount).unwrap_or(i64::MAX)),
            r.day.map(i64::from),
            r.last_refill_at,
        ),
    }
}

/// The columns of a [`CreditRow`].
macro_rules! credit_row_columns {
    () => {
        (
            keys::id,
            keys::credits_remaining,
            keys::last_refill_at,
            keys::refill_amount,
            keys::created_at,
            keys::credit_version,
            keys::credit_seq,
        )
    };
}

type CreditRowValues = (String, Option<i64>, Option<i64>, Option<i64>, i64, i64, i64);

fn credit_row(
    (key_id, remaining, last_refill_at, amount, created_at, version, seq): CreditRowValues,
) -> CreditRow {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    CreditRow {
        key_id,
        remaining: remaining.map(count),
        last_refill_at,
        refill_amount: amount.map(count),
        created_at,
        version,
        seq,
    }
}

impl DieselTx<'_> {
    /// Why a write-behind did not land: a later change of the same counter is there
    /// already (written), or the credits changed under another version, or went
    /// (superseded).
    fn not_written_behind(&mut self, key_id: &str, live: &LiveCredits) -> R<WrittenBehind> {
        Ok(match self.key_credit_row(key_id)? {
            Some(r) if r.remaining.is_some() && r.version == live.version => WrittenBehind::Written,
            _ => WrittenBehind::Superseded,
        })
    }
}

impl DieselTx<'_> {
    /// A key's credit setting written whole (`KeyTx::set_key_credits`): a new credit
    /// version, which live counters loaded before it cannot be written behind over.
    pub(super) fn write_credit_setting(&mut self, key_id: &str, credits: Option<&Credits>) -> R<()> {
        let (remaining, interval, amount, day, last) = credit_values(credits);
        diesel::update(keys::table.filter(keys::id.eq(key_id)))
            .set((
                keys::credits_remaining.eq(remaining),
                keys::credits_base.eq(remaining),
                keys::refill_interval.eq(interval),
                keys::refill_amount.eq(amount),
                keys::refill_day.eq(day),
                keys::last_refill_at.eq(last),
                keys::credit_version.eq(keys::credit_version + 1),
                keys::credit_seq.eq(0),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }
}

impl CreditTx for DieselTx<'_> {
    fn add_key_credits(&mut self, key_id: &str, delta: i64) -> R<Option<u64>> {
        // One statement: concurrent changes add up, none is lost; never below 0, never
        // above 2^53 - 1 (so that repeated increments neither leave the JSON-safe range
        // nor overflow the column). `delta` is within ±(2^53 - 1), so no sum overflows.
        use diesel::dsl::sql;
        use diesel::sql_types::{BigInt, Nullable};
        let max = i64::try_from(keygate_domain::MAX_SAFE_INTEGER).unwrap_or(i64::MAX);
        let delta = delta.clamp(-max, max);
        let expr = sql::<Nullable<BigInt>>("CASE WHEN credits_remaining + ")
            .bind::<BigInt, _>(delta)
            .sql(" < 0 THEN 0 WHEN credits_remaining + ")
            .bind::<BigInt, _>(delta)
            .sql(" > ")
            .bind::<BigInt, _>(max)
            .sql(" THEN ")
            .bind::<BigInt, _>(max)
            .sql(" ELSE credits_remaining + ")
            .bind::<BigInt, _>(delta)
            .sql(" END");
        diesel::update(keys::table.filter(keys::id.eq(key_id)).filter(keys::credits_remaining.is_not_null()))
            .set((
                keys::credits_remaining.eq(expr),
                keys::credit_version.eq(keys::credit_version + 1),
                keys::credit_seq.eq(0),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
        // An update of the credits sets what later spends are a share of.
        diesel::update(keys::table.filter(keys::id.eq(key_id)))
            .set(keys::credits_base.eq(keys::credits_remaining))
            .execute(self.conn)
            .map_err(db_err)?;
        let now: Option<Option<i64>> = keys::table
            .filter(keys::id.eq(key_id))
            .select(keys::credits_remaining)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(now.flatten().map(|r| u64::try_from(r).unwrap_or(0)))
    }

    fn lock_key_credits(&mut self, key_ids: &[&str]) -> R<Vec<CreditRow>> {
        let query =
            keys::table.filter(keys::id.eq_any(key_ids)).order(keys::id).select(credit_row_columns!());
        let rows: Vec<CreditRowValues> = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => query.load(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => query.for_update().load(c),
        }
        .map_err(db_err)?;
        Ok(rows.into_iter().map(credit_row).collect())
    }

    fn key_credit_row(&mut self, key_id: &str) -> R<Option<CreditRow>> {
        let row: Option<CreditRowValues> = keys::table
            .filter(keys::id.eq(key_id))
            .select(credit_row_columns!())
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(credit_row))
    }

    fn write_behind_credits(&mut self, counters: &[(&str, LiveCredits)]) -> R<Vec<WrittenBehind>> {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        // (Irrefutable in a build with PostgreSQL alone.)
        #[cfg(feature = "postgres")]
        #[allow(irrefutable_let_patterns)]
        if let DbConn::Pg(c) = &mut *self.conn {
            // One statement for the batch; the rows it did not write are looked at after.
            use diesel::sql_types::{Array, BigInt, Nullable, Text};
            #[derive(QueryableByName)]
            struct Landed {
                #[diesel(sql_type = Text)]
                id: String,
            }
            let landed: Vec<Landed> = diesel::sql_query(
                "UPDATE keys SET credits_remaining = v.r, last_refill_at = v.l, credit_seq = v.s \
                 FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[]) AS v(id, r, l, ver, s) \
                 WHERE keys.id = v.id AND keys.credits_remaining IS NOT NULL \
                 AND keys.credit_version = v.ver AND keys.credit_seq < v.s RETURNING keys.id",
            )
            .bind::<Array<Text>, _>(counters.iter().map(|c| c.0).collect::<Vec<_>>())
            .bind::<Array<BigInt>, _>(counters.iter().map(|c| int(c.1.remaining)).collect::<Vec<_>>())
            .bind::<Array<Nullable<BigInt>>, _>(counters.iter().map(|c| c.1.last_refill_at).collect::<Vec<_>>())
            .bind::<Array<BigInt>, _>(counters.iter().map(|c| c.1.version).collect::<Vec<_>>())
            .bind::<Array<BigInt>, _>(counters.iter().map(|c| c.1.seq).collect::<Vec<_>>())
            .load(c)
            .map_err(db_err)?;
            let landed: std::collections::HashSet<String> = landed.into_iter().map(|l| l.id).collect();
            let mut out = Vec::with_capacity(counters.len());
            for (key_id, live) in counters {
                out.push(match landed.contains(*key_id) {
                    true => WrittenBehind::Written,
                    false => self.not_written_behind(key_id, live)?,
                });
            }
            return Ok(out);
        }
        let mut out = Vec::with_capacity(counters.len());
        for (key_id, live) in counters {
            let landed = diesel::update(
                keys::table
                    .filter(keys::id.eq(*key_id))
                    .filter(keys::credits_remaining.is_not_null())
                    .filter(keys::credit_version.eq(live.version))
                    .filter(keys::credit_seq.lt(live.seq)),
            )
            .set((
                keys::credits_remaining.eq(int(live.remaining)),
                keys::last_refill_at.eq(live.last_refill_at),
                keys::credit_seq.eq(live.seq),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
            out.push(match landed {
                1 => WrittenBehind::Written,
                _ => self.not_written_behind(key_id, live)?,
            });
        }
        Ok(out)
    }

    fn write_key_credits(&mut self, counters: &[(&str, u64, Option<i64>)]) -> R<()> {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => {
                for (key_id, remaining, last) in counters {
                    diesel::update(
                        keys::table
                            .filter(keys::id.eq(*key_id))
                            .filter(keys::credits_remaining.is_not_null()),
                    )
                    .set((keys::credits_remaining.eq(int(*remaining)), keys::last_refill_at.eq(*last)))
                    .execute(c)
                    .map_err(db_err)?;
                }
                Ok(())
            }
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => {
                use diesel::sql_types::{Array, BigInt, Nullable, Text};
                // One statement, one round trip, for the whole batch.
                let ids: Vec<&str> = counters.iter().map(|c| c.0).collect();
                let remaining: Vec<i64> = counters.iter().map(|c| int(c.1)).collect();
                let last: Vec<Option<i64>> = counters.iter().map(|c| c.2).collect();
                diesel::sql_query(
                    "UPDATE keys SET credits_remaining = v.r, last_refill_at = v.l \
                     FROM unnest($1::text[], $2::int8[], $3::int8[]) AS v(id, r, l) \
                     WHERE keys.id = v.id AND keys.credits_remaining IS NOT NULL",
                )
                .bind::<Array<Text>, _>(ids)
                .bind::<Array<BigInt>, _>(remaining)
                .bind::<Array<Nullable<BigInt>>, _>(last)
                .execute(c)
                .map(drop)
                .map_err(db_err)
            }
        }
    }

    fn set_key_credit_counter(
        &mut self,
        key_id: &str,
        expected: (u64, Option<i64>),
        remaining: u64,
        last_refill_at: Option<i64>,
    ) -> R<bool> {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let query = SetCounter {
            key_id,
            remaining: int(remaining),
            last_refill_at,
            expected: int(expected.0),
            expected_last_refill_at: expected.1,
        };
        let n = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => query.execute(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => query.execute(c),
        };
        n.map(|n| n == 1).map_err(db_err)
    }
}

/// `UPDATE keys SET credits_remaining, last_refill_at WHERE id AND credits_remaining AND
/// last_refill_at (null-safe)`, as a statement of its own: the memory ledger's writer runs it
/// for every key it writes, and diesel prepares a statement once per connection only when
/// its type names it (its own UPDATE builder and `sql_query` are parsed every time, which
/// was most of the writer's time on SQLite).
struct SetCounter<'a> {
    key_id: &'a str,
    remaining: i64,
    last_refill_at: Option<i64>,
    expected: i64,
    expected_last_refill_at: Option<i64>,
}

impl diesel::query_builder::QueryId for SetCounter<'_> {
    type QueryId = SetCounter<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<DB> diesel::query_builder::QueryFragment<DB> for SetCounter<'_>
where
    DB: diesel::backend::Backend + SetCounterSql,
    i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        use diesel::sql_types::{BigInt, Nullable, Text};
        out.push_sql("UPDATE keys SET credits_remaining = ");
        out.push_bind_param::<BigInt, _>(&self.remaining)?;
        out.push_sql(", last_refill_at = ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.last_refill_at)?;
        out.push_sql(" WHERE id = ");
        out.push_bind_param::<Text, _>(self.key_id)?;
        out.push_sql(" AND credits_remaining = ");
        out.push_bind_param::<BigInt, _>(&self.expected)?;
        out.push_sql(DB::NULL_SAFE_EQUALS);
        out.push_bind_param::<Nullable<BigInt>, _>(&self.expected_last_refill_at)
    }
}

impl<C> diesel::RunQueryDsl<C> for SetCounter<'_> {}

/// How a backend compares `last_refill_at` with a value that may be NULL.
trait SetCounterSql {
    const NULL_SAFE_EQUALS: &'static str;
}

#[cfg(feature = "sqlite")]
impl SetCounterSql for diesel::sqlite::Sqlite {
    const NULL_SAFE_EQUALS: &'static str = " AND last_refill_at IS ";
}

#[cfg(feature = "postgres")]
impl SetCounterSql for diesel::pg::Pg {
    const NULL_SAFE_EQUALS: &'static str = " AND last_refill_at IS NOT DISTINCT FROM ";
}
