//! tower and axum: [`KeygateLayer`] protects a router (or one route, with
//! `route_layer`), and [`VerifiedKey`] reads the verification in a handler.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use keygate_client::{Client, Guard, Verifier, VerifiedKey, tower::KeygateLayer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::new("http://127.0.0.1:8080", "kg_root_...")?;
//! let guard = Guard::new(Verifier::remote(client));
//! let app: Router = Router::new()
//!     .route("/documents", get(|key: VerifiedKey| async move { format!("hello {}", key.key_id()) }))
//!     .route_layer(KeygateLayer::new(guard.require("documents.read")));
//! # Ok(()) }
//! ```

use crate::guard::{ClientAddr, ErrorFormat, Guard, Rejection, VerifiedKey};
use futures_util::future::BoxFuture;
use std::task::{Context, Poll};

/// A `tower::Layer` verifying every request's key with a [`Guard`]: refused requests are
/// answered here (401, 403, 429, 503); the others reach the inner service with a
/// [`VerifiedKey`] in their extensions.
#[derive(Debug, Clone)]
pub struct KeygateLayer {
    guard: Guard,
}

impl KeygateLayer {
    /// The layer of `guard`.
    pub fn new(guard: Guard) -> Self {
        Self { guard }
    }
}

impl<S> tower::Layer<S> for KeygateLayer {
    type Service = KeygateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        KeygateService { inner, guard: self.guard.clone() }
    }
}

/// The service [`KeygateLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct KeygateService<S> {
    inner: S,
    guard: Guard,
}

impl<S, B, ResBody> tower::Service<http::Request<B>> for KeygateService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: From<Vec<u8>>,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // The clone that was made ready serves this request; a fresh clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let guard = self.guard.clone();
        let key = guard.key_in(|name| req.headers().get(name).map(http::HeaderValue::as_bytes));
        // tower knows no peer: the service tells it ([`ClientAddr`]).
        let ip = req.extensions().get::<ClientAddr>().map(|a| a.0);
        Box::pin(async move {
            let outcome = match key {
                Ok(key) => guard.check_from(key, ip).await,
                Err(r) => Err(r),
            };
            match outcome {
                Ok(verified) => {
                    req.extensions_mut().insert(verified);
                    inner.call(req).await
                }
                Err(r) => Ok(response(&r, guard.format())),
            }
        })
    }
}

/// A refusal as an `http` response.
fn response<ResBody: From<Vec<u8>>>(r: &Rejection, format: &ErrorFormat) -> http::Response<ResBody> {
    let (content_type, body) = r.body(format);
    let mut res = http::Response::new(ResBody::from(body));
    *res.status_mut() = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::UNAUTHORIZED);
    let headers = res.headers_mut();
    if let Ok(v) = http::HeaderValue::from_str(&content_type) {
        headers.insert(http::header::CONTENT_TYPE, v);
    }
    for (name, value) in &r.headers {
        if let Ok(v) = http::HeaderValue::from_str(value) {
            headers.insert(*name, v);
        }
    }
    res
}

/// The verification a [`KeygateLayer`] put into the request. A route without the layer
/// answers 500 (the layer is missing: a bug of the service, not of the caller).
impl<S: Send + Sync> axum_core::extract::FromRequestParts<S> for VerifiedKey {
    type Rejection = (http::StatusCode, &'static str);

    async fn from_request_parts(parts: &mut http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<VerifiedKey>().cloned().ok_or((
            http::StatusCode::INTERNAL_SERVER_ERROR,
            "VerifiedKey is read on a route that the keygate layer does not protect",
        ))
    }
}

/// `Option<VerifiedKey>`: `None` on a route without the layer.
impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for VerifiedKey {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<VerifiedKey>().cloned())
    }
}
