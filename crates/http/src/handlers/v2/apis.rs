//! v2 `apis.*` (API-v2.md §10): create and read API objects, list an API's keys a page at
//! a time, delete an API with its keys.

use super::{Empty, Envelope, PageEnvelope, decode_cursor, ok, ok_empty, ok_page, page_limit};
use crate::error::ApiError;
use crate::handlers::keys::read::{KeyObject, may_decrypt, reveal_all};
use crate::openapi::{V2Errors, V2Precondition};
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use keygate_domain::{KeyFormat, MAX_NAME_CHARS};
use keygate_rbac::{Api, key_summary};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// v2's Api.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Api)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiObject {
    id: String,
    name: String,
    key_format: KeyFormatName,
    /// Where its keys may be used from, when narrowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    allowed_ips: Option<Vec<String>>,
}

impl From<Api> for ApiObject {
    fn from(a: Api) -> Self {
        let allowed_ips = a.allowed_ips.map(|l| l.entries());
        Self { id: a.id, name: a.name, key_format: a.key_format.into(), allowed_ips }
    }
}

/// How an API's keys are made (API-v2.md §24): `plain`, or `checksum` (GitHub's token
/// shape, `<prefix>_` + 30 base-62 characters + a 6-character CRC32 checksum).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = KeyFormat)]
pub(crate) enum KeyFormatName {
    #[default]
    Plain,
    Checksum,
}

impl From<KeyFormat> for KeyFormatName {
    fn from(f: KeyFormat) -> Self {
        match f {
            KeyFormat::Plain => KeyFormatName::Plain,
            KeyFormat::Checksum => KeyFormatName::Checksum,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateApiBody {
    /// 3–255 characters: a letter, then `A-Z a-z 0-9 . _ -`. Need not be unique.
    #[schema(min_length = 3, max_length = 255, pattern = "^[A-Za-z][A-Za-z0-9._-]*$", example = "payments")]
    name: String,
    /// How the API's keys are made, fixed for its life (default `plain`).
    #[serde(default)]
    key_format: KeyFormatName,
    /// Where the API's keys may be used from (at most 100 IPv4/IPv6 addresses or CIDR
    /// ranges), fixed for its life.
    #[schema(schema_with = crate::openapi::kinds::allowed_ips_or_null)]
    allowed_ips: Option<Vec<String>>,
}

/// The answer of `createApi` (v1 and v2's `data`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedApi {
    api_id: String,
}

impl CreateApiBody {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Its `allowedIps`, checked (taken out of the body).
    pub(crate) fn allowed_ips(&mut self) -> Result<Option<keygate_domain::AllowedIps>, ApiError> {
        super::allowed_ips("allowedIps", self.allowed_ips.take())
    }

    pub(crate) fn key_format(&self) -> KeyFormat {
        match self.key_format {
            KeyFormatName::Plain => KeyFormat::Plain,
            KeyFormatName::Checksum => KeyFormat::Checksum,
        }
    }
}

impl ApiRefBody {
    pub(crate) fn api_id(&self) -> &str {
        &self.api_id
    }
}

impl CreatedApi {
    pub(crate) fn new(api_id: String) -> Self {
        Self { api_id }
    }
}

/// Create an API
#[utoipa::path(post, path = "/v2/apis.createApi", operation_id = "apis.createApi", tag = "apis",
    request_body = CreateApiBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedApi>), V2Errors))]
pub async fn create_api(mut call: Authed<Json<CreateApiBody>>) -> Result<HttpResponse, ApiError> {
    let allowed = call.input.0.allowed_ips()?;
    let api = call.run(|kg, p, Json(b)| kg.rbac.create_api_of(p, b.name(), b.key_format(), allowed)).await?;
    Ok(ok(CreatedApi::new(api.id)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiRefBody {
    #[schema(min_length = 1, max_length = 255, example = "api_1234")]
    api_id: String,
}

/// An API
#[utoipa::path(post, path = "/v2/apis.getApi", operation_id = "apis.getApi", tag = "apis",
    request_body = ApiRefBody,
    responses((status = 200, description = "OK", body = Envelope<ApiObject>), V2Errors))]
pub async fn get_api(call: Authed<Json<ApiRefBody>>) -> Result<HttpResponse, ApiError> {
    let api = call.run(|kg, p, Json(b)| kg.rbac.get_api(p, &b.api_id)).await?;
    Ok(ok(ApiObject::from(api)))
}

/// Delete an API and every key in it
///
/// In one transaction; the keys verify NOT_FOUND on the next request on every instance.
#[utoipa::path(post, path = "/v2/apis.deleteApi", operation_id = "apis.deleteApi", tag = "apis",
    request_body = ApiRefBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_api(call: Authed<Json<ApiRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(|kg, p, Json(b)| kg.rbac.delete_api(p, &b.api_id)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListKeysBody {
    #[schema(min_length = 1, max_length = 255, example = "api_1234")]
    api_id: String,
    /// Items per page (default 100).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    /// The cursor of the previous page.
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
    /// Only the keys of this identity.
    #[schema(min_length = 1, max_length = 255)]
    external_id: Option<String>,
    /// `true`: add `plaintext` to each recoverable key (needs `decrypt_key`; audited).
    decrypt: Option<bool>,
    /// Accepted; changes nothing (keygate's verification cache is never stale).
    #[allow(dead_code)]
    revalidate_keys_cache: Option<bool>,
}

/// A page of an API's keys, by id
#[utoipa::path(post, path = "/v2/apis.listKeys", operation_id = "apis.listKeys", tag = "apis",
    request_body = ListKeysBody,
    responses((status = 200, description = "OK", body = PageEnvelope<KeyObject>), V2Errors, V2Precondition))]
pub async fn list_keys(call: Authed<Json<ListKeysBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    if let Some(external_id) = &b.external_id {
        keygate_domain::check_len("externalId", external_id, MAX_NAME_CHARS)?;
    }
    let (page, mut revealed) = call
        .run(move |kg, p, Json(b)| {
            let decrypt = b.decrypt == Some(true);
            if decrypt {
                may_decrypt(p)?;
            }
            let (mut page, _) = kg.rbac.list_api_keys(
                p,
                &b.api_id,
                b.external_id.as_deref(),
                after.as_deref(),
                limit,
                key_summary,
            )?;
            kg.analytics.fill_last_used(&mut page.items)?;
            let revealed = match decrypt {
                true => reveal_all(kg, p, page.items.iter().map(|s| &s.key))?,
                false => Default::default(),
            };
            Ok::<_, keygate_rbac::RbacError>((page, revealed))
        })
        .await?;
    Ok(ok_page(page, |s| {
        let plaintext = revealed.remove(&s.key.id);
        let mut key = KeyObject::from(s);
        key.plaintext = plaintext;
        key
    }))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_api, get_api, list_keys, delete_api))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}
