//! The one mapping from library errors to HTTP responses (contract §1.1).

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use keygate_analytics::sql::SqlError;
use keygate_domain::{ErrorCode, IdPrefix, ValidationError, new_id};
use keygate_ratelimit::StoreError;
use keygate_rbac::RbacError;
use std::fmt;
use std::sync::Arc;

pub const REQUEST_ID_HEADER: &str = "unkey-request-id";
/// The same name, built at compile time: looking a `&str` up in a header map parses it into
/// a name first, on every response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);

/// The docs base used when an error is rendered outside a request (unit tests); the
/// server re-renders every error with its configured base (see `http::request_id`).
const DEFAULT_DOCS_BASE: &str = "/docs";

/// An error answered to the caller: a code and a message safe to show.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Extra response headers (e.g. `Allow` on 405).
    pub headers: Vec<(&'static str, String)>,
    /// Close the connection after this answer (a body that did not arrive in time).
    pub close: bool,
    /// What went wrong inside (500, 503): logged with the request's id by the request-id
    /// middleware, never shown to the caller.
    pub detail: Option<Arc<str>>,
    /// The v2 problem type's last three segments when the code alone does not say it
    /// (`unkey/data/key_not_found`); see [`ApiError::problem_type`].
    pub problem: Option<&'static str>,
    /// The request field at fault (a dot path: `permissions.2.name`), for v2's `errors`.
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            headers: Vec::new(),
            close: false,
            detail: None,
            problem: None,
            field: None,
        }
    }

    /// The same error with the v2 problem type `problem` (see [`problems`]).
    pub fn with_problem(mut self, problem: &'static str) -> Self {
        self.problem = Some(problem);
        self
    }

    /// The same error located at the request field `path` (a dot path).
    pub fn at_field(mut self, path: impl Into<String>) -> Self {
        self.field = Some(path.into());
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    /// A bug: the details go to the log (with the request's id), never to the caller.
    pub fn internal(detail: impl fmt::Display) -> Self {
        let mut e = Self::new(ErrorCode::InternalServerError, "internal error; see the server log");
        e.detail = Some(detail.to_string().into());
        e
    }

    /// A store did not answer: the details go to the log (with the request's id).
    pub fn unavailable(detail: impl fmt::Display) -> Self {
        let mut e = Self::new(
            ErrorCode::ServiceUnavailable,
            "storage is unavailable; the request had no effect, retry later",
        );
        e.detail = Some(detail.to_string().into());
        e
    }

    /// Logs what went wrong inside, if anything, under the request's id.
    pub fn log_detail(&self, request_id: &str) {
        match (&self.detail, self.code) {
            (Some(d), ErrorCode::InternalServerError) => log::error!("{request_id}: internal error: {d}"),
            (Some(d), _) => log::warn!("{request_id}: storage unavailable: {d}"),
            (None, _) => {}
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        let field = (!e.path.is_empty()).then(|| e.path.clone());
        Self { field, ..Self::bad_request(e.to_string()) }
    }
}

impl From<RbacError> for ApiError {
    fn from(e: RbacError) -> Self {
        match (e.code(), e) {
            (ErrorCode::InternalServerError, e) => Self::internal(e),
            (ErrorCode::ServiceUnavailable, e) => Self::unavailable(e),
            (_, RbacError::Invalid(v)) => v.into(),
            (code, e) => {
                let problem = e.resource().map(|r| problems::of_resource(code, r));
                Self { problem: problem.flatten(), ..Self::new(code, e.to_string()) }
            }
        }
    }
}

impl From<SqlError> for ApiError {
    fn from(e: SqlError) -> Self {
        let (code, problem) = match &e {
            SqlError::Rbac(_) => {
                let SqlError::Rbac(e) = e else { unreachable!() };
                return e.into();
            }
            SqlError::Invalid(_) => (ErrorCode::BadRequest, problems::INVALID_ANALYTICS_QUERY),
            SqlError::NotSupported(_) => (ErrorCode::BadRequest, problems::NOT_SUPPORTED),
            SqlError::TooExpensive(_) => (ErrorCode::BadRequest, problems::QUERY_TOO_EXPENSIVE),
            SqlError::Busy(_) => (ErrorCode::TooManyRequests, problems::TOO_MANY_QUERIES),
        };
        let e = Self::new(code, e.to_string()).with_problem(problem);
        if code == ErrorCode::BadRequest { e.at_field("query") } else { e }
    }
}

impl From<keygate_runtime::CallError> for ApiError {
    fn from(e: keygate_runtime::CallError) -> Self {
        match e {
            keygate_runtime::CallError::Rbac(e) => e.into(),
            keygate_runtime::CallError::Limiter(e) => e.into(),
            keygate_runtime::CallError::Offload(e) => Self::internal(e),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => Self::unavailable(e),
            // A multiLimit across a Redis Cluster's slots: a limit of this deployment.
            StoreError::CannotAtomically(_) => {
                Self::new(e.code(), e.to_string()).with_problem(problems::NOT_SUPPORTED)
            }
        }
    }
}

/// The v2 problem types (API-v2.md §1.1): the last three segments of `type`, where the
/// code alone does not give them.
pub mod problems {
    use keygate_domain::ErrorCode;
    use keygate_rbac::Resource;

    pub const BODY_UNREADABLE: &str = "user/bad_request/request_body_unreadable";
    pub const AUTH_MISSING: &str = "unkey/authentication/missing";
    pub const AUTH_MALFORMED: &str = "unkey/authentication/malformed";
    pub const QUERY_SYNTAX: &str = "user/bad_request/permissions_query_syntax_error";
    pub const NOT_SUPPORTED: &str = "keygate/application/not_supported";
    /// An analytics query keygate does not accept (API-v2.md §18).
    pub const INVALID_ANALYTICS_QUERY: &str = "user/bad_request/invalid_analytics_query";
    /// An analytics query stopped by a bound (§18).
    pub const QUERY_TOO_EXPENSIVE: &str = "keygate/analytics/query_too_expensive";
    /// A workspace's analytics queries at their concurrency limit (§18).
    pub const TOO_MANY_QUERIES: &str = "keygate/analytics/too_many_queries";

    /// The type of a 404 or 409 about `r`.
    pub fn of_resource(code: ErrorCode, r: Resource) -> Option<&'static str> {
        Some(match (code, r) {
            (ErrorCode::NotFound, Resource::Api) => "unkey/data/api_not_found",
            (ErrorCode::NotFound, Resource::Identity) => "unkey/data/identity_not_found",
            (ErrorCode::Conflict, Resource::Identity) => "unkey/data/identity_already_exists",
            (ErrorCode::NotFound, Resource::Key) => "unkey/data/key_not_found",
            (ErrorCode::NotFound, Resource::Permission) => "unkey/data/permission_not_found",
            (ErrorCode::NotFound, Resource::Role) => "unkey/data/role_not_found",
            (ErrorCode::NotFound, Resource::Namespace) => "unkey/data/ratelimit_namespace_not_found",
            (ErrorCode::NotFound, Resource::Override) => "unkey/data/ratelimit_override_not_found",
            (ErrorCode::NotFound, Resource::Workspace) => "unkey/data/workspace_not_found",
            (ErrorCode::NotFound, Resource::RootKey) => "unkey/data/root_key_not_found",
            (ErrorCode::NotFound, Resource::Migration) => "unkey/data/migration_not_found",
            (ErrorCode::NotFound, Resource::Portal) => "unkey/data/portal_not_found",
            (ErrorCode::Conflict, Resource::Portal) => "unkey/data/portal_already_exists",
            (ErrorCode::NotFound, Resource::WebhookEndpoint) => "keygate/data/webhook_endpoint_not_found",
            (ErrorCode::NotFound, Resource::WebhookDelivery) => "keygate/data/webhook_delivery_not_found",
            (ErrorCode::Conflict, Resource::Permission) => "unkey/data/permission_already_exists",
            (ErrorCode::Conflict, Resource::Role) => "unkey/data/role_already_exists",
            _ => return None,
        })
    }

    /// The type that goes with the code when nothing more precise was set.
    pub const fn of_code(code: ErrorCode) -> &'static str {
        match code {
            ErrorCode::BadRequest => "unkey/application/invalid_input",
            ErrorCode::Unauthorized => "unkey/authentication/key_not_found",
            ErrorCode::Forbidden => "unkey/authorization/forbidden",
            ErrorCode::InsufficientPermissions => "unkey/authorization/insufficient_permissions",
            ErrorCode::NotFound => NOT_SUPPORTED,
            ErrorCode::MethodNotAllowed => "keygate/application/method_not_allowed",
            ErrorCode::Conflict => "unkey/data/conflict",
            ErrorCode::RequestTimeout => "user/bad_request/request_timeout",
            ErrorCode::PayloadTooLarge => "user/bad_request/request_body_too_large",
            ErrorCode::UnsupportedMediaType => "keygate/application/unsupported_media_type",
            ErrorCode::PreconditionFailed => "unkey/application/precondition_failed",
            ErrorCode::TooManyRequests => "user/too_many_requests/workspace_rate_limited",
            ErrorCode::InternalServerError => "unkey/application/unexpected_error",
            ErrorCode::ServiceUnavailable => "unkey/application/service_unavailable",
        }
    }
}

