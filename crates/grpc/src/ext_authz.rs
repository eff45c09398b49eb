//! Envoy's external authorization over gRPC (`envoy.service.auth.v3.Authorization/Check`):
//! the forward-auth decision of `/v1/gateway.authorize` (`keygate_http::forward_auth`),
//! its fields taken where the end user cannot write them.
//!
//! - The gateway's own fields (its root key `x-keygate-root-key`, `x-keygate-policy`,
//!   `x-keygate-permissions`, `x-keygate-ratelimit`, `x-keygate-key-header`) come from the
//!   gRPC call's metadata (Envoy's `grpc_service.initial_metadata`) or from the route's
//!   `context_extensions`, never from the end user's request: a copy in both is refused.
//! - The end user's key (and a rate limit's identifier header) come from the request's
//!   headers as Envoy sends them; its address is the request's source peer.
//! - A pass is `ok_response`: `x-keygate-key-id` and the key's name and metadata set on the
//!   upstream request (replacing any copy), every other `x-keygate-*` header and the
//!   header that carried the key removed from it, and the rate-limit fields added to the
//!   client's response. A refusal is `denied_response` with the HTTP answer's status,
//!   headers and JSON body (401, 403, 429, 400 for a gateway misconfigured, 503 for a store
//!   out of reach), exactly as forward auth over HTTP answers.

use actix_web::{ResponseError, web};
use envoy_types::ext_authz::v3::pb::{
    Authorization, CheckRequest, CheckResponse, HeaderAppendAction, HttpStatusCode,
};
use envoy_types::ext_authz::v3::{
    CheckRequestExt, CheckResponseExt, DeniedHttpResponseBuilder, OkHttpResponseBuilder,
};
use keygate_http::{AppState, Copies, ForwardAuth, ForwardAuthFields, forward_auth};
use std::collections::HashMap;
use tonic::{Request, Response, Status};

/// The gateway's fields, by name (the HTTP headers of forward auth).
const CONTROL_PREFIX: &str = "x-keygate-";

/// The `Authorization` service.
#[derive(Debug, Clone)]
pub struct Authorizer {
    state: web::Data<AppState>,
}

impl Authorizer {
    pub fn new(state: web::Data<AppState>) -> Self {
        Self { state }
    }
}

/// A `Check`'s fields: the gateway's from the call's metadata and the route's context
/// extensions, the end user's from the request's headers.
struct CheckFields<'a> {
    metadata: &'a tonic::metadata::MetadataMap,
    extensions: Option<&'a HashMap<String, String>>,
    headers: Option<&'a HashMap<String, String>>,
}

impl ForwardAuthFields for CheckFields<'_> {
    fn control(&self, name: &str) -> Copies<'_> {
        let mut from_metadata = self.metadata.get_all(name).iter();
        let first = from_metadata.next();
        let extension = self.extensions.and_then(|e| e.get(name));
        match (first, from_metadata.next(), extension) {
            (None, _, None) => Copies::None,
            (Some(v), None, None) => Copies::One(v.to_str().ok()),
            (None, _, Some(v)) => Copies::One(Some(v.as_str())),
            _ => Copies::Many,
        }
    }

    fn header(&self, name: &str) -> Copies<'_> {
        // Envoy sends header names in lower case, each once (repeats joined by commas).
        let name = name.to_ascii_lowercase();
        match self.headers.and_then(|h| h.get(&name)) {
            Some(v) => Copies::One(Some(v.as_str())),
            None => Copies::None,
        }
    }
}

#[tonic::async_trait]
impl Authorization for Authorizer {
    async fn check(&self, request: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        let (metadata, _, check) = request.into_parts();
        let http = check.attributes.as_ref().and_then(|a| a.request.as_ref()).and_then(|r| r.http.as_ref());
        let fields = CheckFields {
            metadata: &metadata,
            extensions: check.attributes.as_ref().map(|a| &a.context_extensions),
            headers: check.get_client_headers(),
        };
        let ip = check.get_client_address().and_then(|a| a.parse().ok());
        let call = ForwardAuth {
            fields: &fields,
            ip,
            method: http.map_or("", |h| h.method.as_str()),
            path: http.map_or("", |h| h.path.as_str()),
        };
        let answer = match forward_auth(&self.state, call).await {
            Ok(passed) => {
                let mut ok = OkHttpResponseBuilder::new();
                // Whatever the end user sent as keygate's headers, or the key, the upstream
                // does not see.
                // (Envoy removes after it sets: a header set here is not also removed.)
                let set = |name: &str| passed.headers.iter().any(|(n, _)| *n == name);
                for name in fields.headers.into_iter().flat_map(|h| h.keys()) {
                    if (name.starts_with(CONTROL_PREFIX) || *name == passed.key_header) && !set(name) {
                        ok.remove_header(name.as_str());
                    }
                }
                for (name, value) in passed.headers {
                    match name.starts_with(CONTROL_PREFIX) {
                        true => ok.add_header(
                            name,
                            value,
                            Some(HeaderAppendAction::OverwriteIfExistsOrAdd),
                            false,
                        ),
                        false => ok.add_response_header(
                            name,
                            value,
                            Some(HeaderAppendAction::OverwriteIfExistsOrAdd),
                            false,
                        ),
                    };
                }
                let mut response = CheckResponse::with_status(Status::ok("passed"));
                response.set_http_response(ok);
                response
            }
            Err(refusal) => denied(&refusal),
        };
        Ok(Response::new(answer))
    }
}

/// A refusal as Envoy answers the client: forward auth's HTTP answer (status, headers, the
/// contract's JSON body).
fn denied(refusal: &keygate_http::error::ApiError) -> CheckResponse {
    use actix_web::body::MessageBody;
    let http = refusal.error_response();
    let status = http.status().as_u16();
    let headers: Vec<(String, String)> = http
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    // The answer's body is whole (JSON): taken as it is.
    let body = http.into_body().try_into_bytes().unwrap_or_default();
    let mut builder = DeniedHttpResponseBuilder::new();
    builder.set_http_status(HttpStatusCode::try_from(i32::from(status)).unwrap_or(HttpStatusCode::Forbidden));
    for (name, value) in headers {
        builder.add_header(name, value, Some(HeaderAppendAction::OverwriteIfExistsOrAdd), false);
    }
    builder.set_body(String::from_utf8_lossy(&body).into_owned());
    let grpc = match status {
        401 => Status::unauthenticated(refusal.message.clone()),
        503 => Status::unavailable(refusal.message.clone()),
        _ => Status::permission_denied(refusal.message.clone()),
    };
    let mut response = CheckResponse::with_status(grpc);
    response.set_http_response(builder);
    response
}
