//! The `keys.*` endpoints: create, get, delete and verify a key; set, add and remove its
//! permissions and roles.

use super::{Empty, empty};
use crate::error::{ApiError, REQUEST_ID_HEADER};
use crate::http::blocking;
use crate::http::{Authed, Json, Obj, QueryOrJson, integer};
use crate::openapi::{V1BodyErrors, V1QueryErrors, kinds, refine_body, require_one_of, schema_mut};
use crate::state::AppState;
use actix_web::HttpResponse;
use actix_web::web;
use keygate_domain::Named;
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, ValidationError, check_len, new_id, validate_permission_name,
};
use keygate_rbac::{
    EntityRef, KeyView, MAX_QUERY_NODES, NewKey, PermissionQuery, Principal, RbacError, RbacService,
    Verification, VerifyScope,
};
use keygate_store::SqlStore;
use keygate_usage::{LimitAsk, Usage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use std::sync::Arc;
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

#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct GetKeyBody {
    /// A key id.
    #[schema(min_length = 1, max_length = 255)]
    #[param(min_length = 1, max_length = 255)]
    key_id: String,
}

/// v1's Key: with its direct permissions and roles.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Key)]
pub(crate) struct KeyResponse {
    id: String,
    workspace_id: String,
    /// The `apiId` label given at creation (null when none was given).
    #[schema(required = true)]
    api_id: Option<String>,
    start: String,
    #[schema(required = true)]
    name: Option<String>,
    #[schema(value_type = Option<Object>, required = true)]
    meta: Option<serde_json::Value>,
    enabled: bool,
    /// Unix ms.
    #[schema(required = true)]
    expires: Option<i64>,
    /// Unix ms.
    created_at: i64,
    permissions: Vec<NamedItem>,
    roles: Vec<NamedItem>,
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
            permissions: v.permissions.into_iter().map(NamedItem::from).collect(),
            roles: v.roles.into_iter().map(NamedItem::from).collect(),
        }
    }
}

/// A key with its direct permissions and roles
#[utoipa::path(get, path = "/v1/keys.getKey", operation_id = "keys.getKey", tag = "keys", params(GetKeyBody),
    responses((status = 200, description = "OK", body = KeyResponse), V1QueryErrors))]
pub async fn get_key(call: Authed<QueryOrJson<GetKeyBody>>) -> Result<HttpResponse, ApiError> {
    let view = call.run(|kg, principal, QueryOrJson(q)| kg.rbac.get_key(principal, &q.key_id)).await?;
    Ok(HttpResponse::Ok().json(KeyResponse::from(view)))
}

/// `keys.createKey`. Unkey's other fields (`byteLength`, `ownerId`, `externalId`,
/// `remaining`, `refill`, `ratelimit`, `environment`) are accepted and ignored, like every
/// unknown field.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateKeyBody {
    /// A label stored on the key; scopes api.<apiId>.create_key and verifications naming it.
    #[schema(min_length = 1, max_length = 255, example = "api_1234")]
    api_id: Option<String>,
    #[schema(schema_with = kinds::role_name)]
    name: Option<String>,
    #[schema(min_length = 1, max_length = 8, pattern = "^[A-Za-z0-9_]+$", example = "prod")]
    prefix: Option<String>,
    /// Any JSON object, at most 64 KiB serialized.
    #[schema(value_type = Option<Object>)]
    meta: Option<Map<String, Value>>,
    /// Unix ms; a past value gives a key that verifies EXPIRED.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    expires: Option<Number>,
    enabled: Option<bool>,
    /// Permission names; missing ones are created.
    #[schema(schema_with = kinds::permission_names_or_null)]
    permissions: Option<Vec<String>>,
    /// Role names; each must exist.
    #[schema(schema_with = kinds::role_names_or_null)]
    roles: Option<Vec<String>>,
    /// Links the key to the identity with this externalId (as v2's createKey), created when
    /// missing, which needs `identity.*.create_identity`.
    #[schema(min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$")]
    external_id: Option<String>,
}

/// The answer of `createKey` (v1; v2's `data`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedKey {
    key_id: String,
    /// The secret: shown this once.
    key: String,
}

impl CreatedKey {
    pub(crate) fn new(key_id: String, key: String) -> Self {
        Self { key_id, key }
    }
}

/// Create a key (the secret is shown once)
#[utoipa::path(post, path = "/v1/keys.createKey", operation_id = "keys.createKey", tag = "keys",
    request_body = CreateKeyBody,
    responses((status = 200, description = "OK", body = CreatedKey), V1BodyErrors))]
