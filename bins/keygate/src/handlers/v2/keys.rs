//! v2 `keys.*`: create, read (by id or by secret), delete and verify keys; set, add and
//! remove their permissions and roles by plain strings (slug or name, or id).

use super::credits::{CreditsObject, CreditsRequest, RefillRequest, new_credits};
use super::identities::{IdentityObject, RatelimitObject, RatelimitRequest, new_ratelimits};
use super::permissions::{Permission, Role};
use super::{Empty, Envelope};
use super::{check_count, check_key_id, check_opt_len, ok, ok_empty, unsupported};
use crate::error::{ApiError, problems};
use crate::handlers::keys::{
    CreatedKey, DeleteKeyBody, VerifyCall, VerifyRatelimit, limit_asks, verification,
};
use crate::http::{Authed, Json, Obj, integer};
use crate::openapi::{V2Errors, V2Precondition, kinds, refine_body};
use actix_web::HttpResponse;
use keygate_domain::{ErrorCode, MAX_NAME_CHARS, Patch, ValidationError, check_len};
use keygate_rbac::{
    ApiAccess, EntityKind, KeyLookup, KeySummary, LimitOutcome, LinkMode, MAX_KEY_META_BYTES,
    MAX_V2_KEY_PREFIX_CHARS, MAX_VERIFY_KEY_CHARS, NewKey, PermissionQuery, RoleView, Verification,
    VerifyCode, parse_permission_query,
};
use keygate_rbac::{Principal, RbacError};
use keygate_runtime::Runtime;
use keygate_usage::Usage;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use utoipa::ToSchema;

/// The latest `expires` v2 takes (2100-01-01).
const MAX_EXPIRES_MS: u64 = 4_102_444_800_000;
/// The most roles and permissions one key call names.
const MAX_ROLES: usize = 100;
const MAX_PERMISSIONS: usize = 1000;

/// v2's Key object (`getKey`, `whoami`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Key)]
pub(crate) struct KeyObject {
    key_id: String,
    /// The first characters of the secret.
    start: String,
    enabled: bool,
    /// Unix ms.
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    meta: Option<Value>,
    /// Unix ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    expires: Option<i64>,
    permissions: Vec<String>,
    roles: Vec<String>,
    /// The identity the key is linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    identity: Option<IdentityObject>,
    /// The key's credits, when it has a credit setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    credits: Option<CreditsObject>,
    /// The key's own rate limits, by name (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ratelimits: Vec<RatelimitObject>,
    /// When it was last verified (Unix ms, the start of that minute; absent: never, or
    /// analytics are off).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    last_used: Option<i64>,
}

impl From<KeySummary> for KeyObject {
    fn from(s: KeySummary) -> Self {
        let k = s.key;
        Self {
            meta: k.meta.as_deref().and_then(|m| serde_json::from_str(m).ok()),
            key_id: k.id,
            start: k.start,
            enabled: k.enabled,
            created_at: k.created_at,
            name: k.name,
            expires: k.expires,
            permissions: s.permissions,
            roles: s.roles,
            identity: s.identity.map(IdentityObject::from),
            credits: k.credits.map(|c| CreditsObject::of(Some(c))),
            ratelimits: s.ratelimits.into_iter().map(RatelimitObject::from).collect(),
            last_used: s.last_used,
        }
    }
}

