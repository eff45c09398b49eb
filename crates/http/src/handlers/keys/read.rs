//! Reading a key, both APIs: v1's `getKey` (GET or POST; the key with its direct
//! permissions and roles), v2's `getKey` and `whoami` (by id or by secret; effective
//! permissions, roles, identity, credits, limits, `updatedAt`, `lastUsedAt`).

use crate::error::ApiError;
use crate::handlers::references::NamedItem;
use crate::handlers::v2::credits::CreditsObject;
use crate::handlers::v2::identities::{IdentityObject, RatelimitObject};
use crate::handlers::v2::{Envelope, check_key_id, ok};
use crate::openapi::{Api, V1BodyErrors, V1Precondition, V1QueryErrors, V2Errors, V2Precondition};
use crate::plumbing::{Authed, Json, QueryOrJson};
use actix_web::HttpResponse;
use keygate_domain::check_len;
use keygate_rbac::{ApiAccess, Key};
use keygate_rbac::{KeyLookup, KeySummary, KeyView, MAX_VERIFY_KEY_CHARS, Principal, RbacError};
use keygate_runtime::Runtime;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct GetKeyBody {
    /// A key id.
    #[schema(min_length = 1, max_length = 255)]
    #[param(min_length = 1, max_length = 255)]
    key_id: String,
    /// `true`: add `plaintext` when the key is recoverable (needs `decrypt_key`; audited).
    decrypt: Option<bool>,
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
    /// The key itself, for a recoverable key read with `decrypt=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) plaintext: Option<String>,
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
            plaintext: None,
        }
    }
}

/// 403 before anything is read, unless `p` holds `decrypt_key` in some form.
pub(crate) fn may_decrypt(p: &Principal) -> Result<(), RbacError> {
    ApiAccess::of(p, "decrypt_key").map(drop).ok_or_else(|| ApiAccess::denied("decrypt_key", None))
}

/// The plaintext of `key` when it is recoverable (one `key.decrypt` audit event).
fn reveal(kg: &Runtime, p: &Principal, key: &Key) -> Result<Option<String>, RbacError> {
    Ok(reveal_all(kg, p, [key])?.remove(&key.id))
}

/// The plaintexts of the recoverable ones of `keys` by key id (one `key.decrypt` audit
/// event each): `getKey` and `listKeys` with `decrypt`, both APIs.
pub(crate) fn reveal_all<'a>(
    kg: &Runtime,
    p: &Principal,
    keys: impl IntoIterator<Item = &'a Key>,
) -> Result<std::collections::HashMap<String, String>, RbacError> {
    let keys: Vec<(&str, Option<&str>)> =
        keys.into_iter().map(|k| (k.id.as_str(), k.api_id.as_deref())).collect();
    let revealed = kg.rbac.reveal_keys(p, &keys)?;
    Ok(revealed.into_iter().map(|(id, plaintext)| (id, plaintext.to_string())).collect())
}

/// A key with its direct permissions and roles
#[utoipa::path(get, path = "/v1/keys.getKey", operation_id = "keys.getKey", tag = "keys", params(GetKeyBody),
    responses((status = 200, description = "OK", body = KeyResponse), V1QueryErrors, V1Precondition))]
pub async fn get_key(call: Authed<QueryOrJson<GetKeyBody>>) -> Result<HttpResponse, ApiError> {
    let answer = call
        .run(|kg, principal, QueryOrJson(q)| {
            let decrypt = q.decrypt == Some(true);
            if decrypt {
                may_decrypt(principal)?;
            }
            let view = kg.rbac.get_key(principal, &q.key_id)?;
            let plaintext = if decrypt { reveal(kg, principal, &view.key)? } else { None };
            Ok::<_, RbacError>(KeyResponse { plaintext, ..KeyResponse::from(view) })
        })
        .await?;
    Ok(HttpResponse::Ok().json(answer))
}

// `POST /v1/keys.getKey` with `{"keyId"}`: the same as the GET (one handler, `get_key`,
// reads either); this function only describes the POST form.
#[utoipa::path(post, path = "/v1/keys.getKey", operation_id = "keys.getKey.post", tag = "keys",
    summary = "The same, with the key id in a JSON body",
    request_body = GetKeyBody,
    responses((status = 200, description = "OK", body = KeyResponse), V1BodyErrors, V1Precondition))]
#[allow(dead_code)]
fn get_key_post() {}

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
    /// Where it may be used from, when narrowed (its identity's and API's lists apply too).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    allowed_ips: Option<Vec<String>>,
    /// When it was last updated (Unix ms; absent: never since its creation).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    updated_at: Option<i64>,
    /// When it was last verified (Unix ms, the start of that minute; absent: never, or
    /// analytics are off). Unkey's name, which the SDKs read.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    last_used_at: Option<i64>,
    /// The key itself, for a recoverable key read with `decrypt: true` (getKey, listKeys).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) plaintext: Option<String>,
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
            allowed_ips: k.allowed_ips.map(|a| a.entries()),
            updated_at: (k.updated_at > k.created_at).then_some(k.updated_at),
            last_used_at: s.last_used,
            plaintext: None,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = GetKeyBody)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetKeyBodyV2 {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// `true`: add `plaintext` when the key is recoverable (needs `decrypt_key`; audited).
    decrypt: Option<bool>,
}

/// A key
#[utoipa::path(post, path = "/v2/keys.getKey", operation_id = "keys.getKey", tag = "keys",
    request_body = GetKeyBodyV2,
    responses((status = 200, description = "OK", body = Envelope<KeyObject>), V2Errors, V2Precondition))]
pub async fn get_key_v2(call: Authed<Json<GetKeyBodyV2>>) -> Result<HttpResponse, ApiError> {
    let body = &call.input.0;
    check_key_id(&body.key_id)?;
    let answer = call
        .run(|kg, p, Json(b)| {
            let decrypt = b.decrypt == Some(true);
            if decrypt {
                may_decrypt(p)?;
            }
            let found = described(kg, p, KeyLookup::Id(&b.key_id))?;
            let plaintext = if decrypt { reveal(kg, p, &found.key)? } else { None };
            Ok::<_, RbacError>(KeyObject { plaintext, ..KeyObject::from(found) })
        })
        .await?;
    Ok(ok(answer))
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

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_key, get_key_post))]
struct V1Doc;

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_key_v2, whoami))]
struct V2Doc;

/// This room's part of a document.
pub(crate) fn openapi(api: Api) -> Value {
    match api {
        Api::V1 => crate::openapi::room::<V1Doc>(),
        Api::V2 => crate::openapi::room::<V2Doc>(),
    }
}
