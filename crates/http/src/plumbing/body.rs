//! Bodies and queries: the contract's checks (413, 415, 400 with dot paths), the time
//! limit on a body, NUL refused in every string.

use crate::error::{ApiError, problems};
use crate::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{HttpRequest, web};
use futures_util::StreamExt;
use keygate_domain::{ErrorCode, MAX_SAFE_INTEGER, ValidationError};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Number;

/// A JSON object read as `T`, and nothing else: serde reads a struct from an array too
/// (`[1, null]` for `{a, b}`), which a schema's `object` does not allow, so nested objects of
/// a request are read through this. Errors keep their field paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Only<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Only<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(Only(std::marker::PhantomData))
    }
}

/// Largest accepted request body (contract §1: over 1 MiB is 413).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Checks the size (413) and the content type (415) and reads at most [`MAX_BODY_BYTES`]
/// (413) within the body time limit (408); [`parse_json`] then reads the JSON. A body that
/// arrives in one chunk is not copied.
pub async fn read_body(req: &HttpRequest, mut payload: Payload) -> Result<web::Bytes, ApiError> {
    // The contract's order: size (413), then media type (415), then the content (400).
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    // The media type before any parameters (`; charset=...`), compared as bytes.
    let is_json = req.headers().get(header::CONTENT_TYPE).is_some_and(|v| {
        let media = v.as_bytes().split(|&b| b == b';').next().unwrap_or_default();
        media.trim_ascii().eq_ignore_ascii_case(b"application/json")
    });
    if !is_json {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "the body must be JSON: send Content-Type: application/json",
        ));
    }
    // A compressed body would only fail as malformed JSON: say what is wrong instead.
    if let Some(coding) = req.headers().get(header::CONTENT_ENCODING)
        && !coding.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity")
    {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!(
                "Content-Encoding {} is not supported: send the body uncompressed",
                String::from_utf8_lossy(coding.as_bytes())
            ),
        ));
    }
    // The whole body within the limit: a client that stalls or trickles it is answered
    // 408 and closed, so it cannot hold the connection (and a file descriptor) for good.
    let read =
        ReadBody { req, payload: &mut payload, body: Body::default(), declared, polls: 0, deadline: None };
    match read.await {
        Ok(body) => Ok(body),
        Err(Some(e)) => Err(e),
        Err(None) => {
            let limit = body_time_limit(req);
            let mut e = ApiError::new(
                ErrorCode::RequestTimeout,
                format!("the body did not arrive within {} ms", limit.as_millis()),
            );
            e.close = true;
            Err(e)
        }
    }
}

/// Reads a body to its end under a time limit, without arming a timer for a body that
/// came with the head (nearly every request; a timer costs ~500 instructions).
///
/// actix-http's HTTP/1 dispatcher polls a handler once when the head is parsed, before it
/// feeds the body bytes it has already read, and polls it again in the same turn after
/// feeding them. So a body that came with the head is complete at the second poll; the
/// timer is armed only when the second poll still finds the body incomplete, which is
/// also the case of a client that sent the head alone and stalled (the second poll
/// happens whether or not anything was fed; tests/hostile.rs checks both cases).
struct ReadBody<'a> {
    req: &'a HttpRequest,
    payload: &'a mut Payload,
    body: Body,
    declared: Option<u64>,
    polls: u8,
    deadline: Option<std::pin::Pin<Box<actix_web::rt::time::Sleep>>>,
}

impl std::future::Future for ReadBody<'_> {
    /// `Err(None)`: the time limit passed.
    type Output = Result<web::Bytes, Option<ApiError>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            match this.payload.poll_next_unpin(cx) {
                Poll::Ready(Some(chunk)) => {
                    this.body.push(chunk).map_err(Some)?;
                    // All the declared bytes are here: the end-of-body mark need not wait.
                    if this.declared.is_some_and(|n| n == this.body.len() as u64) {
                        return Poll::Ready(Ok(std::mem::take(&mut this.body).finish()));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(Ok(std::mem::take(&mut this.body).finish())),
                Poll::Pending => break,
            }
        }
        this.polls = this.polls.saturating_add(1);
        if this.polls == 1 {
            return Poll::Pending;
        }
        let req = this.req;
        let deadline =
            this.deadline.get_or_insert_with(|| Box::pin(actix_web::rt::time::sleep(body_time_limit(req))));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(None)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The configured body time limit (looked up only for a body that is still arriving).
fn body_time_limit(req: &HttpRequest) -> std::time::Duration {
    req.app_data::<web::Data<AppState>>().map_or(DEFAULT_BODY_TIMEOUT, |s| s.limits.body_timeout)
}

/// Used when no app state is registered (never in the server).
const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A body being read, at most [`MAX_BODY_BYTES`]. A body that arrives in one chunk is not
/// copied.
#[derive(Debug, Default)]
struct Body {
    first: web::Bytes,
    more: Option<web::BytesMut>,
}

impl Body {
    fn push(&mut self, chunk: Result<web::Bytes, actix_web::error::PayloadError>) -> Result<(), ApiError> {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("could not read the body: {e}")))?;
        if self.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        match self.more.as_mut() {
            Some(m) => m.extend_from_slice(&chunk),
            None if self.first.is_empty() => self.first = chunk,
            None => {
                let mut m = web::BytesMut::with_capacity(self.first.len() + chunk.len());
                m.extend_from_slice(&self.first);
                m.extend_from_slice(&chunk);
                self.more = Some(m);
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), |m| m.len())
    }

    fn finish(self) -> web::Bytes {
        self.more.map_or(self.first, web::BytesMut::freeze)
    }
}

