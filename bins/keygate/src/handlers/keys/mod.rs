//! The `keys.*` endpoints of both APIs, one room per concern, each holding the v1 and the
//! v2 handlers of that concern (they differ on the wire, never in what they ask of the
//! services): [`create`] (createKey, v2's rerollKey), [`read`] (getKey, v2's whoami),
//! [`update`] (v2's updateKey, deleteKey), [`links`] (a key's permissions and roles) and
//! [`verify`] (verifyKey); [`verification`] is the one path v1, v2 and the gateway verify
//! through.
//! v2's `updateCredits` is in `v2::credits`, with the credit objects.

pub mod create;
pub mod links;
pub mod read;
pub mod update;
pub mod verification;
pub mod verify;

pub use create::{create_key, create_key_v2, reroll_key};
pub use links::{
    add_permissions, add_permissions_v2, add_roles, add_roles_v2, remove_permissions, remove_permissions_v2,
    remove_roles, remove_roles_v2, set_permissions, set_permissions_v2, set_roles, set_roles_v2,
};
pub use read::{get_key, get_key_v2, whoami};
pub use update::{delete_key, delete_key_v2, update_key};
pub use verify::{verify_key, verify_key_v2};

use crate::error::ApiError;
use crate::openapi::Api;
use keygate_domain::ErrorCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The latest `expires` v2 takes (2100-01-01).
const MAX_EXPIRES_MS: u64 = 4_102_444_800_000;
/// The most roles and permissions one key call names.
const MAX_ROLES: usize = 100;
const MAX_PERMISSIONS: usize = 1000;

/// The answer of `createKey` (v1; v2's `data`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedKey {
    key_id: String,
    /// The secret: shown this once.
    key: String,
}

impl CreatedKey {
    pub(crate) fn new(key_id: String, key: String) -> Self {
        Self { key_id, key }
    }
}

/// 412: a request keygate understands but cannot carry out (keys are stored hashed).
pub(crate) fn precondition(field: &str, why: &str) -> ApiError {
    ApiError::new(ErrorCode::PreconditionFailed, format!("{field}: {why}")).at_field(field)
}

/// `false` or `null`: what keygate can do of a feature that needs keys stored
/// recoverably (`true` is 412).
pub(crate) fn only_false() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .enum_values(Some([Value::Bool(false), Value::Null]))
        .build()
}

/// The rooms' parts of a document.
pub(crate) fn openapi(api: Api) -> Vec<Value> {
    vec![
        create::openapi(api),
        read::openapi(api),
        update::openapi(api),
        links::openapi(api),
        verify::openapi(api),
    ]
}
