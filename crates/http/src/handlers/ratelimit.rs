//! `ratelimits.limit`: the hot path. With warm caches it runs entirely inline: no SQL, no
//! thread hop; only a namespace or root key not seen before goes to the store.

use crate::error::ApiError;
use crate::openapi::V1BodyErrors;
use crate::plumbing::{Authed, JsonBytes, Obj, blocking, in_background, integer, parse_json};
use crate::state::AppState;
use actix_web::{HttpResponse, web};
use keygate_domain::{MAX_IDENTIFIER_CHARS, ValidationError, check_len, validate_namespace_name};
use keygate_ratelimit::{BudgetKey, Checked, Decision, LimitRequest, pass_failing_open};
use keygate_rbac::counters::SOURCE_STORE;
use keygate_rbac::{Effective, Principal};
use keygate_store::{CounterGuard, RedisStore};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::sync::Arc;
use utoipa::ToSchema;

const MAX_META_BYTES: usize = 64 * 1024;
const MAX_RESOURCES: usize = 100;

/// Strings are borrowed from the body when they have no escapes (no allocation).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = LimitRequest)]
pub(crate) struct LimitBody<'a> {
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 512, example = "user_123")]
    identifier: Cow<'a, str>,
    #[schema(value_type = u64, minimum = 1, maximum = 9_007_199_254_740_991_u64, example = 10)]
    limit: Number,
    /// The window in ms.
    #[schema(value_type = u64, minimum = 1000, maximum = 9_007_199_254_740_991_u64, example = 60000)]
    duration: Number,
    #[serde(borrow)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 512, default = "default", example = "email.outbound")]
    namespace: Option<Cow<'a, str>>,
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64, default = 1)]
    cost: Option<Number>,
    #[serde(rename = "async")]
    #[schema(default = false)]
    is_async: Option<bool>,
    /// Scalar values only, at most 64 KiB serialized.
    #[schema(schema_with = scalar_meta)]
    meta: Option<Map<String, Value>>,
    #[schema(inline, max_items = 100, value_type = Option<Vec<Resource>>)]
    resources: Option<Vec<Obj<Resource>>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(expecting = "an object with a type and an id")]
struct Resource {
    #[serde(rename = "type")]
    #[allow(dead_code)]
    kind: String,
    #[allow(dead_code)]
    id: String,
    #[allow(dead_code)]
    name: Option<String>,
    /// Scalar values only, at most 64 KiB serialized.
    #[schema(schema_with = scalar_meta)]
    meta: Option<Map<String, Value>>,
}

/// `meta` of a limit request: an object of scalars (what [`check_meta`] takes), or null.
fn scalar_meta() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, SchemaType, Type};
    let scalar = AnyOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(SchemaType::from_iter([
            Type::Number,
            Type::Boolean,
            Type::Null,
        ])))
        .item(ObjectBuilder::new().schema_type(Type::String).pattern(Some(crate::openapi::NO_NUL)));
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::RefOr(
            utoipa::openapi::RefOr::T(utoipa::openapi::schema::Schema::AnyOf(scalar.build())),
        )))
        .build()
}

fn check_meta(path: &str, meta: &Map<String, Value>) -> Result<(), ValidationError> {
    for (k, v) in meta {
        if v.is_array() || v.is_object() {
            return Err(ValidationError::new(
                format!("{path}.{k}"),
                "must be a string, number, boolean or null",
            ));
        }
    }
    let size = serde_json::to_string(meta).map(|s| s.len()).unwrap_or(usize::MAX);
    if size > MAX_META_BYTES {
        return Err(ValidationError::new(
            path,
            format!("must be at most {MAX_META_BYTES} bytes when serialized"),
        ));
    }
    Ok(())
}

/// A validated request.
#[derive(Debug)]
pub(crate) struct ValidLimit<'a> {
    pub identifier: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub request: LimitRequest,
    pub is_async: bool,
}