/// `apiId` and `prefix`: `A-Z a-z 0-9 _`.
fn check_word(path: &str, value: &str, min: usize, max: usize) -> Result<(), ApiError> {
    let n = value.chars().count();
    if n < min || n > max {
        return Err(ValidationError::new(path, format!("must be {min} to {max} characters")).into());
    }
    if !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(ValidationError::new(path, "use only A-Z a-z 0-9 and _").into());
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateKeyBody {
    /// A label stored on the key (`A-Z a-z 0-9 _`).
    #[schema(min_length = 3, max_length = 255, pattern = "^[A-Za-z0-9_]+$", example = "api_1234")]
    api_id: String,
    #[schema(min_length = 1, max_length = 16, pattern = "^[A-Za-z0-9_]+$", example = "prod")]
    prefix: Option<String>,
    #[schema(schema_with = kinds::role_name)]
    name: Option<String>,
    /// Bytes of randomness in the secret.
    #[schema(value_type = Option<u64>, minimum = 16, maximum = 255)]
    byte_length: Option<Number>,
    /// At most 100 properties, 64 KiB serialized.
    #[schema(value_type = Option<Object>)]
    meta: Option<Map<String, Value>>,
    /// Permission slugs; missing ones are created.
    #[schema(schema_with = kinds::permission_names_or_null)]
    permissions: Option<Vec<String>>,
    /// Role names; each must exist.
    #[schema(schema_with = kinds::role_names_100_or_null)]
    roles: Option<Vec<String>>,
    /// Unix ms (at most 2100-01-01).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 4_102_444_800_000_u64)]
    expires: Option<Number>,
    enabled: Option<bool>,
    /// `true` is 412: keys are stored hashed.
    #[schema(schema_with = only_false)]
    recoverable: Option<bool>,
    /// Links the key to the identity with this externalId, created (without meta or
    /// limits) when missing, which needs `identity.*.create_identity`.
    #[schema(min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$")]
    external_id: Option<String>,
    /// Uses of the key (null or absent: unlimited) and their refill.
    #[schema(inline, value_type = Option<CreditsRequest>)]
    credits: Option<Obj<CreditsRequest>>,
    /// The key's own rate limits.
    #[schema(max_items = 50, value_type = Option<Vec<RatelimitRequest>>)]
    ratelimits: Option<Vec<Obj<RatelimitRequest>>>,
}

/// `false` or `null`: what keygate can do of a feature that needs keys stored
/// recoverably (`true` is 412).
pub(crate) fn only_false() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .enum_values(Some([Value::Bool(false), Value::Null]))
        .build()
}

/// Create a key (shown once)
#[utoipa::path(post, path = "/v2/keys.createKey", operation_id = "keys.createKey", tag = "keys",
    request_body = CreateKeyBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedKey>), V2Errors, V2Precondition))]
pub async fn create_key(mut call: Authed<Json<CreateKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = std::mem::take(&mut call.input.0);
    check_word("apiId", &b.api_id, 3, MAX_NAME_CHARS)?;
    if let Some(prefix) = &b.prefix {
        check_word("prefix", prefix, 1, MAX_V2_KEY_PREFIX_CHARS)?;
    }
    check_opt_len("name", &b.name, MAX_NAME_CHARS)?;
    let byte_length = match &b.byte_length {
        Some(n) => integer("byteLength", n, 16)?,
        None => 16,
    };
    if byte_length > 255 {
        return Err(ValidationError::new("byteLength", "must be <= 255").into());
    }
    if let Some(meta) = &b.meta
        && meta.len() > 100
    {
        return Err(ValidationError::new("meta", "at most 100 properties").into());
    }
    check_count("permissions", b.permissions.as_deref().unwrap_or_default(), MAX_PERMISSIONS)?;
    check_count("roles", b.roles.as_deref().unwrap_or_default(), MAX_ROLES)?;
    let expires = match &b.expires {
        Some(n) => Some(integer("expires", n, 0)?),
        None => None,
    };
    if expires.is_some_and(|e| e > MAX_EXPIRES_MS) {
        return Err(ValidationError::new("expires", format!("must be <= {MAX_EXPIRES_MS}")).into());
    }
    let ratelimits = new_ratelimits("ratelimits", b.ratelimits.unwrap_or_default())?;
    if b.recoverable == Some(true) {
        return Err(precondition("recoverable", "keys are stored hashed: keygate cannot recover them"));
    }
    let new = NewKey {
        api_id: Some(b.api_id),
        external_id: b.external_id,
        ratelimits,
        credits: new_credits(b.credits)?,
        name: b.name,
        prefix: b.prefix,
        meta: b.meta.map(|m| Value::Object(m).to_string()),
        // At most MAX_EXPIRES_MS, so the conversion cannot fail.
        expires: expires.map(|e| i64::try_from(e).unwrap_or(i64::MAX)),
        enabled: b.enabled.unwrap_or(true),
        permissions: b.permissions.unwrap_or_default(),
        roles: b.roles.unwrap_or_default(),
        byte_length: Some(byte_length as usize),
    };
    if new.meta.as_ref().is_some_and(|m| m.len() > MAX_KEY_META_BYTES) {
        let msg = format!("must be at most {MAX_KEY_META_BYTES} bytes when serialized");
        return Err(ValidationError::new("meta", msg).into());
    }
    let (key, secret) = call.run(|kg, p, _| kg.rbac.create_key_as(p, new)).await?;
    Ok(ok(CreatedKey::new(key.id, secret.expose().to_string())))
}

