//! The `permissions.*` endpoints: create, get, list and delete permissions and roles, and
//! change a role's permissions.

use super::references::{LinkBody, NamedItem, PermissionRef, link};
use super::{Empty, empty};
use crate::error::ApiError;
use crate::openapi::{V1BodyErrors, V1Conflict, V1QueryErrors, kinds, refine_body};
use crate::plumbing::{Authed, Json, Obj, Query};
use actix_web::HttpResponse;
use keygate_rbac::{Entity, EntityKind, EntityRef, NewEntity, RbacService, RoleView};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CreateBody {
    /// A permission name, or a role name (the operation's document says which).
    #[schema(schema_with = kinds::permission_name)]
    name: String,
    #[schema(max_length = 1024)]
    description: Option<String>,
}

/// A permission (or a role, without its permissions).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Entity)]
pub(crate) struct EntityResponse {
    id: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    description: Option<String>,
}

impl From<Entity> for EntityResponse {
    fn from(e: Entity) -> Self {
        Self { id: e.id, name: e.name, description: e.description }
    }
}

/// A role with its permissions.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Role)]
pub(crate) struct RoleResponse {
    #[serde(flatten)]
    role: EntityResponse,
    permissions: Vec<EntityResponse>,
}

impl From<RoleView> for RoleResponse {
    fn from(v: RoleView) -> Self {
        Self { role: v.role.into(), permissions: v.permissions.into_iter().map(Into::into).collect() }
    }
}

async fn create(call: Authed<Json<CreateBody>>, kind: EntityKind) -> Result<String, ApiError> {
    let created = call
        .run(move |kg, principal, Json(body)| {
            let new = NewEntity {
                name: body.name,
                name_field: "name",
                description: body.description,
                ..NewEntity::default()
            };
            kg.rbac.create_entity(principal, kind, new)
        })
        .await?;
    Ok(created.id)
}

/// The answer of `createPermission` (v1; v2's `data`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedPermission {
    permission_id: String,
}

impl CreatedPermission {
    pub(crate) fn new(permission_id: String) -> Self {
        Self { permission_id }
    }
}

/// The answer of `createRole` (v1; v2's `data`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedRole {
    role_id: String,
}

impl CreatedRole {
    pub(crate) fn new(role_id: String) -> Self {
        Self { role_id }
    }
}

/// Create a permission
///
/// A taken name is 409.
#[utoipa::path(post, path = "/v1/permissions.createPermission", operation_id = "permissions.createPermission",
    tag = "permissions", request_body = CreateBody,
    responses((status = 200, description = "OK", body = CreatedPermission), V1BodyErrors, V1Conflict))]
pub async fn create_permission(call: Authed<Json<CreateBody>>) -> Result<HttpResponse, ApiError> {
    let id = create(call, EntityKind::Permission).await?;
    Ok(HttpResponse::Ok().json(CreatedPermission::new(id)))
}

/// Create a role
///
/// A taken name is 409.
#[utoipa::path(post, path = "/v1/permissions.createRole", operation_id = "permissions.createRole",
    tag = "permissions", request_body = CreateBody,
    responses((status = 200, description = "OK", body = CreatedRole), V1BodyErrors, V1Conflict))]
pub async fn create_role(call: Authed<Json<CreateBody>>) -> Result<HttpResponse, ApiError> {
    let id = create(call, EntityKind::Role).await?;
    Ok(HttpResponse::Ok().json(CreatedRole::new(id)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct PermissionIdQuery {
    #[param(min_length = 1, max_length = 255)]
    permission_id: String,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct RoleIdQuery {
    /// A role id.
    #[param(min_length = 1, max_length = 255)]
    role_id: String,
}

/// A permission
#[utoipa::path(get, path = "/v1/permissions.getPermission", operation_id = "permissions.getPermission",
    tag = "permissions", params(PermissionIdQuery),
    responses((status = 200, description = "OK", body = EntityResponse), V1QueryErrors))]
pub async fn get_permission(call: Authed<Query<PermissionIdQuery>>) -> Result<HttpResponse, ApiError> {
    let found = call
        .run(|kg, principal, Query(q)| {
            kg.rbac.get_entity(principal, EntityKind::Permission, &q.permission_id)
        })
        .await?;
    Ok(HttpResponse::Ok().json(EntityResponse::from(found)))
}

/// A role with its permissions
#[utoipa::path(get, path = "/v1/permissions.getRole", operation_id = "permissions.getRole",
    tag = "permissions", params(RoleIdQuery),
    responses((status = 200, description = "OK", body = RoleResponse), V1QueryErrors))]
pub async fn get_role(call: Authed<Query<RoleIdQuery>>) -> Result<HttpResponse, ApiError> {
    let found = call.run(|kg, principal, Query(q)| kg.rbac.get_role(principal, &q.role_id)).await?;
    Ok(HttpResponse::Ok().json(RoleResponse::from(found)))
}

