//! `/v1/gateway.authorize`: forward auth for nginx `auth_request`, Caddy `forward_auth`,
//! Traefik `ForwardAuth` and Envoy `ext_authz` (docs/gateways.md). One call checks the
//! end user's key, its permission and its rate limit, in that order; a request refused
//! for its key or permission consumes no budget. What to check comes from the gateway's
//! configuration (headers on the subrequest, or a named policy), the gateway
//! authenticating with its own root key in `X-Keygate-Root-Key`.

use super::keys::verification::{VerifyCall, verification};
use super::ratelimit::{ValidLimit, decide, rate_limit_fields, seconds_until};
use crate::error::ApiError;
use crate::plumbing::authenticate_secret;
use crate::state::AppState;
use actix_web::http::header::{AUTHORIZATION, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::{ErrorCode, MAX_IDENTIFIER_CHARS, check_len};
use keygate_ratelimit::LimitRequest;
use keygate_rbac::{ApiAccess, Verification, VerifyCode};
use keygate_usage::Usage;
use policy::{GatewayPolicy, IdentifierSource, PolicyRefusal, PolicySpec};
use std::borrow::Cow;
use std::net::IpAddr;

pub mod policy;

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

/// Forward auth: the end user's key, its permission and its rate limit in one call, in that order (docs/gateways.md)
///
/// Any method, `/v1/gateway.authorize` or (Envoy, which appends the original path)
/// `/v1/gateway.authorize/<original path>`.
#[utoipa::path(get, path = "/v1/gateway.authorize", operation_id = "gateway.authorize", tag = "gateway",
    security(("gatewayRootKey" = [])),
    params(
        ("X-Keygate-Permissions" = Option<String>, Header, description = "A permission query the key must satisfy (the v2 DSL: documents.read AND (a OR b)); a malformed one is 400"),
        ("X-Keygate-Ratelimit" = Option<String>, Header, description = "namespace=api; limit=100; duration=60000 [; cost=1] [; identifier=key|header:X-Real-IP]; a malformed one is 400"),
        ("X-Keygate-Key-Header" = Option<String>, Header, description = "The header holding the end user's key (default: Authorization: Bearer <key>)"),
        ("X-Keygate-Policy" = Option<String>, Header, description = "A named policy of KEYGATE_GATEWAY_POLICIES, authoritative: with any of the three headers above it is 400 (nothing overrides it); an unknown one is 400; one the root key is not bound to is 403"),
        ("X-Original-Method" = Option<String>, Header, description = "The original request's method, for the log (nginx; Traefik and Caddy send X-Forwarded-Method)"),
        ("X-Original-URI" = Option<String>, Header, description = "The original request's URI, for the log (nginx; Traefik and Caddy send X-Forwarded-Uri)"),
    ),
    responses(
        (status = 200, description = "The key is valid, holds the permissions and is within its rate limit; no body (nginx's auth_request keeps its upstream connection only for an answer without one): the headers carry the result",
            headers(
                ("X-Keygate-Key-Id" = String, description = "The key's id"),
                ("X-Keygate-Key-Name" = String, description = "The key's name, when it has one (ASCII)"),
                ("X-Keygate-Key-Meta" = String, description = "The key's metadata as JSON, when at most 4 KiB of ASCII"),
                ("RateLimit-Limit" = u64, description = "The rate limit's budget (with a rate limit)"),
                ("RateLimit-Remaining" = u64, description = "What is left of it after this request"),
                ("RateLimit-Reset" = u64, description = "Seconds until the window ends"),
                ("RateLimit-Policy" = String, description = "draft-ietf-httpapi-ratelimit-headers-11: \"<namespace>\";q=<limit>;w=<window s> (with a rate limit)"),
                ("RateLimit" = String, description = "draft-ietf-httpapi-ratelimit-headers-11: \"<namespace>\";r=<remaining>;t=<s until the window ends> (with a rate limit)"),
            )),
        (status = 400, description = "The gateway's configuration is malformed (a bad X-Keygate-Ratelimit or permission query, an unknown policy, a missing identifier header), a control header sent twice, a named policy with inline fields; never a pass", body = crate::error::ErrorBody),
        (status = 401, description = "No key, an unknown, disabled or expired key, another workspace's; or the gateway's root key missing or unknown", body = crate::error::ErrorBody,
            headers(("WWW-Authenticate" = String, description = "Bearer"))),
        (status = 403, description = "The key lacks the permissions, the gateway's root key may not verify keys, or it is bound to other policies (FORBIDDEN)", body = crate::error::ErrorBody),
        (status = 429, description = "The key's (or identifier's) budget is spent", body = crate::error::ErrorBody,
            headers(
                ("Retry-After" = u64, description = "Seconds until the window ends"),
                ("RateLimit-Limit" = u64, description = "The rate limit's budget (with a rate limit)"),
                ("RateLimit-Remaining" = u64, description = "What is left of it after this request"),
                ("RateLimit-Reset" = u64, description = "Seconds until the window ends"),
                ("RateLimit-Policy" = String, description = "draft-ietf-httpapi-ratelimit-headers-11, as on a pass"),
                ("RateLimit" = String, description = "draft-ietf-httpapi-ratelimit-headers-11, as on a pass"),
            )),
        (status = 503, description = "A store is unreachable", body = crate::error::ErrorBody),
    ))]