/// 412: a request keygate understands but cannot carry out (keys are stored hashed).
pub(crate) fn precondition(field: &str, why: &str) -> ApiError {
    ApiError::new(ErrorCode::PreconditionFailed, format!("{field}: {why}")).at_field(field)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// `true` is 412: keys are stored hashed.
    #[schema(schema_with = only_false)]
    decrypt: Option<bool>,
}

/// A key
#[utoipa::path(post, path = "/v2/keys.getKey", operation_id = "keys.getKey", tag = "keys",
    request_body = GetKeyBody,
    responses((status = 200, description = "OK", body = Envelope<KeyObject>), V2Errors, V2Precondition))]
pub async fn get_key(call: Authed<Json<GetKeyBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_key_id(&body.key_id)?;
    if body.decrypt == Some(true) {
        return Err(precondition("decrypt", "keys are stored hashed: keygate cannot decrypt them"));
    }
    let found = call.run(|kg, p, Json(b)| described(kg, p, KeyLookup::Id(&b.key_id))).await?;
    Ok(ok(KeyObject::from(found)))
}

/// A key as v2 describes it: rbac's summary, with when it was last used (analytics).
fn described(kg: &Runtime, p: &Principal, lookup: KeyLookup<'_>) -> Result<KeySummary, RbacError> {
    let mut summary = kg.rbac.key_summary(p, lookup)?;
    kg.analytics.fill_last_used(std::slice::from_mut(&mut summary))?;
    Ok(summary)
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct WhoamiBody {
    /// The key's secret.
    #[schema(min_length = 1, max_length = 512)]
    key: String,
}

/// The key of a secret
#[utoipa::path(post, path = "/v2/keys.whoami", operation_id = "keys.whoami", tag = "keys",
    request_body = WhoamiBody,
    responses((status = 200, description = "OK", body = Envelope<KeyObject>), V2Errors))]
pub async fn whoami(call: Authed<Json<WhoamiBody>>) -> Result<HttpResponse, ApiError> {
    check_len("key", &call.input.0.key, MAX_VERIFY_KEY_CHARS)?;
    let found = call.run(|kg, p, Json(b)| described(kg, p, KeyLookup::Secret(&b.key))).await?;
    Ok(ok(KeyObject::from(found)))
}

/// Delete a key for good
///
/// `permanent` is accepted; keygate always deletes for good.
#[utoipa::path(post, path = "/v2/keys.deleteKey", operation_id = "keys.deleteKey", tag = "keys",
    request_body = DeleteKeyBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_key(call: Authed<Json<DeleteKeyBody>>) -> Result<HttpResponse, ApiError> {
    check_key_id(&call.input.0.key_id)?;
    call.run(|kg, p, Json(b)| kg.rbac.delete_key(p, &b.key_id)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct Credits {
    /// Credits this verification takes (default 1).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    cost: Option<Number>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeyBody {
    /// The key's secret.
    #[schema(min_length = 1, max_length = 512, example = "prod_3ZfVhpSSRW2ctYrnWC3SDbLC")]
    key: String,
    /// A permission query: names joined by AND and OR, with parentheses (docs/api-v2.md);
    /// the schema shows its simplest form, one name (which is not `and` or `or`, in any
    /// case: those are the operators).
    #[schema(
        min_length = 1,
        max_length = 1000,
        pattern = "^([A-Za-z0-9._:*/-]|[A-NP-Za-np-z0-9._:*/-][A-Za-z0-9._:*/-]|[Oo][A-QS-Za-qs-z0-9._:*/-]|[B-Zb-z0-9._:*/-][A-Za-z0-9._:*/-][A-Za-z0-9._:*/-]|[Aa][A-MO-Za-mo-z0-9._:*/-][A-Za-z0-9._:*/-]|[Aa][Nn][A-CE-Za-ce-z0-9._:*/-]|[A-Za-z0-9._:*/-]{4,})$",
        example = "documents.read"
    )]
    permissions: Option<String>,
    #[schema(schema_with = tags)]
    tags: Option<Vec<String>>,
    #[schema(inline, value_type = Option<Credits>)]
    credits: Option<Obj<Credits>>,
    /// Rate limits of the key or its identity to apply, by name, besides the auto-applied
    /// ones; a name found on neither is an ad-hoc limit of the key (limit and duration).
    #[schema(max_items = 50, value_type = Option<Vec<VerifyRatelimit>>)]
    ratelimits: Option<Vec<Obj<VerifyRatelimit>>>,
    #[schema(ignore)]
    migration_id: Option<Value>,
    #[schema(ignore)]
    keyspaces: Option<Value>,
}

