//! Recoverable keys' sealed plaintexts: two columns of `keys` (`vault_key_id`,
//! `ciphertext`), NULL for the others.

use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_rbac::store::KeySecretTx;
use keygate_vault::Sealed;

impl KeySecretTx for DieselTx<'_> {
    fn set_key_secret(&mut self, key_id: &str, sealed: Option<&Sealed>) -> R<()> {
        diesel::update(keys::table.filter(keys::id.eq(key_id)))
            .set((
                keys::vault_key_id.eq(sealed.map(|s| s.key_id.as_str())),
                keys::ciphertext.eq(sealed.map(|s| s.data.as_str())),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn key_secrets(&mut self, workspace_id: &str, key_ids: &[&str]) -> R<Vec<(String, Sealed)>> {
        let mut out = Vec::with_capacity(key_ids.len());
        for chunk in key_ids.chunks(500) {
            let rows: Vec<(String, Option<String>, Option<String>)> = keys::table
                .filter(keys::workspace_id.eq(workspace_id))
                .filter(keys::id.eq_any(chunk))
                .filter(keys::vault_key_id.is_not_null())
                .select((keys::id, keys::vault_key_id, keys::ciphertext))
                .load(self.conn)
                .map_err(db_err)?;
            out.extend(
                rows.into_iter()
                    .filter_map(|(id, key_id, data)| Some((id, Sealed { key_id: key_id?, data: data? }))),
            );
        }
        Ok(out)
    }

    fn vault_key_ids(&mut self) -> R<Vec<(String, u64)>> {
        use diesel::dsl::count_star;
        let rows: Vec<(Option<String>, i64)> = keys::table
            .filter(keys::vault_key_id.is_not_null())
            .group_by(keys::vault_key_id)
            .select((keys::vault_key_id, count_star()))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().filter_map(|(id, n)| Some((id?, n.max(0) as u64))).collect())
    }

    fn key_secrets_not_under(
        &mut self,
        key_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<(String, String, Sealed)>> {
        let mut q = keys::table
            .filter(keys::vault_key_id.is_not_null())
            .filter(keys::vault_key_id.ne(key_id))
            .into_boxed();
        if let Some(after) = after {
            q = q.filter(keys::id.gt(after.to_string()));
        }
        let rows: Vec<(String, String, Option<String>, Option<String>)> = q
            .order(keys::id)
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .select((keys::id, keys::workspace_id, keys::vault_key_id, keys::ciphertext))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, ws, key_id, data)| Some((id, ws, Sealed { key_id: key_id?, data: data? })))
            .collect())
    }
}
