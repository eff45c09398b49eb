//! `ratelimits.limit`: the hot path. With warm caches it runs entirely inline: no SQL, no
//! thread hop; only a namespace or root key not seen before goes to the store.

use crate::error::ApiError;
use crate::openapi::V1BodyErrors;
use crate::plumbing::{Authed, JsonBytes, Obj, integer, parse_json};
use crate::state::AppState;
use actix_web::{HttpResponse, web};
use keygate_domain::{MAX_IDENTIFIER_CHARS, ValidationError, check_len, validate_namespace_name};
use keygate_ratelimit::{Decision, LimitRequest, MIN_DURATION_MS, MIN_LIMIT};
use keygate_rbac::{Effective, Principal};
use keygate_runtime::LimitAsk;
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

impl ValidLimit<'_> {
    /// What the runtime is asked.
    pub(crate) fn ask(&self) -> LimitAsk<'_> {
        LimitAsk {
            namespace: &self.namespace,
            identifier: &self.identifier,
            request: self.request,
            is_async: self.is_async,
        }
    }
}

impl<'a> LimitBody<'a> {
    pub(crate) fn validate(self) -> Result<ValidLimit<'a>, ValidationError> {
        check_len("identifier", &self.identifier, MAX_IDENTIFIER_CHARS)?;
        let limit = integer("limit", &self.limit, MIN_LIMIT)?;
        let duration = integer("duration", &self.duration, MIN_DURATION_MS)?;
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
/// them, and draft-ietf-httpapi-ratelimit-headers-11's structured fields,
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

/// One decision for a validated request, v1's, v2's or forward auth's: the runtime's
/// ([`keygate_runtime::Runtime::limit`]: the namespace, the override that applies, the
/// decision, analytics), counted in the metrics. Answers the override applied too.
pub(crate) async fn decide(
    state: &web::Data<AppState>,
    principal: &Arc<Principal>,
    v: &ValidLimit<'_>,
) -> Result<(Decision, Option<Effective>), ApiError> {
    let limited = state.runtime.limit(state.get_ref(), principal, v.ask()).await?;
    state.metrics.decision(
        &principal.workspace_id,
        &limited.namespace_id,
        &v.namespace,
        limited.decision.success,
    );
    Ok((limited.decision, limited.applied))
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