/// Up to 20 tags of up to 512 characters.
fn tags() -> utoipa::openapi::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(512)))
        .max_items(Some(20))
        .build()
}

/// The permission query of a v2 verification: 400 `permissions_query_syntax_error` with
/// the position of the fault.
fn query(text: &str) -> Result<PermissionQuery, ApiError> {
    // Empty input is a syntax error (position 0), not a length error.
    if text.chars().count() > 1000 {
        return Err(ValidationError::new("permissions", "must be at most 1000 characters").into());
    }
    parse_permission_query(text).map_err(|e| {
        ApiError::bad_request(format!("permissions: {e}"))
            .with_problem(problems::QUERY_SYNTAX)
            .at_field("permissions")
    })
}

/// The outcome of a verification: `valid` and `code`, and the key unless NOT_FOUND.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerifyKeyResult)]
pub(crate) struct VerifyAnswer {
    valid: bool,
    #[schema(schema_with = crate::handlers::keys::verify_codes)]
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    enabled: Option<bool>,
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
    permissions: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    roles: Option<Vec<String>>,
    /// The key's credits left after this verification, when it has credits.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    credits: Option<u64>,
    /// Every rate limit that applied, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    ratelimits: Option<Vec<LimitResult>>,
    /// The identity the key is linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    identity: Option<IdentityObject>,
}

/// How one rate limit fared in a verification.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerifyKeyRatelimitData)]
pub(crate) struct LimitResult {
    id: String,
    name: String,
    limit: u64,
    duration: u64,
    /// Unix ms at which the window ends.
    reset: u64,
    remaining: u64,
    exceeded: bool,
    auto_apply: bool,
}

impl From<LimitOutcome> for LimitResult {
    fn from(o: LimitOutcome) -> Self {
        Self {
            id: o.id,
            name: o.name,
            limit: o.limit,
            duration: o.duration,
            reset: o.reset,
            remaining: o.remaining,
            exceeded: o.exceeded,
            auto_apply: o.auto_apply,
        }
    }
}

impl From<Verification> for VerifyAnswer {
    fn from(v: Verification) -> Self {
        let valid = v.valid();
        let code = v.code.as_str();
        match v.key.filter(|_| v.code != VerifyCode::NotFound) {
            // NOT_FOUND says nothing else (API-v2.md §2.3).
            None => Self {
                valid,
                code,
                key_id: None,
                enabled: None,
                name: None,
                meta: None,
                expires: None,
                permissions: None,
                roles: None,
                credits: None,
                ratelimits: None,
                identity: None,
            },
            Some(k) => Self {
                valid,
                code,
                meta: k.meta.as_deref().and_then(|m| serde_json::from_str(m).ok()),
                key_id: Some(k.id),
                enabled: Some(k.enabled),
                name: k.name,
                expires: k.expires,
                permissions: Some(v.permissions),
                roles: Some(v.roles),
                credits: v.credits,
                ratelimits: (!v.ratelimits.is_empty())
                    .then(|| v.ratelimits.into_iter().map(LimitResult::from).collect()),
                identity: v.identity.map(IdentityObject::from),
            },
        }
    }
}

/// Verify a key (every outcome is a 200)
///
/// Every outcome is 200 with `valid` and `code`. The root key needs `api.*.verify_key`
/// (every key of its workspace) or `api.<apiId>.verify_key` (the keys labelled so; others
/// are NOT_FOUND); with neither, 403 before the key is looked up.
#[utoipa::path(post, path = "/v2/keys.verifyKey", operation_id = "keys.verifyKey", tag = "keys",
    request_body = VerifyKeyBody,
    responses((status = 200, description = "OK", body = Envelope<VerifyAnswer>), V2Errors))]
pub async fn verify_key(call: Authed<Json<VerifyKeyBody>>) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: Json(b), state } = call;
    check_len("key", &b.key, MAX_VERIFY_KEY_CHARS)?;
    let query = b.permissions.as_deref().map(query).transpose()?;
    if let Some(tags) = &b.tags {
        check_count("tags", tags, 20)?;
        for (i, t) in tags.iter().enumerate() {
            check_len(&format!("tags.{i}"), t, 512)?;
        }
    }
    let cost = match b.credits.and_then(|Obj(c)| c.cost) {
        Some(n) => Some(integer("credits.cost", &n, 0)?),
        None => None,
    };
    let ratelimits = limit_asks("ratelimits", b.ratelimits.unwrap_or_default())?;
    unsupported(&[("migrationId", &b.migration_id), ("keyspaces", &b.keyspaces)])?;
    let access = ApiAccess::of(&principal, "verify_key")
        .ok_or_else(|| ApiError::from(ApiAccess::denied("verify_key", None)))?;
    let call = VerifyCall {
        secret: b.key,
        principal: Some(principal),
        api_id: None,
        access: Some(access),
        query,
        usage: Usage { cost, ratelimits, check_only: false },
        tags: b.tags.unwrap_or_default(),
    };
    Ok(ok(VerifyAnswer::from(verification(&state, call).await?)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionsBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// Permission slugs (or ids).
    #[schema(schema_with = kinds::permission_names)]
    permissions: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolesBody {
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

impl KeyLinks for PermissionsBody {
    fn parts(self) -> (String, Vec<String>) {
        (self.key_id, self.permissions)
    }
}

impl KeyLinks for RolesBody {
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
    request_body = PermissionsBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
pub async fn set_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Replace).await?))
}