fn too_large() -> ApiError {
    ApiError::new(ErrorCode::PayloadTooLarge, format!("the body exceeds {MAX_BODY_BYTES} bytes"))
}

/// The query string of a GET read into `T` (400 `"<field>: is required"`, or `"<field>:
/// given more than once"`, naming the parameter).
pub fn read_query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    // NUL is refused as in a body (parse_json).
    let query = req.query_string().as_bytes();
    if let Some(at) = memchr::memchr_iter(b'%', query).find(|&at| query.get(at + 1..at + 3) == Some(b"00")) {
        let name =
            req.query_string()[..at].rsplit('&').next().and_then(|p| p.split('=').next()).unwrap_or("query");
        return Err(ApiError::bad_request(format!("{name}: must not contain NUL (%00) characters")));
    }
    let e = match web::Query::<T>::from_query(req.query_string()) {
        Ok(q) => return Ok(q.into_inner()),
        Err(actix_web::error::QueryPayloadError::Deserialize(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    let field = |prefix: &str| e.strip_prefix(prefix).and_then(|r| r.strip_suffix('`')).map(str::to_owned);
    Err(ApiError::bad_request(match (field("missing field `"), field("duplicate field `")) {
        (Some(f), _) => format!("{f}: is required (query parameter ?{f}=...)"),
        (_, Some(f)) => format!("{f}: given more than once in the query"),
        _ => format!("query: {e}"),
    }))
}

/// A JSON integer within `min..=2^53-1`, as JSON Schema's `integer` means it: a number with no
/// fractional part, however written (`10`, `10.0`, `1e3`); `1.5` is refused (contracts §1).
pub(crate) fn integer(path: &str, n: &Number, min: u64) -> Result<u64, ValidationError> {
    let too_big = || ValidationError::new(path, format!("must be <= {MAX_SAFE_INTEGER}"));
    let too_small = || ValidationError::new(path, format!("must be >= {min}"));
    // The common case first; the other readings only when it is not a u64.
    let v = match (n.as_u64(), n.as_i64(), n.as_f64()) {
        (Some(v), _, _) => v,
        (None, Some(_), _) => return Err(too_small()),
        (None, None, Some(f)) if f.fract() == 0.0 => {
            if f < 0.0 {
                return Err(too_small());
            }
            if f > MAX_SAFE_INTEGER as f64 {
                return Err(too_big());
            }
            // Integral and within 0..=2^53-1 (`-0.0` is 0): exact as a u64.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let v = f as u64;
            v
        }
        _ => return Err(ValidationError::new(path, "must be an integer")),
    };
    match v {
        v if v < min => Err(too_small()),
        v if v > MAX_SAFE_INTEGER => Err(too_big()),
        v => Ok(v),
    }
}

/// Parses a JSON body into `T`, locating errors by dot path.
pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    parse_json_as(body, b'{')
}

/// Parses a JSON body that must be an object (`open` = `{`) or an array (`[`) into `T`.
pub fn parse_json_as<'a, T: Deserialize<'a>>(body: &'a [u8], open: u8) -> Result<T, ApiError> {
    let unreadable = |msg: &str| ApiError::bad_request(msg).with_problem(problems::BODY_UNREADABLE);
    let shape = if open == b'[' { "a JSON array" } else { "a JSON object" };
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(unreadable(&format!("the body is empty; {shape} is expected"))),
        // serde would read a struct from an array too; the shape is checked first.
        Some(&b) if b == open => {}
        Some(_) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() => {
            return Err(unreadable("malformed JSON: the body is not valid JSON"));
        }
        Some(_) => return Err(ApiError::bad_request(format!("body: must be {shape}")).at_field("body")),
    }
    // The fast path parses plainly; only a failure is parsed again with path tracking, to
    // say where the problem is.
    let value = serde_json::from_slice(body).map_err(|_| locate_error::<T>(body))?;
    // NUL, which PostgreSQL's text cannot hold, is refused in every string on every
    // backend alike. In valid JSON it can only be the escape `\u0000`.
    if has_nul_escape(body)
        && let Some(path) = nul_path(body)
    {
        let msg = format!("{path}: must not contain NUL (\\u0000) characters");
        return Err(ApiError::bad_request(msg).at_field(path));
    }
    Ok(value)
}

/// Whether the body holds the escape `\u0000` (maybe escaped itself: [`nul_path`] tells).
/// One SIMD scan for a backslash, which most bodies do not hold at all.
fn has_nul_escape(body: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', body).any(|at| body.get(at + 1..at + 6) == Some(b"u0000"))
}

