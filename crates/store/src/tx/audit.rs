//! The audit log.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{BATCH_ROWS, DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_domain::{IdPrefix, new_id};
use keygate_rbac::store::AuditTx;
use keygate_rbac::{AuditEvent, AuditFilter, AuditRecord};

impl AuditTx for DieselTx<'_> {
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
                        audit_events::detail.eq(&e.detail),
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(audit_events::table).values(&rows).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }

    fn list_audit_events(
        &mut self,
        workspace_id: &str,
        filter: &AuditFilter,
        after: Option<(i64, &str)>,
        limit: usize,
    ) -> R<Vec<AuditRecord>> {
        macro_rules! query {
            ($db:ty) => {{
                let mut q = audit_events::table
                    .filter(audit_events::workspace_id.eq(workspace_id))
                    .into_boxed::<$db>();
                if let Some(a) = &filter.action {
                    q = q.filter(audit_events::action.eq(a));
                }
                if let Some(a) = &filter.actor_id {
                    q = q.filter(audit_events::actor_id.eq(a));
                }
                if let Some(r) = &filter.resource_id {
                    q = q.filter(audit_events::resource_id.eq(r));
                }
                if let Some(since) = filter.since {
                    q = q.filter(audit_events::created_at.ge(since));
                }
                if let Some(until) = filter.until {
                    q = q.filter(audit_events::created_at.lt(until));
                }
                if let Some((at, id)) = after {
                    q = q.filter(
                        audit_events::created_at
                            .lt(at)
                            .or(audit_events::created_at.eq(at).and(audit_events::id.lt(id.to_string()))),
                    );
                }
                q.order((audit_events::created_at.desc(), audit_events::id.desc()))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .select((
                        audit_events::id,
                        audit_events::workspace_id,
                        audit_events::actor_id,
                        audit_events::action,
                        audit_events::resource_type,
                        audit_events::resource_id,
                        audit_events::key_id,
                        audit_events::role_id,
                        audit_events::created_at,
                        audit_events::detail,
                    ))
            }};
        }
        let rows: Vec<AuditRow> = match &mut *self.conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => query!(diesel::pg::Pg).load(c),
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => query!(diesel::sqlite::Sqlite).load(c),
        }
        .map_err(db_err)?;
        Ok(rows.into_iter().map(audit_record).collect())
    }

    fn delete_audit_events_before(&mut self, before: i64, max: usize) -> R<usize> {
        let oldest: Vec<String> = audit_events::table
            .filter(audit_events::created_at.lt(before))
            .order(audit_events::created_at.asc())
            .limit(i64::try_from(max).unwrap_or(i64::MAX))
            .select(audit_events::id)
            .load(self.conn)
            .map_err(db_err)?;
        let mut deleted = 0;
        for chunk in oldest.chunks(BATCH_ROWS) {
            deleted += diesel::delete(audit_events::table.filter(audit_events::id.eq_any(chunk)))
                .execute(self.conn)
                .map_err(db_err)?;
        }
        Ok(deleted)
    }
}

type AuditRow =
    (String, String, String, String, String, String, Option<String>, Option<String>, i64, Option<String>);

fn audit_record(r: AuditRow) -> AuditRecord {
    let (id, workspace_id, actor_id, action, resource_type, resource_id, key_id, role_id, at, detail) = r;
    AuditRecord {
        id,
        workspace_id,
        actor_id,
        action,
        resource_type,
        resource_id,
        key_id,
        role_id,
        at,
        detail,
    }
}
