//! Request plumbing shared by every handler: the request id middleware ([`request_id`]),
//! the [`Authed`] extractor ([`extract`]: authentication ([`auth`]) and then the JSON body
//! or query ([`body`]), in the contract's order: 401 before 413/415/400) and the bridge to
//! blocking (diesel) work ([`blocking`]).

mod auth;
mod blocking;
mod body;
mod extract;
mod request_id;

pub(crate) use auth::{authenticate, authenticate_secret};
pub(crate) use blocking::{blocking, in_background};
pub(crate) use body::{Obj, integer, parse_json, parse_json_as};
pub(crate) use extract::{Authed, Json, JsonBytes, Query, QueryOrJson};
pub(crate) use request_id::{RequestId, is_v2};
