//! Verifying keys, both APIs: v1's `verifyKey` (a permission query as an object, v1's
//! `remaining` and `ratelimit`) and v2's (a query string, tags, credits and limits), each
//! read into a [`VerifyCall`] and run by [`verification`].

use super::verification::{VerifyCall, verification};
use super::verify_answer::{VerifyAnswer, verify_codes};
use crate::error::{ApiError, problems};
use crate::handlers::v2::{Envelope, check_count, ok_with, unsupported};
use crate::openapi::{Api, V1BodyErrors, V2Errors, kinds};
use crate::plumbing::{Authed, Json, Obj, integer};
use actix_web::HttpResponse;
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, ValidationError, check_len, new_id, validate_permission_name,
};
use keygate_rbac::{
    ApiAccess, MAX_QUERY_NODES, MAX_VERIFY_KEY_CHARS, Name, PermissionQuery, Principal, Verification,
    parse_permission_query,
};
use keygate_usage::{LimitAsk, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use std::sync::Arc;
use utoipa::ToSchema;

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
    /// The address the verified request came from (IPv4 or IPv6): needed when the key,
    /// its identity or its API has `allowedIps` (else FORBIDDEN).
    #[schema(schema_with = crate::openapi::kinds::ip_address)]
    ip: Option<String>,
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
pub(crate) struct VerifyKeyResponse<'a> {
    /// Unkey's verifyKey body carries the request id (unkey-py requires it); equal to the
    /// `Unkey-Request-Id` header.
    request_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<&'a str>,
    /// The key's `apiId` label, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    api_id: Option<&'a str>,
    valid: bool,
    #[schema(schema_with = verify_codes)]
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    expires: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    enabled: Option<bool>,
    #[schema(value_type = Vec<String>)]
    permissions: &'a [Name],
    #[schema(value_type = Vec<String>)]
    roles: &'a [Name],
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
    identity: Option<V1Identity<'a>>,
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
pub(crate) struct V1Identity<'a> {
    id: &'a str,
    external_id: &'a str,
    #[schema(value_type = Object)]
    meta: Value,
}

impl<'a> VerifyKeyResponse<'a> {
    /// The answer to `v`, borrowing from it (nothing of the key is copied).
    fn new(v: &'a Verification, request_id: &'a str) -> Self {
        let key = v.key();
        Self {
            request_id,
            valid: v.valid(),
            code: v.code.as_str(),
            key_id: key.map(|k| k.id()),
            api_id: key.and_then(|k| k.api_id()),
            name: key.and_then(|k| k.name()),
            meta: key.and_then(|k| k.meta()).and_then(|m| serde_json::from_str(m).ok()),
            expires: key.and_then(|k| k.expires()),
            enabled: key.map(|k| k.enabled()),
            permissions: v.permissions(),
            roles: v.roles(),
            remaining: v.credits,
            ratelimit: v
                .ratelimits
                .iter()
                .find(|l| &*l.name == "default")
                .or(v.ratelimits.first())
                .map(|l| V1Ratelimit { limit: l.limit, remaining: l.remaining, reset: l.reset }),
            identity: v.identity().map(|i| V1Identity {
                meta: i
                    .identity
                    .meta
                    .as_deref()
                    .and_then(|m| serde_json::from_str(m).ok())
                    .unwrap_or_else(|| Value::Object(Map::new())),
                id: &i.identity.id,
                external_id: &i.identity.external_id,
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
        ip: verified_ip(body.ip)?,
        migration: None,
        query,
        usage,
        tags: Vec::new(),
    };
    let verification = verification(&state, call).await?;
    let request_id = new_id(IdPrefix::Request);
    Ok(crate::handlers::ok_json(&request_id, VerifyKeyResponse::new(&verification, &request_id)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct Credits {
    /// Credits this verification takes (default 1).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    cost: Option<Number>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = VerifyKeyBody)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeyBodyV2 {
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
    /// The address the verified request came from (IPv4 or IPv6): needed when the key,
    /// its identity or its API has `allowedIps` (else FORBIDDEN).
    #[schema(schema_with = crate::openapi::kinds::ip_address)]
    ip: Option<String>,
    /// A migration id (`keys.migrateKeys`): a key not found is looked for among the keys
    /// that migration brought in from another system and have not been used yet (any
    /// legacy migration's when absent).
    #[schema(min_length = 1, max_length = 255)]
    migration_id: Option<String>,
    #[schema(ignore)]
    keyspaces: Option<Value>,
}

/// A verification's `ip`: an IPv4 or IPv6 address (400 otherwise).
fn verified_ip(ip: Option<String>) -> Result<Option<std::net::IpAddr>, ApiError> {
    ip.map(|s| s.parse().map_err(|_| ValidationError::new("ip", "must be an IPv4 or IPv6 address").into()))
        .transpose()
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

/// Verify a key (every outcome is a 200)
///
/// Every outcome is 200 with `valid` and `code`. The root key needs `api.*.verify_key`
/// (every key of its workspace) or `api.<apiId>.verify_key` (the keys labelled so; others
/// are NOT_FOUND); with neither, 403 before the key is looked up.
#[utoipa::path(post, path = "/v2/keys.verifyKey", operation_id = "keys.verifyKey", tag = "keys",
    request_body = VerifyKeyBodyV2,
    responses((status = 200, description = "OK", body = Envelope<VerifyAnswer>), V2Errors))]
pub async fn verify_key_v2(call: Authed<Json<VerifyKeyBodyV2>>) -> Result<HttpResponse, ApiError> {
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
    unsupported(&[("keyspaces", &b.keyspaces)])?;
    if let Some(id) = &b.migration_id {
        check_len("migrationId", id, 255)?;
        if id.is_empty() {
            return Err(ValidationError::new("migrationId", "must be 1 to 255 characters").into());
        }
        state.rbac.ensure_migration(id)?;
    }
    let access = ApiAccess::of(&principal, "verify_key")
        .ok_or_else(|| ApiError::from(ApiAccess::denied("verify_key", None)))?;
    let call = VerifyCall {
        secret: b.key,
        principal: Some(principal),
        api_id: None,
        access: Some(access),
        ip: verified_ip(b.ip)?,
        migration: b.migration_id,
        query,
        usage: Usage { cost, ratelimits, check_only: false },
        tags: b.tags.unwrap_or_default(),
    };
    let v = verification(&state, call).await?;
    Ok(ok_with(|json| VerifyAnswer::from(&v).write_json(json)))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(verify_key))]
struct V1Doc;

#[derive(utoipa::OpenApi)]
#[openapi(paths(verify_key_v2))]
struct V2Doc;

/// This room's part of a document.
pub(crate) fn openapi(api: Api) -> Value {
    match api {
        Api::V1 => crate::openapi::room::<V1Doc>(),
        Api::V2 => crate::openapi::room::<V2Doc>(),
    }
}
