//! Root keys (stored by hash).

use crate::schema::*;
use crate::tx::{DieselTx, R, ROOT_KEY_COLUMNS, RootKeyRow, db_err, root_key};
use diesel::prelude::*;
use keygate_rbac::store::RootKeyTx;
use keygate_rbac::{RootKey, StorageError};

fn permissions_text(key: &RootKey) -> R<String> {
    serde_json::to_string(&key.permissions).map_err(|e| StorageError::Internal(e.to_string()))
}

impl RootKeyTx for DieselTx<'_> {
    fn next_root_key_expiry(&mut self, now: i64) -> R<Option<i64>> {
        root_keys::table
            .filter(root_keys::revoked_at.is_null())
            .filter(root_keys::enabled.eq(true))
            .filter(root_keys::expires_at.gt(now))
            .select(diesel::dsl::min(root_keys::expires_at))
            .first(self.conn)
            .map_err(db_err)
    }

    fn insert_root_key(&mut self, key: &RootKey, hash: &str) -> R<()> {
        diesel::insert_into(root_keys::table)
            .values((
                root_keys::id.eq(&key.id),
                root_keys::workspace_id.eq(&key.workspace_id),
                root_keys::hash.eq(hash),
                root_keys::prefix.eq(&key.prefix),
                root_keys::end_chars.eq(&key.end),
                root_keys::name.eq(&key.name),
                root_keys::enabled.eq(key.enabled),
                root_keys::permissions.eq(permissions_text(key)?),
                root_keys::created_at.eq(key.created_at),
                root_keys::expires_at.eq(key.expires_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn root_key_by_hash(&mut self, hash: &str) -> R<Option<RootKey>> {
        let row: Option<RootKeyRow> = root_keys::table
            .filter(root_keys::hash.eq(hash))
            .filter(root_keys::revoked_at.is_null())
            .select(ROOT_KEY_COLUMNS)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        row.map(root_key).transpose()
    }

    fn root_key_active(&mut self, id: &str) -> R<bool> {
        let found: Option<String> = root_keys::table
            .filter(root_keys::id.eq(id))
            .filter(root_keys::revoked_at.is_null())
            .filter(root_keys::enabled.eq(true))
            .select(root_keys::id)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(found.is_some())
    }

    fn root_key_by_id(&mut self, id: &str) -> R<Option<RootKey>> {
        let row: Option<RootKeyRow> = root_keys::table
            .filter(root_keys::id.eq(id))
            .filter(root_keys::revoked_at.is_null())
            .select(ROOT_KEY_COLUMNS)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        row.map(root_key).transpose()
    }

    fn root_keys_page(&mut self, workspace_id: &str, after: Option<&str>, limit: usize) -> R<Vec<RootKey>> {
        let mut q = root_keys::table
            .filter(root_keys::workspace_id.eq(workspace_id))
            .filter(root_keys::revoked_at.is_null())
            .into_boxed();
        if let Some(after) = after {
            q = q.filter(root_keys::id.gt(after.to_string()));
        }
        let rows: Vec<RootKeyRow> = q
            .order(root_keys::id)
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .select(ROOT_KEY_COLUMNS)
            .load(self.conn)
            .map_err(db_err)?;
        rows.into_iter().map(root_key).collect()
    }

    fn update_root_key(&mut self, key: &RootKey) -> R<bool> {
        diesel::update(
            root_keys::table.filter(root_keys::id.eq(&key.id)).filter(root_keys::revoked_at.is_null()),
        )
        .set((
            root_keys::name.eq(&key.name),
            root_keys::enabled.eq(key.enabled),
            root_keys::permissions.eq(permissions_text(key)?),
            root_keys::expires_at.eq(key.expires_at),
        ))
        .execute(self.conn)
        .map(|n| n > 0)
        .map_err(db_err)
    }

    fn revoke_root_key(&mut self, id: &str, now: i64) -> R<bool> {
        diesel::update(root_keys::table.filter(root_keys::id.eq(id)).filter(root_keys::revoked_at.is_null()))
            .set(root_keys::revoked_at.eq(now))
            .execute(self.conn)
            .map(|n| n > 0)
            .map_err(db_err)
    }

    fn note_root_key_use(&mut self, id: &str, at: i64) -> R<()> {
        diesel::update(
            root_keys::table
                .filter(root_keys::id.eq(id))
                .filter(root_keys::last_used_at.is_null().or(root_keys::last_used_at.lt(at))),
        )
        .set(root_keys::last_used_at.eq(at))
        .execute(self.conn)
        .map(drop)
        .map_err(db_err)
    }
}
