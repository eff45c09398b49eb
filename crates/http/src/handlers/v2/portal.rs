//! v2 `portal.*` (API-v2.md §17): portals and sessions managed with a root key, the code
//! exchanged without one, and the end user's own keys with the `portal_session` cookie.

use super::{Empty, Envelope, PageEnvelope, decode_cursor, ok, ok_empty, ok_page, page_limit, unsupported};
use crate::error::ApiError;
use crate::handlers::keys::create::RerollKeyBody;
use crate::handlers::keys::read::KeyObject;
use crate::handlers::keys::shared::CreatedKey;
use crate::openapi::{V2Conflict, V2Errors, V2Precondition};
use crate::plumbing::{Anyone, Authed, Json, PortalCaller, integer};
use actix_web::HttpResponse;
use keygate_domain::Patch;
use keygate_portal::portals::one_ref;
use keygate_portal::{NewPortal, NewSession, Portal, PortalChange, PortalVerifications, VerificationPoint};
use keygate_rbac::key_summary;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// A portal's branding.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Branding {
    #[serde(skip_serializing_if = "Option::is_none")]
    logo_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    primary_color: Option<String>,
}

/// v2's Portal.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Portal)]
pub(crate) struct PortalObject {
    id: String,
    slug: String,
    display_name: String,
    enabled: bool,
    created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_at: Option<i64>,
    /// The API whose keys the portal shows.
    keyspace_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    branding: Option<Branding>,
}

impl From<Portal> for PortalObject {
    fn from(p: Portal) -> Self {
        let branding = (p.logo_url.is_some() || p.primary_color.is_some())
            .then_some(Branding { logo_url: p.logo_url, primary_color: p.primary_color });
        Self {
            id: p.id,
            slug: p.slug,
            display_name: p.display_name,
            enabled: p.enabled,
            created_at: p.created_at,
            updated_at: p.updated_at,
            keyspace_id: p.api_id,
            branding,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatePortalBody {
    #[schema(min_length = 3, max_length = 64, pattern = "^[a-z0-9-]+$")]
    slug: String,
    #[schema(min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    display_name: String,
    /// The API (one portal per API).
    #[schema(min_length = 1, max_length = 255)]
    keyspace_id: String,
    /// Unkey's deploy platform: not supported (400 `not_supported` when given).
    #[schema(ignore)]
    app_id: Option<Value>,
    enabled: Option<bool>,
    /// An absolute https URL.
    #[schema(
        max_length = 2048,
        pattern = "^https://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?([/?#][^\\s\"'<>\\\\`\\u0000-\\u001f\\u007f-\\u009f]*)?$"
    )]
    logo_url: Option<String>,
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    primary_color: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedPortal {
    portal_id: String,
}

/// Create a portal for an API
///
/// Needs `portal.*.create_portal` (404 without). Slug and API each hold one portal (409).
#[utoipa::path(post, path = "/v2/portal.createPortal", operation_id = "portal.createPortal", tag = "portal",
    request_body = CreatePortalBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedPortal>), V2Errors, V2Conflict))]