impl<'a> LimitBody<'a> {
    pub(crate) fn validate(self) -> Result<ValidLimit<'a>, ValidationError> {
        check_len("identifier", &self.identifier, MAX_IDENTIFIER_CHARS)?;
        let limit = integer("limit", &self.limit, 1)?;
        let duration = integer("duration", &self.duration, 1_000)?;
        let cost = match &self.cost {
            Some(c) => integer("cost", c, 0)?,
            None => 1,
        };
        let namespace = self.namespace.unwrap_or(Cow::Borrowed("default"));
        validate_namespace_name("namespace", &namespace)?;
        if let Some(meta) = &self.meta {
            check_meta("meta", meta)?;
        }
        if let Some(resources) = &self.resources {
            if resources.len() > MAX_RESOURCES {
                return Err(ValidationError::new("resources", format!("at most {MAX_RESOURCES} entries")));
            }
            for (i, Obj(r)) in resources.iter().enumerate() {
                if let Some(meta) = &r.meta {
                    check_meta(&format!("resources.{i}.meta"), meta)?;
                }
            }
        }
        Ok(ValidLimit {
            identifier: self.identifier,
            namespace,
            request: LimitRequest { limit, duration, cost },
            is_async: self.is_async.unwrap_or(false),
        })
    }
}

/// `{"success":..,"limit":..,"remaining":..,"reset":..}`, written directly: the hot path's
/// only response, four fields of fixed types (a test checks it against serde_json).
fn limit_response(d: &Decision) -> String {
    let mut buf = itoa::Buffer::new();
    let mut out = String::with_capacity(96);
    out.push_str(if d.success { r#"{"success":true,"limit":"# } else { r#"{"success":false,"limit":"# });
    out.push_str(buf.format(d.limit));
    out.push_str(r#","remaining":"#);
    out.push_str(buf.format(d.remaining));
    out.push_str(r#","reset":"#);
    out.push_str(buf.format(d.reset));
    out.push('}');
    out
}

/// v1's limit answer (written by [`limit_response`], which a test checks against this).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = LimitResponse)]
pub(crate) struct LimitAnswer {
    success: bool,
    limit: u64,
    remaining: u64,
    /// Unix ms when the window ends.
    reset: u64,
}

/// Check and consume a rate-limit budget (fixed window aligned to the epoch)
///
/// A denial is a 200 with `success: false`.
#[utoipa::path(post, path = "/v1/ratelimits.limit", operation_id = "ratelimits.limit", tag = "ratelimits",
    request_body = LimitBody, responses((status = 200, description = "OK", body = LimitAnswer), V1BodyErrors))]
pub async fn limit(call: Authed<JsonBytes>) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: JsonBytes(bytes), state } = call;
    let body: LimitBody<'_> = parse_json(&bytes)?;
    let v = body.validate()?;
    let (d, applied) = decide(&state, &principal, &v).await?;
    let mut res = HttpResponse::Ok();
    res.insert_header(super::json_type());
    if state.ratelimit_headers {
        let duration = applied.map_or(v.request.duration, |o| o.duration);
        for field in rate_limit_fields(&v.namespace, duration, &d, state.clock.now_ms()) {
            res.insert_header(field);
        }
    }
    Ok(res.body(limit_response(&d)))
}

/// A decision's rate-limit header fields, as forward auth sends them (and `limit` answers
/// with `KEYGATE_RATELIMIT_HEADERS`): `RateLimit-Limit`, `RateLimit-Remaining` and
/// `RateLimit-Reset` (seconds until the window ends) as the draft's earlier revisions named
/// them, and draft-ietf-httpapi-ratelimit-headers-10's structured fields,
/// `RateLimit-Policy: "<namespace>";q=<limit>;w=<window in seconds>` and
/// `RateLimit: "<namespace>";r=<remaining>;t=<seconds until the window ends>` (whole
/// seconds, rounded up). The policy's name is the namespace's where it is a structured
/// string's characters (printable ASCII), `"ratelimit"` otherwise.
pub(crate) fn rate_limit_fields(
    namespace: &str,
    duration_ms: u64,
    d: &Decision,
    now: u64,
) -> [(&'static str, String); 5] {
    let reset = seconds_until(d.reset, now);
    let printable = |c: char| (' '..='~').contains(&c);
    let name = if namespace.chars().all(printable) { namespace } else { "ratelimit" };
    let quoted = format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""));
    [
        ("ratelimit-limit", d.limit.to_string()),
        ("ratelimit-remaining", d.remaining.to_string()),
        ("ratelimit-reset", reset.to_string()),
        ("ratelimit-policy", format!("{quoted};q={};w={}", d.limit, duration_ms.div_ceil(1000))),
        ("ratelimit", format!("{quoted};r={};t={reset}", d.remaining)),
    ]
}

