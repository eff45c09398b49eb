//! The `keys.*` endpoints: create, get, delete and verify a key; set, add and remove its
//! permissions and roles.

use crate::error::ApiError;
use crate::error::REQUEST_ID_HEADER;
use crate::http::{authenticate, blocking, integer, read_json, read_query};
use crate::state::AppState;
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::Named;
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, ValidationError, check_len, new_id, validate_permission_name,
};
use keygate_rbac::{
    EntityRef, KeyView, NewKey, PermissionQuery, Principal, RbacError, RbacService, Verification, VerifyScope,
};
use keygate_store::SqlStore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PermissionsBody {
    key_id: String,
    permissions: Vec<PermissionRef>,
}

/// `slug` is an alias of `name`; `slug` wins when both are given.
#[derive(Debug, Deserialize)]
#[serde(expecting = "an object with an id or a name")]
pub(crate) struct PermissionRef {
    id: Option<String>,
    name: Option<String>,
    slug: Option<String>,
    create: Option<bool>,
}

impl From<PermissionRef> for EntityRef {
    fn from(r: PermissionRef) -> Self {
        let (name, name_field) = match (r.slug, r.name) {
            (Some(slug), _) => (Some(slug), "slug"),
            (None, name) => (name, "name"),
        };
        EntityRef { id: r.id, name, create: r.create, name_field }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RolesBody {
    key_id: String,
    roles: Vec<RoleRef>,
}

#[derive(Debug, Deserialize)]
#[serde(expecting = "an object with an id or a name")]
struct RoleRef {
    id: Option<String>,
    name: Option<String>,
    create: Option<bool>,
}

impl From<RoleRef> for EntityRef {
    fn from(r: RoleRef) -> Self {
        EntityRef { id: r.id, name: r.name, create: r.create, name_field: "name" }
    }
}

/// A service operation on a key's links: setPermissions, addRoles and the like.
/// A service operation on the links of a key or role: setPermissions, addRoles and the like.
pub(crate) type LinkOp =
    fn(&RbacService<SqlStore>, &Principal, &str, &[EntityRef]) -> Result<Vec<Named>, RbacError>;

/// A request body naming an owner (key or role) and listing references.
pub(crate) trait LinkBody: DeserializeOwned {
    /// (the owner's id, the references)
    fn into_parts(self) -> (String, Vec<EntityRef>);
}

impl LinkBody for PermissionsBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.key_id, self.permissions.into_iter().map(EntityRef::from).collect())
    }
}

impl LinkBody for RolesBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.key_id, self.roles.into_iter().map(EntityRef::from).collect())
    }
}

/// Authenticates, reads a `B` and runs `op` on its owner and references.
pub(crate) async fn link_call<B: LinkBody>(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    op: LinkOp,
) -> Result<Vec<Named>, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let (owner, refs) = read_json::<B>(&req, payload).await?.into_parts();
    blocking(move || Ok(op(&state.rbac, &principal, &owner, &refs)?)).await
}

/// `keys.setPermissions`: every permission now attached, sorted by name.
pub async fn set_permissions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let attached = link_call::<PermissionsBody>(req, payload, state, RbacService::set_permissions).await?;
    Ok(HttpResponse::Ok().json(attached))
}

/// `keys.addPermissions`: every permission now attached, sorted by name.
pub async fn add_permissions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let attached = link_call::<PermissionsBody>(req, payload, state, RbacService::add_permissions).await?;
    Ok(HttpResponse::Ok().json(attached))
}

/// `keys.removePermissions`: `{}` (Unkey's shape).
pub async fn remove_permissions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    link_call::<PermissionsBody>(req, payload, state, RbacService::remove_permissions).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

/// `keys.addRoles`: every role now attached, sorted by name.
pub async fn add_roles(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let attached = link_call::<RolesBody>(req, payload, state, RbacService::add_roles).await?;
    Ok(HttpResponse::Ok().json(attached))
}

/// `keys.setRoles`: every role now attached, sorted by name.
pub async fn set_roles(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let attached = link_call::<RolesBody>(req, payload, state, RbacService::set_roles).await?;
    Ok(HttpResponse::Ok().json(attached))
}

