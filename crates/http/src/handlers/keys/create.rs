//! Creating keys, both APIs: v1's and v2's `createKey` (the secret shown once), and v2's
//! `rerollKey` (a new key copying an existing one's settings).

use super::shared::{CreatedKey, MAX_EXPIRES_MS, MAX_PERMISSIONS, MAX_ROLES};
use crate::error::ApiError;
use crate::handlers::v2::credits::{CreditsRequest, new_credits};
use crate::handlers::v2::identities::{RatelimitRequest, new_ratelimits};
use crate::handlers::v2::{Envelope, check_count, check_key_id, check_opt_len, ok};
use crate::openapi::{Api, V1BodyErrors, V1Precondition, V2Errors, V2Precondition, kinds};
use crate::plumbing::{Authed, Json, Obj, integer};
use actix_web::HttpResponse;
use keygate_domain::{MAX_NAME_CHARS, ValidationError};
use keygate_rbac::{MAX_KEY_META_BYTES, MAX_V2_KEY_PREFIX_CHARS, NewKey};
use serde::Deserialize;
use serde_json::{Map, Number, Value};
use utoipa::ToSchema;

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
    /// Keep the plaintext sealed in the vault, to be revealed with `decrypt` (needs
    /// `encrypt_key`, and an encryption keyring: 412 without one).
    recoverable: Option<bool>,
}

/// Create a key (the secret is shown once)
#[utoipa::path(post, path = "/v1/keys.createKey", operation_id = "keys.createKey", tag = "keys",
    request_body = CreateKeyBody,
    responses((status = 200, description = "OK", body = CreatedKey), V1BodyErrors, V1Precondition))]
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
        recoverable: body.recoverable.unwrap_or(false),
        allowed_ips: None,
    };
    let (key, secret) = call.run(|kg, principal, _| kg.rbac.create_key_as(principal, new)).await?;
    Ok(HttpResponse::Ok().json(CreatedKey::new(key.id, secret.expose().to_string())))
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
#[schema(as = CreateKeyBody)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateKeyBodyV2 {
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
    /// Keep the plaintext sealed in the vault, to be revealed with `decrypt` (needs
    /// `encrypt_key`, and an encryption keyring: 412 without one).
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
    /// Where the key may be used from: IPv4/IPv6 addresses and CIDR ranges (at most 100);
    /// a verification must give an `ip` inside it (and inside its identity's and API's lists).
    #[schema(schema_with = crate::openapi::kinds::allowed_ips_or_null)]
    allowed_ips: Option<Vec<String>>,
}

/// Create a key (shown once)
#[utoipa::path(post, path = "/v2/keys.createKey", operation_id = "keys.createKey", tag = "keys",
    request_body = CreateKeyBodyV2,
    responses((status = 200, description = "OK", body = Envelope<CreatedKey>), V2Errors, V2Precondition))]
pub async fn create_key_v2(mut call: Authed<Json<CreateKeyBodyV2>>) -> Result<HttpResponse, ApiError> {
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
    let new = NewKey {
        api_id: Some(b.api_id),
        external_id: b.external_id,
        ratelimits,
        credits: new_credits("credits", b.credits)?,
        name: b.name,
        prefix: b.prefix,
        meta: b.meta.map(|m| Value::Object(m).to_string()),
        // At most MAX_EXPIRES_MS, so the conversion cannot fail.
        expires: expires.map(|e| i64::try_from(e).unwrap_or(i64::MAX)),
        enabled: b.enabled.unwrap_or(true),
        permissions: b.permissions.unwrap_or_default(),
        roles: b.roles.unwrap_or_default(),
        byte_length: Some(byte_length as usize),
        recoverable: b.recoverable.unwrap_or(false),
        allowed_ips: crate::handlers::v2::allowed_ips("allowedIps", b.allowed_ips)?,
    };
    if new.meta.as_ref().is_some_and(|m| m.len() > MAX_KEY_META_BYTES) {
        let msg = format!("must be at most {MAX_KEY_META_BYTES} bytes when serialized");
        return Err(ValidationError::new("meta", msg).into());
    }
    let (key, secret) = call.run(|kg, p, _| kg.rbac.create_key_as(p, new)).await?;
    Ok(ok(CreatedKey::new(key.id, secret.expose().to_string())))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RerollKeyBody {
    #[schema(min_length = 3, max_length = 255)]
    pub(crate) key_id: String,
    /// The original expires this many ms from now (0: at once); null: its expiry stays.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 4_102_444_800_000_u64, example = 0)]
    expiration: Option<Number>,
}

impl RerollKeyBody {
    /// Checks the key id; the expiration (ms) it asks for.
    pub(crate) fn checked(&self) -> Result<Option<u64>, ApiError> {
        check_key_id(&self.key_id)?;
        let expiration = self.expiration.as_ref().map(|n| integer("expiration", n, 0)).transpose()?;
        if expiration.is_some_and(|e| e > MAX_EXPIRES_MS) {
            return Err(ValidationError::new("expiration", format!("must be <= {MAX_EXPIRES_MS}")).into());
        }
        Ok(expiration)
    }
}

/// Reroll a key: a new secret for the same key settings
///
/// A new key (new id and secret, shown once) copying the original's prefix, byte length,
/// name, meta, expiry, enabled flag, identity, permissions, roles, rate limits and credits;
/// then the original expires `expiration` ms from now. One transaction.
#[utoipa::path(post, path = "/v2/keys.rerollKey", operation_id = "keys.rerollKey", tag = "keys",
    request_body = RerollKeyBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedKey>), V2Errors, V2Precondition))]
pub async fn reroll_key(call: Authed<Json<RerollKeyBody>>) -> Result<HttpResponse, ApiError> {
    let expiration = call.input.0.checked()?;
    let (key, secret) = call.run(move |kg, p, Json(b)| kg.rbac.reroll_key(p, &b.key_id, expiration)).await?;
    Ok(ok(CreatedKey::new(key.id, secret.expose().to_string())))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_key))]
struct V1Doc;

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_key_v2, reroll_key))]
struct V2Doc;

/// This room's part of a document: v2's `meta` holds at most 100 properties, and its
/// credits follow their rules.
pub(crate) fn openapi(api: Api) -> Value {
    match api {
        Api::V1 => crate::openapi::room::<V1Doc>(),
        Api::V2 => {
            let mut doc = crate::openapi::room::<V2Doc>();
            let create = crate::openapi::schema_mut(&mut doc, "CreateKeyBody");
            create["properties"]["meta"]["maxProperties"] = 100.into();
            crate::handlers::v2::credits::credits_rules(&mut create["properties"]["credits"]);
            doc
        }
    }
}
