//! The RBAC service, one file per resource: [`auth`] (root keys), [`apis`] (API objects),
//! [`keys`] (create, read, delete keys), [`key_links`] (their permissions and roles),
//! [`key_update`], [`verify`] (verification and its cache, the change
//! counters), [`identities`], [`entities`] (permissions and roles), [`overrides`] and
//! [`namespaces`] (rate limits), [`admin`] (bootstrap, workspaces), [`root_keys`], [`audit`],
//! [`vault`] (recoverable keys), [`events`] (key changes for
//! the webhook outbox), and [`links`], what the link operations share. This
//! file holds the service itself.

mod admin;
mod apis;
mod audit;
mod auth;
mod changes;
mod entities;
mod events;
mod identities;
mod key_import;
mod key_links;
mod key_update;
mod keys;
mod legacy;
mod links;
mod namespaces;
mod overrides;
mod root_keys;
mod vault;
mod verify;

pub use audit::{MAX_AUDIT_PAGE, PERM_READ_AUDIT};
pub use changes::{Changes, RECONCILE_MARGIN_MS};
pub use events::{CreditChange, KeyChange, KeyEvents};
pub use identities::MAX_IDENTITY_META_BYTES;
pub use key_import::MAX_MIGRATED_KEYS;
pub use keygate_domain::{
    MAX_LIMIT_DURATION_MS, MAX_LIMIT_NAME_CHARS, MAX_LIMIT_TOKENS, MAX_RATELIMITS, validate_ratelimits,
};
pub use keys::{key_summary, key_view};
pub use legacy::MAX_LEGACY_CANDIDATES;
pub use links::LinkMode;

use keygate_cache::verify::VerifyCache;
pub use keygate_cache::verify::{MAX_CACHED_KEY_BYTES, MAX_CACHED_UNKNOWN_KEYS};
pub use keygate_domain::root_permissions::{
    MAX_ROOT_KEY_PERMISSIONS, PERM_CREATE_ROOT_KEY, PERM_DELETE_ROOT_KEY, PERM_READ_ROOT_KEY,
    PERM_UPDATE_ROOT_KEY, permission_covers,
};
pub use root_keys::{MAX_ROOT_KEY_EXPIRES_MS, NewRootKey, RootKeyChange};
pub use vault::{PERM_DECRYPT_KEY, PERM_ENCRYPT_KEY, Rotated};
pub use verify::{Assumed, Checked, Snapshot, Unconfirmed, verification_read};

use crate::StorageError;
use crate::cache::{AuthCache, NamespaceCache, OverrideCache, RootKeyEntries};
use crate::counters::creation_shard;

use crate::store::{RbacStore, RbacTx};
use crate::{Key, RbacError};
use keygate_domain::Clock;
use std::collections::HashMap;
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

/// Where a key's live credit counter is kept apart from its row (`keygate-usage`'s
/// ledgers, registered with [`RbacService::with_credit_counters`]). A write that changes or
/// copies a key's credits holds the counter still around it, and reads of keys show the
/// counter's value.
pub trait CreditCounters: Send + Sync + std::fmt::Debug {
    /// Runs `write` (which changes or copies `key_id`'s credits in the database) with the
    /// key's counter held still: its spends committed first, none taken meanwhile, and the
    /// counter read from the database again after.
    fn hold(&self, key_id: &str, write: &mut dyn FnMut() -> Result<(), RbacError>) -> Result<(), RbacError>;
    /// Puts the live counters' values in place of the rows' in `keys`; a counter out of
    /// reach is an error (the row may lag it), not the row's value.
    fn overlay(&self, keys: &mut [&mut Key]) -> Result<(), RbacError>;
}

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
    /// Where this instance stands with other processes' counters (`changes`).
    counter_state: changes::CounterState,
    verify_cache: VerifyCache,
    /// With local counters: a cheap look at whether another process wrote the database,
    /// taken before a cached verification is trusted (`None`: the poll alone).
    probe: Option<crate::counters::Probe>,
    /// Where keys' live credit counters are kept apart from their rows, if anywhere.
    credit_counters: Option<Arc<dyn CreditCounters>>,
    /// The migration ids `keys.migrateKeys` accepts (`key_import`).
    migrations: crate::Migrations,
    /// Root keys' uses noted and not yet written (`root_keys`: id -> unix ms).
    root_key_uses: parking_lot::Mutex<HashMap<String, i64>>,
    /// The keyring recoverable keys are sealed with (`vault`); `None`: none configured.
    vault: Option<Arc<keygate_vault::Keyring>>,
    /// Told of every key change, in its transaction (`events`: the webhook outbox).
    key_events: Option<Arc<dyn KeyEvents>>,
    /// Old systems' hashes, checked on a legacy-migrated key's first use (`legacy`).
    legacy: Option<Arc<dyn crate::LegacyHashes>>,
    legacy_checks: std::sync::atomic::AtomicU64,
    /// The algorithm a namespace is created with (`namespaces`; API-v2.md §26).
    default_algorithm: keygate_domain::Algorithm,
}

