//! Keys and their links to permissions and roles.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{BATCH_ROWS, DieselTx, KeyRow, PROBE_ROWS, R, db_err, key_from_row, named};
use diesel::prelude::*;
use keygate_domain::Named;
use keygate_rbac::store::KeyTx;
use keygate_rbac::{Credits, EntityKind, Key};

impl KeyTx for DieselTx<'_> {
    fn set_key_credits(&mut self, key_id: &str, credits: Option<&Credits>) -> R<()> {
        self.write_credit_setting(key_id, credits)
    }

    fn insert_key(&mut self, key: &Key, hash: &str) -> R<()> {
        diesel::insert_into(keys::table)
            .values((
                keys::id.eq(&key.id),
                keys::workspace_id.eq(&key.workspace_id),
                keys::hash.eq(hash),
                keys::prefix.eq(&key.start),
                keys::name.eq(&key.name),
                keys::meta.eq(&key.meta),
                keys::enabled.eq(key.enabled),
                keys::expires.eq(key.expires),
                keys::created_at.eq(key.created_at),
                keys::updated_at.eq(key.created_at),
                keys::api_id.eq(&key.api_id),
                keys::identity_id.eq(&key.identity_id),
                keys::key_prefix.eq(&key.prefix),
                keys::byte_length.eq(key.byte_length.map(i64::from)),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
        self.set_key_credits(&key.id, key.credits.as_ref())
    }

    fn update_key(&mut self, key: &Key, now: i64) -> R<()> {
        diesel::update(keys::table.filter(keys::id.eq(&key.id)))
            .set((
                keys::name.eq(&key.name),
                keys::meta.eq(&key.meta),
                keys::enabled.eq(key.enabled),
                keys::expires.eq(key.expires),
                keys::identity_id.eq(&key.identity_id),
                keys::updated_at.eq(now),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn get_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::id.eq(key_id))
            .filter(keys::workspace_id.eq(workspace_id))
            .select(key_columns!())
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn find_key(&mut self, key_id: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::id.eq(key_id))
            .select(key_columns!())
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn list_keys(&mut self, workspace_id: &str) -> R<Vec<Key>> {
        let rows: Vec<KeyRow> = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .order((keys::created_at, keys::id))
            .select(key_columns!())
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(key_from_row).collect())
    }

    fn key_by_hash(&mut self, hash: &str) -> R<Option<Key>> {
        let q = keys::table.filter(keys::hash.eq(hash)).select(key_columns!());
        let row: Option<KeyRow> = on_backend!(self.conn, |c| q.get_result(c).optional()).map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn delete_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<String>> {
        // Link rows go by ON DELETE CASCADE.
        diesel::delete(keys::table.filter(keys::id.eq(key_id)).filter(keys::workspace_id.eq(workspace_id)))
            .returning(keys::hash)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)
    }

    fn lock_key(&mut self, workspace_id: &str, key_id: &str) -> R<bool> {
        let query = keys::table
            .filter(keys::id.eq(key_id))
            .filter(keys::workspace_id.eq(workspace_id))
            .select(keys::id);
        Ok(lock_first!(self.conn, query)?.is_some())
    }

    fn key_entities(&mut self, kind: EntityKind, key_id: &str) -> R<Vec<Named>> {
        by_kind!(kind, ent, link, link_col, {
            let q = link::table
                .inner_join(ent::table)
                .filter(link::key_id.eq(key_id))
                .select((ent::id, ent::name));
            let rows: Vec<(String, String)> = on_backend!(self.conn, |c| q.load(c)).map_err(db_err)?;
            Ok(rows.into_iter().map(named).collect())
        })
    }

    fn link_key_entities(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        key_id: &str,
        ids: &[String],
        now: i64,
    ) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            for chunk in ids.chunks(BATCH_ROWS) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|id| {
                        (
                            link::key_id.eq(key_id),
                            link_col.eq(id),
                            link::workspace_id.eq(workspace_id),
                            link::created_at.eq(now),
                        )
                    })
                    .collect();
                on_each_backend!(self.conn, c => diesel::insert_into(link::table).values(&rows).execute(c))
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    fn insert_keys(&mut self, keys: &[(Key, String)]) -> R<()> {
        // 20 values a row: 1,000 rows stay within both backends' bound on parameters.
        for chunk in keys.chunks(BATCH_ROWS) {
            let rows: Vec<_> = chunk
                .iter()
                .map(|(key, hash)| {
                    let (remaining, interval, amount, day, last_refill) =
                        super::credits_tx::credit_values(key.credits.as_ref());
                    (
                        (
                            keys::id.eq(&key.id),
                            keys::workspace_id.eq(&key.workspace_id),
                            keys::hash.eq(hash),
                            keys::prefix.eq(&key.start),
                            keys::name.eq(&key.name),
                            keys::meta.eq(&key.meta),
                            keys::enabled.eq(key.enabled),
                            keys::expires.eq(key.expires),
                            keys::created_at.eq(key.created_at),
                            keys::updated_at.eq(key.created_at),
                        ),
                        (
                            keys::api_id.eq(&key.api_id),
                            keys::identity_id.eq(&key.identity_id),
                            keys::key_prefix.eq(&key.prefix),
                            keys::byte_length.eq(key.byte_length.map(i64::from)),
                            keys::credits_remaining.eq(remaining),
                            keys::refill_interval.eq(interval),
                            keys::refill_amount.eq(amount),
                            keys::refill_day.eq(day),
                            keys::last_refill_at.eq(last_refill),
                            // As a key created alone: its credit setting written once.
                            keys::credit_version.eq(1_i64),
                        ),
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(keys::table).values(&rows).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }

    fn existing_hashes(&mut self, hashes: &[String]) -> R<Vec<String>> {
        let mut found = Vec::new();
        // 100 hashes a statement: PostgreSQL's planner prices 1,000 index probes above a
        // sequential scan of a table of a few hundred thousand keys (and takes the scan, 20x
        // slower, then slower still as the table grows); 100 probes it always takes.
        for chunk in hashes.chunks(PROBE_ROWS) {
            let rows: Vec<String> = keys::table
                .filter(keys::hash.eq_any(chunk))
                .select(keys::hash)
                .load(self.conn)
                .map_err(db_err)?;
            found.extend(rows);
        }
        Ok(found)
    }

    fn link_keys_entities(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        links: &[(String, String)],
        now: i64,
    ) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            for chunk in links.chunks(BATCH_ROWS) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|(key_id, id)| {
                        (
                            link::key_id.eq(key_id),
                            link_col.eq(id),
                            link::workspace_id.eq(workspace_id),
                            link::created_at.eq(now),
                        )
                    })
                    .collect();
                on_each_backend!(self.conn, c => diesel::insert_into(link::table).values(&rows).execute(c))
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    fn unlink_key_entities(&mut self, kind: EntityKind, key_id: &str, ids: &[String]) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            diesel::delete(link::table.filter(link::key_id.eq(key_id)).filter(link_col.eq_any(ids)))
                .execute(self.conn)
                .map(drop)
                .map_err(db_err)
        })
    }
}
