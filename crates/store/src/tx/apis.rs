//! API objects, and the keys of one.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, KeyRow, Keyset, R, db_err, key_from_row, like_literal};
use diesel::prelude::*;
use keygate_domain::{AllowedIps, KeyFormat};
use keygate_rbac::store::ApiTx;
use keygate_rbac::{Api, Key};

type ApiRow = (String, String, String, i64, String, Option<String>);
type ApiColumns =
    (apis::workspace_id, apis::id, apis::name, apis::created_at, apis::key_format, apis::allowed_ips);
const API_COLUMNS: ApiColumns =
    (apis::workspace_id, apis::id, apis::name, apis::created_at, apis::key_format, apis::allowed_ips);

fn api_from_row((workspace_id, id, name, created_at, format, allowed): ApiRow) -> Api {
    let allowed_ips = allowed.as_deref().map(AllowedIps::from_stored);
    Api { id, workspace_id, name, created_at, key_format: KeyFormat::from_stored(&format), allowed_ips }
}

impl ApiTx for DieselTx<'_> {
    fn insert_api_if_absent(&mut self, api: &Api) -> R<bool> {
        if self.get_api(&api.workspace_id, &api.id)?.is_some() {
            return Ok(false);
        }
        self.insert_in_savepoint(|c| {
            diesel::insert_into(apis::table)
                .values((
                    apis::workspace_id.eq(&api.workspace_id),
                    apis::id.eq(&api.id),
                    apis::name.eq(&api.name),
                    apis::created_at.eq(api.created_at),
                    apis::key_format.eq(api.key_format.as_str()),
                    apis::allowed_ips.eq(api.allowed_ips.as_ref().map(AllowedIps::to_stored)),
                ))
                .execute(c)
        })
    }

    fn get_api(&mut self, workspace_id: &str, api_id: &str) -> R<Option<Api>> {
        let row: Option<ApiRow> = apis::table
            .filter(apis::workspace_id.eq(workspace_id))
            .filter(apis::id.eq(api_id))
            .select(API_COLUMNS)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(api_from_row))
    }

    fn list_apis(&mut self, workspace_id: &str, limit: usize) -> R<Vec<Api>> {
        let rows: Vec<ApiRow> = apis::table
            .filter(apis::workspace_id.eq(workspace_id))
            .order((apis::name.asc(), apis::id.asc()))
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .select(API_COLUMNS)
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(api_from_row).collect())
    }

    fn lock_api(&mut self, workspace_id: &str, api_id: &str) -> R<bool> {
        let query = apis::table
            .filter(apis::workspace_id.eq(workspace_id))
            .filter(apis::id.eq(api_id))
            .select(apis::id);
        Ok(lock_first!(self.conn, query)?.is_some())
    }

    fn api_key_ids(&mut self, workspace_id: &str, api_id: &str) -> R<Vec<String>> {
        let of_api = keys::table.filter(keys::workspace_id.eq(workspace_id)).filter(keys::api_id.eq(api_id));
        of_api.select(keys::id).order(keys::id).load(self.conn).map_err(db_err)
    }

    fn delete_api_keys(&mut self, workspace_id: &str, api_id: &str) -> R<Vec<String>> {
        let of_api = keys::table.filter(keys::workspace_id.eq(workspace_id)).filter(keys::api_id.eq(api_id));
        let ids: Vec<String> = of_api.select(keys::id).order(keys::id).load(self.conn).map_err(db_err)?;
        // Link rows go by ON DELETE CASCADE.
        diesel::delete(
            keys::table.filter(keys::workspace_id.eq(workspace_id)).filter(keys::api_id.eq(api_id)),
        )
        .execute(self.conn)
        .map_err(db_err)?;
        Ok(ids)
    }

    fn delete_api(&mut self, workspace_id: &str, api_id: &str) -> R<bool> {
        diesel::delete(apis::table.filter(apis::workspace_id.eq(workspace_id)).filter(apis::id.eq(api_id)))
            .execute(self.conn)
            .map(|n| n > 0)
            .map_err(db_err)
    }

    fn search_api_keys(&mut self, workspace_id: &str, api_id: &str, text: &str, limit: usize) -> R<Vec<Key>> {
        let pattern = format!("%{}%", like_literal(text));
        let rows: Vec<KeyRow> = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .filter(keys::api_id.eq(api_id))
            .filter(keys::id.eq(text).or(keys::name.like(pattern).escape('\\')))
            .order(keys::id.asc())
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .select(key_columns!())
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(key_from_row).collect())
    }

    fn api_keys_page(
        &mut self,
        workspace_id: &str,
        api_id: &str,
        identity_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Key>> {
        use diesel::dsl::sql;
        use diesel::sql_types::{Bool, Text};
        macro_rules! page {
            ($db:ty, $ks:expr, $c:expr) => {{
                let ks: &Keyset = &$ks;
                let mut q = keys::table
                    .filter(keys::workspace_id.eq(workspace_id))
                    .filter(keys::api_id.eq(api_id))
                    .into_boxed::<$db>();
                if let Some(identity_id) = identity_id {
                    q = q.filter(keys::identity_id.eq(identity_id));
                }
                if let Some(after) = after {
                    let cmp = format!("{} > ", ks.col("keys.id"));
                    q = q.filter(sql::<Bool>(&cmp).bind::<Text, _>(after.to_string()));
                }
                q.order(sql::<Text>(&ks.col("keys.id")))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .select(key_columns!())
                    .load::<KeyRow>($c)
            }};
        }
        let rows = on_each_keyset!(self.conn, page).map_err(db_err)?;
        Ok(rows.into_iter().map(key_from_row).collect())
    }

    fn count_api_keys(&mut self, workspace_id: &str, api_id: &str) -> R<u64> {
        let n: i64 = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .filter(keys::api_id.eq(api_id))
            .count()
            .get_result(self.conn)
            .map_err(db_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