impl<S: RbacStore> RbacService<S> {
    /// A service with the verification cache on and change counters in memory (right for
    /// one process, or several on one SQLite file with [`Self::poll_changes`] running).
    pub fn new(store: impl Into<Arc<S>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store: store.into(),
            clock,
            auth: AuthCache::for_root_keys(AUTH_CACHE_TTL_MS),
            namespaces: NamespaceCache::default(),
            overrides: OverrideCache::new(OVERRIDE_CACHE_TTL_MS),
            overrides_listener: None,
            counters: crate::counters::CounterSource::Local(Default::default()),
            counter_state: Default::default(),
            verify_cache: VerifyCache::new(true, MAX_CACHED_KEY_BYTES),
            probe: None,
            credit_counters: None,
            migrations: Default::default(),
            default_algorithm: Default::default(),
            root_key_uses: Default::default(),
            vault: None,
            key_events: None,
            legacy: None,
            legacy_checks: Default::default(),
        }
    }

    /// Where verifications read the change counters: `Store` or `Shared` when several
    /// instances share a PostgreSQL database.
    pub fn with_counter_source(mut self, source: crate::counters::CounterSource) -> Self {
        self.counters = source;
        self
    }

    /// Where the change counters are read (local ones: this process owns the database).
    pub fn counter_source(&self) -> &crate::counters::CounterSource {
        &self.counters
    }

    /// The migration ids `keys.migrateKeys` accepts besides the built-in schemes' names.
    pub fn with_migrations(mut self, migrations: crate::Migrations) -> Self {
        self.migrations = migrations;
        self
    }

    /// The algorithm namespaces are created with (`fixed` unless set); others keep theirs.
    pub fn with_default_algorithm(mut self, algorithm: keygate_domain::Algorithm) -> Self {
        self.default_algorithm = algorithm;
        self
    }

    /// Registers where keys' live credit counters are kept ([`CreditCounters`]).
    pub fn with_credit_counters(mut self, counters: Arc<dyn CreditCounters>) -> Self {
        self.credit_counters = Some(counters);
        self
    }

    /// [`Self::write`], with the key's credit counter held still around it (a write that
    /// changes or copies the key's credits).
    pub(crate) fn write_holding_credits<T>(
        &self,
        key_id: &str,
        f: impl FnOnce(&mut dyn RbacTx, &mut Changes) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let Some(counters) = &self.credit_counters else { return self.write(f) };
        let (mut f, mut out) = (Some(f), None);
        counters.hold(key_id, &mut || {
            let f = f.take().ok_or_else(|| StorageError::Internal("a held write ran twice".into()))?;
            out = Some(self.write(f)?);
            Ok(())
        })?;
        out.ok_or_else(|| StorageError::Internal("a held write did not run".into()).into())
    }

    /// Keys as the database holds them, with their live credit counters where those are
    /// ahead of the rows.
    pub(crate) fn live_credits(&self, keys: &mut [&mut Key]) -> Result<(), RbacError> {
        match &self.credit_counters {
            Some(counters) => counters.overlay(keys),
            None => Ok(()),
        }
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
    pub fn with_verify_cache(self, enabled: bool) -> Self {
        self.with_verify_cache_bytes(enabled, MAX_CACHED_KEY_BYTES)
    }

    /// [`Self::with_verify_cache`], the keys it holds weighing at most about `max_bytes`
    /// ([`MAX_CACHED_KEY_BYTES`] by default).
    pub fn with_verify_cache_bytes(mut self, enabled: bool, max_bytes: u64) -> Self {
        self.verify_cache = VerifyCache::new(enabled, max_bytes);
        self
    }

    /// Registers the one [`OverridesListener`].
    pub fn with_overrides_listener(mut self, listener: Arc<dyn OverridesListener>) -> Self {
        self.overrides_listener = Some(listener);
        self
    }

    /// A namespace's overrides or settings changed: drop this instance's copy, tell the
    /// listener.
    pub fn overrides_changed(&self, namespace_id: &str) {
        self.overrides.evict(namespace_id);
        if let Some(l) = &self.overrides_listener {
            l.overrides_changed(namespace_id);
        }
    }

    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::links::{LinkRules, PERMISSION_RULES, ROLE_RULES, RefPlan, plan_refs};
    use super::*;
    use crate::{EntityRef, Principal};

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
