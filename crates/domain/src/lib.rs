//! Domain types shared by every keygate crate: identifiers, validated names, secrets and
//! their hashes, the stable error codes and the storage error, the injectable [`Clock`],
//! credits and their refills ([`Credits`]), the permission query of `keys.verifyKey`
//! ([`parse_permission_query`]) and the hash schemes of keys brought in ([`migration`]).
//!
//! Nothing here does I/O; everything is cheap and synchronous.

pub mod allowlist;
pub mod calendar;
pub mod checksum;
pub use allowlist::{AllowedIps, MAX_ALLOWED_IPS};
pub use checksum::KeyFormat;
mod clock;
mod credits;
mod error;
mod ids;
mod limits;
pub mod migration;
mod names;
mod outcome;
mod patch;
pub mod prefetch;
mod query;
mod records;
mod redact;
pub mod reserve;
pub mod root_permissions;
mod secret;
pub mod trace;

pub use clock::{Clock, ManualClock, SystemClock};
pub use credits::{
    Credits, CreditsUpdate, Refill, RefillInterval, RefillSpec, check_refill, credit_setting, updated_credits,
};
pub use error::{ErrorCode, StorageError, ValidationError};
pub use ids::{IdPrefix, has_prefix, new_id, random_base58_token, random_token};
pub use limits::{
    Algorithm, MAX_LIMIT_DURATION_MS, MAX_LIMIT_NAME_CHARS, MAX_LIMIT_TOKENS, MAX_RATELIMITS,
    check_limit_bounds, limit_configs, validate_ratelimits,
};
pub use migration::{Cut, HashScheme, LegacyHashes, LegacyRow, Migrated, MigratedKey, Migrations};
pub use names::{
    MAX_IDENTIFIER_CHARS, MAX_KEY_ID_CHARS, MAX_NAME_CHARS, MAX_SAFE_INTEGER, check_len, validate_api_name,
    validate_display_name, validate_external_id, validate_key_id, validate_namespace_name,
    validate_permission_name,
};
pub use outcome::{LimitOutcome, VerifyCode};
pub use patch::Patch;
pub use query::{
    MAX_QUERY_DEPTH, MAX_QUERY_NODES, MAX_QUERY_TOKENS, PermissionQuery, QuerySyntaxError,
    parse_permission_query,
};
pub use records::{
    Api, AuditEvent, AuditFilter, AuditRecord, Entity, EntityRef, Identity, IdentityView, Key, KeyLookup,
    KeySummary, KeyUpdate, KeyView, LimitOwner, NamespaceInfo, NamespaceRef, NewEntity, NewKey, NewRateLimit,
    OutboxEvent, Page, RateLimitConfig, RoleView, Workspace,
};
pub use redact::{redact_in, redact_url};
pub use secret::{
    MIN_ROOT_KEY_CHARS, Secret, digest_hex, hash_secret, secret_digest, validate_root_key_secret,
};

/// An `{id, name}` pair: a permission or a role as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Named {
    pub id: String,
    pub name: String,
}

impl Named {
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        Self { id: id.into(), name: name.into() }
    }
}

/// Sorts by name bytes (UTF-8), ascending, as the contract defines "sorted by name".
pub fn sort_by_name(items: &mut [Named]) {
    items.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()).then_with(|| a.id.cmp(&b.id)));
}
