//! Rate-limit analytics (the `ratelimit_counts` and `ratelimit_identifiers` tables): counts
//! added by upsert, read by range, rolled up (namespaces) or trimmed to the heaviest
//! (identifiers), and pruned.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_analytics::store::{IdentifierCount, RatelimitCount, RatelimitCountTx};
use std::collections::HashMap;

/// Rows of one statement.
#[cfg(feature = "postgres")]
const CHUNK: usize = 5_000;

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn uint(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

type CountRow = (String, String, i64, i64, i64, i64);
type IdentifierRow = (String, String, i64, i64, String, i64, i64);

#[derive(diesel::QueryableByName)]
struct Summed {
    #[diesel(sql_type = diesel::sql_types::Text)]
    identifier: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    passed: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    denied: i64,
}

/// One roll-up or trim at a time across instances (its rows are read, then deleted).
fn serialize(conn: &mut DbConn) -> R<()> {
    #[cfg(feature = "postgres")]
    #[allow(irrefutable_let_patterns)] // (a build with PostgreSQL alone)
    if let DbConn::Pg(c) = conn {
        diesel::sql_query("SELECT pg_advisory_xact_lock(7255002)").execute(c).map_err(db_err)?;
    }
    let _ = conn;
    Ok(())
}

impl RatelimitCountTx for DieselTx<'_> {
    fn add_ratelimit_counts(&mut self, counts: &[RatelimitCount]) -> R<()> {
        use ratelimit_counts::dsl as r;
        #[cfg(feature = "postgres")]
        #[allow(irrefutable_let_patterns)] // (a build with PostgreSQL alone)
        if let DbConn::Pg(c) = &mut *self.conn {
            use diesel::sql_types::{Array, BigInt, Text};
            for chunk in counts.chunks(CHUNK) {
                let text = |f: fn(&RatelimitCount) -> &str| {
                    chunk.iter().map(|c| f(c).to_string()).collect::<Vec<_>>()
                };
                let number = |f: fn(&RatelimitCount) -> i64| chunk.iter().map(f).collect::<Vec<i64>>();
                diesel::sql_query(
                    "INSERT INTO ratelimit_counts (workspace_id, namespace_id, width, bucket, passed, denied) \
                     SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[]) \
                     ON CONFLICT (workspace_id, namespace_id, width, bucket) DO UPDATE SET \
                     passed = ratelimit_counts.passed + EXCLUDED.passed, \
                     denied = ratelimit_counts.denied + EXCLUDED.denied",
                )
                .bind::<Array<Text>, _>(text(|c| &c.workspace_id))
                .bind::<Array<Text>, _>(text(|c| &c.namespace_id))
                .bind::<Array<BigInt>, _>(number(|c| c.width))
                .bind::<Array<BigInt>, _>(number(|c| c.bucket))
                .bind::<Array<BigInt>, _>(number(|c| int(c.passed)))
                .bind::<Array<BigInt>, _>(number(|c| int(c.denied)))
                .execute(c)
                .map_err(db_err)?;
            }
            return Ok(());
        }
        for c in counts {
            let row = (
                r::workspace_id.eq(&c.workspace_id),
                r::namespace_id.eq(&c.namespace_id),
                r::width.eq(c.width),
                r::bucket.eq(c.bucket),
                r::passed.eq(int(c.passed)),
                r::denied.eq(int(c.denied)),
            );
            let target = (r::workspace_id, r::namespace_id, r::width, r::bucket);
            let add = (
                r::passed.eq(r::passed + diesel::upsert::excluded(r::passed)),
                r::denied.eq(r::denied + diesel::upsert::excluded(r::denied)),
            );
            match &mut *self.conn {
                #[cfg(feature = "sqlite")]
                DbConn::Sqlite(c) => diesel::insert_into(r::ratelimit_counts)
                    .values(row)
                    .on_conflict(target)
                    .do_update()
                    .set(add)
                    .execute(c),
                #[cfg(feature = "postgres")]
                DbConn::Pg(c) => diesel::insert_into(r::ratelimit_counts)
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

    fn add_identifier_counts(&mut self, counts: &[IdentifierCount]) -> R<()> {
        use ratelimit_identifiers::dsl as r;
        #[cfg(feature = "postgres")]
        #[allow(irrefutable_let_patterns)] // (a build with PostgreSQL alone)
        if let DbConn::Pg(c) = &mut *self.conn {
            use diesel::sql_types::{Array, BigInt, Text};
            for chunk in counts.chunks(CHUNK) {
                let text = |f: fn(&IdentifierCount) -> &str| {
                    chunk.iter().map(|c| f(c).to_string()).collect::<Vec<_>>()
                };
                let number = |f: fn(&IdentifierCount) -> i64| chunk.iter().map(f).collect::<Vec<i64>>();
                diesel::sql_query(
                    "INSERT INTO ratelimit_identifiers \
                     (workspace_id, namespace_id, width, bucket, identifier, passed, denied) \
                     SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::text[], \
                     $6::int8[], $7::int8[]) \
                     ON CONFLICT (workspace_id, namespace_id, width, bucket, identifier) DO UPDATE SET \
                     passed = ratelimit_identifiers.passed + EXCLUDED.passed, \
                     denied = ratelimit_identifiers.denied + EXCLUDED.denied",
                )
                .bind::<Array<Text>, _>(text(|c| &c.workspace_id))
                .bind::<Array<Text>, _>(text(|c| &c.namespace_id))
                .bind::<Array<BigInt>, _>(number(|c| c.width))
                .bind::<Array<BigInt>, _>(number(|c| c.bucket))
                .bind::<Array<Text>, _>(text(|c| &c.identifier))
                .bind::<Array<BigInt>, _>(number(|c| int(c.passed)))
                .bind::<Array<BigInt>, _>(number(|c| int(c.denied)))
                .execute(c)
                .map_err(db_err)?;
            }
            return Ok(());
        }
        for c in counts {
            let row = (
                r::workspace_id.eq(&c.workspace_id),
                r::namespace_id.eq(&c.namespace_id),
                r::width.eq(c.width),
                r::bucket.eq(c.bucket),
                r::identifier.eq(&c.identifier),
                r::passed.eq(int(c.passed)),
                r::denied.eq(int(c.denied)),
            );
            let target = (r::workspace_id, r::namespace_id, r::width, r::bucket, r::identifier);
            let add = (
                r::passed.eq(r::passed + diesel::upsert::excluded(r::passed)),
                r::denied.eq(r::denied + diesel::upsert::excluded(r::denied)),
            );
            match &mut *self.conn {
                #[cfg(feature = "sqlite")]
                DbConn::Sqlite(c) => diesel::insert_into(r::ratelimit_identifiers)
                    .values(row)
                    .on_conflict(target)
                    .do_update()
                    .set(add)
                    .execute(c),
                #[cfg(feature = "postgres")]
                DbConn::Pg(c) => diesel::insert_into(r::ratelimit_identifiers)
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

    fn ratelimit_counts(
        &mut self,
        workspace_id: &str,
        namespace_id: &str,
        start: i64,
        end: i64,
    ) -> R<Vec<RatelimitCount>> {
        use ratelimit_counts::dsl as r;
        let rows: Vec<CountRow> = r::ratelimit_counts
            .filter(r::workspace_id.eq(workspace_id))
            .filter(r::namespace_id.eq(namespace_id))
            .filter(r::bucket.ge(start))
            .filter(r::bucket.le(end))
            .select((r::workspace_id, r::namespace_id, r::width, r::bucket, r::passed, r::denied))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(count_from_row).collect())
    }

    fn top_identifiers(
        &mut self,
        workspace_id: &str,
        namespace_id: &str,
        (start, end): (i64, i64),
        by_denied: bool,
        limit: usize,
    ) -> R<Vec<IdentifierCount>> {
        use diesel::sql_types::{BigInt, Text};
        // `$n` in order: PostgreSQL's placeholders, and SQLite's numbered parameters.
        let order = if by_denied { "SUM(denied)" } else { "SUM(passed) + SUM(denied)" };
        let sql = format!(
            "SELECT identifier, CAST(SUM(passed) AS BIGINT) AS passed, CAST(SUM(denied) AS BIGINT) AS denied \
             FROM ratelimit_identifiers \
             WHERE workspace_id = $1 AND namespace_id = $2 AND bucket >= $3 AND bucket <= $4 \
             GROUP BY identifier ORDER BY {order} DESC, identifier LIMIT $5"
        );
        let query = diesel::sql_query(sql)
            .bind::<Text, _>(workspace_id)
            .bind::<Text, _>(namespace_id)
            .bind::<BigInt, _>(start)
            .bind::<BigInt, _>(end)
            .bind::<BigInt, _>(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows: Vec<Summed> = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => query.load(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => query.load(c),
        }
        .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .map(|s| IdentifierCount {
                workspace_id: workspace_id.to_string(),
                namespace_id: namespace_id.to_string(),
                width: 0,
                bucket: start,
                identifier: s.identifier,
                passed: uint(s.passed),
                denied: uint(s.denied),
            })
            .collect())
    }

    fn roll_up_ratelimit_counts(&mut self, from: i64, to: i64, before: i64) -> R<usize> {
        use ratelimit_counts::dsl as r;
        serialize(self.conn)?;
        let rows: Vec<CountRow> = r::ratelimit_counts
            .filter(r::width.eq(from))
            .filter(r::bucket.lt(before))
            .select((r::workspace_id, r::namespace_id, r::width, r::bucket, r::passed, r::denied))
            .load(self.conn)
            .map_err(db_err)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let moved = rows.len();
        let mut merged: HashMap<(String, String, i64), (i64, i64)> = HashMap::new();
        for (ws, ns, _, bucket, passed, denied) in rows {
            let e = merged.entry((ws, ns, bucket - bucket.rem_euclid(to))).or_default();
            e.0 += passed;
            e.1 += denied;
        }
        let counts: Vec<RatelimitCount> = merged
            .into_iter()
            .map(|((ws, ns, bucket), (passed, denied))| count_from_row((ws, ns, to, bucket, passed, denied)))
            .collect();
        self.add_ratelimit_counts(&counts)?;
        diesel::delete(r::ratelimit_counts.filter(r::width.eq(from)).filter(r::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(moved)
    }

    fn trim_identifier_counts(&mut self, from: i64, to: i64, before: i64, keep: usize) -> R<usize> {
        use ratelimit_identifiers::dsl as r;
        serialize(self.conn)?;
        let rows: Vec<IdentifierRow> = r::ratelimit_identifiers
            .filter(r::width.eq(from))
            .filter(r::bucket.lt(before))
            .select((
                r::workspace_id,
                r::namespace_id,
                r::width,
                r::bucket,
                r::identifier,
                r::passed,
                r::denied,
            ))
            .load(self.conn)
            .map_err(db_err)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let read = rows.len();
        // Per namespace and new bucket: each identifier's sum.
        type Group = (String, String, i64);
        let mut groups: HashMap<Group, HashMap<String, (i64, i64)>> = HashMap::new();
        for (ws, ns, _, bucket, identifier, passed, denied) in rows {
            let sums = groups.entry((ws, ns, bucket - bucket.rem_euclid(to))).or_default();
            let e = sums.entry(identifier).or_default();
            e.0 += passed;
            e.1 += denied;
        }
        let mut kept = Vec::new();
        for ((ws, ns, bucket), sums) in groups {
            let mut all: Vec<(String, (i64, i64))> = sums.into_iter().collect();
            let mut chosen: std::collections::BTreeSet<String> = Default::default();
            all.sort_by(|a, b| (b.1.0 + b.1.1).cmp(&(a.1.0 + a.1.1)).then_with(|| a.0.cmp(&b.0)));
            chosen.extend(all.iter().take(keep).map(|(id, _)| id.clone()));
            all.sort_by(|a, b| b.1.1.cmp(&a.1.1).then_with(|| a.0.cmp(&b.0)));
            chosen.extend(all.iter().take(keep).filter(|(_, (_, d))| *d > 0).map(|(id, _)| id.clone()));
            for (identifier, (passed, denied)) in all {
                if chosen.contains(&identifier) {
                    kept.push(IdentifierCount {
                        workspace_id: ws.clone(),
                        namespace_id: ns.clone(),
                        width: to,
                        bucket,
                        identifier,
                        passed: uint(passed),
                        denied: uint(denied),
                    });
                }
            }
        }
        diesel::delete(r::ratelimit_identifiers.filter(r::width.eq(from)).filter(r::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        self.add_identifier_counts(&kept)?;
        Ok(read)
    }

    fn ratelimit_namespace_totals(
        &mut self,
        workspace_id: &str,
        start: i64,
        end: i64,
    ) -> R<Vec<(String, u64, u64)>> {
        use ratelimit_counts::dsl as r;
        let rows: Vec<(String, i64, i64)> = r::ratelimit_counts
            .filter(r::workspace_id.eq(workspace_id))
            .filter(r::bucket.ge(start))
            .filter(r::bucket.le(end))
            .select((r::namespace_id, r::passed, r::denied))
            .load(self.conn)
            .map_err(db_err)?;
        let mut sums: HashMap<String, (u64, u64)> = HashMap::new();
        for (ns, passed, denied) in rows {
            let e = sums.entry(ns).or_default();
            e.0 += uint(passed);
            e.1 += uint(denied);
        }
        Ok(sums.into_iter().map(|(ns, (p, d))| (ns, p, d)).collect())
    }

    fn delete_ratelimit_counts_before(&mut self, before: i64) -> R<usize> {
        let n = diesel::delete(ratelimit_counts::table.filter(ratelimit_counts::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        let m = diesel::delete(ratelimit_identifiers::table.filter(ratelimit_identifiers::bucket.lt(before)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(n + m)
    }
}

fn count_from_row((workspace_id, namespace_id, width, bucket, passed, denied): CountRow) -> RatelimitCount {
    RatelimitCount { workspace_id, namespace_id, width, bucket, passed: uint(passed), denied: uint(denied) }
}
