//! One file per resource of the API: each handler extracts ([`crate::plumbing::Authed`]),
//! calls the service and maps the answer.

pub mod analytics;
pub mod apis;
pub mod audit;
pub mod gateway;
pub mod keys;
pub mod overrides;
pub mod permissions;
pub mod ratelimit;
pub mod references;
pub mod scanning;
pub mod system;
pub mod v2;

/// `{}`: v1's answer of an operation that returns nothing (its schema).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(max_properties = 0)]
pub(crate) struct Empty {}

/// `{}`: the answer of an operation that returns nothing (Unkey's shape).
fn empty() -> actix_web::HttpResponse {
    actix_web::HttpResponse::Ok().insert_header(json_type()).body("{}")
}

/// `Content-Type: application/json`, a static value: `ContentType::json()` (which `.json()`
/// inserts when the response has no content type yet) copies the mime's text into a new
/// allocation for every response. Inserted before `.json(..)`, it is kept.
pub(crate) fn json_type() -> (actix_web::http::header::HeaderName, actix_web::http::header::HeaderValue) {
    use actix_web::http::header::{CONTENT_TYPE, HeaderValue};
    (CONTENT_TYPE, HeaderValue::from_static("application/json"))
}

/// 200 with `body` as JSON and the request's id in its header: every answer that carries
/// an id (v2's envelope, v1's verification, the portal's series) is built here.
/// The body is written into a buffer the size of a verification's answer with its credits
/// and limits (`.json(..)` starts at 128 bytes and grows it once or twice per answer).
pub(crate) fn ok_json(request_id: &str, body: impl serde::Serialize) -> actix_web::HttpResponse {
    ok_written(request_id, |json| serde_json::to_writer(json, &body))
}

/// [`ok_json`] with the body written into the buffer by `write` (an answer of a hot path
/// written directly, checked against its serde form by a test).
pub(crate) fn ok_written(
    request_id: &str,
    write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> actix_web::HttpResponse {
    let mut json = Vec::with_capacity(JSON_CAPACITY);
    if let Err(e) = write(&mut json) {
        let e = crate::error::ApiError::internal(format!("an answer not serialized: {e}"));
        e.log_detail(request_id);
        return actix_web::ResponseError::error_response(&e);
    }
    actix_web::HttpResponse::Ok()
        .insert_header(json_type())
        .insert_header((crate::error::REQUEST_ID_HEADER, request_id))
        .body(json)
}

/// [`ok_json`]'s buffer: a jemalloc size class that holds most answers whole.
const JSON_CAPACITY: usize = 512;
