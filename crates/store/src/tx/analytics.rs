//! Verification analytics (the `verification_counts` table): counts added by upsert, read
//! by range, rolled up into coarser buckets and pruned.

use super::*;
use keygate_rbac::store::{AnalyticsTx, VerificationCount, VerificationFilter};

type CountRow = (String, i64, i64, String, String, String, String, String, i64);

/// A count's series and bucket start (workspace, bucket, API, key, identity, outcome, tags).
type SeriesBucket = (String, i64, String, String, String, String, String);

fn count_row(c: &VerificationCount) -> CountRow {
    (
        c.workspace_id.clone(),
        c.width,
        c.bucket,
        c.api_id.clone(),
        c.key_id.clone(),
        c.identity_id.clone(),
        c.outcome.clone(),
        serde_json::to_string(&c.tags).unwrap_or_else(|_| "[]".into()),
        i64::try_from(c.count).unwrap_or(i64::MAX),
    )
}

fn from_row(
    (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags, count): CountRow,
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
        )
    };
}

impl AnalyticsTx for DieselTx<'_> {
    fn add_verification_counts(&mut self, counts: &[VerificationCount]) -> R<()> {
        use verification_counts::dsl as v;
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
                     (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags, count) \
                     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::text[], \
                     $6::text[], $7::text[], $8::text[], $9::int8[]) \
                     ON CONFLICT (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags) \
                     DO UPDATE SET count = verification_counts.count + EXCLUDED.count",
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
                .execute(c)
                .map_err(db_err)?;
            }
            return Ok(());
        }
        for c in counts {
            let (ws, width, bucket, api, key, identity, outcome, tags, n) = count_row(c);
            let row = (
                v::workspace_id.eq(ws),
                v::width.eq(width),
                v::bucket.eq(bucket),
                v::api_id.eq(api),
                v::key_id.eq(key),
                v::identity_id.eq(identity),
                v::outcome.eq(outcome),
                v::tags.eq(tags),
                v::count.eq(n),
            );
            let target = (
                v::workspace_id,
                v::width,
                v::bucket,
                v::api_id,
                v::key_id,
                v::identity_id,
                v::outcome,
                v::tags,
            );
            let add = v::count.eq(v::count + diesel::upsert::excluded(v::count));
            match &mut *self.conn {
                #[cfg(feature = "sqlite")]
                DbConn::Sqlite(c) => diesel::insert_into(v::verification_counts)
                    .values(row)
                    .on_conflict(target)
                    .do_update()
                    .set(add)
                    .execute(c),
                #[cfg(feature = "postgres")]
                DbConn::Pg(c) => diesel::insert_into(v::verification_counts)
                    .values(row)
                    .on_conflict(target)
                    .do_update()
                    .set(add)
                    .execute(c),
            }
            .map_err(db_err)?;
        }
        Ok(())
    }

    fn verification_counts(&mut self, f: &VerificationFilter<'_>) -> R<Vec<VerificationCount>> {
        use verification_counts::dsl as v;
        // Boxed per backend (a boxed query names its backend).
        macro_rules! load {
            ($c:expr) => {{
                let mut q = v::verification_counts
                    .filter(v::workspace_id.eq(f.workspace_id))
                    .filter(v::bucket.ge(f.start))
                    .filter(v::bucket.le(f.end))
                    .select(count_columns!())
                    .into_boxed();
                if let Some(api_id) = f.api_id {
                    q = q.filter(v::api_id.eq(api_id));
                }
                if !f.key_ids.is_empty() {
                    q = q.filter(v::key_id.eq_any(f.key_ids));
                }
                if let Some(id) = f.identity_id {
                    q = q.filter(v::identity_id.eq(id));
                }
                q.load::<CountRow>($c)
            }};
        }
        let rows: Vec<CountRow> = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => load!(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => load!(c),
        }
        .map_err(db_err)?;
        Ok(rows.into_iter().map(from_row).collect())
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
        let mut merged: HashMap<SeriesBucket, i64> = HashMap::new();
        for (ws, _, bucket, api, key, identity, outcome, tags, n) in rows {
            let start = bucket - bucket.rem_euclid(to);
            *merged.entry((ws, start, api, key, identity, outcome, tags)).or_default() += n;
        }
        let counts: Vec<VerificationCount> = merged
            .into_iter()
            .map(|((ws, bucket, api, key, identity, outcome, tags), n)| {
                from_row((ws, to, bucket, api, key, identity, outcome, tags, n))
            })
            .collect();
        self.add_verification_counts(&counts)?;
        diesel::delete(v::verification_counts.filter(v::width.eq(from)).filter(v::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(moved)
    }

    fn delete_verification_counts_before(&mut self, before: i64) -> R<usize> {
        use verification_counts::dsl as v;
        diesel::delete(v::verification_counts.filter(v::bucket.lt(before))).execute(self.conn).map_err(db_err)
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
}
