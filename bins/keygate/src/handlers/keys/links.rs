//! A key's permissions and roles, both APIs: v1's set, add and remove of references (by
//! id or name, `create` flags), v2's of plain strings (slug or name, or id); and [`link`],
//! the helper the role operations of `permissions.*` share with v1's key operations.

use super::{MAX_PERMISSIONS, MAX_ROLES};
use crate::error::ApiError;
use crate::handlers::v2::permissions::{Permission, Role};
use crate::handlers::v2::{Envelope, check_count, check_key_id, ok};
use crate::handlers::{Empty, empty};
use crate::http::{Authed, Json, Obj};
use crate::openapi::{Api, V1BodyErrors, V2Errors, kinds, refine_body, require_one_of, schema_mut};
use actix_web::HttpResponse;
use keygate_domain::Named;
use keygate_rbac::{EntityKind, EntityRef, LinkMode, Principal, RbacError, RbacService, RoleView};
use keygate_store::SqlStore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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

/// A permission by id or name; `slug` is an alias of `name` (and wins when both are given).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(expecting = "an object with an id or a name")]
pub(crate) struct PermissionRef {
    /// A permission id.
    #[schema(min_length = 1, max_length = 255)]
    id: Option<String>,
    /// A permission name; created when missing unless create is false.
    #[schema(schema_with = kinds::permission_name)]
    name: Option<String>,
    /// Alias of name (wins when both are given).
    #[schema(schema_with = kinds::permission_name)]
    slug: Option<String>,
    create: Option<bool>,
}

impl From<PermissionRef> for EntityRef {
    fn from(r: PermissionRef) -> Self {
        let (name, name_field) = match (r.slug, r.name) {
            (Some(slug), _) => (Some(slug), "slug"),
            (None, name) => (name, "name"),
        };
        EntityRef { id: r.id, name, create: r.create, name_field, or_id: false }
    }
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

/// A role by id or name.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(expecting = "an object with an id or a name")]
pub(crate) struct RoleRef {
    /// A role id.
    #[schema(min_length = 1, max_length = 255)]
    id: Option<String>,
    /// A role name; created only with create: true.
    #[schema(schema_with = kinds::role_name)]
    name: Option<String>,
    create: Option<bool>,
}

impl From<RoleRef> for EntityRef {
    fn from(r: RoleRef) -> Self {
        EntityRef { id: r.id, name: r.name, create: r.create, name_field: "name", or_id: false }
    }
}

/// A service operation on the links of a key or role: setPermissions, addRoles and the like.
pub(crate) type LinkOp =
    fn(&RbacService<SqlStore>, &Principal, &str, &[EntityRef]) -> Result<Vec<Named>, RbacError>;

/// A request body naming an owner (key or role) and listing references.
pub(crate) trait LinkBody: DeserializeOwned + Send + 'static {
    /// (the owner's id, the references)
    fn into_parts(self) -> (String, Vec<EntityRef>);
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

/// Runs `op` on the owner and references of the call's body.
pub(crate) async fn link<B: LinkBody>(call: Authed<Json<B>>, op: LinkOp) -> Result<Vec<NamedItem>, ApiError> {
    let all = call
        .run(move |kg, principal, Json(body)| {
            let (owner, refs) = body.into_parts();
            op(&kg.rbac, principal, &owner, &refs)
        })
        .await?;
    Ok(all.into_iter().map(NamedItem::from).collect())
}

/// A permission or role as v1's lists show it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Named)]
pub(crate) struct NamedItem {
    id: String,
    name: String,
}

impl From<Named> for NamedItem {
    fn from(n: Named) -> Self {
        Self { id: n.id, name: n.name }
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

/// A [`PermissionRef`] or [`RoleRef`] in a room's document needs an id or a name.
pub(crate) fn references_need_id_or_name(doc: &mut Value, names: &[&str]) {
    for name in names {
        let fields: &[&str] =
            if *name == "PermissionRef" { &["id", "name", "slug"] } else { &["id", "name"] };
        require_one_of(schema_mut(doc, name), fields, false);
    }
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
