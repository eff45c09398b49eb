//! Request plumbing shared by every handler: the request id middleware ([`request_id`]),
//! the [`Authed`] extractor ([`extract`]: authentication ([`auth`]) and then the JSON body
//! or query ([`body`]), in the contract's order: 401 before 413/415/400) and the bridge to
//! blocking (diesel) work ([`blocking`]).

mod auth;
mod blocking;
mod body;
mod extract;
mod request_id;
pub mod trace_context;

pub(crate) use auth::{authenticate, authenticate_secret};
pub(crate) use blocking::blocking;
pub use body::Obj;
pub(crate) use body::{integer, parse_json, parse_json_as, read_body};
#[cfg(feature = "pages")]
pub(crate) use extract::PORTAL_COOKIE;
pub(crate) use extract::{Anyone, Authed, Json, JsonBytes, PortalCaller, Query, QueryOrJson};
pub(crate) use request_id::is_v2;
pub use request_id::{ACCESS_TARGET, Caller, RequestId};

/// A cookie's value from the request's `Cookie` headers.
pub(crate) fn cookie<'a>(req: &'a actix_web::HttpRequest, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(actix_web::http::header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}
