//! The audit log read back: a workspace's events a page at a time, and retention.

use crate::{AuditFilter, AuditRecord, Page, Principal, RbacError, RbacService, RbacStore};
use keygate_domain::{IdPrefix, MAX_NAME_CHARS, ValidationError, check_len, has_prefix};

/// The root-key permission that reads a workspace's audit log.
pub const PERM_READ_AUDIT: &str = "audit.*.read";
/// The most events one page holds.
pub const MAX_AUDIT_PAGE: usize = 100;

impl<S: RbacStore> RbacService<S> {
    /// `audit.listEvents`: the caller's workspace's events that match `filter`, newest
    /// first, a page at a time; needs `audit.*.read`.
    pub fn list_audit_events(
        &self,
        p: &Principal,
        filter: &AuditFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<AuditRecord>, RbacError> {
        if !p.holds(PERM_READ_AUDIT) {
            return Err(RbacError::missing(&[PERM_READ_AUDIT]));
        }
        self.audit_page(&p.workspace_id, filter, cursor, limit)
    }

    /// [`Self::list_audit_events`] for the admin CLI: any workspace, by id or name.
    pub fn list_audit_events_admin(
        &self,
        workspace: &str,
        filter: &AuditFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<AuditRecord>, RbacError> {
        let ws = self.find_workspace(workspace)?;
        self.audit_page(&ws.id, filter, cursor, limit)
    }

    fn audit_page(
        &self,
        ws: &str,
        filter: &AuditFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<AuditRecord>, RbacError> {
        if limit == 0 || limit > MAX_AUDIT_PAGE {
            return Err(ValidationError::new("limit", format!("must be 1 to {MAX_AUDIT_PAGE}")).into());
        }
        for (field, value) in
            [("event", &filter.action), ("actor", &filter.actor_id), ("resourceId", &filter.resource_id)]
        {
            if let Some(v) = value {
                check_len(field, v, MAX_NAME_CHARS)?;
            }
        }
        let after = cursor.map(parse_audit_cursor).transpose()?;
        let after_ref = after.as_ref().map(|(at, id)| (*at, id.as_str()));
        // One more than asked tells whether another page follows.
        let mut items =
            self.store.read(|tx| Ok(tx.list_audit_events(ws, filter, after_ref, limit + 1)?))?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next = if more { items.last().map(|e| format!("{}:{}", e.at, e.id)) } else { None };
        Ok(Page { items, next })
    }

    /// Retention: deletes at most `max` events older than `before` (Unix ms), of every
    /// workspace, oldest first; returns how many. Bounded work per call: the server's
    /// background pass calls it on a timer.
    pub fn prune_audit_events(&self, before: i64, max: usize) -> Result<usize, RbacError> {
        self.store.transaction(|tx| Ok(tx.delete_audit_events_before(before, max)?))
    }
}

/// `<at>:<id>`, the time and id of the last event of a page.
fn parse_audit_cursor(cursor: &str) -> Result<(i64, String), RbacError> {
    let bad = || ValidationError::new("cursor", "is not a cursor this API gave").into();
    let (at, id) = cursor.split_once(':').ok_or_else(bad)?;
    let at: i64 = at.parse().map_err(|_| bad())?;
    if !has_prefix(id, IdPrefix::AuditEvent) {
        return Err(bad());
    }
    Ok((at, id.to_string()))
}