pub async fn create_portal(call: Authed<Json<CreatePortalBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    unsupported(&[("appId", &b.app_id)])?;
    let portal = call
        .run(move |kg, p, Json(b)| {
            let new = NewPortal {
                slug: b.slug,
                display_name: b.display_name,
                api_id: b.keyspace_id,
                enabled: b.enabled,
                logo_url: b.logo_url,
                primary_color: b.primary_color,
            };
            kg.portal.create_portal(p, new)
        })
        .await?;
    Ok(ok(CreatedPortal { portal_id: portal.id }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetPortalBody {
    /// A portal's id or slug (or give `keyspaceId`).
    #[schema(min_length = 1, max_length = 255)]
    portal: Option<String>,
    #[schema(min_length = 1, max_length = 255)]
    keyspace_id: Option<String>,
    #[schema(ignore)]
    app_id: Option<Value>,
}

/// Read a portal, by id, slug or API
#[utoipa::path(post, path = "/v2/portal.getPortal", operation_id = "portal.getPortal", tag = "portal",
    request_body = GetPortalBody,
    responses((status = 200, description = "OK", body = Envelope<PortalObject>), V2Errors))]
pub async fn get_portal(call: Authed<Json<GetPortalBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    unsupported(&[("appId", &b.app_id)])?;
    one_ref(b.portal.as_deref(), b.keyspace_id.as_deref())?;
    let portal = call
        .run(move |kg, p, Json(b)| {
            let r = one_ref(b.portal.as_deref(), b.keyspace_id.as_deref())
                .map_err(keygate_rbac::RbacError::from)?;
            kg.portal.get_portal(p, r)
        })
        .await?;
    Ok(ok(PortalObject::from(portal)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdatePortalBody {
    #[schema(min_length = 1, max_length = 255)]
    portal: String,
    #[schema(min_length = 3, max_length = 64, pattern = "^[a-z0-9-]+$")]
    slug: Option<String>,
    #[schema(min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    display_name: Option<String>,
    #[schema(min_length = 1, max_length = 255)]
    keyspace_id: Option<String>,
    #[schema(ignore)]
    app_id: Option<Value>,
    enabled: Option<bool>,
    /// Null clears it.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?([/?#][^\\s\"'<>\\\\`\\u0000-\\u001f\\u007f-\\u009f]*)?$")]
    logo_url: Patch<String>,
    /// Null clears it.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^#[0-9a-fA-F]{6}$")]
    primary_color: Patch<String>,
}

fn patch(p: Patch<String>) -> Option<Option<String>> {
    match p {
        Patch::Absent => None,
        Patch::Clear => Some(None),
        Patch::Set(v) => Some(Some(v)),
    }
}

/// Change a portal
///
/// Disabling it ends its sessions' use (401) and stops new ones.
#[utoipa::path(post, path = "/v2/portal.updatePortal", operation_id = "portal.updatePortal", tag = "portal",
    request_body = UpdatePortalBody,
    responses((status = 200, description = "OK", body = Envelope<PortalObject>), V2Errors, V2Conflict))]
pub async fn update_portal(call: Authed<Json<UpdatePortalBody>>) -> Result<HttpResponse, ApiError> {
    unsupported(&[("appId", &call.input.0.app_id)])?;
    let portal = call
        .run(move |kg, p, Json(b)| {
            let change = PortalChange {
                slug: b.slug,
                display_name: b.display_name,
                api_id: b.keyspace_id,
                enabled: b.enabled,
                logo_url: patch(b.logo_url),
                primary_color: patch(b.primary_color),
            };
            kg.portal.update_portal(p, &b.portal, change)
        })
        .await?;
    Ok(ok(PortalObject::from(portal)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct PortalRefBody {
    /// A portal's id or slug.
    #[schema(min_length = 1, max_length = 255)]
    portal: String,
}

/// Delete a portal and its sessions
#[utoipa::path(post, path = "/v2/portal.deletePortal", operation_id = "portal.deletePortal", tag = "portal",
    request_body = PortalRefBody,
    responses((status = 200, description = "OK", body = Envelope<Empty>), V2Errors))]
pub async fn delete_portal(call: Authed<Json<PortalRefBody>>) -> Result<HttpResponse, ApiError> {
    call.run(move |kg, p, Json(b)| kg.portal.delete_portal(p, &b.portal)).await?;
    Ok(ok_empty())
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateSessionBody {
    #[schema(min_length = 1, max_length = 255)]
    portal: String,
    #[schema(min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$", example = "customer_42")]
    external_id: String,
    /// 1–4 distinct of keys:read, keys:create, keys:reroll, analytics:read.
    #[schema(value_type = Vec<ScopeName>, min_items = 1, max_items = 4)]
    scopes: Vec<String>,
    /// The team looking at what its user sees: no changes.
    preview: Option<bool>,
    /// Where the portal's pages link back to: an absolute http(s) URL.
    #[schema(
        max_length = 2048,
        pattern = "^https?://[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?([/?#][^\\s\"'<>\\\\`\\u0000-\\u001f\\u007f-\\u009f]*)?$"
    )]
    return_url: Option<String>,
}

/// What a session may do.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) enum ScopeName {
    #[schema(rename = "keys:read")]
    KeysRead,
    #[schema(rename = "keys:create")]
    KeysCreate,
    #[schema(rename = "keys:reroll")]
    KeysReroll,
    #[schema(rename = "analytics:read")]
    AnalyticsRead,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CreatedSession {
    /// The session's id (`ps_…`): not a credential.
    id: String,
    /// `<public URL>/portal/<slug>?code=<single-use code, valid 15 minutes>`.
    url: String,
}

/// Mint a session for one of your users
///
/// Needs `create_portal_session` on the portal (404 without), and each scope's key
/// permissions on its API (403 for the whole call).
#[utoipa::path(post, path = "/v2/portal.createSession", operation_id = "portal.createSession", tag = "portal",
    request_body = CreateSessionBody,
    responses((status = 200, description = "OK", body = Envelope<CreatedSession>), V2Errors, V2Precondition))]
