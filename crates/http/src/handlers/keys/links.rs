//! A key's permissions and roles, both APIs: v1's set, add and remove of references (by
//! id or name, `create` flags: [`crate::handlers::references`]), v2's of plain strings
//! (slug or name, or id).

use super::shared::{MAX_PERMISSIONS, MAX_ROLES};
use crate::error::ApiError;
use crate::handlers::references::{
    LinkBody, NamedItem, PermissionRef, RoleRef, link, references_need_id_or_name,
};
use crate::handlers::v2::permissions::{Permission, Role};
use crate::handlers::v2::{Envelope, check_count, check_key_id, ok};
use crate::handlers::{Empty, empty};
use crate::openapi::{Api, V1BodyErrors, V2Errors, kinds, refine_body};
use crate::plumbing::{Authed, Json, Obj};
use actix_web::HttpResponse;
use keygate_rbac::{EntityKind, EntityRef, LinkMode, RbacService, RoleView};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionsBody {
    /// A key id.
    #[schema(min_length = 1, max_length = 255)]
    key_id: String,
    #[schema(max_items = 1000, value_type = Vec<PermissionRef>)]
    permissions: Vec<Obj<PermissionRef>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolesBody {
    /// A key id.
    #[schema(min_length = 1, max_length = 255)]
    key_id: String,
    #[schema(max_items = 1000, value_type = Vec<RoleRef>)]
    roles: Vec<Obj<RoleRef>>,
}

impl LinkBody for PermissionsBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.key_id, self.permissions.into_iter().map(|Obj(r)| EntityRef::from(r)).collect())
    }
}

impl LinkBody for RolesBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.key_id, self.roles.into_iter().map(|Obj(r)| EntityRef::from(r)).collect())
    }
}

/// The key's direct permissions become exactly the list
///
/// Every permission now attached, sorted by name.
#[utoipa::path(post, path = "/v1/keys.setPermissions", operation_id = "keys.setPermissions", tag = "keys",
    request_body = PermissionsBody,
    responses((status = 200, description = "OK", body = Vec<NamedItem>), V1BodyErrors))]
pub async fn set_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::set_permissions).await?))
}

/// Attaches permissions to the key (missing names are created unless create is false)
///
/// Every permission now attached, sorted by name.
#[utoipa::path(post, path = "/v1/keys.addPermissions", operation_id = "keys.addPermissions", tag = "keys",
    request_body = PermissionsBody,
    responses((status = 200, description = "OK", body = Vec<NamedItem>), V1BodyErrors))]
pub async fn add_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::add_permissions).await?))
}

/// Detaches permissions from the key
///
/// `{}` (Unkey's shape).
#[utoipa::path(post, path = "/v1/keys.removePermissions", operation_id = "keys.removePermissions", tag = "keys",
    request_body = PermissionsBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn remove_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    link(call, RbacService::remove_permissions).await?;
    Ok(empty())
}

/// Attaches roles to the key
///
/// Every role now attached, sorted by name.
#[utoipa::path(post, path = "/v1/keys.addRoles", operation_id = "keys.addRoles", tag = "keys",
    request_body = RolesBody,
    responses((status = 200, description = "OK", body = Vec<NamedItem>), V1BodyErrors))]
pub async fn add_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::add_roles).await?))
}

/// The key's roles become exactly the list
///
/// Every role now attached, sorted by name.
#[utoipa::path(post, path = "/v1/keys.setRoles", operation_id = "keys.setRoles", tag = "keys",
    request_body = RolesBody,
    responses((status = 200, description = "OK", body = Vec<NamedItem>), V1BodyErrors))]
pub async fn set_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::set_roles).await?))
}

/// Detaches roles from the key
///
/// `{}` (Unkey's shape).
#[utoipa::path(post, path = "/v1/keys.removeRoles", operation_id = "keys.removeRoles", tag = "keys",
    request_body = RolesBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn remove_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    link(call, RbacService::remove_roles).await?;
    Ok(empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = PermissionsBody)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionsBodyV2 {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// Permission slugs (or ids).
    #[schema(schema_with = kinds::permission_names)]
    permissions: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = RolesBody)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolesBodyV2 {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// Role names (or ids).
    #[schema(schema_with = kinds::role_names_100)]
    roles: Vec<String>,
}

/// A key call's body: the key and the strings it lists.
pub(crate) trait KeyLinks: serde::de::DeserializeOwned + Send + 'static {
    fn parts(self) -> (String, Vec<String>);
}

impl KeyLinks for PermissionsBodyV2 {
    fn parts(self) -> (String, Vec<String>) {
        (self.key_id, self.permissions)
    }
}

impl KeyLinks for RolesBodyV2 {
    fn parts(self) -> (String, Vec<String>) {
        (self.key_id, self.roles)
    }
}

