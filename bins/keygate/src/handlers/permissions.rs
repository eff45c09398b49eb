//! The `permissions.*` endpoints: create, get, list and delete permissions and roles, and
//! change a role's permissions.

use super::empty;
use super::keys::{LinkBody, PermissionRef, link};
use crate::error::ApiError;
use crate::http::{Authed, Json, Query};
use actix_web::HttpResponse;
use keygate_rbac::{Entity, EntityKind, EntityRef, NewEntity, RbacService, RoleView};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
pub(crate) struct CreateBody {
    name: String,
    description: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct EntityResponse {
    id: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
}

impl From<Entity> for EntityResponse {
    fn from(e: Entity) -> Self {
        Self { id: e.id, name: e.name, description: e.description }
    }
}

#[derive(Debug, Serialize)]
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
        .run(move |rbac, principal, Json(body)| {
            let new = NewEntity {
                name: body.name,
                name_field: "name",
                description: body.description,
                ..NewEntity::default()
            };
            rbac.create_entity(principal, kind, new)
        })
        .await?;
    Ok(created.id)
}

/// `permissions.createPermission`: `{"permissionId"}`.
pub async fn create_permission(call: Authed<Json<CreateBody>>) -> Result<HttpResponse, ApiError> {
    let id = create(call, EntityKind::Permission).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "permissionId": id })))
}

/// `permissions.createRole`: `{"roleId"}`.
pub async fn create_role(call: Authed<Json<CreateBody>>) -> Result<HttpResponse, ApiError> {
    let id = create(call, EntityKind::Role).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "roleId": id })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionIdQuery {
    permission_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoleIdQuery {
    role_id: String,
}

/// `GET permissions.getPermission?permissionId=...`
pub async fn get_permission(call: Authed<Query<PermissionIdQuery>>) -> Result<HttpResponse, ApiError> {
    let found = call
        .run(|rbac, principal, Query(q)| rbac.get_entity(principal, EntityKind::Permission, &q.permission_id))
        .await?;
    Ok(HttpResponse::Ok().json(EntityResponse::from(found)))
}

/// `GET permissions.getRole?roleId=...`: the role with its permissions.
pub async fn get_role(call: Authed<Query<RoleIdQuery>>) -> Result<HttpResponse, ApiError> {
    let found = call.run(|rbac, principal, Query(q)| rbac.get_role(principal, &q.role_id)).await?;
    Ok(HttpResponse::Ok().json(RoleResponse::from(found)))
}

/// `GET permissions.listPermissions`: every permission of the workspace, sorted by name.
pub async fn list_permissions(call: Authed<()>) -> Result<HttpResponse, ApiError> {
    let all = call.run(|rbac, principal, ()| rbac.list_entities(principal, EntityKind::Permission)).await?;
    Ok(HttpResponse::Ok().json(all.into_iter().map(EntityResponse::from).collect::<Vec<_>>()))
}

/// `GET permissions.listRoles`: every role with its permissions, sorted by name.
pub async fn list_roles(call: Authed<()>) -> Result<HttpResponse, ApiError> {
    let all = call.run(|rbac, principal, ()| rbac.list_roles(principal)).await?;
    Ok(HttpResponse::Ok().json(all.into_iter().map(RoleResponse::from).collect::<Vec<_>>()))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeletePermissionBody {
    permission_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteRoleBody {
    role_id: String,
}

/// `permissions.deletePermission`: `{}`; detached from every key and role.
pub async fn delete_permission(call: Authed<Json<DeletePermissionBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|rbac, principal, Json(body)| {
        rbac.delete_entity(principal, EntityKind::Permission, &body.permission_id)
    })
    .await?;
    Ok(empty())
}

/// `permissions.deleteRole`: `{}`; detached from every key.
pub async fn delete_role(call: Authed<Json<DeleteRoleBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|rbac, principal, Json(body)| rbac.delete_entity(principal, EntityKind::Role, &body.role_id))
        .await?;
    Ok(empty())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolePermissionsBody {
    role_id: String,
    permissions: Vec<PermissionRef>,
}

impl LinkBody for RolePermissionsBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.role_id, self.permissions.into_iter().map(EntityRef::from).collect())
    }
}

/// `permissions.addPermissionsToRole`: every permission of the role, sorted by name.
pub async fn add_permissions_to_role(
    call: Authed<Json<RolePermissionsBody>>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::add_role_permissions).await?))
}

/// `permissions.setRolePermissions`: every permission of the role, sorted by name.
pub async fn set_role_permissions(call: Authed<Json<RolePermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::set_role_permissions).await?))
}

/// `permissions.removePermissionsFromRole`: `{}`.
pub async fn remove_permissions_from_role(
    call: Authed<Json<RolePermissionsBody>>,
) -> Result<HttpResponse, ApiError> {
    link(call, RbacService::remove_role_permissions).await?;
    Ok(empty())
}
