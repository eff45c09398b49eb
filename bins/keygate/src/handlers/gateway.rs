//! `/v1/gateway.authorize`: forward auth for nginx `auth_request`, Caddy `forward_auth`,
//! Traefik `ForwardAuth` and Envoy `ext_authz` (docs/gateways.md). One call checks the
//! end user's key, its permission and its rate limit, in that order; a request refused
//! for its key or permission consumes no budget. What to check comes from the gateway's
//! configuration (headers on the subrequest, or a named policy), the gateway
//! authenticating with its own root key in `X-Keygate-Root-Key`.

use super::ratelimit::{ValidLimit, decide};
use crate::error::ApiError;
use crate::http::{authenticate_secret, blocking};
use crate::state::AppState;
use actix_web::http::header::{AUTHORIZATION, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::{ErrorCode, MAX_IDENTIFIER_CHARS, check_len};
use keygate_ratelimit::{Decision, LimitRequest};
use keygate_rbac::gateway::{GatewayPolicy, IdentifierSource, PolicySpec};
use keygate_rbac::{ApiAccess, Verification, VerifyCode, VerifyScope};
use std::borrow::Cow;

/// The gateway's own root key (the end user's key travels in `Authorization` or the key
/// header).
const ROOT_KEY_HEADER: &str = "x-keygate-root-key";
/// A named policy of `KEYGATE_GATEWAY_POLICIES`.
const POLICY_HEADER: &str = "x-keygate-policy";
const PERMISSIONS_HEADER: &str = "x-keygate-permissions";
const RATELIMIT_HEADER: &str = "x-keygate-ratelimit";
const KEY_HEADER_HEADER: &str = "x-keygate-key-header";
/// Key metadata larger than this (serialized) is not passed upstream.
const MAX_META_HEADER_BYTES: usize = 4096;

/// Any method, `/v1/gateway.authorize` or (Envoy, which appends the original path)
/// `/v1/gateway.authorize/<original path>`.
pub async fn authorize(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let headers = req.headers();
    let text = |name: &str| -> Result<Option<&str>, ApiError> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v.to_str().map(Some).map_err(|_| refused(format!("{name}: not valid text"))),
        }
    };
    // The gateway's root key.
    let Some(root) = text(ROOT_KEY_HEADER)? else {
        let msg = "the gateway must send its root key in X-Keygate-Root-Key (docs/gateways.md)";
        log::warn!("gateway.authorize: {msg}");
        return Err(ApiError::unauthorized(msg));
    };
    let principal = authenticate_secret(root.trim(), &state).await?;
    // What to check: the named policy, with the headers' fields over it.
    let named = match text(POLICY_HEADER)? {
        Some(name) => state.gateway_policies.get(name.trim()).cloned().ok_or_else(|| {
            refused(format!("{POLICY_HEADER}: no policy {name:?} in KEYGATE_GATEWAY_POLICIES"))
        })?,
        None => PolicySpec::default(),
    };
    let given = PolicySpec {
        permissions: text(PERMISSIONS_HEADER)?.map(str::to_owned),
        ratelimit: text(RATELIMIT_HEADER)?.map(str::to_owned),
        key_header: text(KEY_HEADER_HEADER)?.map(str::to_owned),
    };
    let policy = named.overlaid(&given).parse().map_err(|e| refused(format!("{e}")))?;
    let access = ApiAccess::of(&principal, "verify_key")
        .ok_or_else(|| ApiError::from(ApiAccess::denied("verify_key", None)))?;

    // The end user's key.
    let Some(secret) = user_key(headers, &policy)? else {
        return Err(ApiError::unauthorized("no API key: send Authorization: Bearer <key>"));
    };
    let scope =
        VerifyScope { workspace_id: Some(&principal.workspace_id), api_id: None, access: Some(&access) };
    let verification = match state.rbac.verify_key_cached(&secret, &scope, policy.permissions.as_ref()) {
        Some(v) => v,
        None => {
            let (st, p, query, secret) =
                (state.clone(), principal.clone(), policy.permissions.clone(), secret.clone());
            blocking(move || {
                let scope =
                    VerifyScope { workspace_id: Some(&p.workspace_id), api_id: None, access: Some(&access) };
                Ok(st.rbac.verify_key(&secret, &scope, query.as_ref())?)
            })
            .await?
        }
    };
    match verification.code {
        VerifyCode::Valid => {}
        VerifyCode::InsufficientPermissions => {
            return Err(ApiError::new(
                ErrorCode::InsufficientPermissions,
                "the key lacks the required permissions",
            ));
        }
        code => return Err(ApiError::unauthorized(format!("the API key is not valid ({})", code.as_str()))),
    }
    let key_id = verification.key.as_ref().map(|k| k.id.clone()).unwrap_or_default();

    // The rate limit, only for a key that may pass.
    let decision = match &policy.ratelimit {
        None => None,
        Some(limit) => {
            let identifier: Cow<'_, str> = match &limit.identifier {
                IdentifierSource::KeyId => Cow::Owned(key_id.clone()),
                IdentifierSource::Header(h) => {
                    let v = text(h)?.ok_or_else(|| {
                        refused(format!("{h}: the rate limit's identifier header is missing"))
                    })?;
                    check_len(h, v, MAX_IDENTIFIER_CHARS).map_err(|e| refused(e.to_string()))?;
                    Cow::Borrowed(v)
                }
            };
            let v = ValidLimit {
                identifier,
                namespace: Cow::Borrowed(limit.namespace.as_str()),
                request: LimitRequest { limit: limit.limit, duration: limit.duration, cost: limit.cost },
                is_async: false,
            };
            Some(decide(&state, &principal, &v).await?.0)
        }
    };
    log::debug!(
        "gateway.authorize: {} {} key {key_id}: {}",
        text("x-original-method")?.or(text("x-forwarded-method")?).unwrap_or(req.method().as_str()),
        text("x-original-uri")?.or(text("x-forwarded-uri")?).unwrap_or(req.path()),
        decision.as_ref().map_or("passed", |d| if d.success { "passed" } else { "rate limited" })
    );
    let now = state.clock.now_ms();
    if let Some(d) = decision.as_ref().filter(|d| !d.success) {
        let mut e = ApiError::new(ErrorCode::TooManyRequests, "rate limited: retry after the window resets")
            .with_header("retry-after", seconds_until(d.reset, now).to_string());
        for (name, value) in rate_limit_headers(d, now) {
            e = e.with_header(name, value);
        }
        return Err(e);
    }
    let mut res = HttpResponse::Ok();
    res.insert_header(("x-keygate-key-id", key_id.as_str()));
    pass_key_fields(&mut res, &verification);
    for header in decision.iter().flat_map(|d| rate_limit_headers(d, now)) {
        res.insert_header(header);
    }
    // No body: nginx's auth_request reads only the head of the answer and closes an upstream
    // connection whose body it left unread, so a body would cost a new connection per
    // request (its keepalive pool stays usable with an empty one). The headers say it all.
    Ok(res.finish())
}