pub async fn create_key(mut call: Authed<Json<CreateKeyBody>>) -> Result<HttpResponse, ApiError> {
    let body = std::mem::take(&mut call.input.0);
    let expires = match &body.expires {
        // Bounded by 2^53 - 1, so the conversion cannot fail.
        Some(n) => Some(i64::try_from(integer("expires", n, 0)?).unwrap_or(i64::MAX)),
        None => None,
    };
    let new = NewKey {
        api_id: body.api_id,
        external_id: body.external_id,
        ratelimits: Vec::new(),
        credits: None,
        name: body.name,
        prefix: body.prefix,
        meta: body.meta.map(|m| Value::Object(m).to_string()),
        expires,
        enabled: body.enabled.unwrap_or(true),
        permissions: body.permissions.unwrap_or_default(),
        roles: body.roles.unwrap_or_default(),
        byte_length: None,
    };
    let (key, secret) = call.run(|kg, principal, _| kg.rbac.create_key_as(principal, new)).await?;
    Ok(HttpResponse::Ok().json(CreatedKey::new(key.id, secret.expose().to_string())))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteKeyBody {
    /// A key id.
    #[schema(min_length = 1, max_length = 255)]
    pub(crate) key_id: String,
    /// Unkey's soft/hard delete switch: keygate always deletes for good (v1 and v2).
    #[allow(dead_code)]
    permanent: Option<bool>,
}

/// Delete a key
///
/// `{}` on success; keygate always deletes for good.
#[utoipa::path(post, path = "/v1/keys.deleteKey", operation_id = "keys.deleteKey", tag = "keys",
    request_body = DeleteKeyBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn delete_key(call: Authed<Json<DeleteKeyBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, principal, Json(body)| kg.rbac.delete_key(principal, &body.key_id)).await?;
    Ok(empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeyBody {
    /// The key's secret (an empty or unknown one verifies NOT_FOUND).
    #[schema(max_length = 1_048_576, example = "prod_3ZfVhpSSRW2ctYrnWC3SDbLC")]
    key: String,
    /// Only a key created with this apiId verifies; any other answers NOT_FOUND.
    #[schema(min_length = 1, max_length = 255)]
    api_id: Option<String>,
    #[schema(inline, value_type = Option<AuthorizationBody>)]
    authorization: Option<Obj<AuthorizationBody>>,
    /// The credits this verification takes (default 1).
    #[schema(inline, value_type = Option<CostBody>)]
    remaining: Option<Obj<CostBody>>,
    /// Unkey v1's single rate limit: the cost taken from the limit named `default` of the
    /// key or its identity, when it has one.
    #[schema(inline, value_type = Option<CostBody>)]
    ratelimit: Option<Obj<CostBody>>,
    /// Rate limits of the key or its identity to apply, by name (docs/api-v2.md, credits
    /// and rate limits in verifications).
    #[schema(max_items = 50, value_type = Option<Vec<VerifyRatelimit>>)]
    ratelimits: Option<Vec<Obj<VerifyRatelimit>>>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CostBody {
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    cost: Option<Number>,
}

/// A rate limit a verification applies: one of the key's or its identity's, by name (with
/// `limit` and `duration` replacing the stored ones for this call), or an ad-hoc limit of
/// the key (both needed).
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct VerifyRatelimit {
    #[schema(min_length = 1, max_length = 128)]
    name: String,
    /// Tokens taken (default 1).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    cost: Option<Number>,
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1_000_000)]
    limit: Option<Number>,
    /// The window in ms.
    #[schema(value_type = Option<u64>, minimum = 1000, maximum = 2_592_000_000_u64)]
    duration: Option<Number>,
}

/// A request's rate limits (`path`: the field), bounds checked by the service.
pub(crate) fn limit_asks(path: &str, asks: Vec<Obj<VerifyRatelimit>>) -> Result<Vec<LimitAsk>, ApiError> {
    if asks.len() > keygate_usage::MAX_VERIFY_RATELIMITS {
        let msg = format!("at most {} entries", keygate_usage::MAX_VERIFY_RATELIMITS);
        return Err(ValidationError::new(path, msg).into());
    }
    let number = |field: String, n: Option<Number>, min: u64| n.map(|n| integer(&field, &n, min)).transpose();
    asks.into_iter()
        .enumerate()
        .map(|(i, Obj(a))| {
            Ok(LimitAsk {
                cost: number(format!("{path}.{i}.cost"), a.cost, 0)?,
                limit: number(format!("{path}.{i}.limit"), a.limit, 1)?,
                duration: number(format!("{path}.{i}.duration"), a.duration, 1_000)?,
                ..LimitAsk::named(a.name)
            })
        })
        .collect()
}

/// The credit cost a request gives (`path`: the field).
pub(crate) fn cost(path: &str, body: Option<Obj<CostBody>>) -> Result<Option<u64>, ApiError> {
    match body.and_then(|Obj(c)| c.cost) {
        Some(n) => Ok(Some(integer(path, &n, 0)?)),
        None => Ok(None),
    }
}

/// A verification to run: the secret, who may find which keys, the permission query and
/// what it spends. Its `Debug` leaves the secret out.
pub(crate) struct VerifyCall {
    pub secret: String,
    /// The caller's root key, when it sent one: checked still current on the slow path.
    pub principal: Option<Arc<Principal>>,
    pub api_id: Option<String>,
    pub access: Option<keygate_rbac::ApiAccess>,
    pub query: Option<PermissionQuery>,
    pub usage: Usage,
    /// The request's tags (v2), counted with its outcome in analytics.
    pub tags: Vec<String>,
}

impl std::fmt::Debug for VerifyCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyCall")
            .field("secret", &"<redacted>")
            .field("api_id", &self.api_id)
            .field("query", &self.query)
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

impl VerifyCall {
    fn scope(&self) -> VerifyScope<'_> {
        VerifyScope {
            workspace_id: self.principal.as_ref().map(|p| p.workspace_id.as_str()),
            api_id: self.api_id.as_deref(),
            access: self.access.as_ref(),
        }
    }
}

