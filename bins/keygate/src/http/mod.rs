//! Request plumbing shared by every handler: the request id ([`request_id`]),
//! authentication ([`auth`]), the JSON body and query readers ([`body`]) and the bridge to
//! blocking (diesel) work ([`blocking`]). Handlers call these in the contract's order:
//! authenticate (401) before the body is read (413/415/400).

mod auth;
mod blocking;
mod body;
mod request_id;

pub(crate) use auth::authenticate;
pub(crate) use blocking::{blocking, in_background};
pub(crate) use body::{integer, parse_json, read_body, read_json, read_query};
pub(crate) use request_id::RequestId;