pub async fn authorize(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let fields = HeaderFields(req.headers());
    let ip = client_ip(&req, state.trusted_proxies.as_ref());
    let seen = |a: &str, b: &str| req.headers().get(a).or(req.headers().get(b)).and_then(|v| v.to_str().ok());
    let call = ForwardAuth {
        fields: &fields,
        ip,
        method: seen("x-original-method", "x-forwarded-method").unwrap_or(req.method().as_str()),
        path: seen("x-original-uri", "x-forwarded-uri").unwrap_or(req.path()),
    };
    let passed = forward_auth(&state, call).await?;
    let mut res = HttpResponse::Ok();
    for header in passed.headers {
        res.insert_header(header);
    }
    // No body: nginx's auth_request reads only the head of the answer and closes an upstream
    // connection whose body it left unread, so a body would cost a new connection per
    // request (its keepalive pool stays usable with an empty one). The headers say it all.
    Ok(res.finish())
}

/// A field's copies in a forward-auth call: none, one (its text; `None` when it is not
/// valid text), or more than one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies<'a> {
    None,
    One(Option<&'a str>),
    Many,
}

/// Where a forward-auth call's fields come from. `control`: the gateway's own fields (its
/// root key, the policy's name or inline fields), which the end user must not be able to
/// write (HTTP: the subrequest's headers, which the gateway sets; gRPC: the call's
/// metadata and Envoy's `context_extensions`, never the end user's request); `header`:
/// the end user's request headers (the key, a rate limit's identifier header).
pub trait ForwardAuthFields: Sync {
    fn control(&self, name: &str) -> Copies<'_>;
    fn header(&self, name: &str) -> Copies<'_>;
}

/// The fields of HTTP forward auth: every one a header of the subrequest.
struct HeaderFields<'a>(&'a HeaderMap);

impl ForwardAuthFields for HeaderFields<'_> {
    fn control(&self, name: &str) -> Copies<'_> {
        self.header(name)
    }

    fn header(&self, name: &str) -> Copies<'_> {
        let mut all = self.0.get_all(name);
        match (all.next(), all.next()) {
            (None, _) => Copies::None,
            (Some(v), None) => Copies::One(v.to_str().ok()),
            (Some(_), Some(_)) => Copies::Many,
        }
    }
}

/// One forward-auth call: its fields, the end user's address, and the original request's
/// method and path (for the log only).
#[allow(missing_debug_implementations)] // (its fields are a lookup)
pub struct ForwardAuth<'a> {
    pub fields: &'a dyn ForwardAuthFields,
    pub ip: Option<IpAddr>,
    pub method: &'a str,
    pub path: &'a str,
}