/// `keys.removeRoles`: `{}` (Unkey's shape).
pub async fn remove_roles(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    link_call::<RolesBody>(req, payload, state, RbacService::remove_roles).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetKeyBody {
    key_id: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyResponse {
    id: String,
    workspace_id: String,
    /// The `apiId` label given at creation (null when none was given).
    api_id: Option<String>,
    start: String,
    name: Option<String>,
    meta: Option<serde_json::Value>,
    enabled: bool,
    expires: Option<i64>,
    created_at: i64,
    permissions: Vec<Named>,
    roles: Vec<Named>,
}

impl From<KeyView> for KeyResponse {
    fn from(v: KeyView) -> Self {
        let meta = v.key.meta.as_deref().and_then(|m| serde_json::from_str(m).ok());
        Self {
            id: v.key.id,
            workspace_id: v.key.workspace_id,
            api_id: v.key.api_id,
            start: v.key.start,
            name: v.key.name,
            meta,
            enabled: v.key.enabled,
            expires: v.key.expires,
            created_at: v.key.created_at,
            permissions: v.permissions,
            roles: v.roles,
        }
    }
}

/// `GET /v1/keys.getKey?keyId=...` (or POST with `{"keyId"}`).
pub async fn get_key(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let key_id = if req.method() == actix_web::http::Method::GET {
        read_query::<GetKeyBody>(&req)?.key_id
    } else {
        read_json::<GetKeyBody>(&req, payload).await?.key_id
    };
    let view = blocking(move || Ok(state.rbac.get_key(&principal, &key_id)?)).await?;
    Ok(HttpResponse::Ok().json(KeyResponse::from(view)))
}

/// `keys.createKey`. Unkey's other fields (`byteLength`, `ownerId`, `externalId`,
/// `remaining`, `refill`, `ratelimit`, `environment`) are accepted and ignored, like every
/// unknown field.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateKeyBody {
    api_id: Option<String>,
    name: Option<String>,
    prefix: Option<String>,
    meta: Option<Map<String, Value>>,
    expires: Option<Number>,
    enabled: Option<bool>,
    permissions: Option<Vec<String>>,
    roles: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CreatedKey {
    key_id: String,
    key: String,
}

pub async fn create_key(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: CreateKeyBody = read_json(&req, payload).await?;
    let expires = match &body.expires {
        // Bounded by 2^53 - 1, so the conversion cannot fail.
        Some(n) => Some(i64::try_from(integer("expires", n, 0)?).unwrap_or(i64::MAX)),
        None => None,
    };
    let new = NewKey {
        api_id: body.api_id,
        name: body.name,
        prefix: body.prefix,
        meta: body.meta.map(|m| Value::Object(m).to_string()),
        expires,
        enabled: body.enabled.unwrap_or(true),
        permissions: body.permissions.unwrap_or_default(),
        roles: body.roles.unwrap_or_default(),
    };
    let (key, secret) = blocking(move || Ok(state.rbac.create_key_as(&principal, new)?)).await?;
    Ok(HttpResponse::Ok().json(CreatedKey { key_id: key.id, key: secret.expose().to_string() }))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteKeyBody {
    key_id: String,
    /// Unkey's soft/hard delete switch: keygate always deletes for good.
    #[allow(dead_code)]
    permanent: Option<bool>,
}

/// `keys.deleteKey`: `{}` on success.
pub async fn delete_key(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: DeleteKeyBody = read_json(&req, payload).await?;
    blocking(move || Ok(state.rbac.delete_key(&principal, &body.key_id)?)).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}

/// The most names and `and`/`or` nodes one verification query may hold.
const MAX_QUERY_NODES: usize = 1_000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VerifyKeyBody {
    key: String,
    /// Only keys created with this `apiId` verify (others: `NOT_FOUND`).
    api_id: Option<String>,
    authorization: Option<AuthorizationBody>,
}

#[derive(Debug, Deserialize)]
struct AuthorizationBody {
    permissions: Option<Value>,
}

/// `Query = string | {"and": [Query, ...]} | {"or": [Query, ...]}`.
fn permission_query(path: &str, v: &Value, nodes: &mut usize) -> Result<PermissionQuery, ValidationError> {
    *nodes += 1;
    if *nodes > MAX_QUERY_NODES {
        return Err(ValidationError::new(path, format!("a query holds at most {MAX_QUERY_NODES} entries")));
    }
    let shape = || {
        ValidationError::new(path, "must be a permission name or an object with one \"and\" or \"or\" list")
    };
    match v {
        Value::String(name) => {
            validate_permission_name(path, name)?;
            Ok(PermissionQuery::Permission(name.clone()))
        }
        Value::Object(map) if map.len() == 1 => {
            let (op, list) = map.iter().next().ok_or_else(shape)?;
            let Value::Array(items) = list else {
                return Err(ValidationError::new(format!("{path}.{op}"), "must be a list"));
            };
            if items.is_empty() {
                return Err(ValidationError::new(format!("{path}.{op}"), "must not be empty"));
            }
            let subs = items
                .iter()
                .enumerate()
                .map(|(i, q)| permission_query(&format!("{path}.{op}.{i}"), q, nodes))
                .collect::<Result<Vec<_>, _>>()?;
            match op.as_str() {
                "and" => Ok(PermissionQuery::And(subs)),
                "or" => Ok(PermissionQuery::Or(subs)),
                _ => Err(shape()),
            }
        }
        _ => Err(shape()),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct VerifyKeyResponse {
    /// Unkey's verifyKey body carries the request id (unkey-py requires it); equal to the
    /// `Unkey-Request-Id` header.
    request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_id: Option<String>,
    /// The key's `apiId` label, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    api_id: Option<String>,
    valid: bool,
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    permissions: Vec<String>,
    roles: Vec<String>,
}

impl VerifyKeyResponse {
    fn new(v: Verification, request_id: String) -> Self {
        let valid = v.valid();
        let key = v.key;
        Self {
            request_id,
            valid,
            code: v.code.as_str(),
            key_id: key.as_ref().map(|k| k.id.clone()),
            api_id: key.as_ref().and_then(|k| k.api_id.clone()),
            name: key.as_ref().and_then(|k| k.name.clone()),
            meta: key.as_ref().and_then(|k| k.meta.as_deref()).and_then(|m| serde_json::from_str(m).ok()),
            expires: key.as_ref().and_then(|k| k.expires),
            enabled: key.as_ref().map(|k| k.enabled),
            permissions: v.permissions,
            roles: v.roles,
        }
    }
}

/// `keys.verifyKey`: the key's secret is in the body. Always 200 for a well-formed
/// request: `valid` and `code` carry the answer. The root key is optional; when the call
/// carries one (it must then be valid: 401 otherwise), only keys of its workspace are
/// found, and when the body names an `apiId`, only keys carrying it (docs/api.md, tenancy).
pub async fn verify_key(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let caller = match req.headers().contains_key(actix_web::http::header::AUTHORIZATION) {
        true => Some(authenticate(&req, &state).await?),
        false => None,
    };
    let body: VerifyKeyBody = read_json(&req, payload).await?;
    if let Some(api_id) = &body.api_id {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
    }
    let query = match body.authorization.and_then(|a| a.permissions) {
        Some(v) => Some(permission_query("authorization.permissions", &v, &mut 0)?),
        None => None,
    };
    let verification = blocking(move || {
        let scope = VerifyScope {
            workspace_id: caller.as_ref().map(|p| p.workspace_id.as_str()),
            api_id: body.api_id.as_deref(),
        };
        Ok(state.rbac.verify_key(&body.key, &scope, query.as_ref())?)
    })
    .await?;
    let request_id = new_id(IdPrefix::Request);
    Ok(HttpResponse::Ok()
        .insert_header((REQUEST_ID_HEADER, request_id.as_str()))
        .json(VerifyKeyResponse::new(verification, request_id)))
}
