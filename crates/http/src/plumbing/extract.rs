//! The extractors every handler takes: [`Authed`], the caller's root key and the request's
//! input, read in the contract's order (401/403 before 413, 415 and 400).
//!
//! Authentication and input are one extractor, not two: actix polls the extractors of a
//! handler side by side, so a separate body extractor could answer 415 while the root key
//! is still being loaded, and the contract puts 401 first.

use super::auth::authenticate;
use super::blocking::blocking;
use super::body::{parse_json, read_body, read_query};
use crate::error::ApiError;
use crate::state::AppState;
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;
use keygate_rbac::Principal;
use keygate_runtime::Runtime;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::sync::Arc;

/// An authenticated call: who calls (`P`: a root key, or for `keys.verifyKey` an optional
/// one), what they sent (`I`) and the application state to serve it with.
#[derive(Debug)]
pub struct Authed<I, P = Arc<Principal>> {
    pub principal: P,
    pub input: I,
    pub state: web::Data<AppState>,
}

impl<I, P> Authed<I, P>
where
    I: Send + 'static,
    P: Caller + Send,
{
    /// Runs a service operation with the caller and the input off the async workers (the
    /// store is blocking I/O); its error is answered through the one error mapping.
    pub async fn run<T, E, F>(self, op: F) -> Result<T, ApiError>
    where
        F: FnOnce(&Runtime, &P, I) -> Result<T, E> + Send + 'static,
        E: Into<ApiError>,
        T: Send + 'static,
    {
        let Self { mut principal, input, state } = self;
        blocking(state.metrics.queued(), move || {
            // A root key revoked through another instance is refused at this request, and
            // one changed there (its permissions) serves it as it is now.
            if let Some(p) = principal.principal()
                && let Some(current) = state.rbac.current_root_key(p)?
            {
                principal.replace(current);
            }
            op(&state.runtime, &principal, input).map_err(Into::into)
        })
        .await
    }
}

impl<I: Input, P: Caller> FromRequest for Authed<I, P> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let (req, payload) = (req.clone(), payload.take());
        Box::pin(async move {
            let state = app_state(&req)?;
            let principal = P::authenticate(&req, &state).await?;
            let input = I::read(&req, payload).await?;
            Ok(Self { principal, input, state })
        })
    }
}

/// The application state registered on the server.
pub fn app_state(req: &HttpRequest) -> Result<web::Data<AppState>, ApiError> {
    req.app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| ApiError::internal("the application state is missing"))
}

/// Who may call: [`authenticate`]d from the `Authorization` header.
pub trait Caller: Sized + 'static {
    fn authenticate(
        req: &HttpRequest,
        state: &web::Data<AppState>,
    ) -> impl Future<Output = Result<Self, ApiError>>;

    /// The root key that called, if any.
    fn principal(&self) -> Option<&Principal>;

    /// The root key as it is now, found changed since it authenticated the request.
    fn replace(&mut self, current: Arc<Principal>);
}

/// A root key is required (401 without a valid one).
impl Caller for Arc<Principal> {
    fn principal(&self) -> Option<&Principal> {
        Some(self)
    }

    fn replace(&mut self, current: Arc<Principal>) {
        *self = current;
    }

    async fn authenticate(req: &HttpRequest, state: &web::Data<AppState>) -> Result<Self, ApiError> {
        authenticate(req, state).await
    }
}

/// A root key is optional (`keys.verifyKey`); one that is sent must be valid (401).
impl Caller for Option<Arc<Principal>> {
    fn principal(&self) -> Option<&Principal> {
        self.as_deref()
    }

    fn replace(&mut self, current: Arc<Principal>) {
        *self = Some(current);
    }

    async fn authenticate(req: &HttpRequest, state: &web::Data<AppState>) -> Result<Self, ApiError> {
        match req.headers().contains_key(actix_web::http::header::AUTHORIZATION) {
            true => Ok(Some(authenticate(req, state).await?)),
            false => Ok(None),
        }
    }
}

/// No authentication (`portal.exchangeCode`: the code is the credential).
#[derive(Debug)]
pub struct Anyone;

impl Caller for Anyone {
    fn principal(&self) -> Option<&Principal> {
        None
    }

    fn replace(&mut self, _: Arc<Principal>) {}

    async fn authenticate(_: &HttpRequest, _: &web::Data<AppState>) -> Result<Self, ApiError> {
        Ok(Anyone)
    }
}

/// The portal's end-user operations: the session of the `portal_session` cookie (read
/// from the database at each request), 401 when missing, unknown, expired or revoked.
#[derive(Debug)]
pub struct PortalCaller(pub keygate_portal::PortalContext);

/// The portal session cookie's name (API-v2.md §17).
pub const PORTAL_COOKIE: &str = "portal_session";

impl Caller for PortalCaller {
    fn principal(&self) -> Option<&Principal> {
        None
    }

    fn replace(&mut self, _: Arc<Principal>) {}

    async fn authenticate(req: &HttpRequest, state: &web::Data<AppState>) -> Result<Self, ApiError> {
        let refused = || {
            ApiError::unauthorized(
                "a portal session is required: the portal_session cookie is missing, unknown, expired or revoked",
            )
        };
        let token = super::cookie(req, PORTAL_COOKIE).ok_or_else(refused)?.to_string();
        let state = state.clone();
        let ctx = blocking(state.metrics.queued(), move || {
            state.runtime.portal.session(&token).map_err(ApiError::from)
        })
        .await?;
        ctx.map(PortalCaller).ok_or_else(refused)
    }
}

/// What a handler reads from the request once its caller is known.
pub trait Input: Sized + 'static {
    fn read(req: &HttpRequest, payload: Payload) -> impl Future<Output = Result<Self, ApiError>>;
}

/// Nothing: a GET without parameters.
impl Input for () {
    async fn read(_: &HttpRequest, _: Payload) -> Result<Self, ApiError> {
        Ok(())
    }
}

/// A JSON body: 413, 415, then 400 with the field's dot path.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned + 'static> Input for Json<T> {
    async fn read(req: &HttpRequest, payload: Payload) -> Result<Self, ApiError> {
        Ok(Self(parse_json(&read_body(req, payload).await?)?))
    }
}

/// The JSON body's bytes after the checks of [`Json`] but before parsing, for a handler that
/// borrows its strings from them (`ratelimits.limit`).
#[derive(Debug)]
pub struct JsonBytes(pub web::Bytes);

impl Input for JsonBytes {
    async fn read(req: &HttpRequest, payload: Payload) -> Result<Self, ApiError> {
        Ok(Self(read_body(req, payload).await?))
    }
}

/// The query string of a GET (400 naming the parameter).
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned + 'static> Input for Query<T> {
    async fn read(req: &HttpRequest, _: Payload) -> Result<Self, ApiError> {
        Ok(Self(read_query(req)?))
    }
}

/// The query string of a GET, the JSON body of any other method (`keys.getKey` takes both).
#[derive(Debug)]
pub struct QueryOrJson<T>(pub T);

impl<T: DeserializeOwned + 'static> Input for QueryOrJson<T> {
    async fn read(req: &HttpRequest, payload: Payload) -> Result<Self, ApiError> {
        match req.method() == actix_web::http::Method::GET {
            true => Ok(Self(Query::read(req, payload).await?.0)),
            false => Ok(Self(Json::read(req, payload).await?.0)),
        }
    }
}
