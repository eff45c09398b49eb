//! `permissions.*`: permissions, roles and a role's permissions (API-v2.md §3).

use crate::client::{Client, Empty, Response};
use crate::error::Error;
use serde::{Deserialize, Serialize};

/// A permission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Permission {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The name queries use (`documents.read`).
    pub slug: String,
    /// What it allows.
    #[serde(default)]
    pub description: Option<String>,
}

/// A role: a named set of permissions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Role {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Its permissions.
    #[serde(default)]
    pub permissions: Vec<Permission>,
}

/// `permissions.createPermission`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreatePermissionRequest {
    /// Its name.
    pub name: String,
    /// The name queries use.
    pub slug: String,
    /// What it allows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `permissions.createPermission`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreatedPermission {
    /// The new permission's id.
    pub permission_id: String,
}

/// `permissions.getPermission`, `permissions.deletePermission`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PermissionRequest {
    /// Its id or slug.
    pub permission: String,
}

/// `permissions.createRole`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreateRoleRequest {
    /// Its name.
    pub name: String,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its permissions' slugs (created when missing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<String>,
}

/// `permissions.createRole`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreatedRole {
    /// The new role's id.
    pub role_id: String,
}

/// `permissions.getRole`, `permissions.deleteRole`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RoleRequest {
    /// Its id or name.
    pub role: String,
}

/// `permissions.listPermissions`, `permissions.listRoles`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListRequest {
    /// Page size (1–100, default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Keeps the entries whose name contains this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
}

/// `permissions.setRolePermissions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SetRolePermissionsRequest {
    /// The role's id or name.
    pub role: String,
    /// Its permissions become exactly these slugs (created when missing).
    pub permissions: Vec<String>,
}

impl Client {
    /// `permissions.createPermission`.
    pub async fn create_permission(
        &self,
        req: &CreatePermissionRequest,
    ) -> Result<Response<CreatedPermission>, Error> {
        self.call("permissions.createPermission", req).await
    }

    /// `permissions.getPermission`.
    pub async fn get_permission(&self, req: &PermissionRequest) -> Result<Response<Permission>, Error> {
        self.call("permissions.getPermission", req).await
    }

    /// `permissions.listPermissions`: a page, ordered by slug.
    pub async fn list_permissions(&self, req: &ListRequest) -> Result<Response<Vec<Permission>>, Error> {
        self.call("permissions.listPermissions", req).await
    }

    /// `permissions.deletePermission`: removed from every key and role.
    pub async fn delete_permission(&self, req: &PermissionRequest) -> Result<Response<Empty>, Error> {
        self.call("permissions.deletePermission", req).await
    }

    /// `permissions.createRole`.
    pub async fn create_role(&self, req: &CreateRoleRequest) -> Result<Response<CreatedRole>, Error> {
        self.call("permissions.createRole", req).await
    }

    /// `permissions.getRole`: with its permissions.
    pub async fn get_role(&self, req: &RoleRequest) -> Result<Response<Role>, Error> {
        self.call("permissions.getRole", req).await
    }

    /// `permissions.listRoles`: a page, ordered by name.
    pub async fn list_roles(&self, req: &ListRequest) -> Result<Response<Vec<Role>>, Error> {
        self.call("permissions.listRoles", req).await
    }

    /// `permissions.deleteRole`: removed from every key.
    pub async fn delete_role(&self, req: &RoleRequest) -> Result<Response<Empty>, Error> {
        self.call("permissions.deleteRole", req).await
    }

    /// `permissions.setRolePermissions`: the role's permissions become exactly these.
    pub async fn set_role_permissions(
        &self,
        req: &SetRolePermissionsRequest,
    ) -> Result<Response<Vec<Permission>>, Error> {
        self.call("permissions.setRolePermissions", req).await
    }
}
