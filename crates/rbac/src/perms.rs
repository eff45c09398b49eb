//! The root-key permission strings each operation needs (contract §2: a root key
//! satisfies `P` when it holds `*` or exactly `P`).

pub const PERM_ADD_PERMISSION_TO_KEY: &str = "rbac.*.add_permission_to_key";
pub const PERM_CREATE_PERMISSION: &str = "rbac.*.create_permission";
pub const PERM_ADD_ROLE_TO_KEY: &str = "rbac.*.add_role_to_key";
pub const PERM_REMOVE_PERMISSION_FROM_KEY: &str = "rbac.*.remove_permission_from_key";
pub const PERM_REMOVE_ROLE_FROM_KEY: &str = "rbac.*.remove_role_from_key";
pub const PERM_ADD_PERMISSION_TO_ROLE: &str = "rbac.*.add_permission_to_role";
pub const PERM_REMOVE_PERMISSION_FROM_ROLE: &str = "rbac.*.remove_permission_from_role";
pub const PERM_READ_PERMISSION: &str = "rbac.*.read_permission";
pub const PERM_DELETE_PERMISSION: &str = "rbac.*.delete_permission";
pub const PERM_READ_ROLE: &str = "rbac.*.read_role";
pub const PERM_DELETE_ROLE: &str = "rbac.*.delete_role";
pub const PERM_CREATE_ROLE: &str = "rbac.*.create_role";
pub const PERM_READ_KEY: &str = "api.*.read_key";
pub const PERM_CREATE_KEY: &str = "api.*.create_key";
pub const PERM_LIMIT: &str = "ratelimit.*.limit";
pub const PERM_CREATE_NAMESPACE: &str = "ratelimit.*.create_namespace";
pub const PERM_UPDATE_KEY: &str = "api.*.update_key";
pub const PERM_CREATE_API: &str = "api.*.create_api";
pub const PERM_CREATE_IDENTITY: &str = "identity.*.create_identity";
pub const PERM_READ_IDENTITY: &str = "identity.*.read_identity";
pub const PERM_UPDATE_IDENTITY: &str = "identity.*.update_identity";
pub const PERM_DELETE_IDENTITY: &str = "identity.*.delete_identity";

/// Every workspace-wide permission a root key can hold, by group (the dashboard's picker;
/// the `<id>`-scoped forms are written out by hand).
pub const WORKSPACE_PERMISSIONS: &[&str] = &[
    "*",
    "api.*.create_api",
    "api.*.read_api",
    "api.*.delete_api",
    "api.*.create_key",
    "api.*.read_key",
    "api.*.update_key",
    "api.*.delete_key",
    "api.*.verify_key",
    "api.*.read_analytics",
    "api.*.encrypt_key",
    "api.*.decrypt_key",
    "rbac.*.create_permission",
    "rbac.*.read_permission",
    "rbac.*.delete_permission",
    "rbac.*.create_role",
    "rbac.*.read_role",
    "rbac.*.delete_role",
    "rbac.*.add_permission_to_key",
    "rbac.*.remove_permission_from_key",
    "rbac.*.add_role_to_key",
    "rbac.*.remove_role_from_key",
    "rbac.*.add_permission_to_role",
    "rbac.*.remove_permission_from_role",
    "identity.*.create_identity",
    "identity.*.read_identity",
    "identity.*.update_identity",
    "identity.*.delete_identity",
    "ratelimit.*.limit",
    "ratelimit.*.create_namespace",
    "ratelimit.*.set_override",
    "ratelimit.*.read_override",
    "ratelimit.*.delete_override",
    "ratelimit.*.read_analytics",
    "rootkey.*.create_key",
    "rootkey.*.read_key",
    "rootkey.*.update_key",
    "rootkey.*.delete_key",
    "portal.*.create_portal",
    "portal.*.read_portal",
    "portal.*.update_portal",
    "portal.*.delete_portal",
    "portal.*.create_portal_session",
    "audit.*.read",
];

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
