//! `ratelimits.setOverride`, `getOverride`, `listOverrides`, `deleteOverride`.

use super::Empty;
use super::empty;
use crate::error::ApiError;
use crate::openapi::{V1BodyErrors, V1QueryErrors, operation_mut, require_one_of, schema_mut};
use crate::plumbing::{Authed, Json, Query, integer};
use actix_web::HttpResponse;
use keygate_rbac::{NamespaceRef, Override};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// The namespace by id or by name (exactly one), and the identifier or pattern.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetOverrideBody {
    #[schema(min_length = 1, max_length = 512)]
    namespace_id: Option<String>,
    #[schema(min_length = 1, max_length = 512)]
    namespace_name: Option<String>,
    /// An identifier, or a pattern with at most 8 '*'.
    #[schema(min_length = 1, max_length = 512, pattern = "^[^*\\u0000]*(\\*[^*\\u0000]*){0,8}$")]
    identifier: String,
    #[schema(value_type = u64, minimum = 1, maximum = 9_007_199_254_740_991_u64)]
    limit: Number,
    /// The window in ms.
    #[schema(value_type = u64, minimum = 1000, maximum = 9_007_199_254_740_991_u64)]
    duration: Number,
    #[serde(rename = "async")]
    is_async: Option<bool>,
}

/// The namespace by id or by name (exactly one), and the identifier (a query string for
/// `getOverride` and `listOverrides`, a body for `deleteOverride`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OverrideRefBody {
    #[schema(min_length = 1, max_length = 512)]
    namespace_id: Option<String>,
    #[schema(min_length = 1, max_length = 512)]
    namespace_name: Option<String>,
    #[schema(min_length = 1, max_length = 512, required = true, nullable = false)]
    identifier: Option<String>,
}

impl OverrideRefBody {
    fn namespace(&self) -> NamespaceRef {
        NamespaceRef { id: self.namespace_id.clone(), name: self.namespace_name.clone() }
    }

    fn identifier(&self) -> Result<String, ApiError> {
        self.identifier.clone().ok_or_else(|| ApiError::bad_request("identifier: is required"))
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Override)]
pub(crate) struct OverrideResponse {
    id: String,
    identifier: String,
    limit: u64,
    duration: u64,
    #[serde(rename = "async")]
    is_async: bool,
}

impl From<Override> for OverrideResponse {
    fn from(o: Override) -> Self {
        Self {
            id: o.id,
            identifier: o.identifier,
            limit: o.limit,
            duration: o.duration,
            is_async: o.is_async,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OverrideSet {
    override_id: String,
}

/// Set the limit and duration for an identifier or a * pattern in a namespace
///
/// Creates or updates; answers the override's id.
#[utoipa::path(post, path = "/v1/ratelimits.setOverride", operation_id = "ratelimits.setOverride",
    tag = "ratelimits", request_body = SetOverrideBody,
    responses((status = 200, description = "OK", body = OverrideSet), V1BodyErrors))]
pub async fn set_override(call: Authed<Json<SetOverrideBody>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    let limit = integer("limit", &body.limit, 1)?;
    let duration = integer("duration", &body.duration, 1_000)?;
    let is_async = body.is_async.unwrap_or(false);
    let stored = call
        .run(move |kg, principal, Json(body)| {
            let ns = NamespaceRef { id: body.namespace_id, name: body.namespace_name };
            kg.rbac.set_override(principal, &ns, &body.identifier, limit, duration, is_async)
        })
        .await?;
    Ok(HttpResponse::Ok().json(OverrideSet { override_id: stored.id }))
}

/// The override of exactly an identifier (or pattern)
///
/// `GET ratelimits.getOverride?namespaceId|namespaceName=...&identifier=...`
#[utoipa::path(get, path = "/v1/ratelimits.getOverride", operation_id = "ratelimits.getOverride",
    tag = "ratelimits", params(("identifier" = String, Query, min_length = 1, max_length = 512), NamespaceParam),
    responses((status = 200, description = "OK", body = OverrideResponse), V1QueryErrors))]
pub async fn get_override(call: Authed<Query<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let identifier = call.input.0.identifier()?;
    let found = call
        .run(move |kg, principal, Query(q)| kg.rbac.get_override(principal, &q.namespace(), &identifier))
        .await?;
    Ok(HttpResponse::Ok().json(OverrideResponse::from(found)))
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OverrideList {
    overrides: Vec<OverrideResponse>,
    total: usize,
}

/// Every override of a namespace, oldest first
///
/// `GET ratelimits.listOverrides?namespaceId|namespaceName=...`: in one page (`cursor` and
/// `limit` are accepted and ignored: at most 1000 exist).
#[utoipa::path(get, path = "/v1/ratelimits.listOverrides", operation_id = "ratelimits.listOverrides",
    tag = "ratelimits", params(NamespaceParam),
    responses((status = 200, description = "OK", body = OverrideList), V1QueryErrors))]
pub async fn list_overrides(call: Authed<Query<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let all = call.run(|kg, principal, Query(q)| kg.rbac.list_overrides(principal, &q.namespace())).await?;
    let total = all.len();
    let overrides: Vec<OverrideResponse> = all.into_iter().map(Into::into).collect();
    Ok(HttpResponse::Ok().json(OverrideList { overrides, total }))
}

/// Delete an override
#[utoipa::path(post, path = "/v1/ratelimits.deleteOverride", operation_id = "ratelimits.deleteOverride",
    tag = "ratelimits", request_body = OverrideRefBody,
    responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn delete_override(call: Authed<Json<OverrideRefBody>>) -> Result<HttpResponse, ApiError> {
    let identifier = call.input.0.identifier()?;
    call.run(move |kg, principal, Json(body)| {
        kg.rbac.delete_override(principal, &body.namespace(), &identifier)
    })
    .await?;
    Ok(empty())
}

/// The namespace of a query string: `namespaceId=...` or `namespaceName=...`, exactly one
/// (one object parameter, exploded into the query string as OpenAPI's form style says).
#[derive(Debug)]
struct NamespaceParam;

impl utoipa::IntoParams for NamespaceParam {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn, ParameterStyle};
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
        let name =
            || ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(512));
        // Exactly one of the two: added to the document by `openapi()`.
        let schema = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("namespaceId", name())
            .property("namespaceName", name())
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .build();
        vec![
            ParameterBuilder::new()
                .name("namespace")
                .parameter_in(ParameterIn::Query)
                .required(utoipa::openapi::Required::True)
                .style(Some(ParameterStyle::Form))
                .explode(Some(true))
                .description(Some("namespaceId=... or namespaceName=... (exactly one)"))
                .schema(Some(schema))
                .build(),
        ]
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(set_override, get_override, list_overrides, delete_override))]
struct Doc;

/// This room's part of the v1 document: a body names its namespace by id or by name,
/// exactly one.
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    for name in ["SetOverrideBody", "OverrideRefBody"] {
        require_one_of(schema_mut(&mut doc, name), &["namespaceId", "namespaceName"], true);
    }
    for path in ["/v1/ratelimits.getOverride", "/v1/ratelimits.listOverrides"] {
        let params = operation_mut(&mut doc, path, "get")["parameters"].as_array_mut();
        for param in params.into_iter().flatten().filter(|p| p["name"] == "namespace") {
            require_one_of(&mut param["schema"], &["namespaceId", "namespaceName"], true);
        }
    }
    doc
}
