//! The `keys.*` endpoints of both APIs, one room per concern, each holding the v1 and the
//! v2 handlers of that concern (they differ on the wire, never in what they ask of the
//! services): [`create`] (createKey, v2's rerollKey), [`import`] (v2's migrateKeys: keys
//! brought in by their hashes), [`read`] (getKey, v2's whoami),
//! [`update`] (v2's updateKey, deleteKey), [`links`] (a key's permissions and roles) and
//! [`verify`] (verifyKey; [`verify_answer`], v2's answer); [`verification`] is the one
//! path v1, v2 and the gateway verify through, and [`shared`] what the rooms share
//! (bounds, the created key's answer, 412).
//! v2's `updateCredits` is in `v2::credits`, with the credit objects.

pub mod create;
pub mod import;
pub mod links;
pub mod read;
pub mod update;
pub mod verification;
pub mod verify;
pub mod verify_answer;

pub mod shared;

use crate::openapi::Api;
use serde_json::Value;

/// The rooms' parts of a document.
pub(crate) fn openapi(api: Api) -> Vec<Value> {
    vec![
        create::openapi(api),
        import::openapi(api),
        read::openapi(api),
        update::openapi(api),
        links::openapi(api),
        verify::openapi(api),
    ]
}
