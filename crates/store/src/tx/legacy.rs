//! Keys from other systems waiting for their first use (keygate_rbac's `service::legacy`).

use crate::DbConn;
use crate::schema::*;
use crate::tx::{BATCH_ROWS, DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_rbac::LegacyRow;
use keygate_rbac::store::LegacyTx;

impl LegacyTx for DieselTx<'_> {
    fn insert_legacy_hashes(&mut self, rows: &[LegacyRow]) -> R<()> {
        for chunk in rows.chunks(BATCH_ROWS) {
            let values: Vec<_> = chunk
                .iter()
                .map(|r| {
                    (
                        legacy_keys::key_id.eq(&r.key_id),
                        legacy_keys::workspace_id.eq(&r.workspace_id),
                        legacy_keys::lookup.eq(&r.lookup),
                        legacy_keys::hash.eq(&r.hash),
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(legacy_keys::table).values(&values).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }

    fn legacy_candidates(&mut self, lookup: &str, limit: usize) -> R<Vec<(String, String)>> {
        legacy_keys::table
            .filter(legacy_keys::lookup.eq(lookup))
            .select((legacy_keys::key_id, legacy_keys::hash))
            .order(legacy_keys::key_id)
            .limit(limit as i64)
            .load(self.conn)
            .map_err(db_err)
    }

    fn adopt_legacy_key(&mut self, key_id: &str, hash: &str) -> R<bool> {
        let waiting = format!("legacy:{key_id}");
        let moved = diesel::update(keys::table.filter(keys::id.eq(key_id)).filter(keys::hash.eq(&waiting)))
            .set(keys::hash.eq(hash))
            .execute(self.conn)
            .map_err(db_err)?;
        diesel::delete(legacy_keys::table.filter(legacy_keys::key_id.eq(key_id)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(moved == 1)
    }
}
