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
pub const PERM_DELETE_KEY: &str = "api.*.delete_key";
pub const PERM_LIMIT: &str = "ratelimit.*.limit";
pub const PERM_CREATE_NAMESPACE: &str = "ratelimit.*.create_namespace";