/// Attaches the list (missing slugs are created)
///
/// Answers every permission now on the key.
#[utoipa::path(post, path = "/v2/keys.addPermissions", operation_id = "keys.addPermissions", tag = "keys",
    request_body = PermissionsBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
pub async fn add_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Add).await?))
}

/// Detaches the list (each must exist)
///
/// Answers every permission now on the key.
#[utoipa::path(post, path = "/v2/keys.removePermissions", operation_id = "keys.removePermissions", tag = "keys",
    request_body = PermissionsBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Permission>>), V2Errors))]
pub async fn remove_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Remove).await?))
}

/// The key's roles become exactly the list
///
/// Answers every role now on the key.
#[utoipa::path(post, path = "/v2/keys.setRoles", operation_id = "keys.setRoles", tag = "keys",
    request_body = RolesBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Role>>), V2Errors))]
pub async fn set_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Replace).await?))
}

/// Attaches the list (each must exist)
///
/// Answers every role now on the key.
#[utoipa::path(post, path = "/v2/keys.addRoles", operation_id = "keys.addRoles", tag = "keys",
    request_body = RolesBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Role>>), V2Errors))]
pub async fn add_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Add).await?))
}

/// Detaches the list (each must exist)
///
/// Answers every role now on the key.
#[utoipa::path(post, path = "/v2/keys.removeRoles", operation_id = "keys.removeRoles", tag = "keys",
    request_body = RolesBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<Role>>), V2Errors))]
pub async fn remove_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Remove).await?))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_key,
    get_key,
    whoami,
    delete_key,
    verify_key,
    update_key,
    reroll_key,
    set_permissions,
    add_permissions,
    remove_permissions,
    set_roles,
    add_roles,
    remove_roles
))]
struct Doc;

/// This room's part of the v2 document: `add*` and `remove*` take at least one entry
/// (`set*`, with the same body, takes none).
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    for (path, list) in [
        ("/v2/keys.addPermissions", "permissions"),
        ("/v2/keys.removePermissions", "permissions"),
        ("/v2/keys.addRoles", "roles"),
        ("/v2/keys.removeRoles", "roles"),
    ] {
        refine_body(&mut doc, path, "post", |body| body["properties"][list]["minItems"] = 1.into());
    }
    let create = crate::openapi::schema_mut(&mut doc, "CreateKeyBody");
    create["properties"]["meta"]["maxProperties"] = 100.into();
    super::credits::credits_rules(&mut create["properties"]["credits"]);
    // updateKey's refill (a component of its own there).
    super::credits::refill_rule(crate::openapi::schema_mut(&mut doc, "RefillRequest"));
    // v1's body, where v2 takes key ids of at least 3 characters.
    refine_body(&mut doc, "/v2/keys.deleteKey", "post", |body| {
        body["properties"]["keyId"]["minLength"] = 3.into()
    });
    doc
}