/// v1's error body (contract §1.1): `{"error": {code, message, docs, requestId}}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody<'a> {
    #[schema(inline)]
    error: ErrorDetail<'a>,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ErrorDetail<'a> {
    #[schema(schema_with = error_codes)]
    code: &'static str,
    message: &'a str,
    /// Where the code is explained (`/docs/errors#CODE`).
    docs: String,
    /// Equal to the `Unkey-Request-Id` header.
    request_id: &'a str,
}

/// v2's error body (API-v2.md §1.1): `{meta: {requestId}, error: {title, detail, status,
/// type, errors?}}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Problem<'a> {
    #[schema(inline)]
    meta: ProblemMeta<'a>,
    #[schema(inline)]
    error: ProblemDetail<'a>,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ProblemMeta<'a> {
    request_id: &'a str,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
struct ProblemDetail<'a> {
    title: &'static str,
    detail: &'a str,
    status: u16,
    /// The problem type: a URL ending in `<system>/<category>/<code>`.
    #[serde(rename = "type")]
    kind: String,
    /// The fields at fault (400 and 413 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, inline)]
    errors: Option<Vec<FieldError<'a>>>,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
struct FieldError<'a> {
    /// `body` and the field's JSON path: `body.permissions[2]`.
    location: String,
    message: &'a str,
}

