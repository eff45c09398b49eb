//! v1 `apis.*` (Unkey v1's wire, API-v2.md §10): the same API objects as v2's, created,
//! read, their keys listed, deleted with their keys.

use super::keys::read::{KeyResponse, may_decrypt, reveal_all};
use super::v2::apis::{ApiRefBody, CreateApiBody, CreatedApi};
use super::{Empty, empty};
use crate::error::ApiError;
use crate::openapi::{V1BodyErrors, V1Precondition, V1QueryErrors};
use crate::plumbing::{Authed, Json, Query};
use actix_web::HttpResponse;
use keygate_domain::{MAX_NAME_CHARS, ValidationError, check_len};
use keygate_rbac::{Api, key_view};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// v1's Api: with its workspace.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Api)]
pub(crate) struct ApiResponse {
    id: String,
    name: String,
    workspace_id: String,
}

impl From<Api> for ApiResponse {
    fn from(a: Api) -> Self {
        Self { id: a.id, name: a.name, workspace_id: a.workspace_id }
    }
}

/// Create an API
#[utoipa::path(post, path = "/v1/apis.createApi", operation_id = "apis.createApi", tag = "apis",
    request_body = CreateApiBody, responses((status = 200, description = "OK", body = CreatedApi), V1BodyErrors))]
pub async fn create_api(mut call: Authed<Json<CreateApiBody>>) -> Result<HttpResponse, ApiError> {
    let allowed = call.input.0.allowed_ips()?;
    let api = call.run(|kg, p, Json(b)| kg.rbac.create_api_of(p, b.name(), b.key_format(), allowed)).await?;
    Ok(HttpResponse::Ok().json(CreatedApi::new(api.id)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct ApiIdQuery {
    #[param(min_length = 1, max_length = 255, example = "api_1234")]
    api_id: String,
}

/// An API
#[utoipa::path(get, path = "/v1/apis.getApi", operation_id = "apis.getApi", tag = "apis", params(ApiIdQuery),
    responses((status = 200, description = "OK", body = ApiResponse), V1QueryErrors))]
pub async fn get_api(call: Authed<Query<ApiIdQuery>>) -> Result<HttpResponse, ApiError> {
    let api = call.run(|kg, p, Query(q)| kg.rbac.get_api(p, &q.api_id)).await?;
    Ok(HttpResponse::Ok().json(ApiResponse::from(api)))
}

/// Delete an API and every key in it
#[utoipa::path(post, path = "/v1/apis.deleteApi", operation_id = "apis.deleteApi", tag = "apis",
    request_body = ApiRefBody, responses((status = 200, description = "OK", body = Empty), V1BodyErrors))]
pub async fn delete_api(call: Authed<Json<ApiRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, p, Json(b)| kg.rbac.delete_api(p, b.api_id())).await?;
    Ok(empty())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct ListKeysQuery {
    #[param(min_length = 1, max_length = 255, example = "api_1234")]
    api_id: String,
    /// Keys per page (default 100).
    #[param(minimum = 1, maximum = 100, default = 100)]
    limit: Option<u32>,
    /// The `cursor` of the previous page.
    #[param(min_length = 1, max_length = 255)]
    cursor: Option<String>,
    /// Only the keys of this owner (Unkey v1's `ownerId`; keygate keys have none yet).
    #[param(min_length = 1, max_length = 255)]
    owner_id: Option<String>,
    /// `true`: add `plaintext` to each recoverable key (needs `decrypt_key`; audited).
    decrypt: Option<bool>,
}

/// A page of an API's keys, and how many it holds.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeyList {
    keys: Vec<KeyResponse>,
    /// The cursor of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    cursor: Option<String>,
    /// How many keys the API holds.
    total: u64,
}

/// A page of an API's keys, by id
#[utoipa::path(get, path = "/v1/apis.listKeys", operation_id = "apis.listKeys", tag = "apis",
    params(ListKeysQuery), responses((status = 200, description = "OK", body = KeyList), V1QueryErrors, V1Precondition))]
pub async fn list_keys(call: Authed<Query<ListKeysQuery>>) -> Result<HttpResponse, ApiError> {
    let q = &call.input.0;
    let limit = q.limit.unwrap_or(100);
    if !(1..=100).contains(&limit) {
        return Err(ValidationError::new("limit", "must be 1 to 100").into());
    }
    for (field, value) in [("cursor", &q.cursor), ("ownerId", &q.owner_id)] {
        if let Some(v) = value {
            check_len(field, v, MAX_NAME_CHARS)?;
        }
    }
    let (page, total, mut revealed) = call
        .run(move |kg, p, Query(q)| {
            let decrypt = q.decrypt == Some(true);
            if decrypt {
                may_decrypt(p)?;
            }
            let owner = q.owner_id.as_deref();
            let (page, total) =
                kg.rbac.list_api_keys(p, &q.api_id, owner, q.cursor.as_deref(), limit as usize, key_view)?;
            let revealed = match decrypt {
                true => reveal_all(kg, p, page.items.iter().map(|v| &v.key))?,
                false => Default::default(),
            };
            Ok::<_, keygate_rbac::RbacError>((page, total, revealed))
        })
        .await?;
    let keys = page
        .items
        .into_iter()
        .map(|v| {
            let plaintext = revealed.remove(&v.key.id);
            let mut key = KeyResponse::from(v);
            key.plaintext = plaintext;
            key
        })
        .collect();
    Ok(HttpResponse::Ok().json(KeyList { keys, cursor: page.next, total }))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_api, get_api, list_keys, delete_api))]
struct Doc;

/// This room's part of the v1 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
