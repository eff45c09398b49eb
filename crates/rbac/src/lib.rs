//! The keygate RBAC service: root keys and their authentication, workspaces, APIs, keys,
//! identities, permissions and roles and the links between them, rate-limit namespaces and
//! their overrides, the audit log, and `keys.verifyKey`'s check with
//! its cache, and the upkeep of the change counters that keep it exact (the counters
//! themselves, and the caches, are `keygate-cache`'s; the records `keygate-domain`'s).
//!
//! Knows nothing of HTTP or SQL: it is defined over the storage traits of [`store`], which
//! the `keygate-store` crate implements for SQLite and PostgreSQL. Every operation
//! validates, authorizes, resolves and then writes, in that order, and all writes of one
//! call go through one [`RbacStore::transaction`], so a failed call changes nothing.
//!
//! The other capabilities build on this crate and never the other way round:
//! `keygate-usage` (what a verification spends: rate limits, credits) and
//! `keygate-analytics` (verification and rate-limit counts). They extend its transactions
//! ([`RbacTx`]) with their own storage traits, and `keygate-usage` registers its credit
//! counters through [`CreditCounters`].

mod cache;
mod error;
mod model;
mod perms;
mod service;
pub mod store;
mod verification;

pub use counters::{
    ChangeProbe, Confirm, Confirming, CounterSource, LocalCounters, Probe, Scope, SharedCounters, Tag,
};
pub use error::{RbacError, Resource};
pub use keygate_cache::counters;
pub use keygate_cache::{Cached, CachedKey, Digest, Interner, KeyCredits, Name, snapshot};
pub use keygate_domain::StorageError;
pub use keygate_domain::migration;
pub use keygate_domain::{
    Api, AuditEvent, AuditFilter, AuditRecord, Entity, EntityRef, Identity, IdentityView, Key, KeyLookup,
    KeySummary, KeyUpdate, KeyView, LimitOwner, NamespaceRef, NewEntity, NewKey, NewRateLimit, OutboxEvent,
    Page, RateLimitConfig, RoleView, Workspace,
};
pub use keygate_domain::{
    Credits, CreditsUpdate, Cut, HashScheme, MAX_QUERY_DEPTH, MAX_QUERY_NODES, MAX_QUERY_TOKENS, Migrated,
    MigratedKey, Migrations, PermissionQuery, QuerySyntaxError, Refill, RefillInterval, RefillSpec,
    check_refill, credit_setting, parse_permission_query, updated_credits,
};
pub use keygate_domain::{LegacyHashes, LegacyRow};
pub use keygate_domain::{LimitOutcome, VerifyCode};
pub use keygate_ratelimit::overrides::{
    Effective, MAX_OVERRIDES_PER_NAMESPACE, MAX_PATTERN_BYTES_PER_NAMESPACE, MAX_STARS_PER_PATTERN, Override,
    OverrideSet, is_pattern, validate_pattern,
};
pub use model::{Principal, RootKey, VerifyScope};
pub use perms::{ApiAccess, WORKSPACE_PERMISSIONS};
pub use service::MAX_LEGACY_CANDIDATES;
pub use service::{
    AUTH_CACHE_TTL_MS, Assumed, Changes, Checked, CreditCounters, LinkMode, MAX_AUDIT_PAGE,
    MAX_CACHED_KEY_BYTES, MAX_CACHED_UNKNOWN_KEYS, MAX_IDENTITY_META_BYTES, MAX_KEY_META_BYTES,
    MAX_KEY_PREFIX_CHARS, MAX_LIMIT_DURATION_MS, MAX_LIMIT_NAME_CHARS, MAX_LIMIT_TOKENS, MAX_MIGRATED_KEYS,
    MAX_RATELIMITS, MAX_V2_KEY_PREFIX_CHARS, MAX_VERIFY_KEY_CHARS, OVERRIDE_CACHE_TTL_MS, OverridesListener,
    PERM_READ_AUDIT, RECONCILE_MARGIN_MS, RbacService, Snapshot, Unconfirmed, key_summary, key_view,
    validate_ratelimits, verification_read,
};
pub use service::{CreditChange, KeyChange, KeyEvents, PERM_DECRYPT_KEY, PERM_ENCRYPT_KEY, Rotated};
pub use service::{
    MAX_ROOT_KEY_EXPIRES_MS, MAX_ROOT_KEY_PERMISSIONS, NewRootKey, PERM_CREATE_ROOT_KEY,
    PERM_DELETE_ROOT_KEY, PERM_READ_ROOT_KEY, PERM_UPDATE_ROOT_KEY, RootKeyChange, permission_covers,
};
pub use store::{CreditSubscriber, EntityKind, OutboxTx, RbacStore, RbacTx};
pub use verification::Verification;
