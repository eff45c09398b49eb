//! The RBAC service, one file per resource: [`auth`] (root keys), [`apis`] (API objects),
//! [`keys`] (keys and their links, verification), [`entities`] (permissions and roles), [`overrides`] and
//! [`namespaces`] (rate limits), [`admin`] (bootstrap, workspaces, root keys), and
//! [`links`], what the link operations share. This file holds the service itself.

mod admin;
mod analytics;
mod apis;
mod audit;
mod auth;
mod credits;
mod entities;
mod identities;
mod keys;
mod links;
mod namespaces;
mod overrides;
mod ratelimit_analytics;
mod sessions;
mod usage;
mod verify;

pub use analytics::{
    DEFAULT_RETENTION_DAYS, DailyVerifications, KeyOrOwner, OrderField, TimeSlice, VerificationsQuery,
    VerificationsRow, field_name as outcome_field,
};
pub use audit::{MAX_AUDIT_PAGE, PERM_READ_AUDIT};
use credits::CreditLedger;
pub use credits::{
    CreditOp, Installed, RefillSpec, SharedCredits, SharedRefill, SharedSpend, SharedSpendAsk, check_refill,
    credit_setting,
};
pub use identities::{
    MAX_IDENTITY_META_BYTES, MAX_LIMIT_DURATION_MS, MAX_LIMIT_NAME_CHARS, MAX_LIMIT_TOKENS, MAX_RATELIMITS,
    validate_ratelimits,
};
pub use keys::{key_summary, key_view};
pub use links::LinkMode;
use links::*;
pub use ratelimit_analytics::{
    LimitSlice, RatelimitsQuery, RatelimitsRow, TOP_IDENTIFIERS, VERIFY_NAMESPACE_PREFIX,
};
pub use sessions::{DashboardSession, SESSION_IDLE_MS};
pub use usage::{MAX_VERIFY_RATELIMITS, Pending, validate_usage};
use verify::VerifyCache;
pub use verify::{MAX_CACHED_KEY_BYTES, MAX_CACHED_UNKNOWN_KEYS};

