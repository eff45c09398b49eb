use crate::pool::DbConn;
use crate::schema::*;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use keygate_domain::{IdPrefix, Named, new_id};
use keygate_rbac::{AuditEvent, Entity, EntityKind, Key, Override, RbacTx, RootKey, StorageError, Workspace};
use std::collections::{HashMap, HashSet};

/// Maps a diesel error onto the service's storage error (the one place that does).
pub(crate) fn db_err(e: DieselError) -> StorageError {
    match &e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
            StorageError::Conflict(info.message().to_string())
        }
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        )
        | DieselError::BrokenTransactionManager => StorageError::Unavailable(e.to_string()),
        DieselError::DatabaseError(_, info)
            if {
                let m = info.message();
                m.contains("database is locked")
                    || m.contains("statement timeout")
                    || m.contains("canceling statement")
                    || m.contains("terminating connection")
                    || m.contains("server closed the connection")
                    || m.contains("deadlock detected")
                    || m.contains("could not connect")
                    || m.contains("Connection refused")
            } =>
        {
            StorageError::Unavailable(e.to_string())
        }
        _ => StorageError::Internal(e.to_string()),
    }
}

type R<T> = Result<T, StorageError>;

/// Rows per multi-row insert: 1,000 rows of at most 8 columns stay well under SQLite's
/// (32,766) and PostgreSQL's (65,535) bind-parameter limits.
const BATCH_ROWS: usize = 1_000;

/// Runs `$body` with `$c` bound to the inner connection of either backend. For the few
/// statements diesel cannot build for the `MultiConnection` enum (multi-row inserts,
/// `ON CONFLICT`, `RETURNING`): the same code is compiled once per backend.
macro_rules! on_each_backend {
    ($conn:expr, $c:ident => $body:expr) => {
        match &mut *$conn {
            DbConn::Pg($c) => $body,
            DbConn::Sqlite($c) => $body,
        }
    };
}

/// [`RbacTx`] over one diesel connection (inside a transaction when the store began one).
pub(crate) struct DieselTx<'c> {
    conn: &'c mut DbConn,
}

impl<'c> DieselTx<'c> {
    pub(crate) fn new(conn: &'c mut DbConn) -> Self {
        Self { conn }
    }
}

/// Runs `$body` with `$ent` bound to the entity table module of `$kind`, `$link` to its
/// key-link table module and `$link_col` to the link table's entity column.
macro_rules! by_kind {
    ($kind:expr, $ent:ident, $link:ident, $link_col:ident, $body:block) => {
        match $kind {
            EntityKind::Permission => {
                #[allow(unused_imports)]
                use keys_permissions as $link;
                #[allow(unused_imports)]
                use keys_permissions::permission_id as $link_col;
                #[allow(unused_imports)]
                use permissions as $ent;
                $body
            }
            EntityKind::Role => {
                #[allow(unused_imports)]
                use keys_roles as $link;
                #[allow(unused_imports)]
                use keys_roles::role_id as $link_col;
                #[allow(unused_imports)]
                use roles as $ent;
                $body
            }
        }
    };
}

/// The first id a one-column select finds, locking its row until the transaction ends:
/// `FOR NO KEY UPDATE` on PostgreSQL (a row lock without a new row version, so the FK checks
/// of link rows inserted next do not lock a tuple this transaction wrote); on SQLite the
/// transaction began with BEGIN IMMEDIATE and already holds the write lock.
macro_rules! lock_first {
    ($conn:expr, $query:expr) => {
        match &mut *$conn {
            DbConn::Pg(c) => $query.for_no_key_update().first::<String>(c).optional(),
            DbConn::Sqlite(c) => $query.first::<String>(c).optional(),
        }
        .map_err(db_err)
    };
}

fn entity((id, name, description): (String, String, Option<String>)) -> Entity {
    Entity { id, name, description }
}

fn named((id, name): (String, String)) -> Named {
    Named { id, name }
}

type KeyRow =
    (String, String, String, Option<String>, Option<String>, bool, Option<i64>, i64, Option<String>);

/// The columns of a [`Key`], in [`KeyRow`] order.
const KEY_COLUMNS: (
    keys::id,
    keys::workspace_id,
    keys::prefix,
    keys::name,
    keys::meta,
    keys::enabled,
    keys::expires,
    keys::created_at,
    keys::api_id,
) = (
    keys::id,
    keys::workspace_id,
    keys::prefix,
    keys::name,
    keys::meta,
    keys::enabled,
    keys::expires,
    keys::created_at,
    keys::api_id,
);