/// `code`: one of [`ErrorCode::ALL`].
fn error_codes() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(ErrorCode::ALL.iter().map(|c| c.as_str())))
        .build()
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        self.render(&new_id(IdPrefix::Request), DEFAULT_DOCS_BASE)
    }
}

impl ApiError {
    /// v2's problem type: `<system>/<category>/<code>`.
    pub fn problem_type(&self) -> &'static str {
        self.problem.unwrap_or(problems::of_code(self.code))
    }

    /// v2's status: the code's, but 400 for a missing or malformed `Authorization` header
    /// (v1: 401).
    pub fn v2_status(&self) -> StatusCode {
        match self.problem {
            Some(problems::AUTH_MISSING | problems::AUTH_MALFORMED) => StatusCode::BAD_REQUEST,
            _ => self.status_code(),
        }
    }

    /// The v2 response (API-v2.md §1.1): `{meta:{requestId}, error:{title, detail, status,
    /// type, errors?}}`, as `application/problem+json` when the client accepts it.
    pub fn render_v2(&self, request_id: &str, docs_base: &str, problem_json: bool) -> HttpResponse {
        let status = self.v2_status();
        // 400 and 413 say where (`errors`, empty when no field is at fault).
        let errors = matches!(status.as_u16(), 400 | 413).then(|| {
            self.field
                .iter()
                .map(|path| FieldError { location: location(path), message: &self.message })
                .collect()
        });
        let body = Problem {
            meta: ProblemMeta { request_id },
            error: ProblemDetail {
                title: title(self.code, status),
                detail: &self.message,
                status: status.as_u16(),
                kind: format!("{docs_base}/errors/{}", self.problem_type()),
                errors,
            },
        };
        let mut res = HttpResponse::build(status);
        res.insert_header((REQUEST_ID_HEADER, request_id));
        if self.close {
            res.force_close();
        }
        for (name, value) in &self.headers {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(*name), HeaderValue::try_from(value.as_str())) {
                res.insert_header((n, v));
            }
        }
        let content_type = if problem_json { "application/problem+json" } else { "application/json" };
        res.content_type(content_type).body(serde_json::to_string(&body).unwrap_or_default())
    }

    /// The response: status, the contract's JSON body, `Unkey-Request-Id`, and the
    /// headers that go with the code.
    pub fn render(&self, request_id: &str, docs_base: &str) -> HttpResponse {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.as_str(),
                message: &self.message,
                docs: format!("{docs_base}/errors#{}", self.code.as_str()),
                request_id,
            },
        };
        let mut res = HttpResponse::build(self.status_code());
        res.insert_header((REQUEST_ID_HEADER, request_id));
        if self.code == ErrorCode::Unauthorized {
            res.insert_header(("www-authenticate", "Bearer"));
        }
        if self.close {
            res.force_close();
        }
        for (name, value) in &self.headers {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(*name), HeaderValue::try_from(value.as_str())) {
                res.insert_header((n, v));
            }
        }
        res.json(body)
    }
}

