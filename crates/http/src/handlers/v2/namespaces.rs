//! v2 `ratelimit.getNamespace`, `listNamespaces`, `updateNamespace` (API-v2.md §26): a
//! namespace's settings, its rate-limit algorithm (`keygate-namespaces`).

use super::{Empty, Envelope, PageEnvelope};
use super::{decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use keygate_domain::{NamespaceInfo, validate_namespace_name};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// v2's Namespace.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Namespace)]
struct NamespaceObject {
    namespace_id: String,
    namespace: String,
    /// How the namespace's limits are decided.
    #[schema(value_type = String, example = "fixed", pattern = "^(fixed|sliding|token_bucket)$")]
    algorithm: String,
    /// Unix ms.
    created_at: i64,
}

impl From<NamespaceInfo> for NamespaceObject {
    fn from(n: NamespaceInfo) -> Self {
        Self { namespace_id: n.id, namespace: n.name, algorithm: n.algorithm, created_at: n.created_at }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct NamespaceRefBody {
    /// The namespace's name (or `rlns_` id).
    #[schema(min_length = 1, max_length = 512)]
    namespace: String,
}

/// A namespace's settings
#[utoipa::path(post, path = "/v2/ratelimit.getNamespace", operation_id = "ratelimit.getNamespace", tag = "ratelimit",
    request_body = NamespaceRefBody, responses((status = 200, description = "OK", body = Envelope<NamespaceObject>), V2Errors))]
pub async fn get_namespace(call: Authed<Json<NamespaceRefBody>>) -> Result<HttpResponse, ApiError> {
    validate_namespace_name("namespace", &call.input.0.namespace)?;
    let found = call.run(move |kg, p, Json(b)| kg.namespaces.get(p, &b.namespace)).await?;
    Ok(ok(NamespaceObject::from(found)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListNamespacesBody {
    /// Items per page (default 100).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    /// The cursor of the previous page.
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
}

/// A page of namespaces, by name
#[utoipa::path(post, path = "/v2/ratelimit.listNamespaces", operation_id = "ratelimit.listNamespaces", tag = "ratelimit",
    request_body = ListNamespacesBody, responses((status = 200, description = "OK", body = PageEnvelope<NamespaceObject>), V2Errors))]
pub async fn list_namespaces(call: Authed<Json<ListNamespacesBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let page = call.run(move |kg, p, _| kg.namespaces.list(p, limit, after.as_deref())).await?;
    Ok(ok_page(page, NamespaceObject::from))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct UpdateNamespaceBody {
    /// The namespace's name (or `rlns_` id).
    #[schema(min_length = 1, max_length = 512)]
    namespace: String,
    /// `fixed` (epoch-aligned windows), `sliding` (the weighted two-window count) or
    /// `token_bucket` (GCRA). Every budget of the namespace starts afresh under it.
    #[schema(value_type = String, pattern = "^(fixed|sliding|token_bucket)$")]
    algorithm: String,
}

/// Change a namespace's algorithm
///
/// keygate's own operation. The next decision on every instance uses it; each budget of
/// the namespace starts afresh.
#[utoipa::path(post, path = "/v2/ratelimit.updateNamespace", operation_id = "ratelimit.updateNamespace", tag = "ratelimit",
    request_body = UpdateNamespaceBody, responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn update_namespace(call: Authed<Json<UpdateNamespaceBody>>) -> Result<HttpResponse, ApiError> {
    validate_namespace_name("namespace", &call.input.0.namespace)?;
    keygate_ratelimit::Algorithm::parse_field("algorithm", &call.input.0.algorithm)?;
    call.run(move |kg, p, Json(b)| kg.namespaces.update(p, &b.namespace, &b.algorithm)).await?;
    Ok(ok_empty())
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_namespace, list_namespaces, update_namespace))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}