/// `credits` of updateKey: each part absent (kept), null or a value.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateCreditsData {
    /// Given: the counter becomes it (null: unlimited).
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    remaining: Patch<Number>,
    /// Given alone: the refill changes and the counter stays (null: no refill).
    #[serde(default)]
    #[schema(value_type = Option<RefillRequest>)]
    refill: Patch<Obj<RefillRequest>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// Absent: unchanged; null: cleared; a value: set (as every nullable field here).
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    name: Patch<String>,
    /// The identity to link (created when missing); null: unlinked.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$")]
    external_id: Patch<String>,
    /// At most 100 properties, 64 KiB serialized.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    meta: Patch<Map<String, Value>>,
    /// Unix ms (at most 2100-01-01).
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 4_102_444_800_000_u64)]
    expires: Patch<Number>,
    /// null: unlimited.
    #[serde(default)]
    #[schema(value_type = Option<UpdateCreditsData>)]
    credits: Patch<Obj<UpdateCreditsData>>,
    /// The whole set; null or `[]`: none. A kept name keeps its id and its count.
    #[serde(default)]
    #[schema(value_type = Option<Vec<RatelimitRequest>>, max_items = 50)]
    ratelimits: Patch<Vec<Obj<RatelimitRequest>>>,
    enabled: Option<bool>,
    /// The key's roles become exactly these (names or ids; each must exist).
    #[schema(schema_with = kinds::role_names_100_or_null)]
    roles: Option<Vec<String>>,
    /// The key's direct permissions become exactly these (missing slugs are created).
    #[schema(schema_with = kinds::permission_names_or_null)]
    permissions: Option<Vec<String>>,
}

/// Update a key
///
/// Every field absent is unchanged, null clears it, a value sets it; `roles` and
/// `permissions` replace as setRoles and setPermissions do. All or nothing, in one
/// transaction; `{keyId}` alone changes nothing and answers 200.
#[utoipa::path(post, path = "/v2/keys.updateKey", operation_id = "keys.updateKey", tag = "keys",
    request_body = UpdateKeyBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn update_key(mut call: Authed<Json<UpdateKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = &mut call.input.0;
    check_key_id(&b.key_id)?;
    let meta = std::mem::take(&mut b.meta).try_map(|m| {
        if m.len() > 100 {
            return Err(ApiError::from(ValidationError::new("meta", "at most 100 properties")));
        }
        Ok(Value::Object(m).to_string())
    })?;
    let expires = std::mem::take(&mut b.expires).try_map(|n| {
        let e = integer("expires", &n, 0)?;
        if e > MAX_EXPIRES_MS {
            return Err(ApiError::from(ValidationError::new(
                "expires",
                format!("must be <= {MAX_EXPIRES_MS}"),
            )));
        }
        Ok(i64::try_from(e).unwrap_or(i64::MAX))
    })?;
    let credits = std::mem::take(&mut b.credits).try_map(|Obj(c)| {
        Ok::<_, ApiError>(keygate_rbac::CreditsUpdate {
            remaining: c.remaining.try_map(|n| integer("credits.remaining", &n, 0))?,
            refill: c.refill.try_map(|Obj(r)| super::credits::refill_spec("credits.refill", r))?,
        })
    })?;
    let ratelimits = std::mem::take(&mut b.ratelimits).try_map(|l| new_ratelimits("ratelimits", l))?;
    if let Some(p) = &b.permissions {
        check_count("permissions", p, MAX_PERMISSIONS)?;
    }
    if let Some(r) = &b.roles {
        check_count("roles", r, MAX_ROLES)?;
    }
    let update = keygate_rbac::KeyUpdate {
        name: std::mem::take(&mut b.name),
        external_id: std::mem::take(&mut b.external_id),
        meta,
        expires,
        credits,
        ratelimits,
        enabled: b.enabled,
        roles: b.roles.take(),
        permissions: b.permissions.take(),
    };
    call.run(move |kg, p, Json(b)| kg.rbac.update_key(p, &b.key_id, update)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RerollKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// The original expires this many ms from now (0: at once); null: its expiry stays.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 4_102_444_800_000_u64, example = 0)]
    expiration: Option<Number>,
}

/// Reroll a key: a new secret for the same key settings
///
/// A new key (new id and secret, shown once) copying the original's prefix, byte length,
/// name, meta, expiry, enabled flag, identity, permissions, roles, rate limits and credits;
/// then the original expires `expiration` ms from now. One transaction.
#[utoipa::path(post, path = "/v2/keys.rerollKey", operation_id = "keys.rerollKey", tag = "keys",
    request_body = RerollKeyBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedKey>), V2Errors))]
pub async fn reroll_key(call: Authed<Json<RerollKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    check_key_id(&b.key_id)?;
    let expiration = b.expiration.as_ref().map(|n| integer("expiration", n, 0)).transpose()?;
    if expiration.is_some_and(|e| e > MAX_EXPIRES_MS) {
        return Err(ValidationError::new("expiration", format!("must be <= {MAX_EXPIRES_MS}")).into());
    }
    let (key, secret) = call.run(move |kg, p, Json(b)| kg.rbac.reroll_key(p, &b.key_id, expiration)).await?;
    Ok(ok(CreatedKey::new(key.id, secret.expose().to_string())))
}