/// Whole seconds from `now` to `reset` (ms), rounded up.
pub(crate) fn seconds_until(reset: u64, now: u64) -> u64 {
    reset.saturating_sub(now).div_ceil(1000)
}

/// One decision for a validated request, v1's or v2's: the namespace (a name, or the id
/// of an existing namespace) resolved from the cache or the store, the override that
/// applies, then the decision in the rate-limit store. Answers the override applied too.
pub(crate) async fn decide(
    state: &web::Data<AppState>,
    principal: &Arc<Principal>,
    v: &ValidLimit<'_>,
) -> Result<(Decision, Option<Effective>), ApiError> {
    let namespace_id = match state.rbac.namespace_cached(principal, &v.namespace) {
        Some(found) => found?,
        None => {
            let _turn = state.loads.enter(&*v.namespace).await;
            match state.rbac.namespace_cached(principal, &v.namespace) {
                Some(found) => found?,
                None => {
                    let (state, principal, name) =
                        (state.clone(), principal.clone(), v.namespace.to_string());
                    blocking(state.metrics.queued(), move || {
                        Ok(state.rbac.resolve_namespace(&principal, &name)?)
                    })
                    .await?
                }
            }
        }
    };
    let now = state.clock.now_ms();
    let overrides = cached_overrides(state, &namespace_id, &v.identifier).await?;
    let d = match &state.redis {
        Some(redis) => {
            // `async: true` (§5.8): from this instance's state when it knows the budget's
            // window (the store's `deferred.rs`; the over-admission bound is in api.md).
            let req = with_override(v.request, overrides.0.as_ref());
            let key =
                BudgetKey { namespace_id: &namespace_id, identifier: &v.identifier, duration: req.duration };
            match v.is_async.then(|| redis.limit_async(key, req, now)).flatten() {
                Some(d) => (d, overrides.0),
                None => {
                    let at = Budget { namespace_id: &namespace_id, identifier: &v.identifier, now };
                    decide_in_redis(state, redis, principal, at, v.request, overrides).await?
                }
            }
        }
        None => {
            // The in-process store: inline, it never finds overrides stale; `async` changes
            // nothing (one instance: exact either way).
            let req = with_override(v.request, overrides.0.as_ref());
            let key =
                BudgetKey { namespace_id: &namespace_id, identifier: &v.identifier, duration: req.duration };
            (state.limiter.limit(key, req, now)?, overrides.0)
        }
    };
    state.metrics.decision(&principal.workspace_id, &namespace_id, &v.namespace, d.0.success);
    state.analytics.record_limit(&principal.workspace_id, &namespace_id, &v.identifier, d.0.success, now);
    Ok(d)
}

/// The override for `identifier` and the overrides epoch it was read under: from the
/// cache (a due refresh runs in the background), else read once per namespace at a time.
pub(crate) async fn cached_overrides(
    state: &web::Data<AppState>,
    namespace_id: &Arc<String>,
    identifier: &str,
) -> Result<(Option<Effective>, u64), ApiError> {
    if let Some(hit) = state.rbac.override_cached(namespace_id, identifier) {
        if hit.refresh {
            let (st, ns) = (state.clone(), namespace_id.clone());
            in_background("overrides refresh", move || refresh_overrides(&st, &ns));
        }
        return Ok(hit.value);
    }
    let _turn = state.loads.enter(namespace_id.as_str()).await;
    if let Some(hit) = state.rbac.override_cached(namespace_id, identifier) {
        return Ok(hit.value);
    }
    let (st, ns, identifier) = (state.clone(), namespace_id.clone(), identifier.to_string());
    blocking(state.metrics.queued(), move || load_overrides(&st, &ns, &identifier)).await
}