/// The dot path of the first string (or object key) holding a NUL character, if any.
fn nul_path(body: &[u8]) -> Option<String> {
    fn walk(v: &serde_json::Value, path: &mut Vec<String>) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                path.push(i.to_string());
                let found = walk(item, path);
                if !found {
                    path.pop();
                }
                found
            }),
            serde_json::Value::Object(map) => map.iter().any(|(k, item)| {
                path.push(k.replace('\0', "\\u0000"));
                let found = k.contains('\0') || walk(item, path);
                if !found {
                    path.pop();
                }
                found
            }),
            _ => false,
        }
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut path = Vec::new();
    walk(&value, &mut path).then(|| if path.is_empty() { "body".to_string() } else { path.join(".") })
}

/// The 400 for a body that does not parse into `T`: `"<dot.path>: <what is wrong>"`.
fn locate_error<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ApiError {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let Err(e) = serde_path_to_error::deserialize::<_, T>(de) else {
        return ApiError::bad_request("malformed JSON").with_problem(problems::BODY_UNREADABLE);
    };
    let path = dot_path(e.path());
    let inner = e.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        return ApiError::bad_request(format!("malformed JSON: {inner}"))
            .with_problem(problems::BODY_UNREADABLE);
    }
    let text = strip_position(&inner.to_string());
    if let Some(field) = text.strip_prefix("missing field `").and_then(|r| r.strip_suffix('`')) {
        let full = if path.is_empty() { field.to_string() } else { format!("{path}.{field}") };
        return ApiError::bad_request(format!("{full}: is required")).at_field(full);
    }
    let path = if path.is_empty() { "body".to_string() } else { path };
    ApiError::bad_request(format!("{path}: {text}")).at_field(path)
}

fn dot_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let parts: Vec<String> = path
        .iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Map { key } => Some(key.clone()),
            Segment::Enum { variant } => Some(variant.clone()),
            Segment::Unknown => None,
        })
        .collect();
    parts.join(".")
}

/// serde_json appends " at line L column C"; the dot path already locates the problem.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Sample<'a> {
        key_id: String,
        #[serde(borrow)]
        identifier: Option<std::borrow::Cow<'a, str>>,
        limit: Option<Number>,
        permissions: Option<Vec<serde_json::Value>>,
    }

    proptest::proptest! {
        /// Any byte string: a 400 (with a message) or a parsed request, never a panic.
        #[test]
        fn the_body_parser_never_panics(body in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Err(e) = parse_json::<Sample<'_>>(&body) {
                proptest::prop_assert_eq!(e.code, ErrorCode::BadRequest);
                proptest::prop_assert!(!e.message.is_empty());
            }
        }

        /// Near-valid JSON bodies (the shapes a fuzzer reaches): the same.
        #[test]
        fn near_valid_bodies_never_panic(
            body in proptest::string::string_regex(r#"\{("(keyId|identifier|limit|permissions)":( *"[a-z\\u0\\]{0,8}"|-?[0-9.e]{1,6}|\[[^\]]{0,6}\]|null|true|\{\}),?){0,4}\}?"#).unwrap(),
        ) {
            if let Err(e) = parse_json::<Sample<'_>>(body.as_bytes()) {
                proptest::prop_assert_eq!(e.code, ErrorCode::BadRequest);
            }
        }
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Body {
        key_id: String,
        items: Vec<Item>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Item {
        n: u64,
    }

    fn msg(body: &str) -> String {
        parse_json::<Body>(body.as_bytes()).expect_err("invalid").message
    }

    #[test]
    fn messages_carry_dot_paths() {
        assert_eq!(msg(r#"{"items": []}"#), "keyId: is required");
        assert_eq!(
            msg(r#"{"keyId": 1, "items": []}"#),
            "keyId: invalid type: integer `1`, expected a string"
        );
        assert_eq!(msg(r#"{"keyId": "k", "items": [{"n": 1}, {}]}"#), "items.1.n: is required");
        assert!(
            msg(r#"{"keyId": "k", "items": [{"n": 1.0}]}"#)
                .starts_with("items.0.n: invalid type: floating point")
        );
        assert!(msg(r#"{"keyId": "k", "items": [{"n": 1e400}]}"#).starts_with("malformed JSON"));
        assert!(msg(r#"{"keyId": "#).starts_with("malformed JSON"));
        assert_eq!(msg(""), "the body is empty; a JSON object is expected");
        assert_eq!(msg(r#"["k", []]"#), "body: must be a JSON object");
        assert_eq!(msg("42"), "body: must be a JSON object");
        assert_eq!(msg("nope"), "malformed JSON: the body is not valid JSON");
        let deep = "[".repeat(10_000);
        assert!(msg(&deep).starts_with("malformed JSON"), "{}", msg(&deep));
        let deep_obj = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
        // Deep nesting inside an unknown field is skipped without recursion.
        assert_eq!(msg(&deep_obj), "keyId: is required");
        let deep_known =
            format!("{{\"keyId\":\"k\",\"items\":[{}1{}]}}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(msg(&deep_known).starts_with("items.0"), "{}", msg(&deep_known));
    }
}
