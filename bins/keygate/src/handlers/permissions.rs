//! The `permissions.*` endpoints: create, get, list and delete permissions and roles, and
//! change a role's permissions.

use super::keys::{LinkBody, PermissionRef, link_call};
use crate::error::ApiError;
use crate::http::{authenticate, blocking, read_json, read_query};
use crate::state::AppState;
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_rbac::{Entity, EntityKind, EntityRef, RbacService, RoleView};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct CreateBody {
    name: String,
    description: Option<String>,
}

#[derive(Debug, Serialize)]
struct EntityResponse {
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
struct RoleResponse {
    #[serde(flatten)]
    role: EntityResponse,
    permissions: Vec<EntityResponse>,
}

impl From<RoleView> for RoleResponse {
    fn from(v: RoleView) -> Self {
        Self { role: v.role.into(), permissions: v.permissions.into_iter().map(Into::into).collect() }
    }
}

async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    kind: EntityKind,
) -> Result<String, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: CreateBody = read_json(&req, payload).await?;
    let created =
        blocking(move || Ok(state.rbac.create_entity(&principal, kind, &body.name, body.description)?))
            .await?;
    Ok(created.id)
}

/// `permissions.createPermission`: `{"permissionId"}`.
pub async fn create_permission(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = create(req, payload, state, EntityKind::Permission).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "permissionId": id })))
}

/// `permissions.createRole`: `{"roleId"}`.
pub async fn create_role(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = create(req, payload, state, EntityKind::Role).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "roleId": id })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PermissionIdQuery {
    permission_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoleIdQuery {
    role_id: String,
}

/// `GET permissions.getPermission?permissionId=...`
pub async fn get_permission(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let id = read_query::<PermissionIdQuery>(&req)?.permission_id;
    let found = blocking(move || Ok(state.rbac.get_entity(&principal, EntityKind::Permission, &id)?)).await?;
    Ok(HttpResponse::Ok().json(EntityResponse::from(found)))
}

/// `GET permissions.getRole?roleId=...`: the role with its permissions.
pub async fn get_role(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let id = read_query::<RoleIdQuery>(&req)?.role_id;
    let found = blocking(move || Ok(state.rbac.get_role(&principal, &id)?)).await?;
    Ok(HttpResponse::Ok().json(RoleResponse::from(found)))
}

/// `GET permissions.listPermissions`: every permission of the workspace, sorted by name.
pub async fn list_permissions(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let all = blocking(move || Ok(state.rbac.list_entities(&principal, EntityKind::Permission)?)).await?;
    Ok(HttpResponse::Ok().json(all.into_iter().map(EntityResponse::from).collect::<Vec<_>>()))
}

/// `GET permissions.listRoles`: every role with its permissions, sorted by name.
pub async fn list_roles(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let all = blocking(move || Ok(state.rbac.list_roles(&principal)?)).await?;
    Ok(HttpResponse::Ok().json(all.into_iter().map(RoleResponse::from).collect::<Vec<_>>()))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeletePermissionBody {
    permission_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteRoleBody {
    role_id: String,
}

/// `permissions.deletePermission`: `{}`; detached from every key and role.
pub async fn delete_permission(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: DeletePermissionBody = read_json(&req, payload).await?;
    blocking(move || {
        Ok(state.rbac.delete_entity(&principal, EntityKind::Permission, &body.permission_id)?)
    })
    .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

/// `permissions.deleteRole`: `{}`; detached from every key.
pub async fn delete_role(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: DeleteRoleBody = read_json(&req, payload).await?;
    blocking(move || Ok(state.rbac.delete_entity(&principal, EntityKind::Role, &body.role_id)?)).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RolePermissionsBody {
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
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let all =
        link_call::<RolePermissionsBody>(req, payload, state, RbacService::add_role_permissions).await?;
    Ok(HttpResponse::Ok().json(all))
}

/// `permissions.setRolePermissions`: every permission of the role, sorted by name.
pub async fn set_role_permissions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let all =
        link_call::<RolePermissionsBody>(req, payload, state, RbacService::set_role_permissions).await?;
    Ok(HttpResponse::Ok().json(all))
}

/// `permissions.removePermissionsFromRole`: `{}`.
pub async fn remove_permissions_from_role(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    link_call::<RolePermissionsBody>(req, payload, state, RbacService::remove_role_permissions).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}
