//! Verification analytics (the `verification_counts` table): counts added by upsert, read
//! by range, rolled up into coarser buckets and pruned.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_analytics::store::{VerificationCount, VerificationCountTx, VerificationFilter};
use std::collections::HashMap;

type CountRow = (String, i64, i64, String, String, String, String, String, i64, i64);

/// A sum of counts, as `verification_counts` reads them.
#[derive(diesel::QueryableByName)]
struct Summed {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    bucket: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    api_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    key_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    identity_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    tags: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    outcome: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    count: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    spent_credits: i64,
}

/// A count's series and bucket start (workspace, bucket, API, key, identity, outcome, tags).
type SeriesBucket = (String, i64, String, String, String, String, String);

#[cfg(feature = "postgres")]
fn count_row(c: &VerificationCount) -> CountRow {
    (
        c.workspace_id.clone(),
        c.width,
        c.bucket,
        c.api_id.clone(),
        c.key_id.clone(),
        c.identity_id.clone(),
        c.outcome.clone(),
        tags_text(&c.tags),
        i64::try_from(c.count).unwrap_or(i64::MAX),
        i64::try_from(c.spent_credits).unwrap_or(i64::MAX),
    )
}

fn from_row(
    (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags, count, spent): CountRow,
) -> VerificationCount {
    VerificationCount {
        workspace_id,
        width,
        bucket,
        api_id,
        key_id,
        identity_id,
        outcome,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        count: u64::try_from(count).unwrap_or(0),
        spent_credits: u64::try_from(spent).unwrap_or(0),
    }
}

macro_rules! count_columns {
    () => {
        (
            verification_counts::workspace_id,
            verification_counts::width,
            verification_counts::bucket,
            verification_counts::api_id,
            verification_counts::key_id,
            verification_counts::identity_id,
            verification_counts::outcome,
            verification_counts::tags,
            verification_counts::count,
            verification_counts::spent_credits,
        )
    };
}

/// An API's count of one outcome in one bucket (workspace, API, width, bucket, outcome).
/// An API's bucket: workspace, API, width, bucket, outcome (borrowed from the counts summed).
type ApiBucket<'a> = (&'a str, &'a str, i64, i64, &'a str);

/// The most counts one SQLite upsert statement writes (ten parameters each).
#[cfg(feature = "sqlite")]
const UPSERT_ROWS: usize = 32;

/// `INSERT INTO verification_counts ... ON CONFLICT DO UPDATE` of `N` counts, a statement
/// of its own (as `SetCounter` in tx/credits.rs): diesel prepares a statement once per
/// connection only when its type names it, and never an upsert of its own builder (nor a
/// `sql_query`): parsing it again was a third of a flush's time on SQLite.
#[cfg(feature = "sqlite")]
struct UpsertCounts<'a, const N: usize> {
    rows: &'a [VerificationCount],
    /// Each row's tags as the column holds them, and its count and spent credits as
    /// BIGINTs.
    tags: &'a [String],
    counts: &'a [(i64, i64)],
}

#[cfg(feature = "sqlite")]
impl<const N: usize> diesel::query_builder::QueryId for UpsertCounts<'_, N> {
    type QueryId = UpsertCounts<'static, N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

#[cfg(feature = "sqlite")]
impl<const N: usize> diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite> for UpsertCounts<'_, N> {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::sqlite::Sqlite>,
    ) -> diesel::QueryResult<()> {
        use diesel::sql_types::{BigInt, Text};
        // Its SQL is cached by its type: always N rows.
        assert_eq!((self.rows.len(), self.tags.len(), self.counts.len()), (N, N, N));
        out.push_sql(
            "INSERT INTO verification_counts \
             (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags, count, spent_credits) \
             VALUES ",
        );
        for (i, ((c, tags), n)) in self.rows.iter().zip(self.tags).zip(self.counts).enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, _>(c.workspace_id.as_str())?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&c.width)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&c.bucket)?;
            for text in [&c.api_id, &c.key_id, &c.identity_id, &c.outcome, tags] {
                out.push_sql(", ");
                out.push_bind_param::<Text, _>(text.as_str())?;
            }
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&n.0)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&n.1)?;
            out.push_sql(")");
        }
        out.push_sql(
            " ON CONFLICT (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags) \
             DO UPDATE SET count = verification_counts.count + excluded.count, \
             spent_credits = verification_counts.spent_credits + excluded.spent_credits",
        );
        Ok(())
    }
}