fn key_from_row((id, workspace_id, start, name, meta, enabled, expires, created_at, api_id): KeyRow) -> Key {
    Key { id, workspace_id, api_id, start, name, meta, enabled, expires, created_at }
}

type RootKeyRow = (String, String, String, String, i64, Option<i64>);

fn root_key(row: RootKeyRow) -> R<RootKey> {
    let (id, workspace_id, prefix, permissions, created_at, expires_at) = row;
    let permissions: Vec<String> = serde_json::from_str(&permissions)
        .map_err(|e| StorageError::Internal(format!("root key {id}: bad permissions column: {e}")))?;
    Ok(RootKey { id, workspace_id, prefix, permissions, created_at, expires_at })
}

const ROOT_KEY_COLUMNS: (
    root_keys::id,
    root_keys::workspace_id,
    root_keys::prefix,
    root_keys::permissions,
    root_keys::created_at,
    root_keys::expires_at,
) = (
    root_keys::id,
    root_keys::workspace_id,
    root_keys::prefix,
    root_keys::permissions,
    root_keys::created_at,
    root_keys::expires_at,
);

/// The column an entity lookup matches on.
#[derive(Debug, Clone, Copy)]
enum Column {
    Id,
    Name,
}

impl DieselTx<'_> {
    /// The entities of a workspace whose id (or name) is one of `values`.
    fn entities_matching(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        by: Column,
        values: &[String],
    ) -> R<Vec<Named>> {
        // On PostgreSQL the rows found are locked FOR KEY SHARE until the transaction ends:
        // a concurrent delete of a permission or role this call is about to link waits for
        // it (and then takes the new links with it) instead of making the link insert fail
        // its foreign key. SQLite transactions are serialized already.
        by_kind!(kind, ent, link, link_col, {
            let in_ws = ent::table.filter(ent::workspace_id.eq(workspace_id)).select((ent::id, ent::name));
            let rows: Vec<(String, String)> = match (&mut *self.conn, by) {
                (DbConn::Pg(c), Column::Id) => in_ws.filter(ent::id.eq_any(values)).for_key_share().load(c),
                (DbConn::Pg(c), Column::Name) => {
                    in_ws.filter(ent::name.eq_any(values)).for_key_share().load(c)
                }
                (DbConn::Sqlite(c), Column::Id) => in_ws.filter(ent::id.eq_any(values)).load(c),
                (DbConn::Sqlite(c), Column::Name) => in_ws.filter(ent::name.eq_any(values)).load(c),
            }
            .map_err(db_err)?;
            Ok(rows.into_iter().map(named).collect())
        })
    }

    /// Inserts inside a savepoint; a unique violation rolls back only the savepoint, so
    /// the enclosing transaction stays usable (PostgreSQL aborts it otherwise).
    fn insert_in_savepoint(&mut self, insert: impl FnOnce(&mut DbConn) -> QueryResult<usize>) -> R<bool> {
        match self.conn.transaction(insert) {
            Ok(_) => Ok(true),
            Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
            Err(e) => Err(db_err(e)),
        }
    }
}

