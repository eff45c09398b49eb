//! keygate's rate-limit namespace settings (API-v2.md §26): a namespace's algorithm
//! (`fixed`, `sliding`, `token_bucket`: `keygate_ratelimit::algorithm`), read by
//! `ratelimit.getNamespace` and `listNamespaces`, changed by `updateNamespace`.
//!
//! Built on `keygate-rbac`: the rows are rbac's store's (`NamespaceTx`), a namespace is
//! created on first use by rbac's resolution, and a change goes out as a change of the
//! namespace's overrides does (`RbacService::overrides_changed`): the algorithm is read
//! with the overrides, so the next decision on every instance uses the new one. Budgets
//! are identified with their algorithm, so a change starts every budget of the namespace
//! afresh at its next decision.

use keygate_domain::{AuditEvent, IdPrefix, NamespaceInfo, Page, has_prefix};
use keygate_ratelimit::Algorithm;
use keygate_rbac::store::RbacTx;
use keygate_rbac::{Principal, RbacError, RbacService, RbacStore, Resource};
use std::sync::Arc;

/// The permission that reads every namespace's settings (`ratelimit.<nsId>.read_namespace`
/// reads one).
pub const PERM_READ_NAMESPACE: &str = "ratelimit.*.read_namespace";
/// The permission that changes a namespace's settings.
pub const PERM_UPDATE_NAMESPACE: &str = "ratelimit.*.update_namespace";
/// The most namespaces one `listNamespaces` page holds.
pub const MAX_PAGE: usize = 100;

/// The namespaces' settings, over rbac's service and store.
#[derive(Debug)]
pub struct Namespaces<S> {
    rbac: Arc<RbacService<S>>,
}

impl<S: RbacStore> Namespaces<S> {
    pub fn new(rbac: Arc<RbacService<S>>) -> Self {
        Self { rbac }
    }

    /// `ratelimit.getNamespace`: the namespace named `namespace` (a name, else the `rlns_`
    /// id of one); 404 when there is none, 403 without `ratelimit.*.read_namespace` or
    /// `ratelimit.<nsId>.read_namespace`.
    pub fn get(&self, p: &Principal, namespace: &str) -> Result<NamespaceInfo, RbacError> {
        keygate_domain::validate_namespace_name("namespace", namespace)?;
        let any = may_read_some(p)?;
        let found = self.rbac.store().read(|tx| find(tx, &p.workspace_id, namespace))?;
        let found = found.ok_or_else(|| RbacError::not_found(Resource::Namespace, namespace))?;
        if !any && !p.holds(&read_one(&found.id)) {
            return Err(RbacError::missing(&[PERM_READ_NAMESPACE]));
        }
        Ok(found)
    }

    /// `ratelimit.listNamespaces`: a page of the workspace's namespaces by name (bytes
    /// ascending) after `cursor`; a root key that reads only some namespaces sees those.
    pub fn list(
        &self,
        p: &Principal,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<NamespaceInfo>, RbacError> {
        let any = may_read_some(p)?;
        let limit = limit.clamp(1, MAX_PAGE);
        let rows =
            self.rbac.store().read(|tx| Ok(tx.namespaces_page(&p.workspace_id, cursor, limit + 1)?))?;
        let mut page = Page::keyset(rows, limit, |n| n.name.as_str());
        if !any {
            page.items.retain(|n| p.holds(&read_one(&n.id)));
        }
        Ok(page)
    }

    /// The workspace's first 1,000 namespaces by name, for a root key that may read
    /// overrides in all of them (the dashboard's rate-limit page).
    pub fn list_all(&self, p: &Principal) -> Result<Vec<NamespaceInfo>, RbacError> {
        let read = "ratelimit.*.read_override";
        if !p.holds(read) {
            return Err(RbacError::missing(&[read]));
        }
        self.rbac.store().read(|tx| Ok(tx.namespaces_page(&p.workspace_id, None, 1_000)?))
    }

    /// `ratelimit.updateNamespace`: sets the namespace's algorithm (audited as
    /// `ratelimit_namespace.update`); every instance decides its next request under it,
    /// each budget starting afresh. Setting the algorithm it has changes nothing.
    pub fn update(
        &self,
        p: &Principal,
        namespace: &str,
        algorithm: &str,
    ) -> Result<NamespaceInfo, RbacError> {
        keygate_domain::validate_namespace_name("namespace", namespace)?;
        let algorithm = Algorithm::parse_field("algorithm", algorithm)?;
        if !p.holds(PERM_UPDATE_NAMESPACE) {
            return Err(RbacError::missing(&[PERM_UPDATE_NAMESPACE]));
        }
        let now = self.rbac.clock().now_ms() as i64;
        let (info, changed) = self.rbac.store().transaction(|tx| {
            let found = find(tx, &p.workspace_id, namespace)?
                .ok_or_else(|| RbacError::not_found(Resource::Namespace, namespace))?;
            if found.algorithm == algorithm.as_str() {
                return Ok((found, false));
            }
            tx.lock_namespace(&found.id)?;
            tx.set_namespace_algorithm(&found.id, algorithm.as_str())?;
            let event = AuditEvent::new(
                &p.workspace_id,
                &p.root_key_id,
                "ratelimit_namespace.update",
                "ratelimit_namespace",
                &found.id,
                now,
            );
            tx.insert_audit_events(&[event])?;
            Ok((NamespaceInfo { algorithm: algorithm.as_str().into(), ..found }, true))
        })?;
        if changed {
            self.rbac.overrides_changed(&info.id);
        }
        Ok(info)
    }
}

/// Whether `p` reads every namespace (`true`) or only some (`false`); 403 when none.
fn may_read_some(p: &Principal) -> Result<bool, RbacError> {
    if p.holds(PERM_READ_NAMESPACE) {
        return Ok(true);
    }
    match p.permissions().any(|x| x.starts_with("ratelimit.") && x.ends_with(".read_namespace")) {
        true => Ok(false),
        false => Err(RbacError::missing(&[PERM_READ_NAMESPACE])),
    }
}

fn read_one(namespace_id: &str) -> String {
    format!("ratelimit.{namespace_id}.read_namespace")
}

/// The namespace named `name`, else (v2's `namespace` takes both) the one with that id.
fn find(tx: &mut dyn RbacTx, ws: &str, name: &str) -> Result<Option<NamespaceInfo>, RbacError> {
    let id = match tx.namespace_by_name(ws, name)? {
        Some(found) => found.id,
        None if has_prefix(name, IdPrefix::Namespace) => name.to_string(),
        None => return Ok(None),
    };
    Ok(tx.namespace_info(ws, &id)?)
}