#[cfg(feature = "sqlite")]
impl<C, const N: usize> diesel::RunQueryDsl<C> for UpsertCounts<'_, N> {}

/// A tag set as the `tags` column holds it (a JSON array).
fn tags_text(tags: &[String]) -> String {
    match tags {
        [] => "[]".to_string(),
        _ => serde_json::to_string(tags).unwrap_or_else(|_| "[]".into()),
    }
}

impl DieselTx<'_> {
    /// Adds each count to its row of `verification_counts` (created when absent).
    fn upsert_series(&mut self, counts: &[VerificationCount]) -> R<()> {
        #[cfg(feature = "postgres")]
        #[allow(irrefutable_let_patterns)] // (a build with PostgreSQL alone)
        if let DbConn::Pg(c) = &mut *self.conn {
            // One statement per 5,000 counts (each series once in a batch: a flush's and a
            // roll-up's are).
            use diesel::sql_types::{Array, BigInt, Text};
            for chunk in counts.chunks(5_000) {
                let rows: Vec<CountRow> = chunk.iter().map(count_row).collect();
                let column = |f: fn(&CountRow) -> String| rows.iter().map(f).collect::<Vec<String>>();
                let number = |f: fn(&CountRow) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
                diesel::sql_query(
                    "INSERT INTO verification_counts \
                     (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags, count, \
                     spent_credits) \
                     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::text[], \
                     $6::text[], $7::text[], $8::text[], $9::int8[], $10::int8[]) \
                     ON CONFLICT (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags) \
                     DO UPDATE SET count = verification_counts.count + EXCLUDED.count, \
                     spent_credits = verification_counts.spent_credits + EXCLUDED.spent_credits",
                )
                .bind::<Array<Text>, _>(column(|r| r.0.clone()))
                .bind::<Array<BigInt>, _>(number(|r| r.1))
                .bind::<Array<BigInt>, _>(number(|r| r.2))
                .bind::<Array<Text>, _>(column(|r| r.3.clone()))
                .bind::<Array<Text>, _>(column(|r| r.4.clone()))
                .bind::<Array<Text>, _>(column(|r| r.5.clone()))
                .bind::<Array<Text>, _>(column(|r| r.6.clone()))
                .bind::<Array<Text>, _>(column(|r| r.7.clone()))
                .bind::<Array<BigInt>, _>(number(|r| r.8))
                .bind::<Array<BigInt>, _>(number(|r| r.9))
                .execute(c)
                .map_err(db_err)?;
            }
            return Ok(());
        }
        // SQLite: statements of UPSERT_ROWS rows, then of one, each prepared once per
        // connection.
        #[cfg(feature = "sqlite")]
        #[allow(irrefutable_let_patterns)] // (a build with SQLite alone)
        if let DbConn::Sqlite(c) = &mut *self.conn {
            let tags: Vec<String> = counts.iter().map(|c| tags_text(&c.tags)).collect();
            let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            let numbers: Vec<(i64, i64)> =
                counts.iter().map(|c| (int(c.count), int(c.spent_credits))).collect();
            let whole = counts.len() - counts.len() % UPSERT_ROWS;
            for at in (0..whole).step_by(UPSERT_ROWS) {
                let r = at..at + UPSERT_ROWS;
                let q = UpsertCounts::<UPSERT_ROWS> {
                    rows: &counts[r.clone()],
                    tags: &tags[r.clone()],
                    counts: &numbers[r],
                };
                q.execute(c).map_err(db_err)?;
            }
            for at in whole..counts.len() {
                let r = at..at + 1;
                let q = UpsertCounts::<1> {
                    rows: &counts[r.clone()],
                    tags: &tags[r.clone()],
                    counts: &numbers[r],
                };
                q.execute(c).map_err(db_err)?;
            }
        }
        Ok(())
    }

    /// Adds each count to its API's row of `api_verification_counts`.
    fn upsert_api_totals(&mut self, totals: &HashMap<ApiBucket<'_>, (i64, i64)>) -> R<()> {
        use diesel::sql_types::{BigInt, Text};
        let sql = "INSERT INTO api_verification_counts \
                   (workspace_id, api_id, width, bucket, outcome, count, spent_credits) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7) \
                   ON CONFLICT (workspace_id, api_id, width, bucket, outcome) \
                   DO UPDATE SET count = api_verification_counts.count + excluded.count, \
                   spent_credits = api_verification_counts.spent_credits + excluded.spent_credits";
        for ((ws, api, width, bucket, outcome), (n, spent)) in totals {
            let q = diesel::sql_query(sql)
                .bind::<Text, _>(ws)
                .bind::<Text, _>(api)
                .bind::<BigInt, _>(width)
                .bind::<BigInt, _>(bucket)
                .bind::<Text, _>(outcome)
                .bind::<BigInt, _>(n)
                .bind::<BigInt, _>(spent);
            match &mut *self.conn {
                #[cfg(feature = "sqlite")]
                DbConn::Sqlite(c) => q.execute(c),
                #[cfg(feature = "postgres")]
                DbConn::Pg(c) => q.execute(c),
            }
            .map_err(db_err)?;
        }
        Ok(())
    }

    /// Sums from `api_verification_counts` (one API's, or the workspace's), when the read
    /// needs nothing finer than APIs.
    fn api_totals(&mut self, f: &VerificationFilter<'_>) -> R<Vec<VerificationCount>> {
        use api_verification_counts::dsl as a;
        // Boxed per backend (a boxed query names its backend).
        macro_rules! load {
            ($c:expr) => {{
                let mut q = a::api_verification_counts
                    .filter(a::workspace_id.eq(f.workspace_id))
                    .filter(a::bucket.ge(f.start))
                    .filter(a::bucket.le(f.end))
                    .select((a::api_id, a::bucket, a::outcome, a::count, a::spent_credits))
                    .into_boxed();
                if let Some(api_id) = f.api_id {
                    q = q.filter(a::api_id.eq(api_id));
                }
                q.load::<(String, i64, String, i64, i64)>($c)
            }};
        }
        let rows = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => load!(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => load!(c),
        }
        .map_err(db_err)?;
        let width = f.sums.width;
        let mut sums: HashMap<(String, i64, String), (i64, i64)> = HashMap::new();
        for (api, bucket, outcome, n, spent) in rows {
            let bucket = width.map_or(0, |w| bucket - bucket.rem_euclid(w));
            let api = if f.sums.by_api { api } else { String::new() };
            add(sums.entry((api, bucket, outcome)).or_default(), (n, spent));
        }
        Ok(sums
            .into_iter()
            .map(|((api, bucket, outcome), (n, spent))| {
                let ws = f.workspace_id.to_string();
                from_row((
                    ws,
                    width.unwrap_or(0),
                    bucket,
                    api,
                    String::new(),
                    String::new(),
                    outcome,
                    "[]".into(),
                    n,
                    spent,
                ))
            })
            .collect())
    }
}

