//! What the key rooms share: the bounds of v2's key calls, the created key's answer, and
//! the 412 of what needs keys stored recoverably.

use serde::Serialize;
use utoipa::ToSchema;

/// The latest `expires` v2 takes (2100-01-01).
pub(crate) const MAX_EXPIRES_MS: u64 = 4_102_444_800_000;
/// The most roles and permissions one key call names.
pub(crate) const MAX_ROLES: usize = 100;
pub(crate) const MAX_PERMISSIONS: usize = 1000;

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
