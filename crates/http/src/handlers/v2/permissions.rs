//! v2 `permissions.*`: permissions and roles named by slug (role: name) or id, created,
//! read, listed a page at a time and deleted; a role's permissions replaced.

use super::{Empty, Envelope, PageEnvelope};
use super::{check_count, decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::handlers::permissions::{CreatedPermission, CreatedRole};
use crate::openapi::{V2Conflict, V2Errors, kinds};
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use keygate_domain::{MAX_NAME_CHARS, ValidationError, check_len};
use keygate_rbac::{Entity, EntityKind, NewEntity, RoleView};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// Longest display name and description v2 takes.
const MAX_TITLE_CHARS: usize = 512;
const MAX_DESCRIPTION_CHARS: usize = 512;
/// The most permissions one call names.
const MAX_PERMISSIONS: usize = 1000;

/// v2's Permission: `name` is the display name, `slug` the unique name (v1's `name`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Permission {
    id: String,
    name: String,
    slug: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    description: Option<String>,
}

impl From<Entity> for Permission {
    fn from(e: Entity) -> Self {
        let name = e.display_name().to_string();
        Self { id: e.id, name, slug: e.name, description: e.description }
    }
}

/// v2's Role, with its permissions sorted by slug.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Role {
    id: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
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

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CreatePermissionBody {
    /// The display name.
    #[schema(min_length = 1, max_length = 512)]
    name: String,
    /// The unique name.
    #[schema(schema_with = kinds::permission_name)]
    slug: String,
    #[schema(max_length = 512)]
    description: Option<String>,
}

/// Create a permission
///
/// A taken slug is 409.
#[utoipa::path(post, path = "/v2/permissions.createPermission", operation_id = "permissions.createPermission",
    tag = "permissions", request_body = CreatePermissionBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedPermission>), V2Errors, V2Conflict))]
pub async fn create_permission(call: Authed<Json<CreatePermissionBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_len("name", &body.name, MAX_TITLE_CHARS)?;
    check_opt_len_allow_empty("description", &body.description, MAX_DESCRIPTION_CHARS)?;
    let created = call
        .run(|kg, p, Json(body)| {
            let new = NewEntity {
                title: (body.name != body.slug).then_some(body.name),
                name: body.slug,
                name_field: "slug",
                description: body.description,
                permissions: Vec::new(),
            };
            kg.rbac.create_entity(p, EntityKind::Permission, new)
        })
        .await?;
    Ok(ok(CreatedPermission::new(created.id)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CreateRoleBody {
    #[schema(schema_with = kinds::role_name)]
    name: String,
    #[schema(max_length = 512)]
    description: Option<String>,
    /// Permission slugs; missing ones are created.
    #[schema(schema_with = kinds::permission_names_or_null)]
    permissions: Option<Vec<String>>,
}

/// Create a role
///
/// A taken name is 409; missing permission slugs are created.
#[utoipa::path(post, path = "/v2/permissions.createRole", operation_id = "permissions.createRole",
    tag = "permissions", request_body = CreateRoleBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedRole>), V2Errors, V2Conflict))]
pub async fn create_role(call: Authed<Json<CreateRoleBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_opt_len_allow_empty("description", &body.description, MAX_DESCRIPTION_CHARS)?;
    check_count("permissions", body.permissions.as_deref().unwrap_or_default(), MAX_PERMISSIONS)?;
    let created = call
        .run(|kg, p, Json(body)| {
            let new = NewEntity {
                name: body.name,
                name_field: "name",
                description: body.description,
                title: None,
                permissions: body.permissions.unwrap_or_default(),
            };
            kg.rbac.create_entity(p, EntityKind::Role, new)
        })
        .await?;
    Ok(ok(CreatedRole::new(created.id)))
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

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct PermissionRefBody {
    /// A slug or an id.
    #[schema(schema_with = kinds::permission_name)]
    permission: String,
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct RoleRefBody {
    /// A name or an id.
    #[schema(schema_with = kinds::role_name)]
    role: String,
}

/// A permission by slug or id
#[utoipa::path(post, path = "/v2/permissions.getPermission", operation_id = "permissions.getPermission",
    tag = "permissions", request_body = PermissionRefBody,
    responses((status = 200, description = "OK", body = Envelope<Permission>), V2Errors))]