/// Adds a count and its spent credits to a sum of them.
fn add(sum: &mut (i64, i64), (n, spent): (i64, i64)) {
    sum.0 = sum.0.saturating_add(n);
    sum.1 = sum.1.saturating_add(spent);
}

impl VerificationCountTx for DieselTx<'_> {
    fn add_verification_counts(&mut self, counts: &[VerificationCount]) -> R<()> {
        self.upsert_series(counts)?;
        let mut totals: HashMap<ApiBucket<'_>, (i64, i64)> = HashMap::new();
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for c in counts {
            let key = (&*c.workspace_id, &*c.api_id, c.width, c.bucket, &*c.outcome);
            add(totals.entry(key).or_default(), (int(c.count), int(c.spent_credits)));
        }
        self.upsert_api_totals(&totals)
    }

    fn verification_counts(&mut self, f: &VerificationFilter<'_>) -> R<Vec<VerificationCount>> {
        use diesel::sql_types::{BigInt, Text};
        let g = f.sums;
        if f.key_ids.is_empty() && f.identity_id.is_none() && !(g.by_key || g.by_identity || g.by_tags) {
            return self.api_totals(f);
        }
        // Summed in the database; `$n` in order (PostgreSQL's placeholders and SQLite's
        // numbered parameters). Parts not summed by read as constants.
        let part = |on: bool, column: &'static str| if on { column } else { "''" };
        let bucket = match g.width {
            Some(w) => format!("(bucket - bucket % {w})"),
            None => "CAST(0 AS BIGINT)".to_string(),
        };
        let columns = [
            bucket.as_str(),
            part(g.by_api, "api_id"),
            part(g.by_key, "key_id"),
            part(g.by_identity, "identity_id"),
            part(g.by_tags, "tags"),
        ];
        let grouped: Vec<&str> =
            columns.iter().copied().filter(|c| !c.starts_with("''") && !c.starts_with("CAST")).collect();
        let mut sql = format!(
            "SELECT {} AS bucket, {} AS api_id, {} AS key_id, {} AS identity_id, {} AS tags, outcome, \
             CAST(SUM(count) AS BIGINT) AS count, CAST(SUM(spent_credits) AS BIGINT) AS spent_credits \
             FROM verification_counts \
             WHERE workspace_id = $1 AND bucket >= $2 AND bucket <= $3",
            columns[0], columns[1], columns[2], columns[3], columns[4]
        );
        let mut n = 3;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        if f.api_id.is_some() {
            sql += &format!(" AND api_id = {}", param());
        }
        if !f.key_ids.is_empty() {
            let list: Vec<String> = f.key_ids.iter().map(|_| param()).collect();
            sql += &format!(" AND key_id IN ({})", list.join(", "));
        }
        if f.identity_id.is_some() {
            sql += &format!(" AND identity_id = {}", param());
        }
        sql += " GROUP BY outcome";
        for c in grouped {
            sql += ", ";
            sql += c;
        }
        // Boxed per backend (a boxed query names its backend).
        macro_rules! load {
            ($c:expr, $backend:ty) => {{
                let mut q = diesel::sql_query(&sql)
                    .into_boxed::<$backend>()
                    .bind::<Text, _>(f.workspace_id)
                    .bind::<BigInt, _>(f.start)
                    .bind::<BigInt, _>(f.end);
                if let Some(api_id) = f.api_id {
                    q = q.bind::<Text, _>(api_id);
                }
                for key in f.key_ids {
                    q = q.bind::<Text, _>(key.as_str());
                }
                if let Some(id) = f.identity_id {
                    q = q.bind::<Text, _>(id);
                }
                q.load::<Summed>($c)
            }};
        }
        let rows: Vec<Summed> = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => load!(c, diesel::sqlite::Sqlite),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => load!(c, diesel::pg::Pg),
        }
        .map_err(db_err)?;
        let width = g.width.unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|r| {
                from_row((
                    f.workspace_id.to_string(),
                    width,
                    r.bucket,
                    r.api_id,
                    r.key_id,
                    r.identity_id,
                    r.outcome,
                    if r.tags.is_empty() { "[]".to_string() } else { r.tags },
                    r.count,
                    r.spent_credits,
                ))
            })
            .collect())
    }

    fn roll_up_verification_counts(&mut self, from: i64, to: i64, before: i64) -> R<usize> {
        use verification_counts::dsl as v;
        #[cfg(feature = "postgres")]
        #[allow(irrefutable_let_patterns)] // (a build with PostgreSQL alone)
        if let DbConn::Pg(c) = &mut *self.conn {
            // One roll-up at a time across instances (its rows are read, then deleted).
            diesel::sql_query("SELECT pg_advisory_xact_lock(7255001)").execute(c).map_err(db_err)?;
        }
        let rows: Vec<CountRow> = v::verification_counts
            .filter(v::width.eq(from))
            .filter(v::bucket.lt(before))
            .select(count_columns!())
            .load(self.conn)
            .map_err(db_err)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let moved = rows.len();
        let mut merged: HashMap<SeriesBucket, (i64, i64)> = HashMap::new();
        for (ws, _, bucket, api, key, identity, outcome, tags, n, spent) in rows {
            let start = bucket - bucket.rem_euclid(to);
            add(merged.entry((ws, start, api, key, identity, outcome, tags)).or_default(), (n, spent));
        }
        let counts: Vec<VerificationCount> = merged
            .into_iter()
            .map(|((ws, bucket, api, key, identity, outcome, tags), (n, spent))| {
                from_row((ws, to, bucket, api, key, identity, outcome, tags, n, spent))
            })
            .collect();
        self.upsert_series(&counts)?;
        diesel::delete(v::verification_counts.filter(v::width.eq(from)).filter(v::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        // The APIs' sums likewise.
        use api_verification_counts::dsl as a;
        let rows: Vec<(String, String, i64, String, i64, i64)> = a::api_verification_counts
            .filter(a::width.eq(from))
            .filter(a::bucket.lt(before))
            .select((a::workspace_id, a::api_id, a::bucket, a::outcome, a::count, a::spent_credits))
            .load(self.conn)
            .map_err(db_err)?;
        let mut totals: HashMap<ApiBucket<'_>, (i64, i64)> = HashMap::new();
        for (ws, api, bucket, outcome, n, spent) in &rows {
            add(
                totals.entry((ws, api, to, bucket - bucket.rem_euclid(to), outcome)).or_default(),
                (*n, *spent),
            );
        }
        self.upsert_api_totals(&totals)?;
        diesel::delete(a::api_verification_counts.filter(a::width.eq(from)).filter(a::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(moved)
    }

    fn delete_verification_counts_before(&mut self, before: i64) -> R<usize> {
        use verification_counts::dsl as v;
        let n = diesel::delete(v::verification_counts.filter(v::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        diesel::delete(api_verification_counts::table.filter(api_verification_counts::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(n)
    }

    fn keys_last_used(&mut self, key_ids: &[&str]) -> R<Vec<(String, i64)>> {
        use diesel::dsl::max;
        use verification_counts::dsl as v;
        let rows: Vec<(String, Option<i64>)> = v::verification_counts
            .filter(v::key_id.eq_any(key_ids))
            .group_by(v::key_id)
            .select((v::key_id, max(v::bucket)))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().filter_map(|(k, b)| b.map(|b| (k, b))).collect())
    }

    fn claim_analytics_flush(&mut self, id: &str, now: i64) -> R<bool> {
        use analytics_flushes::dsl as f;
        let row = (f::id.eq(id), f::written_at.eq(now));
        let inserted = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => {
                diesel::insert_into(f::analytics_flushes).values(row).on_conflict_do_nothing().execute(c)
            }
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => {
                diesel::insert_into(f::analytics_flushes).values(row).on_conflict_do_nothing().execute(c)
            }
        }
        .map_err(db_err)?;
        Ok(inserted == 1)
    }

    fn delete_analytics_flushes_before(&mut self, before: i64) -> R<usize> {
        use analytics_flushes::dsl as f;
        diesel::delete(f::analytics_flushes.filter(f::written_at.lt(before)))
            .execute(self.conn)
            .map_err(db_err)
    }

    fn append_journal(&mut self, id: &str, merged: bool, written_at: i64, body: &[u8]) -> R<()> {
        use verification_journal::dsl as j;
        diesel::insert_into(j::verification_journal)
            .values((j::id.eq(id), j::merged.eq(merged), j::written_at.eq(written_at), j::body.eq(body)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(())
    }

    fn take_journal(&mut self, merged: bool, max: usize) -> R<Vec<Vec<u8>>> {
        // One statement: on PostgreSQL an entry a concurrent fold deleted first is skipped
        // after its lock is released (read committed), so each entry is taken once. The
        // bound is a literal: SQLite compiles a statement again whenever its LIMIT's
        // parameter is bound again.
        let sql = format!(
            "DELETE FROM verification_journal WHERE id IN \
             (SELECT id FROM verification_journal WHERE merged = $1 ORDER BY id LIMIT {max}) \
             RETURNING body"
        );
        let q = diesel::sql_query(sql).bind::<diesel::sql_types::Bool, _>(merged);
        let rows: Vec<JournalBody> = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => q.load(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => q.load(c),
        }
        .map_err(db_err)?;
        Ok(rows.into_iter().map(|r| r.body).collect())
    }

    fn journal_oldest(&mut self) -> R<Option<i64>> {
        use diesel::dsl::min;
        use verification_journal::dsl as j;
        // No `.first()`: its `LIMIT ?` would make SQLite compile the statement every time.
        j::verification_journal.select(min(j::written_at)).get_result(self.conn).map_err(db_err)
    }
}

/// A journal entry's body, as `take_journal` returns it.
#[derive(diesel::QueryableByName)]
struct JournalBody {
    #[diesel(sql_type = diesel::sql_types::Binary)]
    body: Vec<u8>,
}
