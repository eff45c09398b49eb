//! v2 `keys.*`: create, read (by id or by secret), delete and verify keys; set, add and
//! remove their permissions and roles by plain strings (slug or name, or id).

use super::permissions::{Permission, Role};
use super::{check_count, check_key_id, check_opt_len, ok, ok_empty, unsupported};
use crate::error::{ApiError, problems};
use crate::handlers::keys::DeleteKeyBody;
use crate::http::{Authed, Json, integer};
use actix_web::HttpResponse;
use keygate_domain::{ErrorCode, MAX_NAME_CHARS, ValidationError, check_len};
use keygate_rbac::{
    ApiAccess, EntityKind, KeyLookup, KeySummary, LinkMode, MAX_KEY_META_BYTES, MAX_V2_KEY_PREFIX_CHARS,
    MAX_VERIFY_KEY_CHARS, NewKey, PermissionQuery, RoleView, Verification, VerifyCode, VerifyScope,
    parse_permission_query,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// The latest `expires` v2 takes (2100-01-01).
const MAX_EXPIRES_MS: u64 = 4_102_444_800_000;
/// The most roles and permissions one key call names.
const MAX_ROLES: usize = 100;
const MAX_PERMISSIONS: usize = 1000;

/// v2's Key object (`getKey`, `whoami`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeyObject {
    key_id: String,
    start: String,
    enabled: bool,
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<i64>,
    permissions: Vec<String>,
    roles: Vec<String>,
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

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateKeyBody {
    api_id: String,
    prefix: Option<String>,
    name: Option<String>,
    byte_length: Option<Number>,
    meta: Option<Map<String, Value>>,
    permissions: Option<Vec<String>>,
    roles: Option<Vec<String>>,
    expires: Option<Number>,
    enabled: Option<bool>,
    recoverable: Option<bool>,
    external_id: Option<Value>,
    credits: Option<Value>,
    ratelimits: Option<Value>,
}

/// `keys.createKey`: `{keyId, key}`; the key is shown once.
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
    unsupported(&[("externalId", &b.external_id), ("credits", &b.credits), ("ratelimits", &b.ratelimits)])?;
    if b.recoverable == Some(true) {
        return Err(precondition("recoverable", "keys are stored hashed: keygate cannot recover them"));
    }
    let new = NewKey {
        api_id: Some(b.api_id),
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
    let (key, secret) = call.run(|rbac, p, _| rbac.create_key_as(p, new)).await?;
    Ok(ok(serde_json::json!({ "keyId": key.id, "key": secret.expose() })))
}

/// 412: a request keygate understands but cannot carry out (keys are stored hashed).
fn precondition(field: &str, why: &str) -> ApiError {
    ApiError::new(ErrorCode::PreconditionFailed, format!("{field}: {why}")).at_field(field)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetKeyBody {
    key_id: String,
    decrypt: Option<bool>,
}

/// `keys.getKey {keyId}`: the Key object.
pub async fn get_key(call: Authed<Json<GetKeyBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_key_id(&body.key_id)?;
    if body.decrypt == Some(true) {
        return Err(precondition("decrypt", "keys are stored hashed: keygate cannot decrypt them"));
    }
    let found = call.run(|rbac, p, Json(b)| rbac.key_summary(p, KeyLookup::Id(&b.key_id))).await?;
    Ok(ok(KeyObject::from(found)))
}

#[derive(Debug, Deserialize)]
pub(crate) struct WhoamiBody {
    key: String,
}

/// `keys.whoami {key}`: the Key object of a secret.
pub async fn whoami(call: Authed<Json<WhoamiBody>>) -> Result<HttpResponse, ApiError> {
    check_len("key", &call.input.0.key, MAX_VERIFY_KEY_CHARS)?;
    let found = call.run(|rbac, p, Json(b)| rbac.key_summary(p, KeyLookup::Secret(&b.key))).await?;
    Ok(ok(KeyObject::from(found)))
}

/// `keys.deleteKey {keyId, permanent?}`: `{}`.
pub async fn delete_key(call: Authed<Json<DeleteKeyBody>>) -> Result<HttpResponse, ApiError> {
    check_key_id(&call.input.0.key_id)?;
    call.run(|rbac, p, Json(b)| rbac.delete_key(p, &b.key_id)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize)]
pub(crate) struct Credits {
    cost: Number,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeyBody {
    key: String,
    permissions: Option<String>,
    tags: Option<Vec<String>>,
    credits: Option<Credits>,
    ratelimits: Option<Value>,
    migration_id: Option<Value>,
    keyspaces: Option<Value>,
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

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyAnswer {
    valid: bool,
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    permissions: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    roles: Option<Vec<String>>,
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
            },
        }
    }
}

/// `keys.verifyKey`: every outcome is 200 with `valid` and `code`. The root key needs
/// `api.*.verify_key` (every key of its workspace) or `api.<apiId>.verify_key` (the keys
/// labelled so; others are NOT_FOUND); with neither, 403 before the key is looked up.
pub async fn verify_key(mut call: Authed<Json<VerifyKeyBody>>) -> Result<HttpResponse, ApiError> {
    let b = &mut call.input.0;
    check_len("key", &b.key, MAX_VERIFY_KEY_CHARS)?;
    let query = b.permissions.as_deref().map(query).transpose()?;
    if let Some(tags) = &b.tags {
        check_count("tags", tags, 20)?;
        for (i, t) in tags.iter().enumerate() {
            check_len(&format!("tags.{i}"), t, 512)?;
        }
    }
    if let Some(c) = &b.credits {
        integer("credits.cost", &c.cost, 0)?;
    }
    unsupported(&[
        ("ratelimits", &b.ratelimits),
        ("migrationId", &b.migration_id),
        ("keyspaces", &b.keyspaces),
    ])?;
    let access = ApiAccess::of(&call.principal, "verify_key")
        .ok_or_else(|| ApiError::from(ApiAccess::denied("verify_key", None)))?;
    let scope = |ws| VerifyScope { workspace_id: Some(ws), api_id: None, access: Some(&access) };
    let cached =
        call.state.rbac.verify_key_cached(&b.key, &scope(&call.principal.workspace_id), query.as_ref());
    let verification = match cached {
        Some(v) => v,
        None => {
            call.run(move |rbac, p, Json(body)| {
                let scope =
                    VerifyScope { workspace_id: Some(&p.workspace_id), api_id: None, access: Some(&access) };
                rbac.verify_key(&body.key, &scope, query.as_ref())
            })
            .await?
        }
    };
    Ok(ok(VerifyAnswer::from(verification)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PermissionsBody {
    key_id: String,
    permissions: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolesBody {
    key_id: String,
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
    call.run(move |rbac, p, (key_id, refs)| rbac.change_key_links(p, &key_id, kind, mode, &refs)).await
}

fn permissions_answer(all: Vec<RoleView>) -> HttpResponse {
    ok(all.into_iter().map(|v| Permission::from(v.role)).collect::<Vec<_>>())
}

fn roles_answer(all: Vec<RoleView>) -> HttpResponse {
    ok(all.into_iter().map(Role::from).collect::<Vec<_>>())
}

/// `keys.setPermissions`: the key's direct permissions become exactly the list.
pub async fn set_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Replace).await?))
}

/// `keys.addPermissions`: attaches the list (missing slugs are created).
pub async fn add_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Add).await?))
}

/// `keys.removePermissions`: detaches the list (each must exist).
pub async fn remove_permissions(call: Authed<Json<PermissionsBody>>) -> Result<HttpResponse, ApiError> {
    Ok(permissions_answer(change(call, EntityKind::Permission, LinkMode::Remove).await?))
}

/// `keys.setRoles`: the key's roles become exactly the list.
pub async fn set_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Replace).await?))
}

/// `keys.addRoles`: attaches the list (each must exist).
pub async fn add_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Add).await?))
}

/// `keys.removeRoles`: detaches the list (each must exist).
pub async fn remove_roles(call: Authed<Json<RolesBody>>) -> Result<HttpResponse, ApiError> {
    Ok(roles_answer(change(call, EntityKind::Role, LinkMode::Remove).await?))
}