/// Runs a verification for every path that verifies (v1, v2, the gateway): from the cache
/// inline when that needs no I/O, else off the async workers; answered once its credit
/// spend is committed.
pub(crate) async fn verification(
    state: &web::Data<AppState>,
    call: VerifyCall,
) -> Result<Verification, ApiError> {
    let cached = state.usage.verify_cached(&call.secret, &call.scope(), call.query.as_ref(), &call.usage);
    let (pending, call) = match cached {
        Some(pending) => (pending?, call),
        None => {
            let st = state.clone();
            blocking(move || {
                if let Some(p) = &call.principal {
                    st.rbac.ensure_root_key_current(p)?;
                }
                let pending =
                    st.usage.verify(&call.secret, &call.scope(), call.query.as_ref(), &call.usage)?;
                Ok((pending, call))
            })
            .await?
        }
    };
    let verification = pending.settle().await?;
    // Analytics: counted in memory (a check that spends nothing is counted by the call
    // that follows it).
    if !call.usage.check_only {
        state.analytics.record_verification(&verification, &call.scope(), &call.tags);
    }
    Ok(verification)
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct AuthorizationBody {
    #[schema(value_type = Option<PermissionQueryDoc>)]
    permissions: Option<Value>,
}

/// `Query = string | {"and": [Query, ...]} | {"or": [Query, ...]}` (at most
/// [`MAX_QUERY_NODES`] entries in all): what [`permission_query`] reads.
#[derive(Debug)]
pub(crate) struct PermissionQueryDoc;

impl utoipa::PartialSchema for PermissionQueryDoc {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::Ref;
        use utoipa::openapi::schema::AdditionalProperties;
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
        let list = |op: &str| {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    op,
                    ArrayBuilder::new().items(Ref::from_schema_name("PermissionQuery")).min_items(Some(1)),
                )
                .required(op)
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        };
        OneOfBuilder::new().item(kinds::permission_name()).item(list("and")).item(list("or")).into()
    }
}

impl ToSchema for PermissionQueryDoc {
    fn name() -> std::borrow::Cow<'static, str> {
        "PermissionQuery".into()
    }
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

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeyResponse {
    /// Unkey's verifyKey body carries the request id (unkey-py requires it); equal to the
    /// `Unkey-Request-Id` header.
    request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<String>,
    /// The key's `apiId` label, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    api_id: Option<String>,
    valid: bool,
    #[schema(schema_with = verify_codes)]
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    expires: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    enabled: Option<bool>,
    permissions: Vec<String>,
    roles: Vec<String>,
    /// The key's credits left after this verification, when it has credits.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    remaining: Option<u64>,
    /// The limit named `default` among those that applied, else the first by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    ratelimit: Option<V1Ratelimit>,
    /// The identity the key is linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    identity: Option<V1Identity>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct V1Ratelimit {
    limit: u64,
    remaining: u64,
    /// Unix ms at which the window ends.
    reset: u64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct V1Identity {
    id: String,
    external_id: String,
    #[schema(value_type = Object)]
    meta: Value,
}

/// `code` of a verification: one of [`VerifyCode::ALL`](keygate_rbac::VerifyCode::ALL).
pub(crate) fn verify_codes() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(keygate_rbac::VerifyCode::ALL.iter().map(|c| c.as_str())))
        .build()
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
            remaining: v.credits,
            ratelimit: v
                .ratelimits
                .iter()
                .find(|l| l.name == "default")
                .or(v.ratelimits.first())
                .map(|l| V1Ratelimit { limit: l.limit, remaining: l.remaining, reset: l.reset }),
            identity: v.identity.map(|i| V1Identity {
                meta: i
                    .identity
                    .meta
                    .as_deref()
                    .and_then(|m| serde_json::from_str(m).ok())
                    .unwrap_or_else(|| Value::Object(Map::new())),
                id: i.identity.id,
                external_id: i.identity.external_id,
            }),
        }
    }
}