impl RbacTx for DieselTx<'_> {
    fn count_workspaces(&mut self) -> R<i64> {
        workspaces::table.count().get_result(self.conn).map_err(db_err)
    }

    fn insert_workspace(&mut self, ws: &Workspace) -> R<()> {
        diesel::insert_into(workspaces::table)
            .values((
                workspaces::id.eq(&ws.id),
                workspaces::name.eq(&ws.name),
                workspaces::created_at.eq(ws.created_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn find_workspace(&mut self, id_or_name: &str) -> R<Option<Workspace>> {
        let found: Option<(String, String, i64)> = workspaces::table
            .filter(workspaces::id.eq(id_or_name).or(workspaces::name.eq(id_or_name)))
            .order(workspaces::created_at)
            .select((workspaces::id, workspaces::name, workspaces::created_at))
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(found.map(|(id, name, created_at)| Workspace { id, name, created_at }))
    }

    fn list_workspaces(&mut self) -> R<Vec<Workspace>> {
        let rows: Vec<(String, String, i64)> = workspaces::table
            .order((workspaces::created_at, workspaces::id))
            .select((workspaces::id, workspaces::name, workspaces::created_at))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(|(id, name, created_at)| Workspace { id, name, created_at }).collect())
    }

    fn insert_root_key(&mut self, key: &RootKey, hash: &str) -> R<()> {
        let permissions =
            serde_json::to_string(&key.permissions).map_err(|e| StorageError::Internal(e.to_string()))?;
        diesel::insert_into(root_keys::table)
            .values((
                root_keys::id.eq(&key.id),
                root_keys::workspace_id.eq(&key.workspace_id),
                root_keys::hash.eq(hash),
                root_keys::prefix.eq(&key.prefix),
                root_keys::permissions.eq(permissions),
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
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        row.map(root_key).transpose()
    }

    fn list_root_keys(&mut self, workspace_id: &str) -> R<Vec<RootKey>> {
        let rows: Vec<RootKeyRow> = root_keys::table
            .filter(root_keys::workspace_id.eq(workspace_id))
            .filter(root_keys::revoked_at.is_null())
            .order((root_keys::created_at, root_keys::id))
            .select(ROOT_KEY_COLUMNS)
            .load(self.conn)
            .map_err(db_err)?;
        rows.into_iter().map(root_key).collect()
    }

    fn revoke_root_key(&mut self, id: &str, now: i64) -> R<bool> {
        diesel::update(root_keys::table.filter(root_keys::id.eq(id)).filter(root_keys::revoked_at.is_null()))
            .set(root_keys::revoked_at.eq(now))
            .execute(self.conn)
            .map(|n| n > 0)
            .map_err(db_err)
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
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn get_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::id.eq(key_id))
            .filter(keys::workspace_id.eq(workspace_id))
            .select(KEY_COLUMNS)
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn find_key(&mut self, key_id: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::id.eq(key_id))
            .select(KEY_COLUMNS)
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn list_keys(&mut self, workspace_id: &str) -> R<Vec<Key>> {
        let rows: Vec<KeyRow> = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .order((keys::created_at, keys::id))
            .select(KEY_COLUMNS)
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(key_from_row).collect())
    }

    fn insert_entity(&mut self, kind: EntityKind, workspace_id: &str, e: &Entity, now: i64) -> R<bool> {
        by_kind!(kind, ent, link, link_col, {
            let row = (
                ent::id.eq(&e.id),
                ent::workspace_id.eq(workspace_id),
                ent::name.eq(&e.name),
                ent::description.eq(&e.description),
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
            let row: Option<(String, String, Option<String>)> = ent::table
                .filter(ent::id.eq(id))
                .filter(ent::workspace_id.eq(workspace_id))
                .select((ent::id, ent::name, ent::description))
                .first(self.conn)
                .optional()
                .map_err(db_err)?;
            Ok(row.map(entity))
        })
    }

    fn list_entities(&mut self, kind: EntityKind, workspace_id: &str) -> R<Vec<Entity>> {
        by_kind!(kind, ent, link, link_col, {
            let rows: Vec<(String, String, Option<String>)> = ent::table
                .filter(ent::workspace_id.eq(workspace_id))
                .select((ent::id, ent::name, ent::description))
                .load(self.conn)
                .map_err(db_err)?;
            Ok(rows.into_iter().map(entity).collect())
        })
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
        let rows: Vec<(String, String, Option<String>)> = roles_permissions::table
            .inner_join(permissions::table)
            .filter(roles_permissions::role_id.eq(role_id))
            .select((permissions::id, permissions::name, permissions::description))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(entity).collect())
    }

    fn key_by_hash(&mut self, hash: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::hash.eq(hash))
            .select(KEY_COLUMNS)
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn role_permissions(&mut self, role_ids: &[String]) -> R<Vec<Named>> {
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

    fn delete_key(&mut self, workspace_id: &str, key_id: &str) -> R<bool> {
        // Link rows go by ON DELETE CASCADE.
        diesel::delete(keys::table.filter(keys::id.eq(key_id)).filter(keys::workspace_id.eq(workspace_id)))
            .execute(self.conn)
            .map(|n| n > 0)
            .map_err(db_err)
    }

    fn lock_key(&mut self, workspace_id: &str, key_id: &str, _now: i64) -> R<bool> {
        let query = keys::table
            .filter(keys::id.eq(key_id))
            .filter(keys::workspace_id.eq(workspace_id))
            .select(keys::id);
        Ok(lock_first!(self.conn, query)?.is_some())
    }

    fn entities_by_ids(&mut self, kind: EntityKind, workspace_id: &str, ids: &[String]) -> R<Vec<Named>> {
        self.entities_matching(kind, workspace_id, Column::Id, ids)
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

    fn key_entities(&mut self, kind: EntityKind, key_id: &str) -> R<Vec<Named>> {
        by_kind!(kind, ent, link, link_col, {
            let rows: Vec<(String, String)> = link::table
                .inner_join(ent::table)
                .filter(link::key_id.eq(key_id))
                .select((ent::id, ent::name))
                .load(self.conn)
                .map_err(db_err)?;
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

    fn unlink_key_entities(&mut self, kind: EntityKind, key_id: &str, ids: &[String]) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            diesel::delete(link::table.filter(link::key_id.eq(key_id)).filter(link_col.eq_any(ids)))
                .execute(self.conn)
                .map(drop)
                .map_err(db_err)
        })
    }

    fn namespace_by_name(&mut self, workspace_id: &str, name: &str) -> R<Option<Named>> {
        let row: Option<(String, String)> = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::workspace_id.eq(workspace_id))
            .filter(ratelimit_namespaces::name.eq(name))
            .select((ratelimit_namespaces::id, ratelimit_namespaces::name))
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(named))
    }

    fn namespace_by_id(&mut self, workspace_id: &str, id: &str) -> R<Option<Named>> {
        let row: Option<(String, String)> = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::workspace_id.eq(workspace_id))
            .filter(ratelimit_namespaces::id.eq(id))
            .select((ratelimit_namespaces::id, ratelimit_namespaces::name))
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(named))
    }

    fn lock_namespace(&mut self, namespace_id: &str) -> R<()> {
        let query = ratelimit_namespaces::table
            .filter(ratelimit_namespaces::id.eq(namespace_id))
            .select(ratelimit_namespaces::id);
        lock_first!(self.conn, query)?;
        Ok(())
    }

    fn overrides(&mut self, namespace_id: &str) -> R<Vec<Override>> {
        type Row = (String, String, String, i64, i64, bool, i64);
        let rows: Vec<Row> = ratelimit_overrides::table
            .filter(ratelimit_overrides::namespace_id.eq(namespace_id))
            .select((
                ratelimit_overrides::id,
                ratelimit_overrides::namespace_id,
                ratelimit_overrides::identifier,
                ratelimit_overrides::max_tokens,
                ratelimit_overrides::duration,
                ratelimit_overrides::is_async,
                ratelimit_overrides::seq,
            ))
            .order(ratelimit_overrides::seq.asc())
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .map(|(id, namespace_id, identifier, limit, duration, is_async, seq)| Override {
                id,
                namespace_id,
                identifier,
                limit: limit.max(0) as u64,
                duration: duration.max(0) as u64,
                is_async,
                seq,
            })
            .collect())
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
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        if let Some(id) = &id {
            diesel::delete(ratelimit_overrides::table.filter(ratelimit_overrides::id.eq(id)))
                .execute(self.conn)
                .map_err(db_err)?;
        }
        Ok(id)
    }

    fn insert_namespace_if_absent(&mut self, workspace_id: &str, ns: &Named, now: i64) -> R<(Named, bool)> {
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

    fn insert_audit_events(&mut self, events: &[AuditEvent]) -> R<()> {
        for chunk in events.chunks(BATCH_ROWS) {
            let rows: Vec<_> = chunk
                .iter()
                .map(|e| {
                    (
                        audit_events::id.eq(new_id(IdPrefix::AuditEvent)),
                        audit_events::workspace_id.eq(&e.workspace_id),
                        audit_events::actor_id.eq(&e.actor_id),
                        audit_events::action.eq(e.action),
                        audit_events::resource_type.eq(e.resource_type),
                        audit_events::resource_id.eq(&e.resource_id),
                        audit_events::key_id.eq(&e.key_id),
                        audit_events::role_id.eq(&e.role_id),
                        audit_events::created_at.eq(e.at),
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(audit_events::table).values(&rows).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }
}
