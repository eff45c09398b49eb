//! `keys.createKey`, `keys.getKey`, `keys.deleteKey`, `keys.setPermissions`, `keys.addRoles`.

use crate::error::ApiError;
use crate::http::{authenticate, blocking, integer, read_json};
use crate::server::AppState;
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::Named;
use keygate_rbac::{EntityRef, KeyView, NewKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetPermissionsBody {
    key_id: String,
    permissions: Vec<PermissionRef>,
}

/// `slug` is an alias of `name`; `slug` wins when both are given.
#[derive(Debug, Deserialize)]
#[serde(expecting = "an object with an id or a name")]
struct PermissionRef {
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
struct AddRolesBody {
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

pub async fn set_permissions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: SetPermissionsBody = read_json(&req, payload).await?;
    let refs: Vec<EntityRef> = body.permissions.into_iter().map(EntityRef::from).collect();
    let result: Vec<Named> =
        blocking(move || Ok(state.rbac.set_permissions(&principal, &body.key_id, &refs)?)).await?;
    Ok(HttpResponse::Ok().json(result))
}

pub async fn add_roles(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let principal = authenticate(&req, &state).await?;
    let body: AddRolesBody = read_json(&req, payload).await?;
    let refs: Vec<EntityRef> = body.roles.into_iter().map(EntityRef::from).collect();
    let result: Vec<Named> =
        blocking(move || Ok(state.rbac.add_roles(&principal, &body.key_id, &refs)?)).await?;
    Ok(HttpResponse::Ok().json(result))
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
        let query = web::Query::<GetKeyBody>::from_query(req.query_string())
            .map_err(|_| ApiError::bad_request("keyId: is required (query parameter ?keyId=...)"))?;
        query.into_inner().key_id
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
