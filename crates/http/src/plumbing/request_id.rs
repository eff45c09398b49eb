//! The request-id middleware: every response carries `Unkey-Request-Id`, and an error body the same id.

use crate::error::{ApiError, REQUEST_ID};
use crate::metrics::RouteName;
use crate::state::AppState;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::HeaderValue;
use actix_web::{HttpMessage, web};
use futures_util::future::{Ready, ready};
use keygate_domain::{IdPrefix, new_id};

/// Middleware: gives every response an id, in the
/// `Unkey-Request-Id` header; an error response is rendered (again) with that id and the
/// configured docs base, so header and body agree, and its inside detail (500, 503) is
/// logged under the same id, so an operator finds the log line of the id a client reports.
///
/// A concrete `Transform` whose future wraps the inner one: no allocation per request (the
/// generic `from_fn` middleware boxes a future each time).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestId {
    /// The share of requests without a caller's trace context that are traced.
    sample_ratio: f64,
}

impl RequestId {
    /// With tracing (`KEYGATE_OTLP_SAMPLE_RATIO`): `sample_ratio` of the requests that
    /// carry no `traceparent` are traced; one that does follows its caller's decision.
    pub fn new(sample_ratio: f64) -> Self {
        Self { sample_ratio }
    }
}

impl<S, B> Transform<S, ServiceRequest> for RequestId
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Transform = RequestIdService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RequestIdService { service, sample_ratio: self.sample_ratio }))
    }
}

#[derive(Debug)]
pub struct RequestIdService<S> {
    service: S,
    sample_ratio: f64,
}

impl<S, B> Service<ServiceRequest> for RequestIdService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Future = WithRequestId<S::Future>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let span = request_span(&req, self.sample_ratio);
        // A disabled span (no tracing, or not sampled) is not entered: entering one still
        // costs ~60 instructions each time.
        let inner = match span.is_disabled() {
            true => self.service.call(req),
            false => span.in_scope(|| self.service.call(req)),
        };
        WithRequestId { start: std::time::Instant::now(), inner, span }
    }
}

/// The request's trace span (docs/operations.md, "Traces"), a child of the caller's
/// `traceparent`, when the program traces and the request is sampled (its caller's
/// decision, else `sample_ratio`); disabled otherwise, and then free. Its route, status,
/// request id and workspace are recorded as they become known.
fn request_span(req: &ServiceRequest, sample_ratio: f64) -> tracing::Span {
    if !keygate_domain::trace::traced() {
        return tracing::Span::none();
    }
    let parent = super::trace_context::parent_of(req.headers());
    if !super::trace_context::sampled(&parent, sample_ratio) {
        return tracing::Span::none();
    }
    use tracing::field::Empty;
    let span = tracing::info_span!(target: "keygate::http", "request",
        otel.kind = "server", otel.status_code = Empty,
        http.request.method = Empty, http.route = Empty, http.response.status_code = Empty,
        keygate.request_id = Empty, keygate.workspace_id = Empty);
    if !span.is_disabled() {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        span.record("http.request.method", req.method().as_str());
        // Whatever the header holds, the request is served (a bad one starts a new trace).
        let _ = span.set_parent(parent);
    }
    span
}

pin_project_lite::pin_project! {
    /// The inner service's future, when its request arrived, and its span.
    #[derive(Debug)]
    pub struct WithRequestId<F> {
        #[pin]
        inner: F,
        start: std::time::Instant,
        span: tracing::Span,
    }
}

impl<F, B> std::future::Future for WithRequestId<F>
where
    F: std::future::Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
    B: MessageBody + 'static,
{
    type Output = Result<ServiceResponse<BoxBody>, actix_web::Error>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(match this.span.is_disabled() {
            true => this.inner.poll(cx),
            false => this.span.in_scope(|| this.inner.poll(cx)),
        });
        // A body of another type (the dashboard's error pages) is boxed here; a `BoxBody`,
        // which every API handler answers with, is passed on as it is.
        let res = finish(res.map(ServiceResponse::map_into_boxed_body));
        if let Ok(res) = &res {
            observe(res, this.start.elapsed());
            if !this.span.is_disabled() {
                record_outcome(this.span, res);
            }
        }
        std::task::Poll::Ready(res)
    }
}

/// Every handler's body is a `BoxBody`, so is the rendered error's: the response is passed
/// on as it is, without an `EitherBody` around it. The id is made here, when the response
/// has none: a handler whose body carries the id (v2's envelope, v1's verifyKey) made it
/// and set the header, and a request gets one id, never two.
fn finish(
    res: Result<ServiceResponse<BoxBody>, actix_web::Error>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let mut res = res?;
    if let Some(err) = res.response().error().and_then(|e| e.as_error::<ApiError>()).cloned() {
        let id = new_id(IdPrefix::Request);
        err.log_detail(&id);
        let state = res.request().app_data::<web::Data<AppState>>().cloned();
        let docs_base = state.as_ref().map_or("/docs", |s| s.docs_base.as_str());
        let rendered = match is_v2(res.request().path()) {
            true => err.render_v2(&id, docs_base, accepts_problem_json(res.request())),
            false => err.render(&id, docs_base),
        };
        return Ok(res.into_response(rendered));
    }
    if !res.headers().contains_key(&REQUEST_ID)
        && let Ok(v) = HeaderValue::try_from(new_id(IdPrefix::Request))
    {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    Ok(res)
}

/// The request's metrics and, when `keygate::access` is enabled at info, its access-log
/// line: request id, method, route template, status, latency, and the caller's workspace
/// and root key id when it authenticated (never a secret, never the raw path or query).
fn observe(res: &ServiceResponse<BoxBody>, elapsed: std::time::Duration) {
    let req = res.request();
    let route = req.app_data::<RouteName>().map_or(crate::metrics::UNMATCHED, |r| r.0);
    let status = res.status().as_u16();
    if let Some(state) = req.app_data::<web::Data<AppState>>() {
        state.metrics.request(route, status, elapsed);
    }
    if log::log_enabled!(target: ACCESS_TARGET, log::Level::Info) {
        let id = res.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
        let caller = req.extensions().get::<Caller>().cloned();
        let (ws, rk) =
            caller.as_ref().map_or(("-", "-"), |c| (c.workspace_id.as_str(), c.root_key_id.as_str()));
        let method = req.method().as_str();
        let ms = elapsed.as_secs_f64() * 1000.0;
        log::info!(target: ACCESS_TARGET, request_id = id, method = method, route = route, status = status,
            latency_ms = ms, workspace_id = ws, root_key_id = rk;
            "{id} {method} {route} {status} {ms:.3}ms workspace={ws} root_key={rk}");
    }
}

/// The request's route, status and id on its span (its name: method and route).
fn record_outcome(span: &tracing::Span, res: &ServiceResponse<BoxBody>) {
    let req = res.request();
    let route = req.app_data::<RouteName>().map_or(crate::metrics::UNMATCHED, |r| r.0);
    let status = res.status();
    {
        // Started when first entered: its name is the span's own to change, not a field's.
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        span.context().span().update_name(format!("{} {route}", req.method()));
    }
    span.record("http.route", route);
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    if let Some(id) = res.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()) {
        span.record("keygate.request_id", id);
    }
}

/// The access log's target: off unless enabled (`RUST_LOG=info` or
/// `RUST_LOG=...,keygate::access=info`; docs/operations.md).
pub const ACCESS_TARGET: &str = "keygate::access";

/// Who called, as the access log shows it: set by authentication when the access log is on.
#[derive(Debug, Clone)]
pub struct Caller {
    pub workspace_id: String,
    pub root_key_id: String,
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
