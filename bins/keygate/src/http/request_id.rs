//! The request-id middleware: every response carries `Unkey-Request-Id`, and an error body the same id.

use crate::error::{ApiError, REQUEST_ID};
use crate::state::AppState;
use actix_web::body::BoxBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::HeaderValue;
use actix_web::web;
use futures_util::future::{Ready, ready};
use keygate_domain::{IdPrefix, new_id};

/// Middleware: gives every request an id when it arrives, and its response the
/// `Unkey-Request-Id` header; an error response is rendered (again) with that id and the
/// configured docs base, so header and body agree, and its inside detail (500, 503) is
/// logged under the same id, so an operator finds the log line of the id a client reports.
///
/// A concrete `Transform` whose future wraps the inner one: no allocation per request (the
/// generic `from_fn` middleware boxes a future each time).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestId;

impl<S> Transform<S, ServiceRequest> for RequestId
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = actix_web::Error>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Transform = RequestIdService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RequestIdService { service }))
    }
}

#[derive(Debug)]
pub struct RequestIdService<S> {
    service: S,
}

impl<S> Service<ServiceRequest> for RequestIdService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = actix_web::Error>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Future = WithRequestId<S::Future>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        WithRequestId { id: Some(new_id(IdPrefix::Request)), inner: self.service.call(req) }
    }
}

pin_project_lite::pin_project! {
    /// The inner service's future and the id its request was given on arrival.
    #[derive(Debug)]
    pub struct WithRequestId<F> {
        #[pin]
        inner: F,
        id: Option<String>,
    }
}

impl<F> std::future::Future for WithRequestId<F>
where
    F: std::future::Future<Output = Result<ServiceResponse<BoxBody>, actix_web::Error>>,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx));
        let id = this.id.take().unwrap_or_else(|| new_id(IdPrefix::Request));
        std::task::Poll::Ready(finish(res, id))
    }
}

/// Every handler's body is a `BoxBody`, so is the rendered error's: the response is passed
/// on as it is, without an `EitherBody` around it.
fn finish(
    res: Result<ServiceResponse<BoxBody>, actix_web::Error>,
    id: String,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let mut res = res?;
    if let Some(err) = res.response().error().and_then(|e| e.as_error::<ApiError>()).cloned() {
        err.log_detail(&id);
        let state = res.request().app_data::<web::Data<AppState>>().cloned();
        let docs_base = state.as_ref().map_or("/docs", |s| s.docs_base.as_str());
        let rendered = match is_v2(res.request().path()) {
            true => err.render_v2(&id, docs_base, accepts_problem_json(res.request())),
            false => err.render(&id, docs_base),
        };
        return Ok(res.into_response(rendered));
    }
    // A handler whose body carries the id (keys.verifyKey) has set the header already.
    if !res.headers().contains_key(&REQUEST_ID)
        && let Ok(v) = HeaderValue::try_from(id)
    {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    Ok(res)
}

/// Whether a path belongs to the v2 API (its errors are v2 problem bodies).
pub fn is_v2(path: &str) -> bool {
    path == "/v2" || path.starts_with("/v2/")
}

/// Whether the client's `Accept` lists `application/problem+json`, `application/*` or
/// `*/*` (API-v2.md §1.1): v2 errors are then `application/problem+json`.
fn accepts_problem_json(req: &actix_web::HttpRequest) -> bool {
    req.headers().get_all(actix_web::http::header::ACCEPT).any(|v| {
        v.to_str().unwrap_or_default().split(',').any(|item| {
            let media = item.split(';').next().unwrap_or_default().trim();
            ["application/problem+json", "application/*", "*/*"].iter().any(|m| media.eq_ignore_ascii_case(m))
        })
    })
}
