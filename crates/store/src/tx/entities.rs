//! Permissions and roles, and the permissions of a role.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{
    BATCH_ROWS, Column, DieselTx, EntityRow, Keyset, R, contains_pattern, db_err, entity, named,
};
use diesel::prelude::*;
use keygate_domain::Named;
use keygate_rbac::store::EntityTx;
use keygate_rbac::{Entity, EntityKind, StorageError};
use std::collections::{HashMap, HashSet};

impl EntityTx for DieselTx<'_> {
    fn insert_entity(&mut self, kind: EntityKind, workspace_id: &str, e: &Entity, now: i64) -> R<bool> {
        by_kind!(kind, ent, link, link_col, {
            let row = (
                ent::id.eq(&e.id),
                ent::workspace_id.eq(workspace_id),
                ent::name.eq(&e.name),
                ent::description.eq(&e.description),
                ent::title.eq(&e.title),
                ent::created_at.eq(now),
            );
            // A taken name (even by a concurrent transaction, after it commits) inserts nothing.
            on_each_backend!(self.conn, c => {
                diesel::insert_into(ent::table).values(&row).on_conflict_do_nothing().execute(c)
            })
            .map(|n| n > 0)
            .map_err(db_err)
        })
    }

    fn get_entity(&mut self, kind: EntityKind, workspace_id: &str, id: &str) -> R<Option<Entity>> {
        by_kind!(kind, ent, link, link_col, {
            let row: Option<EntityRow> = ent::table
                .filter(ent::id.eq(id))
                .filter(ent::workspace_id.eq(workspace_id))
                .select((ent::id, ent::name, ent::description, ent::title))
                .get_result(self.conn)
                .optional()
                .map_err(db_err)?;
            Ok(row.map(entity))
        })
    }

    fn list_entities(&mut self, kind: EntityKind, workspace_id: &str) -> R<Vec<Entity>> {
        by_kind!(kind, ent, link, link_col, {
            let rows: Vec<EntityRow> = ent::table
                .filter(ent::workspace_id.eq(workspace_id))
                .select((ent::id, ent::name, ent::description, ent::title))
                .load(self.conn)
                .map_err(db_err)?;
            Ok(rows.into_iter().map(entity).collect())
        })
    }

    fn entities_page(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Entity>> {
        use diesel::dsl::sql;
        use diesel::sql_types::{Bool, Text};
        macro_rules! page {
            ($db:ty, $ks:expr, $c:expr) => {{
                let ks: &Keyset = &$ks;
                by_kind!(kind, ent, link, link_col, {
                    let mut q = ent::table.filter(ent::workspace_id.eq(workspace_id)).into_boxed::<$db>();
                    if let Some(after) = after {
                        let cmp = format!("{} > ", ks.col("name"));
                        q = q.filter(sql::<Bool>(&cmp).bind::<Text, _>(after.to_string()));
                    }
                    if let Some(search) = search {
                        let p = contains_pattern(search);
                        let like = |c: &str| format!("{} LIKE ", ks.lower(c));
                        let or = |c: &str| format!(" ESCAPE '\\' OR {}", like(c));
                        let cond = sql::<Bool>(&format!("({}", like("id")))
                            .bind::<Text, _>(p.clone())
                            .sql(&or("name"))
                            .bind::<Text, _>(p.clone())
                            .sql(&or("COALESCE(title, '')"))
                            .bind::<Text, _>(p.clone())
                            .sql(&or("COALESCE(description, '')"))
                            .bind::<Text, _>(p)
                            .sql(" ESCAPE '\\')");
                        q = q.filter(cond);
                    }
                    q.order(sql::<Text>(&ks.col("name")))
                        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                        .select((ent::id, ent::name, ent::description, ent::title))
                        .load::<EntityRow>($c)
                })
            }};
        }
        let rows = on_each_keyset!(self.conn, page).map_err(db_err)?;
        Ok(rows.into_iter().map(entity).collect())
    }

    fn delete_entity(&mut self, kind: EntityKind, workspace_id: &str, id: &str) -> R<bool> {
        // Links to keys and roles go by ON DELETE CASCADE.
        by_kind!(kind, ent, link, link_col, {
            diesel::delete(ent::table.filter(ent::id.eq(id)).filter(ent::workspace_id.eq(workspace_id)))
                .execute(self.conn)
                .map(|n| n > 0)
                .map_err(db_err)
        })
    }

    fn lock_role(&mut self, workspace_id: &str, role_id: &str) -> R<bool> {
        let query = roles::table
            .filter(roles::id.eq(role_id))
            .filter(roles::workspace_id.eq(workspace_id))
            .select(roles::id);
        Ok(lock_first!(self.conn, query)?.is_some())
    }

    fn link_role_permissions(
        &mut self,
        workspace_id: &str,
        role_id: &str,
        ids: &[String],
        now: i64,
    ) -> R<()> {
        for chunk in ids.chunks(BATCH_ROWS) {
            let rows: Vec<_> = chunk
                .iter()
                .map(|id| {
                    (
                        roles_permissions::role_id.eq(role_id),
                        roles_permissions::permission_id.eq(id),
                        roles_permissions::workspace_id.eq(workspace_id),
                        roles_permissions::created_at.eq(now),
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(roles_permissions::table).values(&rows).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }

    fn unlink_role_permissions(&mut self, role_id: &str, ids: &[String]) -> R<()> {
        diesel::delete(
            roles_permissions::table
                .filter(roles_permissions::role_id.eq(role_id))
                .filter(roles_permissions::permission_id.eq_any(ids)),
        )
        .execute(self.conn)
        .map(drop)
        .map_err(db_err)
    }

    fn permissions_of_role(&mut self, role_id: &str) -> R<Vec<Entity>> {
        let rows: Vec<EntityRow> = roles_permissions::table
            .inner_join(permissions::table)
            .filter(roles_permissions::role_id.eq(role_id))
            .select((permissions::id, permissions::name, permissions::description, permissions::title))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(entity).collect())
    }

    fn permission_names_of_roles(&mut self, role_ids: &[String]) -> R<Vec<Named>> {
        let mut out = Vec::new();
        for chunk in role_ids.chunks(BATCH_ROWS) {
            let rows: Vec<(String, String)> = roles_permissions::table
                .inner_join(permissions::table)
                .filter(roles_permissions::role_id.eq_any(chunk))
                .select((permissions::id, permissions::name))
                .distinct()
                .load(self.conn)
                .map_err(db_err)?;
            out.extend(rows.into_iter().map(named));
        }
        Ok(out)
    }

    fn entities_by_ids(&mut self, kind: EntityKind, workspace_id: &str, ids: &[String]) -> R<Vec<Named>> {
        self.entities_matching(kind, workspace_id, Column::Id, ids)
    }

    fn entities_in_detail(&mut self, kind: EntityKind, workspace_id: &str, ids: &[String]) -> R<Vec<Entity>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(BATCH_ROWS) {
            by_kind!(kind, ent, link, link_col, {
                let rows: Vec<EntityRow> = ent::table
                    .filter(ent::workspace_id.eq(workspace_id))
                    .filter(ent::id.eq_any(chunk))
                    .select((ent::id, ent::name, ent::description, ent::title))
                    .load(self.conn)
                    .map_err(db_err)?;
                out.extend(rows.into_iter().map(entity));
            });
        }
        Ok(out)
    }

    fn entities_by_names(&mut self, kind: EntityKind, workspace_id: &str, names: &[String]) -> R<Vec<Named>> {
        self.entities_matching(kind, workspace_id, Column::Name, names)
    }

    fn insert_entities_if_absent(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        entities: &[Named],
        now: i64,
    ) -> R<Vec<(Named, bool)>> {
        let mut created: HashSet<String> = HashSet::new();
        by_kind!(kind, ent, link, link_col, {
            for chunk in entities.chunks(BATCH_ROWS) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|e| {
                        (
                            ent::id.eq(&e.id),
                            ent::workspace_id.eq(workspace_id),
                            ent::name.eq(&e.name),
                            ent::created_at.eq(now),
                        )
                    })
                    .collect();
                // A name created concurrently by another transaction is skipped here (after
                // waiting for that transaction) and picked up by the select below.
                let inserted: Vec<(String, String)> = on_each_backend!(self.conn, c => {
                    diesel::insert_into(ent::table)
                        .values(&rows)
                        .on_conflict_do_nothing()
                        .returning((ent::id, ent::name))
                        .get_results(c)
                })
                .map_err(db_err)?;
                created.extend(inserted.into_iter().map(|(_, name)| name));
            }
        });
        // Names another transaction created meanwhile were not returned: read those rows.
        let lost: Vec<String> =
            entities.iter().filter(|e| !created.contains(&e.name)).map(|e| e.name.clone()).collect();
        let mut existing: HashMap<String, Named> = if lost.is_empty() {
            HashMap::new()
        } else {
            self.entities_by_names(kind, workspace_id, &lost)?
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect()
        };
        entities
            .iter()
            .map(|e| {
                if created.contains(&e.name) {
                    Ok((e.clone(), true))
                } else {
                    existing.remove(&e.name).map(|found| (found, false)).ok_or_else(|| {
                        StorageError::Internal(format!("{} {} missing after insert", kind.noun(), e.name))
                    })
                }
            })
            .collect()
    }
}