pub async fn create_session(call: Authed<Json<CreateSessionBody>>) -> Result<HttpResponse, ApiError> {
    let (session, url) = call
        .run(move |kg, p, Json(b)| {
            let new = NewSession {
                external_id: b.external_id,
                scopes: b.scopes,
                preview: b.preview.unwrap_or(false),
                return_url: b.return_url,
            };
            let (session, code, portal) = kg.portal.create_session(p, &b.portal, new)?;
            Ok::<_, keygate_rbac::RbacError>((session, kg.portal.session_url(&portal, &code)))
        })
        .await?;
    Ok(ok(CreatedSession { id: session.id, url }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ExchangeCodeBody {
    #[schema(min_length = 1, max_length = 128)]
    code: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExchangedCode {
    /// The session's access token: the `portal_session` cookie's value.
    access_token: String,
    expires_at: i64,
}

/// Exchange a session's code for its access token (no root key)
///
/// An unknown, expired, revoked or used code: 401. A code works once.
#[utoipa::path(post, path = "/v2/portal.exchangeCode", operation_id = "portal.exchangeCode", tag = "portal",
    request_body = ExchangeCodeBody, security(()),
    responses((status = 200, description = "OK", body = Envelope<ExchangedCode>), V2Errors))]
pub async fn exchange_code(call: Authed<Json<ExchangeCodeBody>, Anyone>) -> Result<HttpResponse, ApiError> {
    let (token, ctx) = call.run(move |kg, _, Json(b)| kg.portal.exchange_code(&b.code)).await?;
    let expires_at = ctx.session.token_expires_at.unwrap_or_default();
    Ok(ok(ExchangedCode { access_token: token, expires_at }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ListSessionsBody {
    #[schema(min_length = 1, max_length = 255)]
    portal: String,
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
    /// An externalId prefix (`%` and `_` taken literally).
    #[schema(min_length = 1, max_length = 255)]
    search: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionObject {
    id: String,
    /// `pending` (code not exchanged yet) or `active`.
    status: &'static str,
    created_at: i64,
    expires_at: i64,
    scopes: Vec<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionGroupObject {
    external_id: String,
    sessions: Vec<SessionObject>,
}

/// The live sessions of a portal, per end user
#[utoipa::path(post, path = "/v2/portal.listSessions", operation_id = "portal.listSessions", tag = "portal",
    request_body = ListSessionsBody,
    responses((status = 200, description = "OK", body = PageEnvelope<SessionGroupObject>), V2Errors))]
pub async fn list_sessions(call: Authed<Json<ListSessionsBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let (items, next) = call
        .run(move |kg, p, Json(b)| {
            kg.portal.list_sessions(p, &b.portal, b.search.as_deref(), after.as_deref(), limit)
        })
        .await?;
    let page = keygate_rbac::Page { items, next };
    Ok(ok_page(page, |g| SessionGroupObject {
        external_id: g.external_id,
        sessions: g
            .sessions
            .into_iter()
            .map(|s| SessionObject {
                status: s.status(),
                created_at: s.created_at,
                expires_at: s.expires_at(),
                scopes: s.scopes.iter().map(|x| x.as_str()).collect(),
                id: s.id,
            })
            .collect(),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RevokeSessionBody {
    #[schema(min_length = 1, max_length = 255)]
    portal: String,
    #[schema(min_length = 1, max_length = 255, pattern = "^[A-Za-z0-9_.-]+$", example = "customer_42")]
    external_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RevokedSessions {
    sessions_revoked: usize,
}

/// Revoke every live session of one end user (pending ones too)
#[utoipa::path(post, path = "/v2/portal.revokeSession", operation_id = "portal.revokeSession", tag = "portal",
    request_body = RevokeSessionBody,
    responses((status = 200, description = "OK", body = Envelope<RevokedSessions>), V2Errors))]
pub async fn revoke_session(call: Authed<Json<RevokeSessionBody>>) -> Result<HttpResponse, ApiError> {
    let n = call.run(move |kg, p, Json(b)| kg.portal.revoke_sessions(p, &b.portal, &b.external_id)).await?;
    Ok(ok(RevokedSessions { sessions_revoked: n }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct PortalListKeysBody {
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    limit: Option<Number>,
    #[schema(min_length = 6, max_length = 1024, pattern = "^kgc1:[^\\u0000]+$")]
    cursor: Option<String>,
}

/// The session user's keys in the portal's API (cookie `portal_session`; `keys:read`)
#[utoipa::path(post, path = "/v2/portal.listKeys", operation_id = "portal.listKeys", tag = "portal",
    request_body = PortalListKeysBody, security(("portalSession" = [])),
    responses((status = 200, description = "OK", body = PageEnvelope<KeyObject>), V2Errors))]
pub async fn list_keys(
    call: Authed<Json<PortalListKeysBody>, PortalCaller>,
) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let limit = page_limit(&b.limit, 100)?;
    let after = decode_cursor(b.cursor.as_deref())?;
    let page = call
        .run(move |kg, PortalCaller(ctx), _| {
            let mut page = kg.portal.list_keys(ctx, after.as_deref(), limit, key_summary)?;
            kg.analytics.fill_last_used(&mut page.items)?;
            Ok::<_, keygate_rbac::RbacError>(page)
        })
        .await?;
    Ok(ok_page(page, KeyObject::from))
}

/// Reroll one of the session user's keys (cookie `portal_session`; `keys:reroll`)
///
/// As `keys.rerollKey`; a preview session: 403; another key: 404.
#[utoipa::path(post, path = "/v2/portal.rerollKey", operation_id = "portal.rerollKey", tag = "portal",
    request_body = RerollKeyBody, security(("portalSession" = [])),
    responses((status = 200, description = "OK", body = Envelope<CreatedKey>), V2Errors))]
pub async fn reroll_key(call: Authed<Json<RerollKeyBody>, PortalCaller>) -> Result<HttpResponse, ApiError> {
    let expiration = call.input.0.checked()?;
    let (key, secret) = call
        .run(move |kg, PortalCaller(ctx), Json(b)| kg.portal.reroll_key(ctx, &b.key_id, expiration))
        .await?;
    Ok(ok(CreatedKey::new(key.id, secret.expose().to_string())))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PortalVerificationsBody {
    /// Unix ms.
    #[schema(value_type = u64)]
    start_time: Number,
    /// Unix ms, exclusive; at most 90 days after `startTime`.
    #[schema(value_type = u64)]
    end_time: Number,
    #[schema(min_length = 3, max_length = 255)]
    key_id: Option<String>,
}

/// One bucket of verifications.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Point {
    time: i64,
    total: u64,
    valid: u64,
    rate_limited: u64,
    insufficient_permissions: u64,
    forbidden: u64,
    disabled: u64,
    expired: u64,
    usage_exceeded: u64,
    /// The credits charged (API-v2.md §22).
    spent_credits: u64,
}

impl From<&VerificationPoint> for Point {
    fn from(p: &VerificationPoint) -> Self {
        Self {
            time: p.time,
            total: p.total(),
            valid: p.field("valid"),
            rate_limited: p.field("rateLimited"),
            insufficient_permissions: p.field("insufficientPermissions"),
            forbidden: p.field("forbidden"),
            disabled: p.field("disabled"),
            expired: p.field("expired"),
            usage_exceeded: p.field("usageExceeded"),
            spent_credits: p.spent_credits,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeySeriesObject {
    key_id: String,
    data: Vec<Point>,
}

/// The totals (`data`) and each key's series (`keys`), zero-filled and ascending.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerificationsAnswer<'a> {
    meta: super::Meta<'a>,
    data: Vec<Point>,
    /// The buckets' width: a minute up to 6 hours, an hour up to 7 days, a day beyond.
    bucket_millis: i64,
    keys: Vec<KeySeriesObject>,
}

/// The session user's verifications per bucket (cookie `portal_session`; `analytics:read`)
#[utoipa::path(post, path = "/v2/portal.getVerifications", operation_id = "portal.getVerifications", tag = "portal",
    request_body = PortalVerificationsBody, security(("portalSession" = [])),
    responses((status = 200, description = "OK", body = VerificationsAnswer), V2Errors))]
pub async fn get_verifications(
    call: Authed<Json<PortalVerificationsBody>, PortalCaller>,
) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    let start = integer("startTime", &b.start_time, 0)?;
    let end = integer("endTime", &b.end_time, 0)?;
    let (start, end) = (i64::try_from(start).unwrap_or(i64::MAX), i64::try_from(end).unwrap_or(i64::MAX));
    let v: PortalVerifications = call
        .run(move |kg, PortalCaller(ctx), Json(b)| {
            kg.portal.verifications(ctx, start, end, b.key_id.as_deref())
        })
        .await?;
    let id = keygate_domain::new_id(keygate_domain::IdPrefix::Request);
    let body = VerificationsAnswer {
        meta: super::Meta { request_id: &id },
        data: v.total.iter().map(Point::from).collect(),
        bucket_millis: v.bucket_ms,
        keys: v
            .keys
            .iter()
            .map(|k| KeySeriesObject {
                key_id: k.key_id.clone(),
                data: k.points.iter().map(Point::from).collect(),
            })
            .collect(),
    };
    Ok(crate::handlers::ok_json(&id, body))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_portal,
    get_portal,
    update_portal,
    delete_portal,
    create_session,
    exchange_code,
    list_sessions,
    revoke_session,
    list_keys,
    reroll_key,
    get_verifications
))]
struct Doc;

/// This room's part of the v2 document: a session's scopes are distinct.
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    crate::openapi::schema_mut(&mut doc, "CreateSessionBody")["properties"]["scopes"]["uniqueItems"] =
        true.into();
    doc
}
