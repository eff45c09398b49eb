//! Change counters (`keygate_rbac::counters`).

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::dsl::max;
use diesel::prelude::*;
use diesel::upsert::excluded;
use keygate_rbac::store::CounterTx;
use std::collections::HashMap;

impl CounterTx for DieselTx<'_> {
    fn bump_counters(&mut self, names: &[String], now: i64) -> R<Vec<u64>> {
        use change_counters as cc;
        // SQLite writers hold the database's write lock (BEGIN IMMEDIATE), so the next
        // number is exact there; PostgreSQL does not use it (see CounterTx::counters_since).
        let seq = self.counters_seq()? + 1;
        let mut values = Vec::with_capacity(names.len());
        for name in names {
            let row = (cc::scope.eq(name), cc::value.eq(1_i64), cc::seq.eq(seq), cc::changed_at.eq(now));
            let value: i64 = on_each_backend!(self.conn, c => diesel::insert_into(cc::table)
                .values(row)
                .on_conflict(cc::scope)
                .do_update()
                .set((cc::value.eq(cc::value + 1), cc::seq.eq(excluded(cc::seq)), cc::changed_at.eq(excluded(cc::changed_at))))
                .returning(cc::value)
                .get_result(c))
            .map_err(db_err)?;
            values.push(value.max(0) as u64);
        }
        Ok(values)
    }

    fn counters(&mut self, names: &[String]) -> R<Vec<u64>> {
        use change_counters as cc;
        let rows: Vec<(String, i64)> = cc::table
            .filter(cc::scope.eq_any(names))
            .select((cc::scope, cc::value))
            .load(self.conn)
            .map_err(db_err)?;
        let found: HashMap<String, i64> = rows.into_iter().collect();
        Ok(names.iter().map(|n| found.get(n).map_or(0, |v| (*v).max(0) as u64)).collect())
    }

    fn counters_seq(&mut self) -> R<i64> {
        use change_counters as cc;
        let seq: Option<i64> = cc::table.select(max(cc::seq)).first(self.conn).map_err(db_err)?;
        Ok(seq.unwrap_or(0))
    }

    fn counters_since(&mut self, seq: i64) -> R<(Vec<(String, u64)>, i64)> {
        use change_counters as cc;
        let rows: Vec<(String, i64, i64)> = cc::table
            .filter(cc::seq.gt(seq))
            .select((cc::scope, cc::value, cc::seq))
            .load(self.conn)
            .map_err(db_err)?;
        let last = rows.iter().map(|r| r.2).max().unwrap_or(seq);
        Ok((rows.into_iter().map(|(n, v, _)| (n, v.max(0) as u64)).collect(), last))
    }

    fn root_key_counters(&mut self) -> R<Vec<(String, u64)>> {
        use change_counters as cc;
        // "rk:<id>" and "rk-created": the primary key's range of names starting "rk".
        let rows: Vec<(String, i64)> = cc::table
            .filter(cc::scope.ge("rk").and(cc::scope.lt("rl")))
            .select((cc::scope, cc::value))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(|(n, v)| (n, v.max(0) as u64)).collect())
    }

    fn counters_changed_since(&mut self, at: i64) -> R<Vec<(String, u64)>> {
        use change_counters as cc;
        let rows: Vec<(String, i64)> = cc::table
            .filter(cc::changed_at.ge(at))
            .select((cc::scope, cc::value))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(|(n, v)| (n, v.max(0) as u64)).collect())
    }
}

impl crate::SqlStore {
    /// The change counter that carried change number `seq` (the highest, with `None`; of
    /// several, the first by name), as
    /// (its change number, name, value, when): where the counters' history stands, which a
    /// snapshot of the verification cache names to be checked against when it is read.
    /// `None`: no counter (nothing changed yet), or none carries `seq` now (bumped since).
    pub fn counter_mark(
        &self,
        seq: Option<i64>,
    ) -> Result<Option<(i64, String, u64, i64)>, keygate_rbac::StorageError> {
        use change_counters as cc;
        let row: Option<(i64, String, i64, i64)> = self.with_conn(|conn| {
            // One transaction's counters share its change number: the first by name.
            let q = cc::table
                .select((cc::seq, cc::scope, cc::value, cc::changed_at))
                .order((cc::seq.desc(), cc::scope));
            match seq {
                Some(seq) => q.filter(cc::seq.eq(seq)).first(conn).optional(),
                None => q.first(conn).optional(),
            }
        })?;
        Ok(row.map(|(seq, scope, value, at)| (seq, scope, value.max(0) as u64, at)))
    }
}
