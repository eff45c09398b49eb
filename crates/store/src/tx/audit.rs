//! The audit log.

use super::*;

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
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(audit_events::table).values(&rows).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }
}
