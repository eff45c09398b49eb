//! actix-web: [`KeygateMiddleware`] protects an app, a scope or a resource (`wrap`), and
//! [`VerifiedKey`] reads the verification in a handler.
//!
//! ```no_run
//! use actix_web::{App, HttpServer, web};
//! use keygate_client::{Client, Guard, Verifier, VerifiedKey, actix::KeygateMiddleware};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let guard = Guard::new(Verifier::remote(Client::new("http://127.0.0.1:8080", "kg_root_...")?));
//! HttpServer::new(move || {
//!     App::new().service(
//!         web::resource("/documents")
//!             .wrap(KeygateMiddleware::new(guard.require("documents.read")))
//!             .to(|key: VerifiedKey| async move { format!("hello {}", key.key_id()) }),
//!     )
//! })
//! .bind("127.0.0.1:3000")?
//! .run()
//! .await?;
//! # Ok(()) }
//! ```

use crate::guard::{ClientAddr, Guard, Rejection, VerifiedKey};
use actix_web::body::EitherBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse};
use futures_util::future::{LocalBoxFuture, Ready, ready};
use std::rc::Rc;

/// actix-web middleware verifying every request's key with a [`Guard`]: refused requests
/// are answered here (401, 403, 429, 503); the others reach the handler with a
/// [`VerifiedKey`] in their extensions.
#[derive(Debug, Clone)]
pub struct KeygateMiddleware {
    guard: Guard,
}

impl KeygateMiddleware {
    /// The middleware of `guard`.
    pub fn new(guard: Guard) -> Self {
        Self { guard }
    }
}

impl<S, B> Transform<S, ServiceRequest> for KeygateMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = KeygateActixService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(KeygateActixService { service: Rc::new(service), guard: self.guard.clone() }))
    }
}

/// The service [`KeygateMiddleware`] wraps around another.
#[derive(Debug)]
pub struct KeygateActixService<S> {
    service: Rc<S>,
    guard: Guard,
}

impl<S, B> Service<ServiceRequest> for KeygateActixService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let service = self.service.clone();
        let guard = self.guard.clone();
        let key = guard.key_in(|name| req.headers().get(name).map(|v| v.as_bytes()));
        // The service's [`ClientAddr`] when it set one, else the connection's address.
        let set = req.extensions().get::<ClientAddr>().map(|a| a.0);
        let ip = set.or_else(|| req.peer_addr().map(|a| a.ip()));
        Box::pin(async move {
            let outcome = match key {
                Ok(key) => guard.check_from(key, ip).await,
                Err(r) => Err(r),
            };
            match outcome {
                Ok(verified) => {
                    req.extensions_mut().insert(verified);
                    Ok(service.call(req).await?.map_into_left_body())
                }
                Err(r) => Ok(req.into_response(response(&r, &guard)).map_into_right_body()),
            }
        })
    }
}

/// A refusal as an actix-web response.
fn response(r: &Rejection, guard: &Guard) -> HttpResponse {
    let (content_type, body) = r.body(guard.format());
    let status =
        actix_web::http::StatusCode::from_u16(r.status).unwrap_or(actix_web::http::StatusCode::UNAUTHORIZED);
    let mut res = HttpResponse::build(status);
    res.content_type(content_type);
    for (name, value) in &r.headers {
        res.insert_header((*name, value.as_str()));
    }
    res.body(body)
}

/// The verification [`KeygateMiddleware`] put into the request. A route without the
/// middleware answers 500 (the middleware is missing: a bug of the service).
impl FromRequest for VerifiedKey {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        ready(req.extensions().get::<VerifiedKey>().cloned().ok_or_else(|| {
            actix_web::error::ErrorInternalServerError(
                "VerifiedKey is read on a route that the keygate middleware does not protect",
            )
        }))
    }
}
