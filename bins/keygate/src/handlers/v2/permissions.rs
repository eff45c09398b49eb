//! v2 `permissions.*`: permissions and roles named by slug (role: name) or id, created,
//! read, listed a page at a time and deleted; a role's permissions replaced.

use super::{check_count, decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::http::{Authed, Json};
use actix_web::HttpResponse;
use keygate_domain::{MAX_NAME_CHARS, ValidationError, check_len};
use keygate_rbac::{Entity, EntityKind, NewEntity, RoleView};
use serde::{Deserialize, Serialize};
use serde_json::Number;

/// Longest display name and description v2 takes.
const MAX_TITLE_CHARS: usize = 512;
const MAX_DESCRIPTION_CHARS: usize = 512;
/// The most permissions one call names.
const MAX_PERMISSIONS: usize = 1000;

/// v2's Permission: `name` is the display name, `slug` the unique name (v1's `name`).
#[derive(Debug, Serialize)]
pub(crate) struct Permission {
    id: String,
    name: String,
    slug: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
}

impl From<Entity> for Permission {
    fn from(e: Entity) -> Self {
        let name = e.display_name().to_string();
        Self { id: e.id, name, slug: e.name, description: e.description }
    }
}

/// v2's Role, with its permissions sorted by slug.
#[derive(Debug, Serialize)]
pub(crate) struct Role {
    id: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    permissions: Vec<Permission>,
}

impl From<RoleView> for Role {
    fn from(v: RoleView) -> Self {
        Self {
            id: v.role.id,
            name: v.role.name,
            description: v.role.description,
            permissions: v.permissions.into_iter().map(Permission::from).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct CreatePermissionBody {
    name: String,
    slug: String,
    description: Option<String>,
}

/// `permissions.createPermission`: `{permissionId}`; a taken slug is 409.
pub async fn create_permission(call: Authed<Json<CreatePermissionBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_len("name", &body.name, MAX_TITLE_CHARS)?;
    check_opt_len_allow_empty("description", &body.description, MAX_DESCRIPTION_CHARS)?;
    let created = call
        .run(|rbac, p, Json(body)| {
            let new = NewEntity {
                title: (body.name != body.slug).then_some(body.name),
                name: body.slug,
                name_field: "slug",
                description: body.description,
                permissions: Vec::new(),
            };
            rbac.create_entity(p, EntityKind::Permission, new)
        })
        .await?;
    Ok(ok(serde_json::json!({ "permissionId": created.id })))
}

#[derive(Debug, Deserialize)]
pub(crate) struct CreateRoleBody {
    name: String,
    description: Option<String>,
    permissions: Option<Vec<String>>,
}

/// `permissions.createRole`: `{roleId}`; a taken name is 409; missing permission slugs
/// are created.
pub async fn create_role(call: Authed<Json<CreateRoleBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_opt_len_allow_empty("description", &body.description, MAX_DESCRIPTION_CHARS)?;
    check_count("permissions", body.permissions.as_deref().unwrap_or_default(), MAX_PERMISSIONS)?;
    let created = call
        .run(|rbac, p, Json(body)| {
            let new = NewEntity {
                name: body.name,
                name_field: "name",
                description: body.description,
                title: None,
                permissions: body.permissions.unwrap_or_default(),
            };
            rbac.create_entity(p, EntityKind::Role, new)
        })
        .await?;
    Ok(ok(serde_json::json!({ "roleId": created.id })))
}

/// A description may be empty; it is bounded.
fn check_opt_len_allow_empty(path: &str, value: &Option<String>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().count() > max => {
            Err(ValidationError::new(path, format!("must be at most {max} characters")).into())
        }
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct PermissionRefBody {
    permission: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RoleRefBody {
    role: String,
}

/// `permissions.getPermission {permission}` (slug or id).
pub async fn get_permission(call: Authed<Json<PermissionRefBody>>) -> Result<HttpResponse, ApiError> {
    let found = call
        .run(|rbac, p, Json(b)| rbac.find_entity(p, EntityKind::Permission, "permission", &b.permission))
        .await?;
    Ok(ok(Permission::from(found)))
}

/// `permissions.getRole {role}` (name or id), with its permissions.
pub async fn get_role(call: Authed<Json<RoleRefBody>>) -> Result<HttpResponse, ApiError> {
    let found = call.run(|rbac, p, Json(b)| rbac.find_role(p, &b.role)).await?;
    Ok(ok(Role::from(found)))
}

/// `permissions.deletePermission {permission}`: `{}`; detached from every key and role.
pub async fn delete_permission(call: Authed<Json<PermissionRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|rbac, p, Json(b)| {
        rbac.delete_entity_by_ref(p, EntityKind::Permission, "permission", &b.permission)
    })
    .await?;
    Ok(ok_empty())
}

/// `permissions.deleteRole {role}`: `{}`; detached from every key.
pub async fn delete_role(call: Authed<Json<RoleRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|rbac, p, Json(b)| rbac.delete_entity_by_ref(p, EntityKind::Role, "role", &b.role)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize)]
pub(crate) struct ListBody {
    limit: Option<Number>,
    cursor: Option<String>,
    search: Option<String>,
}

async fn list(
    call: Authed<Json<ListBody>>,
    kind: EntityKind,
) -> Result<keygate_rbac::Page<RoleView>, ApiError> {
    let body = &call.input.0;
    let limit = page_limit(&body.limit, 100)?;
    let after = decode_cursor(body.cursor.as_deref())?;
    check_opt_len_allow_empty("search", &body.search, 256)?;
    call.run(move |rbac, p, Json(b)| rbac.list_page(p, kind, b.search.as_deref(), after.as_deref(), limit))
        .await
}

/// `permissions.listPermissions {limit?, cursor?, search?}`: a page, by slug.
pub async fn list_permissions(call: Authed<Json<ListBody>>) -> Result<HttpResponse, ApiError> {
    Ok(ok_page(list(call, EntityKind::Permission).await?, |v| Permission::from(v.role)))
}

/// `permissions.listRoles {limit?, cursor?, search?}`: a page, by name.
pub async fn list_roles(call: Authed<Json<ListBody>>) -> Result<HttpResponse, ApiError> {
    Ok(ok_page(list(call, EntityKind::Role).await?, Role::from))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetRolePermissionsBody {
    role: Option<String>,
    role_id: Option<String>,
    permissions: Vec<String>,
}

/// `permissions.setRolePermissions {role | roleId, permissions}`: the role's permissions
/// become exactly the list; answers all of them.
pub async fn set_role_permissions(
    mut call: Authed<Json<SetRolePermissionsBody>>,
) -> Result<HttpResponse, ApiError> {
    let body = &mut call.input.0;
    check_count("permissions", &body.permissions, MAX_PERMISSIONS)?;
    let (role, other) = match (body.role.take(), body.role_id.take()) {
        (None, None) => return Err(ValidationError::new("role", "is required (or roleId)").into()),
        (Some(a), Some(b)) if a != b => (a, Some(b)),
        (Some(r), _) | (None, Some(r)) => (r, None),
    };
    check_len("role", &role, MAX_NAME_CHARS)?;
    if let Some(other) = &other {
        check_len("roleId", other, MAX_NAME_CHARS)?;
    }
    let all = call
        .run(move |rbac, p, Json(b)| {
            // `role` and `roleId` may name one role by its name and its id.
            if let Some(other) = other
                && !rbac.same_role(p, &role, &other)?
            {
                return Err(ValidationError::new("roleId", "names another role than role").into());
            }
            rbac.set_role_permissions_by_ref(p, &role, &b.permissions)
        })
        .await?;
    Ok(ok(all.into_iter().map(Permission::from).collect::<Vec<_>>()))
}
