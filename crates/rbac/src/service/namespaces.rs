//! Rate-limit namespaces: resolved by name, created on first use where allowed.

use crate::perms::{PERM_CREATE_NAMESPACE, PERM_LIMIT};
use crate::{Principal, RbacError, RbacService, RbacStore};
use keygate_domain::{IdPrefix, Named, has_prefix, new_id};
use std::sync::Arc;

impl<S: RbacStore> RbacService<S> {
    /// Early check: the caller can limit in at least some namespace.
    pub(super) fn check_limit_any(&self, p: &Principal) -> Result<bool, RbacError> {
        if p.holds(PERM_LIMIT) {
            return Ok(true);
        }
        if p.permissions().any(|x| x.starts_with("ratelimit.") && x.ends_with(".limit")) {
            return Ok(false);
        }
        Err(RbacError::missing(&[PERM_LIMIT]))
    }

    pub(super) fn check_limit_in(
        &self,
        p: &Principal,
        all: bool,
        ns_name: &str,
        ns_id: Arc<String>,
    ) -> Result<Arc<String>, RbacError> {
        if all || p.holds(&format!("ratelimit.{ns_id}.limit")) {
            Ok(ns_id)
        } else {
            Err(RbacError::InsufficientPermissions(format!(
                "the root key lacks the permission {PERM_LIMIT} (or ratelimit.{ns_id}.limit for namespace {ns_name})"
            )))
        }
    }

    /// The namespace id for `name`, from the cache only; `None` means the store must be
    /// asked ([`Self::resolve_namespace`]). Never blocks on I/O.
    pub fn namespace_cached(&self, p: &Principal, name: &str) -> Option<Result<Arc<String>, RbacError>> {
        let all = match self.check_limit_any(p) {
            Ok(all) => all,
            Err(e) => return Some(Err(e)),
        };
        let id = self.namespaces.get(&p.workspace_id, name)?;
        Some(self.check_limit_in(p, all, name, id))
    }

    /// The namespace named `name`, else (v2's `namespace` takes both) the one with that id.
    pub fn find_namespace(&self, ws: &str, name: &str) -> Result<Option<Named>, RbacError> {
        self.store.read(|tx| match tx.namespace_by_name(ws, name)? {
            None if has_prefix(name, IdPrefix::Namespace) => Ok(tx.namespace_by_id(ws, name)?),
            found => Ok(found),
        })
    }

    /// 403 unless the caller may create the missing namespace `name`.
    fn may_create_namespace(p: &Principal, all: bool, name: &str) -> Result<(), RbacError> {
        if !p.holds(PERM_CREATE_NAMESPACE) {
            return Err(RbacError::InsufficientPermissions(format!(
                "namespace {name} does not exist; the root key needs {PERM_CREATE_NAMESPACE} to create it"
            )));
        }
        if !all {
            return Err(RbacError::missing(&[PERM_LIMIT]));
        }
        Ok(())
    }

    /// The namespace ids of several names at once (v2's `multiLimit`): every permission is
    /// checked before any missing namespace is created, so a 403 creates none.
    pub fn resolve_namespaces(&self, p: &Principal, names: &[&str]) -> Result<Vec<Arc<String>>, RbacError> {
        let all = self.check_limit_any(p)?;
        let ws = p.workspace_id.as_str();
        for (i, name) in names.iter().enumerate() {
            keygate_domain::validate_namespace_name(&format!("{i}.namespace"), name)?;
        }
        for name in names {
            match self.namespaces.get(ws, name) {
                Some(id) => drop(self.check_limit_in(p, all, name, id)?),
                None => match self.find_namespace(ws, name)? {
                    Some(ns) => drop(self.check_limit_in(p, all, name, Arc::new(ns.id))?),
                    None => Self::may_create_namespace(p, all, name)?,
                },
            }
        }
        names.iter().map(|name| self.resolve_namespace(p, name)).collect()
    }

    /// The namespace id for `name` (or for the id of an existing namespace), creating the
    /// namespace when the caller may.
    pub fn resolve_namespace(&self, p: &Principal, name: &str) -> Result<Arc<String>, RbacError> {
        keygate_domain::validate_namespace_name("namespace", name)?;
        let all = self.check_limit_any(p)?;
        let ws = p.workspace_id.as_str();
        if let Some(id) = self.namespaces.get(ws, name) {
            return self.check_limit_in(p, all, name, id);
        }
        let ns = match self.find_namespace(ws, name)? {
            Some(ns) => ns,
            None => {
                Self::may_create_namespace(p, all, name)?;
                self.store.transaction(|tx| {
                    let fresh = Named::new(new_id(IdPrefix::Namespace), name);
                    let algorithm = self.default_algorithm.as_str();
                    let (ns, created) = tx.insert_namespace_if_absent(ws, &fresh, algorithm, self.now())?;
                    if created {
                        tx.insert_audit_events(&[Self::workspace_event(
                            p,
                            "ratelimit_namespace.create",
                            "ratelimit_namespace",
                            &ns.id,
                            self.now(),
                        )])?;
                    }
                    Ok(ns)
                })?
            }
        };
        let id = Arc::new(ns.id);
        self.namespaces.put(ws, name, id.clone());
        self.check_limit_in(p, all, name, id)
    }
}
