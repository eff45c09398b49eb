//! The root-key permission strings each operation needs (contract §2: a root key
//! satisfies `P` when it holds `*` or exactly `P`): the contract's vocabulary, named once
//! for every crate (`keygate-rbac` checks them, the dashboard offers them); and what one
//! root key may hand another ([`permission_covers`], [`checked_permissions`]).

use crate::{ValidationError, validate_permission_name};

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
    "ratelimit.*.read_namespace",
    "ratelimit.*.update_namespace",
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

// Root keys' own management (`rootKeys.*`, API-v2.md §19).
pub const PERM_CREATE_ROOT_KEY: &str = "rootkey.*.create_key";
pub const PERM_READ_ROOT_KEY: &str = "rootkey.*.read_key";
pub const PERM_UPDATE_ROOT_KEY: &str = "rootkey.*.update_key";
pub const PERM_DELETE_ROOT_KEY: &str = "rootkey.*.delete_key";
/// Most permissions one root key holds.
pub const MAX_ROOT_KEY_PERMISSIONS: usize = 1000;

/// Whether the held permission `held` reaches everything `wanted` grants: `*`, the same
/// string, or the same dotted segments where `held` has `*` for a whole segment
/// (`api.*.read_key` covers `api.api_1.read_key`; `api.*` covers nothing of three segments).
pub fn permission_covers(held: &str, wanted: &str) -> bool {
    if held == "*" || held == wanted {
        return true;
    }
    let (mut h, mut w) = (held.split('.'), wanted.split('.'));
    loop {
        match (h.next(), w.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == "*" || a == b => {}
            _ => return false,
        }
    }
}

/// Checks and de-duplicates a permission list (1 to 1000 valid names).
pub fn checked_permissions(
    permissions: &[String],
    allow_empty: bool,
) -> Result<Vec<String>, ValidationError> {
    if (!allow_empty && permissions.is_empty()) || permissions.len() > MAX_ROOT_KEY_PERMISSIONS {
        let least = if allow_empty { 0 } else { 1 };
        return Err(ValidationError::new(
            "permissions",
            format!("must hold {least} to {MAX_ROOT_KEY_PERMISSIONS} permissions"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(permissions.len());
    for (i, name) in permissions.iter().enumerate() {
        validate_permission_name(&format!("permissions.{i}"), name)?;
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::permission_covers;

    #[test]
    fn a_pattern_covers_what_it_matches_segment_by_segment() {
        for (held, wanted, covers) in [
            ("*", "*", true),
            ("*", "api.*.create_key", true),
            ("api.*.read_key", "api.*.read_key", true),
            ("api.*.read_key", "api.api_1.read_key", true),
            ("api.*.read_key", "api.*.create_key", false),
            ("api.*.read_key", "*", false),
            ("api.api_1.read_key", "api.*.read_key", false),
            ("api.*", "api.api_1.read_key", false),
            ("api.*.*", "api.api_1.read_key", true),
            ("rootkey.*.create_key", "rootkey.*.create_key", true),
            ("ratelimit.*.limit", "ratelimit.rlns_1.limit", true),
            ("api.*.read_key", "api.a.b.read_key", false),
        ] {
            assert_eq!(permission_covers(held, wanted), covers, "{held} covers {wanted}");
        }
    }
}
