//! The request-id middleware: every response carries `Unkey-Request-Id`, and an error body the same id.

use crate::error::{ApiError, REQUEST_ID};
use crate::server::AppState;
use actix_web::body::BoxBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::HeaderValue;
use actix_web::web;
use futures_util::future::{FutureExt, Map, Ready, ready};
use keygate_domain::{IdPrefix, new_id};

/// Middleware: gives every response an `Unkey-Request-Id`; an error response is rendered
/// (again) with that id and the configured docs base, so header and body agree.
///
/// A concrete `Transform` whose future is a `Map` over the inner future with a plain `fn`:
/// no allocation per request (the generic `from_fn` middleware boxes a future each time).
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

type Finish = fn(
    Result<ServiceResponse<BoxBody>, actix_web::Error>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error>;

impl<S> Service<ServiceRequest> for RequestIdService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = actix_web::Error>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Future = Map<S::Future, Finish>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        self.service.call(req).map(finish as Finish)
    }
}

/// Every handler's body is a `BoxBody`, so is the rendered error's: the response is passed
/// on as it is, without an `EitherBody` around it.
fn finish(
    res: Result<ServiceResponse<BoxBody>, actix_web::Error>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let mut res = res?;
    if let Some(err) = res.response().error().and_then(|e| e.as_error::<ApiError>()).cloned() {
        let state = res.request().app_data::<web::Data<AppState>>().cloned();
        let docs_base = state.as_ref().map_or("/docs", |s| s.docs_base.as_str());
        let rendered = err.render(&new_id(IdPrefix::Request), docs_base);
        return Ok(res.into_response(rendered));
    }
    // A handler whose body carries the id (keys.verifyKey) has set the header already.
    if !res.headers().contains_key(&REQUEST_ID)
        && let Ok(v) = HeaderValue::try_from(new_id(IdPrefix::Request))
    {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    Ok(res)
}