/// v2's `title` of a status (`Insufficient Permissions` for a 403 about permissions).
fn title(code: ErrorCode, status: StatusCode) -> &'static str {
    match (code, status.as_u16()) {
        (ErrorCode::InsufficientPermissions, _) => "Insufficient Permissions",
        (_, 409) => "Conflicting Resource",
        (_, 413) => "Request Entity Too Large",
        (_, s) => StatusCode::from_u16(s).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error"),
    }
}

/// v2's `location` of a field: `body` and its JSON path (`permissions.2.name` ->
/// `body.permissions[2].name`).
fn location(dot_path: &str) -> String {
    let mut out = String::from("body");
    if dot_path == "body" {
        return out;
    }
    for part in dot_path.split('.') {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(part);
            out.push(']');
        } else {
            out.push('.');
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    #[test]
    fn body_has_the_four_fields_and_header_matches() {
        let res = ApiError::new(ErrorCode::NotFound, "key key_123 not found").error_response();
        assert_eq!(res.status(), 404);
        let id = res.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let bytes = res.into_body().try_into_bytes().expect("bytes");
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(v["error"]["code"], "NOT_FOUND");
        assert_eq!(v["error"]["message"], "key key_123 not found");
        assert!(v["error"]["docs"].as_str().is_some_and(|d| d.ends_with("/errors#NOT_FOUND")));
        assert_eq!(v["error"]["requestId"].as_str(), id.as_deref());
        assert!(id.is_some_and(|id| id.starts_with("req_")));
    }

    #[test]
    fn every_code_maps_to_its_status_and_internals_stay_hidden() {
        for code in ErrorCode::ALL {
            assert_eq!(ApiError::new(code, "m").error_response().status().as_u16(), code.http_status());
        }
        let e: ApiError =
            RbacError::Storage(keygate_rbac::StorageError::Internal("secret sql".into())).into();
        assert!(!e.message.contains("secret sql"));
        let res = ApiError::unauthorized("no").error_response();
        assert_eq!(res.headers().get("www-authenticate").and_then(|v| v.to_str().ok()), Some("Bearer"));
    }
}