use crate::cache::{self, AuthCache, Cached, NamespaceCache, OverrideCache};
use crate::counters::{Scope, creation_shard};
pub use crate::perms::*;
use crate::store::{EntityKind, RbacStore, RbacTx};
use crate::{
    Api, ApiAccess, AuditEvent, AuditFilter, AuditRecord, Entity, Identity, IdentityView, Key, KeyLookup,
    KeySummary, KeyView, LimitOwner, NewEntity, NewKey, NewRateLimit, Page, PermissionQuery, Principal,
    RateLimitConfig, RbacError, Resource, RoleView, RootKey, Verification, VerifyCode, VerifyScope,
    Workspace,
};
use crate::{
    Effective, EntityRef, MAX_PATTERN_BYTES_PER_NAMESPACE, NamespaceRef, Override, OverrideSet, StorageError,
    is_pattern, validate_pattern,
};
use keygate_domain::{
    Clock, IdPrefix, MAX_NAME_CHARS, Named, Patch, Secret, ValidationError, check_len, digest_hex,
    has_prefix, hash_secret, new_id, random_base58_token, random_token, secret_digest, sort_by_name,
    validate_api_name, validate_display_name, validate_external_id, validate_key_id,
    validate_permission_name, validate_root_key_secret,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// How long a verified root key is trusted without asking the store again (contract §2).
pub const AUTH_CACHE_TTL_MS: u64 = 10_000;

/// The most entries one `setPermissions`/`addRoles` call may carry.
pub const MAX_REFS_PER_CALL: usize = 1_000;
/// Longest description of a permission or role.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `prefix` of `keys.createKey`.
pub const MAX_KEY_PREFIX_CHARS: usize = 8;
/// Longest `prefix` of v2's `keys.createKey`.
pub const MAX_V2_KEY_PREFIX_CHARS: usize = 16;
/// Longest key secret a verification or `whoami` takes.
pub const MAX_VERIFY_KEY_CHARS: usize = 512;
/// Largest serialized `meta` of a key.
pub const MAX_KEY_META_BYTES: usize = 64 * 1024;
/// How long an instance uses a namespace's overrides before reading them again. A change
/// made through this instance applies at once; through another one, within this time.
pub const OVERRIDE_CACHE_TTL_MS: u64 = 1_000;
/// The most overrides one namespace may hold.
pub const MAX_OVERRIDES_PER_NAMESPACE: usize = 1_000;

/// Told after a namespace's rate-limit overrides changed (committed). The server passes
/// it on to a shared rate-limit store, so that every instance reloads them on its next
/// request (contract §6), not only this one.
pub trait OverridesListener: Send + Sync + std::fmt::Debug {
    fn overrides_changed(&self, namespace_id: &str);
}

/// The RBAC service: authentication, authorization and the key/permission/role/namespace
/// operations, over any [`RbacStore`].
#[derive(Debug)]
pub struct RbacService<S> {
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    auth: AuthCache,
    namespaces: NamespaceCache,
    overrides: OverrideCache,
    overrides_listener: Option<Arc<dyn OverridesListener>>,
    /// Where the change counters are read (`crate::counters`).
    counters: crate::counters::CounterSource,
    verify_cache: VerifyCache,
    /// With local counters: a cheap look at whether another process wrote the database,
    /// taken before a cached verification is trusted (`None`: the poll alone).
    probe: Option<crate::counters::Probe>,
    /// Where the rate limits of keys and identities are counted (`usage`).
    limiter: Arc<dyn keygate_ratelimit::RateLimitStore>,
    /// The credit counters verifications spend (`credits`).
    credits: CreditLedger,
    /// Where verifications are counted for analytics (`analytics`); `None`: off.
    analytics: Option<Arc<crate::analytics::Recorder>>,
    /// Where rate-limit decisions are counted for analytics (`ratelimit_analytics`).
    limit_analytics: Option<Arc<crate::ratelimit_analytics::LimitRecorder>>,
    /// An analytics flush whose commit was not confirmed (`analytics`).
    unconfirmed_flush: parking_lot::Mutex<Option<analytics::Flush>>,
}

impl<S: RbacStore> RbacService<S> {
    /// A service with the verification cache on and change counters in memory (right for
    /// one process, or several on one SQLite file with [`Self::poll_changes`] running).
    pub fn new(store: S, clock: Arc<dyn Clock>) -> Self {
        Self {
            store: Arc::new(store),
            clock,
            auth: AuthCache::for_root_keys(AUTH_CACHE_TTL_MS),
            namespaces: NamespaceCache::default(),
            overrides: OverrideCache::new(OVERRIDE_CACHE_TTL_MS),
            overrides_listener: None,
            counters: crate::counters::CounterSource::Local(Default::default()),
            verify_cache: VerifyCache::new(true),
            probe: None,
            limiter: Arc::new(keygate_ratelimit::MemoryStore::new()),
            credits: CreditLedger::Memory(Arc::default()),
            analytics: None,
            limit_analytics: None,
            unconfirmed_flush: Default::default(),
        }
    }

    /// Counts verifications for analytics in `recorder` ([`Self::record_verification`],
    /// flushed by [`Self::flush_analytics`]).
    pub fn with_analytics(mut self, recorder: Arc<crate::analytics::Recorder>) -> Self {
        self.analytics = Some(recorder);
        self
    }

    /// Where verifications count the rate limits of keys and identities (default: an
    /// in-process store; several instances share a Redis store). The budgets are keyed
    /// apart from every `ratelimit.*` namespace's.
    pub fn with_limiter(mut self, limiter: Arc<dyn keygate_ratelimit::RateLimitStore>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Where verifications read the change counters: `Store` or `Shared` when several
    /// instances share a PostgreSQL database.
    pub fn with_counter_source(mut self, source: crate::counters::CounterSource) -> Self {
        // Credits in memory need the database to be this process's alone, as local
        // counters do; else each spend is a statement on the key's row.
        self.credits = match source {
            crate::counters::CounterSource::Local(_) => CreditLedger::Memory(Arc::default()),
            _ => CreditLedger::Rows(Arc::default()),
        };
        self.counters = source;
        self
    }

    /// Keeps the credit counters verifications spend in a shared store (Redis), written
    /// behind to the database ([`Self::write_behind_credits`]): for several instances on
    /// one database.
    pub fn with_shared_credits(mut self, store: Arc<dyn SharedCredits>) -> Self {
        self.credits = CreditLedger::Shared(credits::SharedLedger::new(store));
        self
    }

    /// With local counters, looks at `probe` (at most once per `every`) before trusting a
    /// cached verification, and catches up with the database's counters when it moved: a
    /// process sharing its SQLite file with others (a keygate server and an embedded
    /// verifier) sees their writes at its next verification rather than its next poll.
    pub fn with_change_probe(
        mut self,
        probe: Arc<dyn crate::counters::ChangeProbe>,
        every: std::time::Duration,
    ) -> Self {
        self.probe = Some(crate::counters::Probe::new(probe, every));
        self
    }

    /// Turns the verification cache off (every verification reads the store) or on.
    pub fn with_verify_cache(mut self, enabled: bool) -> Self {
        self.verify_cache = VerifyCache::new(enabled);
        self
    }

    /// Registers the one [`OverridesListener`].
    pub fn with_overrides_listener(mut self, listener: Arc<dyn OverridesListener>) -> Self {
        self.overrides_listener = Some(listener);
        self
    }

    /// A namespace's overrides changed: drop this instance's copy, tell the listener.
    fn overrides_changed(&self, namespace_id: &str) {
        self.overrides.evict(namespace_id);
        if let Some(l) = &self.overrides_listener {
            l.overrides_changed(namespace_id);
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn now(&self) -> i64 {
        self.clock.now_ms() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rules: &LinkRules, refs: &[EntityRef]) -> Result<RefPlan, String> {
        plan_refs(rules, refs, 0).map_err(|e| e.to_string())
    }

    #[test]
    fn entries_need_an_id_or_a_name() {
        let err = plan(&PERMISSION_RULES, &[EntityRef::by_name("a"), EntityRef::default()]).unwrap_err();
        assert_eq!(err, "permissions.1: an entry needs an id or a name");
        let err = plan(&ROLE_RULES, &[EntityRef { create: Some(true), ..EntityRef::default() }]).unwrap_err();
        assert_eq!(err, "roles.0: an entry needs an id or a name");
    }

    #[test]
    fn duplicates_merge_and_create_defaults_differ_by_kind() {
        let refs = [
            EntityRef::by_name("a"),
            EntityRef::by_name("a"),
            EntityRef::by_id("perm_1"),
            EntityRef::by_id("perm_1"),
        ];
        let p = plan(&PERMISSION_RULES, &refs).unwrap();
        assert_eq!(p.ids.len(), 1);
        assert_eq!(p.names.get("a"), Some(&true), "permissions are created by default");
        let p = plan(&ROLE_RULES, &[EntityRef::by_name("r")]).unwrap();
        assert_eq!(p.names.get("r"), Some(&false), "roles are not");
        // Absent and true are the same effective flag for permissions: merged.
        assert!(
            plan(&PERMISSION_RULES, &[EntityRef::by_name("a"), EntityRef::by_name("a").with_create(true)])
                .is_ok()
        );
        let err =
            plan(&PERMISSION_RULES, &[EntityRef::by_name("a"), EntityRef::by_name("a").with_create(false)])
                .unwrap_err();
        assert!(err.starts_with("permissions.1: "), "{err}");
    }

    #[test]
    fn names_are_validated_at_the_field_they_came_from() {
        let slug = EntityRef { name: Some("bad name".into()), name_field: "slug", ..EntityRef::default() };
        assert!(plan(&PERMISSION_RULES, &[slug]).unwrap_err().starts_with("permissions.0.slug: "));
        assert!(
            plan(&ROLE_RULES, &[EntityRef::by_name("bad\u{7}")]).unwrap_err().starts_with("roles.0.name: ")
        );
        assert!(
            plan(&PERMISSION_RULES, &[EntityRef::by_id("")]).unwrap_err().starts_with("permissions.0.id: ")
        );
        let both = EntityRef { id: Some("perm_1".into()), name: Some("a".into()), ..EntityRef::by_name("a") };
        let p = plan(&PERMISSION_RULES, &[both]).unwrap();
        assert_eq!(p.pairs, vec![("permissions.0".to_string(), "perm_1".to_string(), "a".to_string())]);
        assert!(p.names.is_empty(), "an entry with an id is resolved by id");
    }

    #[test]
    fn entry_counts_are_bounded() {
        assert_eq!(plan_refs(&ROLE_RULES, &[], 1).unwrap_err().to_string(), "roles: needs at least 1 entry");
        let many: Vec<EntityRef> =
            (0..=MAX_REFS_PER_CALL).map(|i| EntityRef::by_name(format!("p{i}"))).collect();
        assert_eq!(plan(&PERMISSION_RULES, &many).unwrap_err(), "permissions: at most 1000 entries");
    }

    #[test]
    fn principals_hold_star_or_the_exact_string() {
        let p = Principal::new("rk".into(), "ws".into(), ["rbac.*.create_role".to_string()]);
        assert!(p.holds("rbac.*.create_role"));
        assert!(!p.holds("rbac.x.create_role"), "`*` inside a permission is not a pattern");
        assert!(!p.holds("rbac.*.create_permission"));
        let all = Principal::new("rk".into(), "ws".into(), ["*".to_string()]);
        assert!(all.holds("anything.at.all"));
    }
}
