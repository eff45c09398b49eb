//! The `keys.*` endpoints: create, get, delete and verify a key; set, add and remove its
//! permissions and roles.

use super::empty;
use crate::error::{ApiError, REQUEST_ID_HEADER};
use crate::http::{Authed, Json, QueryOrJson, integer};
use actix_web::HttpResponse;
use keygate_domain::Named;
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, ValidationError, check_len, new_id, validate_permission_name,
};
use keygate_rbac::{
    EntityRef, KeyView, MAX_QUERY_NODES, NewKey, PermissionQuery, Principal, RbacError, RbacService,
    Verification, VerifyScope,
};
use keygate_store::SqlStore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionsBody {
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
        EntityRef { id: r.id, name, create: r.create, name_field, or_id: false }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolesBody {
    key_id: String,
    roles: Vec<RoleRef>,
}

#[derive(Debug, Deserialize)]
#[serde(expecting = "an object with an id or a name")]
pub(crate) struct RoleRef {
    id: Option<String>,
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
        (self.key_id, self.permissions.into_iter().map(EntityRef::from).collect())
    }
}

impl LinkBody for RolesBody {
    fn into_parts(self) -> (String, Vec<EntityRef>) {
        (self.key_id, self.roles.into_iter().map(EntityRef::from).collect())
    }
}

/// Runs `op` on the owner and references of the call's body.
pub(crate) async fn link<B: LinkBody>(call: Authed<Json<B>>, op: LinkOp) -> Result<Vec<Named>, ApiError> {
    call.run(move |rbac, principal, Json(body)| {
        let (owner, refs) = body.into_parts();
        op(rbac, principal, &owner, &refs)
    })
    .await
}

/// `keys.setPermissions`: every permission now attached, sorted by name.
pub async fn set_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::set_permissions).await?))
}

/// `keys.addPermissions`: every permission now attached, sorted by name.
pub async fn add_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::add_permissions).await?))
}

/// `keys.removePermissions`: `{}` (Unkey's shape).
pub async fn remove_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    link(call, RbacService::remove_permissions).await?;
    Ok(empty())
}

/// `keys.addRoles`: every role now attached, sorted by name.
pub async fn add_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::add_roles).await?))
}

/// `keys.setRoles`: every role now attached, sorted by name.
pub async fn set_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(link(call, RbacService::set_roles).await?))
}

/// `keys.removeRoles`: `{}` (Unkey's shape).
pub async fn remove_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    link(call, RbacService::remove_roles).await?;
    Ok(empty())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetKeyBody {
    key_id: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeyResponse {
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
pub async fn get_key(call: Authed<QueryOrJson<GetKeyBody>>) -> Result<HttpResponse, ApiError> {
    let view = call.run(|rbac, principal, QueryOrJson(q)| rbac.get_key(principal, &q.key_id)).await?;
    Ok(HttpResponse::Ok().json(KeyResponse::from(view)))
}

/// `keys.createKey`. Unkey's other fields (`byteLength`, `ownerId`, `externalId`,
/// `remaining`, `refill`, `ratelimit`, `environment`) are accepted and ignored, like every
/// unknown field.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateKeyBody {
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
pub(crate) struct CreatedKey {
    key_id: String,
    key: String,
}

pub async fn create_key(mut call: Authed<Json<CreateKeyBody>>) -> Result<HttpResponse, ApiError> {
    let body = std::mem::take(&mut call.input.0);
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
        byte_length: None,
    };
    let (key, secret) = call.run(|rbac, principal, _| rbac.create_key_as(principal, new)).await?;
    Ok(HttpResponse::Ok().json(CreatedKey { key_id: key.id, key: secret.expose().to_string() }))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteKeyBody {
    pub(crate) key_id: String,
    /// Unkey's soft/hard delete switch: keygate always deletes for good (v1 and v2).
    #[allow(dead_code)]
    permanent: Option<bool>,
}

/// `keys.deleteKey`: `{}` on success.
pub async fn delete_key(call: Authed<Json<DeleteKeyBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|rbac, principal, Json(body)| rbac.delete_key(principal, &body.key_id)).await?;
    Ok(empty())
}

/// The most names and `and`/`or` nodes one verification query may hold.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeyBody {
    key: String,
    /// Only keys created with this `apiId` verify (others: `NOT_FOUND`).
    api_id: Option<String>,
    authorization: Option<AuthorizationBody>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct AuthorizationBody {
    permissions: Option<Value>,
}

/// `Query = string | {"and": [Query, ...]} | {"or": [Query, ...]}`: v1's object form of a
/// [`PermissionQuery`] (v2's string form: `keygate_rbac::parse_permission_query`; both are
/// bounded by [`MAX_QUERY_NODES`] and evaluated alike).
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
pub(crate) struct VerifyKeyResponse {
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

/// Which keys a verification may find: the caller's workspace (when it sent a root key) and
/// the body's `apiId`.
fn scope<'a>(caller: &'a Option<Arc<Principal>>, body: &'a VerifyKeyBody) -> VerifyScope<'a> {
    VerifyScope {
        workspace_id: caller.as_ref().map(|p| p.workspace_id.as_str()),
        api_id: body.api_id.as_deref(),
        access: None,
    }
}

/// `keys.verifyKey`: the key's secret is in the body. Always 200 for a well-formed
/// request: `valid` and `code` carry the answer. The root key is optional; when the call
/// carries one (it must then be valid: 401 otherwise), only keys of its workspace are
/// found, and when the body names an `apiId`, only keys carrying it (docs/api.md, tenancy).
pub async fn verify_key(
    mut call: Authed<Json<VerifyKeyBody>, Option<Arc<Principal>>>,
) -> Result<HttpResponse, ApiError> {
    let body = &mut call.input.0;
    if let Some(api_id) = &body.api_id {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
    }
    let query = match body.authorization.take().and_then(|a| a.permissions) {
        Some(v) => Some(permission_query("authorization.permissions", &v, &mut 0)?),
        None => None,
    };
    // A current cached answer needs no I/O: inline; else off the async workers.
    let cached = call.state.rbac.verify_key_cached(
        &call.input.0.key,
        &scope(&call.principal, &call.input.0),
        query.as_ref(),
    );
    let verification = match cached {
        Some(v) => v,
        None => {
            call.run(move |rbac, caller, Json(body)| {
                rbac.verify_key(&body.key, &scope(caller, &body), query.as_ref())
            })
            .await?
        }
    };
    let request_id = new_id(IdPrefix::Request);
    Ok(HttpResponse::Ok()
        .insert_header((REQUEST_ID_HEADER, request_id.as_str()))
        .json(VerifyKeyResponse::new(verification, request_id)))
}