/// A call that passed: the headers of the answer (`x-keygate-key-id`, the key's name and
/// metadata for the upstream request; the rate-limit fields for the client's response),
/// and the header that carried the end user's key (lower case).
#[derive(Debug, Default)]
pub struct Passed {
    pub headers: Vec<(&'static str, String)>,
    pub key_header: String,
}

/// Forward auth's decision, whatever the transport: the end user's key, its permission
/// and its rate limit, in that order; a refusal is the [`ApiError`] to answer (its code
/// says 400, 401, 403, 429 or 503).
pub async fn forward_auth(state: &web::Data<AppState>, call: ForwardAuth<'_>) -> Result<Passed, ApiError> {
    let fields = call.fields;
    let text = |name: &str| -> Result<Option<&str>, ApiError> { single(fields.control(name), name) };
    // The gateway's root key.
    let Some(root) = text(ROOT_KEY_HEADER)? else {
        let msg = "the gateway must send its root key in X-Keygate-Root-Key (docs/gateways.md)";
        log::warn!("gateway.authorize: {msg}");
        return Err(ApiError::unauthorized(msg));
    };
    let named = text(POLICY_HEADER)?.map(str::trim);
    let inline = PolicySpec {
        permissions: text(PERMISSIONS_HEADER)?.map(str::to_owned),
        ratelimit: text(RATELIMIT_HEADER)?.map(str::to_owned),
        key_header: text(KEY_HEADER_HEADER)?.map(str::to_owned),
    };
    let principal = authenticate_secret(root.trim(), state).await?;
    // What to check: the named policy (authoritative) or the inline fields, as the root
    // key's bindings allow (docs/gateways.md, "Who decides the policy").
    let policy = state.gateway_policies.resolve(&principal.root_key_id, named, inline).map_err(|e| {
        let message = e.to_string();
        match e {
            PolicyRefusal::NotBound { .. } => {
                count_refusal("policy_not_bound");
                log::warn!("gateway.authorize: {message}");
                ApiError::new(ErrorCode::Forbidden, message)
            }
            PolicyRefusal::Overridden { .. } => {
                count_refusal("policy_overridden");
                refused(message)
            }
            _ => refused(message),
        }
    })?;
    let access = ApiAccess::of(&principal, "verify_key")
        .ok_or_else(|| ApiError::from(ApiAccess::denied("verify_key", None)))?;

    // The end user's key.
    let Some(secret) = user_key(fields, &policy)? else {
        return Err(ApiError::unauthorized("no API key: send Authorization: Bearer <key>"));
    };
    // With a rate limit of the policy's, the key is checked first, spending nothing, so
    // that a request the policy's limit refuses spends neither credits nor key limits.
    let verify_call = |check_only| VerifyCall {
        secret: secret.clone(),
        principal: Some(principal.clone()),
        api_id: None,
        access: Some(access.clone()),
        ip: call.ip,
        migration: None,
        query: policy.permissions.clone(),
        usage: Usage { check_only, ..Usage::default() },
        tags: Vec::new(),
    };
    let mut verification = verification(state, verify_call(policy.ratelimit.is_some())).await?;
    refuse_unless_valid(&verification, state.clock.now_ms())?;
    let key_id = verification.key().map(|k| k.id().to_string()).unwrap_or_default();

    // The rate limit, only for a key that may pass.
    let decision = match &policy.ratelimit {
        None => None,
        Some(limit) => {
            let identifier: Cow<'_, str> = match &limit.identifier {
                IdentifierSource::KeyId => Cow::Owned(key_id.clone()),
                IdentifierSource::Header(h) => {
                    let v = single(fields.header(h), h)?.ok_or_else(|| {
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
            let (d, applied) = decide(state, &principal, &v).await?;
            Some((d, limit.namespace.as_str(), applied.map_or(limit.duration, |o| o.duration)))
        }
    };
    log::debug!(
        "gateway.authorize: {} {} key {key_id}: {}",
        call.method,
        call.path,
        decision.as_ref().map_or("passed", |(d, ..)| if d.success { "passed" } else { "rate limited" })
    );
    let mut now = state.clock.now_ms();
    if let Some((d, namespace, duration)) = decision.as_ref().filter(|(d, ..)| !d.success) {
        let mut e = ApiError::new(ErrorCode::TooManyRequests, "rate limited: retry after the window resets")
            .with_header("retry-after", seconds_until(d.reset, now).to_string());
        for (name, value) in rate_limit_fields(namespace, *duration, d, now) {
            e = e.with_header(name, value);
        }
        return Err(e);
    }
    if policy.ratelimit.is_some() {
        // Passed the policy's limit: now the key's limits and credits.
        verification = super::keys::verification::verification(state, verify_call(false)).await?;
        now = state.clock.now_ms();
        refuse_unless_valid(&verification, now)?;
    }
    let key_header = policy.key_header.as_deref().unwrap_or(AUTHORIZATION.as_str()).to_ascii_lowercase();
    let mut passed = Passed { headers: Vec::new(), key_header };
    passed.headers.push(("x-keygate-key-id", key_id));
    pass_key_fields(&mut passed, &verification);
    passed.headers.extend(
        decision.iter().flat_map(|(d, namespace, duration)| rate_limit_fields(namespace, *duration, d, now)),
    );
    Ok(passed)
}

/// The gateway's answer to a verification that is not VALID: 403 for missing permissions,
/// 429 for the key's rate limits (with `Retry-After`: when the first exceeded window ends)
/// or its credits (without: they come back only by a refill or an update), 401 otherwise.
fn refuse_unless_valid(v: &Verification, now: u64) -> Result<(), ApiError> {
    match v.code {
        VerifyCode::Valid => Ok(()),
        VerifyCode::InsufficientPermissions => {
            Err(ApiError::new(ErrorCode::InsufficientPermissions, "the key lacks the required permissions"))
        }
        VerifyCode::RateLimited => {
            let reset = v.ratelimits.iter().filter(|l| l.exceeded).map(|l| l.reset).min().unwrap_or(now);
            Err(ApiError::new(
                ErrorCode::TooManyRequests,
                "the key's rate limit is exceeded: retry after the window resets",
            )
            .with_header("retry-after", seconds_until(reset, now).to_string()))
        }
        VerifyCode::UsageExceeded => {
            Err(ApiError::new(ErrorCode::TooManyRequests, "the key has no credits left for this request"))
        }
        VerifyCode::Forbidden => {
            Err(ApiError::new(ErrorCode::Forbidden, "the API key may not be used from this address"))
        }
        code => Err(ApiError::unauthorized(format!("the API key is not valid ({})", code.as_str()))),
    }
}

/// A field of the call's, at most once: a second copy (a gateway that appends where it
/// should replace, so that an end user's copy could come first) is refused, never chosen.
fn single<'a>(copies: Copies<'a>, name: &str) -> Result<Option<&'a str>, ApiError> {
    match copies {
        Copies::None => Ok(None),
        Copies::One(Some(text)) => Ok(Some(text)),
        Copies::One(None) => Err(refused(format!("{name}: not valid text"))),
        Copies::Many => {
            count_refusal("duplicate_header");
            Err(refused(format!("{name}: sent more than once (the gateway must set it, replacing any copy)")))
        }
    }
}

fn count_refusal(reason: &'static str) {
    metrics::counter!("keygate_gateway_refusals_total", "reason" => reason).increment(1);
}

/// A request the gateway's configuration got wrong: 400, logged (never a pass).
fn refused(message: String) -> ApiError {
    log::warn!("gateway.authorize: {message}");
    ApiError::bad_request(message)
}

/// The end user's key: the policy's header, else `Authorization: Bearer`.
fn user_key(fields: &dyn ForwardAuthFields, policy: &GatewayPolicy) -> Result<Option<String>, ApiError> {
    let copies = match &policy.key_header {
        Some(h) => fields.header(h.as_str()),
        None => fields.header(AUTHORIZATION.as_str()),
    };
    let value = match copies {
        Copies::None => return Ok(None),
        Copies::Many => {
            count_refusal("duplicate_header");
            return Err(ApiError::unauthorized("more than one API key: send one"));
        }
        Copies::One(None) => return Err(ApiError::unauthorized("the API key is not valid text")),
        Copies::One(Some(text)) => text.trim(),
    };
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
fn pass_key_fields(passed: &mut Passed, v: &Verification) {
    let Some(key) = v.key() else { return };
    if let Some(name) = key.name().filter(|n| n.is_ascii() && !n.chars().any(|c| c.is_ascii_control())) {
        passed.headers.push(("x-keygate-key-name", name.to_string()));
    }
    if let Some(meta) = key.meta().filter(|m| m.len() <= MAX_META_HEADER_BYTES && m.is_ascii()) {
        passed.headers.push(("x-keygate-key-meta", meta.to_string()));
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(authorize))]
struct Doc;

/// The methods forward auth answers (a gateway asks with the original request's).
const METHODS: [&str; 6] = ["get", "post", "put", "patch", "delete", "options"];

/// This room's part of the v1 document: the one operation under every method, at
/// `/v1/gateway.authorize` and at Envoy's `/v1/gateway.authorize/{original}`.
pub(crate) fn openapi() -> serde_json::Value {
    use serde_json::json;
    let mut doc = crate::openapi::room::<Doc>();
    let op = crate::openapi::operation_mut(&mut doc, "/v1/gateway.authorize", "get").take();
    let (mut plain, mut envoy) = (serde_json::Map::new(), serde_json::Map::new());
    for method in METHODS {
        let mut this = op.clone();
        this["operationId"] = json!(format!("gateway.authorize.{method}"));
        plain.insert(method.to_string(), this.clone());
        this["operationId"] = json!(format!("gateway.authorize.path.{method}"));
        if let Some(params) = this["parameters"].as_array_mut() {
            params.insert(0, crate::openapi::schema_json_of(original_path()));
        }
        envoy.insert(method.to_string(), this);
    }
    doc["paths"] = json!({ "/v1/gateway.authorize": plain, "/v1/gateway.authorize/{original}": envoy });
    doc
}

/// Envoy's `{original}`: the original request's path.
fn original_path() -> utoipa::openapi::path::Parameter {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ParameterBuilder::new()
        .name("original")
        .parameter_in(ParameterIn::Path)
        .required(utoipa::openapi::Required::True)
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .description(Some("The original request's path (Envoy appends it to path_prefix); only logged"))
        .build()
}

/// The gateway's own root key, in `X-Keygate-Root-Key`.
pub(crate) fn security_scheme() -> utoipa::openapi::security::SecurityScheme {
    use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
    SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
        "X-Keygate-Root-Key",
        "The gateway's own root key (needs api.*.verify_key, and ratelimit.*.limit with a rate limit); \
         the end user's key travels in Authorization: Bearer <key> or the policy's key header",
    )))
}

/// The end user's address (API-v2.md §25): the connection's, unless it comes from a trusted
/// proxy (`KEYGATE_TRUSTED_PROXIES`; over a Unix socket, any configured): then the nearest
/// address of `X-Forwarded-For` (read from the right) that is not a trusted proxy. An
/// `X-Forwarded-For` sent by anyone else is ignored; a malformed one from a trusted proxy
/// gives no address (a key with `allowedIps` is then FORBIDDEN).
pub(crate) fn client_ip(req: &HttpRequest, trusted: Option<&keygate_domain::AllowedIps>) -> Option<IpAddr> {
    let peer = req.peer_addr().map(|a| a.ip());
    let Some(trusted) = trusted else { return peer };
    if peer.is_some_and(|p| !trusted.contains(p)) {
        return peer;
    }
    let mut nearest = peer;
    let values: Vec<&str> =
        req.headers().get_all("x-forwarded-for").map(|v| v.to_str().unwrap_or("")).collect();
    for entry in values.iter().rev().flat_map(|v| v.rsplit(',')) {
        let addr: IpAddr = entry.trim().parse().ok()?;
        nearest = Some(addr);
        if !trusted.contains(addr) {
            break;
        }
    }
    nearest
}