async fn change<B: KeyLinks>(
    call: Authed<Json<B>>,
    kind: EntityKind,
    mode: LinkMode,
) -> Result<Vec<RoleView>, ApiError> {
    let Authed { principal, input: Json(body), state } = call;
    let (key_id, refs) = body.parts();
    check_key_id(&key_id)?;
    check_count(kind.plural(), &refs, if kind == EntityKind::Role { MAX_ROLES } else { MAX_PERMISSIONS })?;
    let call = Authed { principal, input: (key_id, refs), state };
    call.run(move |kg, p, (key_id, refs)| kg.rbac.change_key_links(p, &key_id, kind, mode, &refs)).await
}

fn permissions_answer(all: Vec<RoleView>) -> HttpResponse {
    ok(all.into_iter().map(|v| Permission::from(v.role)).collect::<Vec<_>>())
}

fn roles_answer(all: Vec<RoleView>) -> HttpResponse {
    ok(all.into_iter().map(Role::from).collect::<Vec<_>>())
}

/// The key's direct permissions become exactly the list
///
/// Answers every permission now on the key.
#[utoipa::path(post, path = "/v2/keys.setPermissions", operation_id = "keys.setPermissions", tag = "keys",
    request_body = PermissionsBodyV2,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
pub async fn set_permissions_v2(call: Authed<Json<PermissionsBodyV2>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Replace).await?))
}

/// Attaches the list (missing slugs are created)
///
/// Answers every permission now on the key.
#[utoipa::path(post, path = "/v2/keys.addPermissions", operation_id = "keys.addPermissions", tag = "keys",
    request_body = PermissionsBodyV2,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
pub async fn add_permissions_v2(call: Authed<Json<PermissionsBodyV2>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Add).await?))
}

/// Detaches the list (each must exist)
///
/// Answers every permission now on the key.
#[utoipa::path(post, path = "/v2/keys.removePermissions", operation_id = "keys.removePermissions", tag = "keys",
    request_body = PermissionsBodyV2,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
pub async fn remove_permissions_v2(call: Authed<Json<PermissionsBodyV2>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Remove).await?))
}

/// The key's roles become exactly the list
///
/// Answers every role now on the key.
#[utoipa::path(post, path = "/v2/keys.setRoles", operation_id = "keys.setRoles", tag = "keys",
    request_body = RolesBodyV2,
    responses((status = 200, description = "OK", body = Envelope<Vec<Role>>), V2Errors))]
pub async fn set_roles_v2(call: Authed<Json<RolesBodyV2>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Replace).await?))
}

/// Attaches the list (each must exist)
///
/// Answers every role now on the key.
#[utoipa::path(post, path = "/v2/keys.addRoles", operation_id = "keys.addRoles", tag = "keys",
    request_body = RolesBodyV2,
    responses((status = 200, description = "OK", body = Envelope<Vec<Role>>), V2Errors))]
pub async fn add_roles_v2(call: Authed<Json<RolesBodyV2>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Add).await?))
}

/// Detaches the list (each must exist)
///
/// Answers every role now on the key.
#[utoipa::path(post, path = "/v2/keys.removeRoles", operation_id = "keys.removeRoles", tag = "keys",
    request_body = RolesBodyV2,
    responses((status = 200, description = "OK", body = Envelope<Vec<Role>>), V2Errors))]
pub async fn remove_roles_v2(call: Authed<Json<RolesBodyV2>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Remove).await?))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(set_permissions, add_permissions, remove_permissions, add_roles, set_roles, remove_roles))]
struct V1Doc;

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    set_permissions_v2,
    add_permissions_v2,
    remove_permissions_v2,
    set_roles_v2,
    add_roles_v2,
    remove_roles_v2
))]
struct V2Doc;

/// This room's part of a document: a v1 reference names an id or a name; `add*` and
/// `remove*` take at least one entry (`set*`, with the same body, takes none).
pub(crate) fn openapi(api: Api) -> Value {
    let (mut doc, prefix) = match api {
        Api::V1 => (crate::openapi::room::<V1Doc>(), "/v1"),
        Api::V2 => (crate::openapi::room::<V2Doc>(), "/v2"),
    };
    if api == Api::V1 {
        references_need_id_or_name(&mut doc, &["PermissionRef", "RoleRef"]);
    }
    for (op, list) in [
        ("addPermissions", "permissions"),
        ("removePermissions", "permissions"),
        ("addRoles", "roles"),
        ("removeRoles", "roles"),
    ] {
        refine_body(&mut doc, &format!("{prefix}/keys.{op}"), "post", |body| {
            body["properties"][list]["minItems"] = 1.into()
        });
    }
    doc
}
