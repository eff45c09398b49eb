//! The one mapping from library errors to HTTP responses (contract §1.1).

use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
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
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), headers: Vec::new(), close: false, detail: None }
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
        Self::bad_request(e.to_string())
    }
}

impl From<RbacError> for ApiError {
    fn from(e: RbacError) -> Self {
        match e.code() {
            ErrorCode::InternalServerError => Self::internal(e),
            ErrorCode::ServiceUnavailable => Self::unavailable(e),
            code => Self::new(code, e.to_string()),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e.code() {
            ErrorCode::ServiceUnavailable => Self::unavailable(e),
            code => Self::new(code, e.to_string()),
        }
    }
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorBody<'a> {
    code: &'static str,
    message: &'a str,
    docs: String,
    request_id: &'a str,
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
    /// The response: status, the contract's JSON body, `Unkey-Request-Id`, and the
    /// headers that go with the code.
    pub fn render(&self, request_id: &str, docs_base: &str) -> HttpResponse {
        let body = serde_json::json!({ "error": ErrorBody {
            code: self.code.as_str(),
            message: &self.message,
            docs: format!("{docs_base}/errors#{}", self.code.as_str()),
            request_id,
        }});
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
