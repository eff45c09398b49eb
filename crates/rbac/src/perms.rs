//! The root-key permissions operations need (the names: [`keygate_domain::root_permissions`],
//! re-exported here) and which keys a key action's permission reaches.

pub use keygate_domain::root_permissions::*;

/// Which keys a root key may act on for a key action (`read_key`, `update_key`, ...):
/// `api.*.<action>` (or `*`) reaches every key, `api.<apiId>.<action>` the keys labelled
/// with that `apiId` (API-v2.md §1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiAccess {
    All,
    /// The `apiId`s named by the root key's scoped permissions (not empty).
    Only(Vec<String>),
}

impl ApiAccess {
    /// The access `p` holds for `action`; `None` when it holds no form of it (403 before
    /// anything is looked up).
    pub fn of(p: &crate::Principal, action: &str) -> Option<Self> {
        // `*` or `api.*.<action>`, asked on every verification: no string built for it.
        if p.holds("*") || p.permissions().any(|x| x.strip_prefix("api.*.") == Some(action)) {
            return Some(ApiAccess::All);
        }
        let suffix = format!(".{action}");
        let mut ids: Vec<String> = p
            .permissions()
            .filter_map(|x| x.strip_prefix("api.")?.strip_suffix(suffix.as_str()))
            .filter(|id| !id.is_empty() && *id != "*")
            .map(str::to_owned)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        (!ids.is_empty()).then_some(ApiAccess::Only(ids))
    }

    /// Whether a key labelled `api_id` is reachable.
    pub fn admits(&self, api_id: Option<&str>) -> bool {
        match self {
            ApiAccess::All => true,
            ApiAccess::Only(ids) => api_id.is_some_and(|a| ids.iter().any(|i| i == a)),
        }
    }

    /// The API filters a workspace-wide read runs with: `[None]` (every API) for `All`,
    /// else one `Some(apiId)` per API named.
    pub fn scope(&self) -> Vec<Option<&str>> {
        match self {
            ApiAccess::All => vec![None],
            ApiAccess::Only(ids) => ids.iter().map(|id| Some(id.as_str())).collect(),
        }
    }

    /// The 403 for `action` on a key labelled `api_id` (or for any key when `None`).
    pub fn denied(action: &str, api_id: Option<&str>) -> crate::RbacError {
        let any = format!("api.*.{action}");
        match api_id {
            Some(id) => crate::RbacError::InsufficientPermissions(format!(
                "the root key lacks the permission {any} (or api.{id}.{action})"
            )),
            None => crate::RbacError::missing(&[any.as_str()]),
        }
    }
}