/// Verify a key (and its permissions)
///
/// The key's secret is in the body. Always 200 for a well-formed request: `valid` and
/// `code` carry the answer. The root key is optional; when the call carries one (it must
/// then be valid: 401 otherwise), only keys of its workspace are found, and when the body
/// names an `apiId`, only keys carrying it (docs/api.md, tenancy).
#[utoipa::path(post, path = "/v1/keys.verifyKey", operation_id = "keys.verifyKey", tag = "keys",
    security((), ("rootKey" = [])), request_body = VerifyKeyBody,
    responses((status = 200, description = "OK", body = VerifyKeyResponse), V1BodyErrors))]
pub async fn verify_key(
    call: Authed<Json<VerifyKeyBody>, Option<Arc<Principal>>>,
) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: Json(body), state } = call;
    if let Some(api_id) = &body.api_id {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
    }
    let query = match body.authorization.and_then(|Obj(a)| a.permissions) {
        Some(v) => Some(permission_query("authorization.permissions", &v, &mut 0)?),
        None => None,
    };
    let mut asks = limit_asks("ratelimits", body.ratelimits.unwrap_or_default())?;
    // v1's single limit is the one named `default`; its cost unless `ratelimits` names it.
    if let Some(cost) = cost("ratelimit.cost", body.ratelimit)?
        && !asks.iter().any(|a| a.name == "default")
    {
        asks.push(LimitAsk { cost: Some(cost), if_present: true, ..LimitAsk::named("default") });
    }
    let usage = Usage { cost: cost("remaining.cost", body.remaining)?, ratelimits: asks, check_only: false };
    let call = VerifyCall {
        secret: body.key,
        principal,
        api_id: body.api_id,
        access: None,
        query,
        usage,
        tags: Vec::new(),
    };
    let verification = verification(&state, call).await?;
    let request_id = new_id(IdPrefix::Request);
    Ok(HttpResponse::Ok()
        .insert_header((REQUEST_ID_HEADER, request_id.as_str()))
        .json(VerifyKeyResponse::new(verification, request_id)))
}

// `POST /v1/keys.getKey` with `{"keyId"}`: the same as the GET (one handler, `get_key`,
// reads either); this function only describes the POST form.
#[utoipa::path(post, path = "/v1/keys.getKey", operation_id = "keys.getKey.post", tag = "keys",
    summary = "The same, with the key id in a JSON body",
    request_body = GetKeyBody,
    responses((status = 200, description = "OK", body = KeyResponse), V1BodyErrors))]
#[allow(dead_code)]
fn get_key_post() {}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    set_permissions,
    add_permissions,
    remove_permissions,
    add_roles,
    set_roles,
    remove_roles,
    get_key,
    get_key_post,
    create_key,
    delete_key,
    verify_key
))]
struct Doc;

/// A [`PermissionRef`] or [`RoleRef`] in a room's document needs an id or a name.
pub(crate) fn references_need_id_or_name(doc: &mut Value, names: &[&str]) {
    for name in names {
        let fields: &[&str] =
            if *name == "PermissionRef" { &["id", "name", "slug"] } else { &["id", "name"] };
        require_one_of(schema_mut(doc, name), fields, false);
    }
}

/// This room's part of the v1 document: a reference names an id or a name; `add*` and
/// `remove*` take at least one entry (`set*`, with the same body, takes none).
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    references_need_id_or_name(&mut doc, &["PermissionRef", "RoleRef"]);
    for (path, list) in [
        ("/v1/keys.addPermissions", "permissions"),
        ("/v1/keys.removePermissions", "permissions"),
        ("/v1/keys.addRoles", "roles"),
        ("/v1/keys.removeRoles", "roles"),
    ] {
        refine_body(&mut doc, path, "post", |body| body["properties"][list]["minItems"] = 1.into());
    }
    doc
}