pub async fn get_permission(call: Authed<Json<PermissionRefBody>>) -> Result<HttpResponse, ApiError> {
    let found = call
        .run(|kg, p, Json(b)| kg.rbac.find_entity(p, EntityKind::Permission, "permission", &b.permission))
        .await?;
    Ok(ok(Permission::from(found)))
}

/// A role by name or id
///
/// With its permissions.
#[utoipa::path(post, path = "/v2/permissions.getRole", operation_id = "permissions.getRole",
    tag = "permissions", request_body = RoleRefBody,
    responses((status = 200, description = "OK", body = Envelope<Role>), V2Errors))]
pub async fn get_role(call: Authed<Json<RoleRefBody>>) -> Result<HttpResponse, ApiError> {
    let found = call.run(|kg, p, Json(b)| kg.rbac.find_role(p, &b.role)).await?;
    Ok(ok(Role::from(found)))
}

/// Delete a permission
///
/// Detached from every key and role.
#[utoipa::path(post, path = "/v2/permissions.deletePermission", operation_id = "permissions.deletePermission",
    tag = "permissions", request_body = PermissionRefBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_permission(call: Authed<Json<PermissionRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, p, Json(b)| {
        kg.rbac.delete_entity_by_ref(p, EntityKind::Permission, "permission", &b.permission)
    })
    .await?;
    Ok(ok_empty())
}

/// Delete a role
///
/// Detached from every key.
#[utoipa::path(post, path = "/v2/permissions.deleteRole", operation_id = "permissions.deleteRole",
    tag = "permissions", request_body = RoleRefBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_role(call: Authed<Json<RoleRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, p, Json(b)| kg.rbac.delete_entity_by_ref(p, EntityKind::Role, "role", &b.role)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListBody {
    /// Items per page (default 100).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    /// The cursor of the previous page.
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
    /// Only items whose name contains this text (no wildcards).
    #[schema(max_length = 256)]
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
    call.run(move |kg, p, Json(b)| kg.rbac.list_page(p, kind, b.search.as_deref(), after.as_deref(), limit))
        .await
}

/// A page of permissions, by slug
#[utoipa::path(post, path = "/v2/permissions.listPermissions", operation_id = "permissions.listPermissions",
    tag = "permissions", request_body = ListBody,
    responses((status = 200, description = "OK", body = PageEnvelope<Permission>), V2Errors))]
pub async fn list_permissions(call: Authed<Json<ListBody>>) -> Result<HttpResponse, ApiError> {
    Ok(ok_page(list(call, EntityKind::Permission).await?, |v| Permission::from(v.role)))
}

/// A page of roles, by name
#[utoipa::path(post, path = "/v2/permissions.listRoles", operation_id = "permissions.listRoles",
    tag = "permissions", request_body = ListBody,
    responses((status = 200, description = "OK", body = PageEnvelope<Role>), V2Errors))]
pub async fn list_roles(call: Authed<Json<ListBody>>) -> Result<HttpResponse, ApiError> {
    Ok(ok_page(list(call, EntityKind::Role).await?, Role::from))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetRolePermissionsBody {
    /// The role by name or id (or `roleId`; both may name the same role).
    #[schema(schema_with = kinds::role_name)]
    role: Option<String>,
    #[schema(schema_with = kinds::role_name)]
    role_id: Option<String>,
    /// Permission slugs.
    #[schema(schema_with = kinds::permission_names)]
    permissions: Vec<String>,
}

/// A role's permissions become exactly the list
///
/// Answers all of them.
#[utoipa::path(post, path = "/v2/permissions.setRolePermissions", operation_id = "permissions.setRolePermissions",
    tag = "permissions", request_body = SetRolePermissionsBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
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
        .run(move |kg, p, Json(b)| {
            // `role` and `roleId` may name one role by its name and its id.
            if let Some(other) = other
                && !kg.rbac.same_role(p, &role, &other)?
            {
                return Err(ValidationError::new("roleId", "names another role than role").into());
            }
            kg.rbac.set_role_permissions_by_ref(p, &role, &b.permissions)
        })
        .await?;
    Ok(ok(all.into_iter().map(Permission::from).collect::<Vec<_>>()))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_permission,
    get_permission,
    list_permissions,
    delete_permission,
    create_role,
    get_role,
    list_roles,
    delete_role,
    set_role_permissions
))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    crate::openapi::require_one_of(
        crate::openapi::schema_mut(&mut doc, "SetRolePermissionsBody"),
        &["role", "roleId"],
        false,
    );
    doc
}
