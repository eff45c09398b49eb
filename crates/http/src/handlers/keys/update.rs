//! Changing and deleting keys, both APIs: v2's `updateKey` (every field absent, cleared
//! or set, in one transaction), v1's and v2's `deleteKey`.

use super::shared::{MAX_EXPIRES_MS, MAX_PERMISSIONS, MAX_ROLES};
use crate::error::ApiError;
use crate::handlers::v2::credits::RefillRequest;
use crate::handlers::v2::identities::{RatelimitRequest, new_ratelimits};
use crate::handlers::v2::{self, Envelope, check_count, check_key_id, ok_empty};
use crate::handlers::{Empty, empty};
use crate::openapi::{Api, V1BodyErrors, V2Errors, kinds, refine_body};
use crate::plumbing::{Authed, Json, Obj, integer};
use actix_web::HttpResponse;
use keygate_domain::{Patch, ValidationError};
use serde::Deserialize;
use serde_json::{Map, Number, Value};
use utoipa::ToSchema;

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

/// Delete a key for good
///
/// `permanent` is accepted; keygate always deletes for good.
#[utoipa::path(post, path = "/v2/keys.deleteKey", operation_id = "keys.deleteKey", tag = "keys",
    request_body = DeleteKeyBody,
    responses((status = 200, description = "OK", body = Envelope<v2::Empty>), V2Errors))]
pub async fn delete_key_v2(call: Authed<Json<DeleteKeyBody>>) -> Result<HttpResponse, ApiError> {
    check_key_id(&call.input.0.key_id)?;
    call.run(|kg, p, Json(b)| kg.rbac.delete_key(p, &b.key_id)).await?;
    Ok(ok_empty())
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
    /// Where the key may be used from (at most 100 addresses or CIDR ranges); null or `[]`: anywhere.
    #[serde(default)]
    #[schema(schema_with = crate::openapi::kinds::allowed_ips_or_null)]
    allowed_ips: Patch<Vec<String>>,
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
    responses((status = 200, description = "OK", body = Envelope<v2::Empty>), V2Errors))]
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
            refill: c
                .refill
                .try_map(|Obj(r)| crate::handlers::v2::credits::refill_spec("credits.refill", r))?,
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
        allowed_ips: crate::handlers::v2::allowed_ips_patch(
            "allowedIps",
            std::mem::take(&mut b.allowed_ips),
        )?,
    };
    call.run(move |kg, p, Json(b)| kg.rbac.update_key(p, &b.key_id, update)).await?;
    Ok(ok_empty())
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(delete_key))]
struct V1Doc;

#[derive(utoipa::OpenApi)]
#[openapi(paths(delete_key_v2, update_key))]
struct V2Doc;

/// This room's part of a document: v2 takes key ids of at least 3 characters (in v1's
/// body of deleteKey), and updateKey's refill follows its rule.
pub(crate) fn openapi(api: Api) -> Value {
    match api {
        Api::V1 => crate::openapi::room::<V1Doc>(),
        Api::V2 => {
            let mut doc = crate::openapi::room::<V2Doc>();
            crate::handlers::v2::credits::refill_rule(crate::openapi::schema_mut(&mut doc, "RefillRequest"));
            refine_body(&mut doc, "/v2/keys.deleteKey", "post", |body| {
                body["properties"]["keyId"]["minLength"] = 3.into()
            });
            doc
        }
    }
}