/// A request the gateway's configuration got wrong: 400, logged (never a pass).
fn refused(message: String) -> ApiError {
    log::warn!("gateway.authorize: {message}");
    ApiError::bad_request(message)
}

/// The end user's key: the policy's header, else `Authorization: Bearer`.
fn user_key(headers: &HeaderMap, policy: &GatewayPolicy) -> Result<Option<String>, ApiError> {
    let raw = match &policy.key_header {
        Some(h) => headers.get(h.as_str()),
        None => headers.get(AUTHORIZATION),
    };
    let Some(raw) = raw else { return Ok(None) };
    let value = raw.to_str().map_err(|_| ApiError::unauthorized("the API key is not valid text"))?.trim();
    let key = match &policy.key_header {
        Some(_) => value,
        None => match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => return Err(ApiError::unauthorized("send the API key as Authorization: Bearer <key>")),
        },
    };
    // No key is longer than verifyKey takes: a longer one is not a key (hashed for nothing).
    if key.chars().count() > keygate_rbac::MAX_VERIFY_KEY_CHARS {
        return Err(ApiError::unauthorized("the API key is not valid"));
    }
    Ok((!key.is_empty()).then(|| key.to_string()))
}

/// The key's name and small metadata, for the gateway to pass upstream.
fn pass_key_fields(res: &mut actix_web::HttpResponseBuilder, v: &Verification) {
    let Some(key) = &v.key else { return };
    if let Some(name) =
        key.name.as_deref().filter(|n| n.is_ascii() && !n.chars().any(|c| c.is_ascii_control()))
    {
        res.insert_header(("x-keygate-key-name", name));
    }
    if let Some(meta) = key.meta.as_deref().filter(|m| m.len() <= MAX_META_HEADER_BYTES && m.is_ascii()) {
        res.insert_header(("x-keygate-key-meta", meta));
    }
}

/// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (seconds until the window
/// ends), as the IETF draft names them.
fn rate_limit_headers(d: &Decision, now: u64) -> [(&'static str, String); 3] {
    [
        ("ratelimit-limit", d.limit.to_string()),
        ("ratelimit-remaining", d.remaining.to_string()),
        ("ratelimit-reset", seconds_until(d.reset, now).to_string()),
    ]
}

/// Whole seconds from `now` to `reset` (ms), rounded up.
fn seconds_until(reset: u64, now: u64) -> u64 {
    reset.saturating_sub(now).div_ceil(1000)
}