/// Every permission of the workspace, sorted by name
#[utoipa::path(get, path = "/v1/permissions.listPermissions", operation_id = "permissions.listPermissions",
    tag = "permissions", responses((status = 200, description = "OK", body = Vec<EntityResponse>), V1QueryErrors))]
pub async fn list_permissions(call: Authed<()>) -> Result<HttpResponse, ApiError> {
    let all = call.run(|kg, principal, ()| kg.rbac.list_entities(principal, EntityKind::Permission)).await?;
    Ok(HttpResponse::Ok().json(all.into_iter().map(EntityResponse::from).collect::<Vec<_>>()))
}

/// Every role with its permissions, sorted by name
#[utoipa::path(get, path = "/v1/permissions.listRoles", operation_id = "permissions.listRoles",
    tag = "permissions", responses((status = 200, description = "OK", body = Vec<RoleResponse>), V1QueryErrors))]
pub async fn list_roles(call: Authed<()>) -> Result<HttpResponse, ApiError> {
    let all = call.run(|kg, principal, ()| kg.rbac.list_roles(principal)).await?;
    Ok(HttpResponse::Ok().json(all.into_iter().map(RoleResponse::from).collect::<Vec<_>>()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeletePermissionBody {
    #[schema(min_length = 1, max_length = 255)]
    permission_id: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteRoleBody {
    /// A role id.
    #[schema(min_length = 1, max_length = 255)]
    role_id: String,
}

/// Delete a permission
///
/// `{}`; detached from every key and role.
#[utoipa::path(post, path = "/v1/permissions.deletePermission", operation_id = "permissions.deletePermission",
    tag = "permissions", request_body = DeletePermissionBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn delete_permission(call: Authed<Json<DeletePermissionBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, principal, Json(body)| {
        kg.rbac.delete_entity(principal, EntityKind::Permission, &body.permission_id)
    })
    .await?;
    Ok(empty())
}

/// Delete a role
///
/// `{}`; detached from every key.
#[utoipa::path(post, path = "/v1/permissions.deleteRole", operation_id = "permissions.deleteRole",
    tag = "permissions", request_body = DeleteRoleBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn delete_role(call: Authed<Json<DeleteRoleBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, principal, Json(body)| kg.rbac.delete_entity(principal, EntityKind::Role, &body.role_id))
        .await?;
    Ok(empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolePermissionsBody {
    /// A role id.
    #[schema(min_length = 1, max_length = 255)]
    role_id: String,
    #[schema(max_items = 1000, value_type = Vec<PermissionRef>)]
    permissions: Vec<Obj<PermissionRef>>,
}

impl LinkBody for RolePermissionsBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.role_id, self.permissions.into_iter().map(|Obj(r)| EntityRef::from(r)).collect())
    }
}

/// Attaches permissions to a role
///
/// Every permission of the role, sorted by name.
#[utoipa::path(post, path = "/v1/permissions.addPermissionsToRole", operation_id = "permissions.addPermissionsToRole", tag = "permissions",
    request_body = RolePermissionsBody,
    responses((status = 200, description = "OK", body = Vec<NamedItem>), V1BodyErrors))]
pub async fn add_permissions_to_role(
    call: Authed<Json<RolePermissionsBody>>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::add_role_permissions).await?))
}

/// A role's permissions become exactly the list
///
/// Every permission of the role, sorted by name.
#[utoipa::path(post, path = "/v1/permissions.setRolePermissions", operation_id = "permissions.setRolePermissions", tag = "permissions",
    request_body = RolePermissionsBody,
    responses((status = 200, description = "OK", body = Vec<NamedItem>), V1BodyErrors))]
pub async fn set_role_permissions(call: Authed<Json<RolePermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::set_role_permissions).await?))
}

/// Detaches permissions from a role
///
/// `{}`.
#[utoipa::path(post, path = "/v1/permissions.removePermissionsFromRole", operation_id = "permissions.removePermissionsFromRole", tag = "permissions",
    request_body = RolePermissionsBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn remove_permissions_from_role(
    call: Authed<Json<RolePermissionsBody>>,
) -> Result<HttpResponse, ApiError> {
    link(call, RbacService::remove_role_permissions).await?;
    Ok(empty())
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
    add_permissions_to_role,
    set_role_permissions,
    remove_permissions_from_role
))]
struct Doc;

/// This room's part of the v1 document: a role's name is a display name (a permission's
/// follows the permission-name rule); `add*` and `remove*` take at least one entry.
pub(crate) fn openapi() -> serde_json::Value {
    let mut doc = crate::openapi::room::<Doc>();
    super::references::references_need_id_or_name(&mut doc, &["PermissionRef"]);
    refine_body(&mut doc, "/v1/permissions.createRole", "post", |body| {
        body["properties"]["name"] = crate::openapi::schema_json_of(kinds::role_name());
    });
    for path in ["/v1/permissions.addPermissionsToRole", "/v1/permissions.removePermissionsFromRole"] {
        refine_body(&mut doc, path, "post", |body| body["properties"]["permissions"]["minItems"] = 1.into());
    }
    doc
}
