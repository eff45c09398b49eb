//! Rate-limit namespaces and their overrides.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, Keyset, R, db_err, named};
use diesel::prelude::*;
use keygate_domain::{Named, NamespaceInfo};
use keygate_rbac::store::NamespaceTx;
use keygate_rbac::{Override, StorageError};

macro_rules! namespace_columns {
    () => {
        (
            ratelimit_namespaces::id,
            ratelimit_namespaces::name,
            ratelimit_namespaces::algorithm,
            ratelimit_namespaces::created_at,
        )
    };
}

fn namespace_info((id, name, algorithm, created_at): (String, String, String, i64)) -> NamespaceInfo {
    NamespaceInfo { id, name, algorithm, created_at }
}

impl NamespaceTx for DieselTx<'_> {
    fn namespace_by_name(&mut self, workspace_id: &str, name: &str) -> R<Option<Named>> {
        let row: Option<(String, String)> = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::workspace_id.eq(workspace_id))
            .filter(ratelimit_namespaces::name.eq(name))
            .select((ratelimit_namespaces::id, ratelimit_namespaces::name))
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(named))
    }

    fn namespace_by_id(&mut self, workspace_id: &str, id: &str) -> R<Option<Named>> {
        let row: Option<(String, String)> = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::workspace_id.eq(workspace_id))
            .filter(ratelimit_namespaces::id.eq(id))
            .select((ratelimit_namespaces::id, ratelimit_namespaces::name))
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(named))
    }

    fn namespaces_page(
        &mut self,
        workspace_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<NamespaceInfo>> {
        use diesel::dsl::sql;
        use diesel::sql_types::{Bool, Text};
        macro_rules! page {
            ($db:ty, $ks:expr, $c:expr) => {{
                let ks: &Keyset = &$ks;
                let mut q = ratelimit_namespaces::table
                    .filter(ratelimit_namespaces::workspace_id.eq(workspace_id))
                    .into_boxed::<$db>();
                if let Some(after) = after {
                    let cmp = format!("{} > ", ks.col("name"));
                    q = q.filter(sql::<Bool>(&cmp).bind::<Text, _>(after.to_string()));
                }
                q.order(sql::<Text>(&ks.col("name")))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .select(namespace_columns!())
                    .load::<(String, String, String, i64)>($c)
            }};
        }
        let rows = on_each_keyset!(self.conn, page).map_err(db_err)?;
        Ok(rows.into_iter().map(namespace_info).collect())
    }

    fn namespace_info(&mut self, workspace_id: &str, id: &str) -> R<Option<NamespaceInfo>> {
        let row = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::workspace_id.eq(workspace_id))
            .filter(ratelimit_namespaces::id.eq(id))
            .select(namespace_columns!())
            .get_result::<(String, String, String, i64)>(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(namespace_info))
    }

    fn namespace_algorithm(&mut self, namespace_id: &str) -> R<String> {
        let found: Option<String> = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::id.eq(namespace_id))
            .select(ratelimit_namespaces::algorithm)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(found.unwrap_or_else(|| "fixed".into()))
    }

    fn set_namespace_algorithm(&mut self, namespace_id: &str, algorithm: &str) -> R<()> {
        diesel::update(ratelimit_namespaces::table.filter(ratelimit_namespaces::id.eq(namespace_id)))
            .set(ratelimit_namespaces::algorithm.eq(algorithm))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(())
    }

    fn lock_namespace(&mut self, namespace_id: &str) -> R<()> {
        let query = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::id.eq(namespace_id))
            .select(ratelimit_namespaces::id);
        lock_first!(self.conn, query)?;
        Ok(())
    }

    fn overrides(&mut self, namespace_id: &str) -> R<Vec<Override>> {
        let rows: Vec<OverrideRow> = ratelimit_overrides::table
            .filter(ratelimit_overrides::namespace_id.eq(namespace_id))
            .select(override_columns!())
            .order(ratelimit_overrides::seq.asc())
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(override_of).collect())
    }

    fn overrides_page(&mut self, namespace_id: &str, after: Option<&str>, limit: usize) -> R<Vec<Override>> {
        use diesel::dsl::sql;
        use diesel::sql_types::{Bool, Text};
        macro_rules! page {
            ($db:ty, $ks:expr, $c:expr) => {{
                let ks: &Keyset = &$ks;
                let mut q = ratelimit_overrides::table
                    .filter(ratelimit_overrides::namespace_id.eq(namespace_id))
                    .into_boxed::<$db>();
                if let Some(after) = after {
                    let cmp = format!("{} > ", ks.col("identifier"));
                    q = q.filter(sql::<Bool>(&cmp).bind::<Text, _>(after.to_string()));
                }
                q.order(sql::<Text>(&ks.col("identifier")))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .select(override_columns!())
                    .load::<OverrideRow>($c)
            }};
        }
        let rows = on_each_keyset!(self.conn, page).map_err(db_err)?;
        Ok(rows.into_iter().map(override_of).collect())
    }

    fn upsert_override(&mut self, workspace_id: &str, o: &Override, now: i64) -> R<Override> {
        // Callers hold the namespace's lock: the read-then-write below does not race.
        let existing = ratelimit_overrides::table
            .filter(ratelimit_overrides::namespace_id.eq(&o.namespace_id))
            .filter(ratelimit_overrides::identifier.eq(&o.identifier))
            .select((ratelimit_overrides::id, ratelimit_overrides::seq))
            .first::<(String, i64)>(self.conn)
            .optional()
            .map_err(db_err)?;
        let (limit, duration) = (o.limit as i64, o.duration as i64);
        if let Some((id, seq)) = existing {
            diesel::update(ratelimit_overrides::table.filter(ratelimit_overrides::id.eq(&id)))
                .set((
                    ratelimit_overrides::max_tokens.eq(limit),
                    ratelimit_overrides::duration.eq(duration),
                    ratelimit_overrides::is_async.eq(o.is_async),
                ))
                .execute(self.conn)
                .map_err(db_err)?;
            return Ok(Override { id, seq, ..o.clone() });
        }
        let last: Option<i64> = ratelimit_overrides::table
            .filter(ratelimit_overrides::namespace_id.eq(&o.namespace_id))
            .select(diesel::dsl::max(ratelimit_overrides::seq))
            .first(self.conn)
            .map_err(db_err)?;
        let seq = last.unwrap_or(0) + 1;
        diesel::insert_into(ratelimit_overrides::table)
            .values((
                ratelimit_overrides::id.eq(&o.id),
                ratelimit_overrides::workspace_id.eq(workspace_id),
                ratelimit_overrides::namespace_id.eq(&o.namespace_id),
                ratelimit_overrides::identifier.eq(&o.identifier),
                ratelimit_overrides::max_tokens.eq(limit),
                ratelimit_overrides::duration.eq(duration),
                ratelimit_overrides::is_async.eq(o.is_async),
                ratelimit_overrides::seq.eq(seq),
                ratelimit_overrides::created_at.eq(now),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(Override { seq, ..o.clone() })
    }

    fn delete_override(&mut self, namespace_id: &str, identifier: &str) -> R<Option<String>> {
        let id: Option<String> = ratelimit_overrides::table
            .filter(ratelimit_overrides::namespace_id.eq(namespace_id))
            .filter(ratelimit_overrides::identifier.eq(identifier))
            .select(ratelimit_overrides::id)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        if let Some(id) = &id {
            diesel::delete(ratelimit_overrides::table.filter(ratelimit_overrides::id.eq(id)))
                .execute(self.conn)
                .map_err(db_err)?;
        }
        Ok(id)
    }

    fn insert_namespace_if_absent(
        &mut self,
        workspace_id: &str,
        ns: &Named,
        algorithm: &str,
        now: i64,
    ) -> R<(Named, bool)> {
        if let Some(existing) = self.namespace_by_name(workspace_id, &ns.name)? {
            return Ok((existing, false));
        }
        let created = self.insert_in_savepoint(|c| {
            diesel::insert_into(ratelimit_namespaces::table)
                .values((
                    ratelimit_namespaces::id.eq(&ns.id),
                    ratelimit_namespaces::workspace_id.eq(workspace_id),
                    ratelimit_namespaces::name.eq(&ns.name),
                    ratelimit_namespaces::created_at.eq(now),
                    ratelimit_namespaces::algorithm.eq(algorithm),
                ))
                .execute(c)
        })?;
        if created {
            return Ok((ns.clone(), true));
        }
        let existing = self.namespace_by_name(workspace_id, &ns.name)?.ok_or_else(|| {
            StorageError::Internal(format!("namespace {} vanished after a conflict", ns.name))
        })?;
        Ok((existing, false))
    }
}

/// An override's row: the columns of [`OVERRIDE_COLUMNS`].
type OverrideRow = (String, String, String, i64, i64, bool, i64);

/// The columns an [`Override`] is read from, in [`OverrideRow`]'s order.
macro_rules! override_columns {
    () => {
        (
            ratelimit_overrides::id,
            ratelimit_overrides::namespace_id,
            ratelimit_overrides::identifier,
            ratelimit_overrides::max_tokens,
            ratelimit_overrides::duration,
            ratelimit_overrides::is_async,
            ratelimit_overrides::seq,
        )
    };
}
use override_columns;

fn override_of((id, namespace_id, identifier, limit, duration, is_async, seq): OverrideRow) -> Override {
    Override {
        id,
        namespace_id,
        identifier,
        limit: limit.max(0) as u64,
        duration: duration.max(0) as u64,
        is_async,
        seq,
    }
}