/// How often a decision is retried when the namespace's overrides keep changing under it.
pub(crate) const STALE_OVERRIDES_RETRIES: usize = 3;

/// Which budget a decision is for, and when.
#[derive(Debug, Clone, Copy)]
struct Budget<'a> {
    namespace_id: &'a Arc<String>,
    identifier: &'a str,
    now: u64,
}

/// The decision in Redis, batched with this worker's other decisions, under the namespace's
/// overrides and the caller's root key:
/// - when Redis finds the overrides changed since they were read (another instance changed
///   them), they are read again and the decision asked again;
/// - when it finds the root key's change counter changed (a revocation through another
///   instance), the root key is checked against the database (401 when revoked) and the
///   decision asked again without that guard.
///
/// When Redis cannot be reached: 503, or a pass when failing open (contract §5.12).
async fn decide_in_redis(
    state: &web::Data<AppState>,
    redis: &RedisStore,
    principal: &Arc<Principal>,
    at: Budget<'_>,
    request: LimitRequest,
    mut overrides: (Option<Effective>, u64),
) -> Result<(Decision, Option<Effective>), ApiError> {
    let mut guard = match principal.tag() {
        Some(tag) if tag.source > SOURCE_STORE => Some(tag),
        // Loaded while Redis's counters could not be read: checked against the database's.
        Some(_) => return_if_revoked(state, principal).await.map(|()| None)?,
        None => None,
    };
    let mut stale = 0;
    loop {
        let req = with_override(request, overrides.0.as_ref());
        let key =
            BudgetKey { namespace_id: at.namespace_id, identifier: at.identifier, duration: req.duration };
        // Overrides changing faster than they can be read: decide with the latest read.
        let epoch = (stale < STALE_OVERRIDES_RETRIES).then_some(overrides.1);
        let counter_guard = guard.map(|tag| CounterGuard {
            name: principal.counter_name(),
            epoch: tag.source,
            value: tag.values[0],
        });
        match redis.limit_batched(key, req, at.now, epoch, counter_guard).await {
            Ok(Checked::Decided(d)) => return Ok((d, overrides.0)),
            Ok(Checked::StaleOverrides) => {
                stale += 1;
                let (st, ns, id) = (state.clone(), at.namespace_id.clone(), at.identifier.to_string());
                overrides = blocking(state.metrics.queued(), move || load_overrides(&st, &ns, &id)).await?;
            }
            Ok(Checked::StaleCounter) => {
                return_if_revoked(state, principal).await?;
                guard = None;
            }
            Err(e) if state.fail_open => return Ok((pass_failing_open(key, req, at.now, &e), overrides.0)),
            Err(e) => return Err(e.into()),
        }
    }
}

/// 401 when the root key was revoked (by the database, off the async workers).
async fn return_if_revoked(state: &web::Data<AppState>, principal: &Arc<Principal>) -> Result<(), ApiError> {
    let (state, principal) = (state.clone(), principal.clone());
    blocking(state.metrics.queued(), move || Ok(state.rbac.ensure_root_key_current(&principal)?)).await
}

/// Reads the namespace's overrides again into the cache (blocking I/O), under the epoch
/// read first, as in [`load_overrides`].
fn refresh_overrides(state: &AppState, namespace_id: &str) -> Result<(), ApiError> {
    let epoch = state.limiter.overrides_epoch(namespace_id)?;
    Ok(state.rbac.refresh_overrides(namespace_id, epoch)?)
}

/// Reads the namespace's overrides into the cache (blocking I/O). The epoch is read first:
/// a change committed after that read bumps it after its commit, so the pair is never
/// newer-epoch-with-older-overrides.
pub(crate) fn load_overrides(
    state: &AppState,
    namespace_id: &str,
    identifier: &str,
) -> Result<(Option<Effective>, u64), ApiError> {
    let epoch = state.limiter.overrides_epoch(namespace_id)?;
    Ok((state.rbac.load_overrides(namespace_id, epoch)?.find(identifier), epoch))
}

