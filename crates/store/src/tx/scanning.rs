//! Keys reported leaked (keygate_scanning::store).

use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_scanning::{LeakRecord, LeakRows};

impl LeakRows for DieselTx<'_> {
    fn leak_recorded(&mut self, key_id: &str) -> R<bool> {
        let found: Option<String> = leaked_keys::table
            .filter(leaked_keys::key_id.eq(key_id))
            .select(leaked_keys::key_id)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(found.is_some())
    }

    fn record_leak(&mut self, leak: &LeakRecord<'_>) -> R<()> {
        diesel::insert_into(leaked_keys::table)
            .values((
                leaked_keys::key_id.eq(leak.key_id),
                leaked_keys::workspace_id.eq(leak.workspace_id),
                leaked_keys::url.eq(leak.url),
                leaked_keys::source.eq(leak.source),
                leaked_keys::action.eq(leak.action),
                leaked_keys::reported_at.eq(leak.at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }
}