/// The request with the override (if any) replacing its limit and duration (§5.6).
pub(crate) fn with_override(mut request: LimitRequest, found: Option<&Effective>) -> LimitRequest {
    if let Some(o) = found {
        request.limit = o.limit;
        request.duration = o.duration;
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> Result<ValidLimit<'static>, String> {
        let b: LimitBody<'_> = serde_json::from_str(json).map_err(|e| e.to_string())?;
        b.validate()
            .map(|v| ValidLimit {
                identifier: v.identifier.into_owned().into(),
                namespace: v.namespace.into_owned().into(),
                ..v
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn response_is_the_json_of_the_decision() {
        for d in [
            Decision { success: true, limit: 1, remaining: 0, reset: 1_795_316_280_000 },
            Decision { success: false, limit: 9_007_199_254_740_991, remaining: 12, reset: 0 },
        ] {
            let v: serde_json::Value = serde_json::from_str(&limit_response(&d)).unwrap();
            // The documented answer type, serialized.
            let answer =
                LimitAnswer { success: d.success, limit: d.limit, remaining: d.remaining, reset: d.reset };
            assert_eq!(v, serde_json::to_value(&answer).unwrap());
        }
    }

    #[test]
    fn bounds() {
        let cases = [
            (r#"{"identifier":"a","limit":0,"duration":1000}"#, "limit: must be >= 1"),
            (r#"{"identifier":"a","limit":1,"duration":999}"#, "duration: must be >= 1000"),
            (r#"{"identifier":"a","limit":1,"duration":1000,"cost":-1}"#, "cost: must be >= 0"),
            (r#"{"identifier":"a","limit":1.5,"duration":1000}"#, "limit: must be an integer"),
            (r#"{"identifier":"a","limit":0.0,"duration":1000}"#, "limit: must be >= 1"),
            (r#"{"identifier":"a","limit":-1.0,"duration":1000}"#, "limit: must be >= 1"),
            (r#"{"identifier":"a","limit":1,"duration":9.99e2}"#, "duration: must be >= 1000"),
            (
                r#"{"identifier":"a","limit":9.007199254740992e15,"duration":1000}"#,
                "limit: must be <= 9007199254740991",
            ),
            (
                r#"{"identifier":"a","limit":18446744073709551616,"duration":1000}"#,
                "limit: must be <= 9007199254740991",
            ),
            (
                r#"{"identifier":"a","limit":9007199254740992,"duration":1000}"#,
                "limit: must be <= 9007199254740991",
            ),
            (r#"{"identifier":"","limit":1,"duration":1000}"#, "identifier: must not be empty"),
            (
                r#"{"identifier":"a","limit":1,"duration":1000,"namespace":""}"#,
                "namespace: must not be empty",
            ),
            (
                r#"{"identifier":"a","limit":1,"duration":1000,"namespace":"a\u0000b"}"#,
                "namespace: must not contain NUL characters",
            ),
            (
                r#"{"identifier":"a","limit":1,"duration":1000,"meta":{"x":{"y":1}}}"#,
                "meta.x: must be a string, number, boolean or null",
            ),
        ];
        for (json, expected) in cases {
            assert_eq!(body(json).unwrap_err(), expected, "for {json}");
        }
        let ok =
            body(r#"{"identifier":"é","limit":9007199254740991,"duration":1000,"cost":0,"namespace":null}"#)
                .expect("valid");
        assert_eq!((&*ok.namespace, ok.request.cost), ("default", 0));
        // Integers as JSON Schema means them (contracts §1): no fractional part, however
        // written.
        let ok = body(r#"{"identifier":"a","limit":10.0,"duration":6e4,"cost":-0.0}"#).expect("integral");
        assert_eq!((ok.request.limit, ok.request.duration, ok.request.cost), (10, 60_000, 0));
        let ok =
            body(r#"{"identifier":"a","limit":9007199254740991.0,"duration":1E3}"#).expect("the largest");
        assert_eq!((ok.request.limit, ok.request.duration), (9_007_199_254_740_991, 1_000));
    }
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(limit))]
struct Doc;

/// This room's part of the v1 document.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}
