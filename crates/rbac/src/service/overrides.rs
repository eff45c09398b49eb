//! Rate-limit overrides: set, read, list, delete, and the cached sets the hot path reads.

use crate::cache::OverrideEntries;
use crate::{
    Cached, Effective, MAX_OVERRIDES_PER_NAMESPACE, MAX_PATTERN_BYTES_PER_NAMESPACE, NamespaceRef, Override,
    OverrideSet, Page, Principal, RbacError, RbacService, RbacStore, RbacTx, Resource, is_pattern,
    validate_pattern,
};
use keygate_domain::{IdPrefix, Named, check_len, has_prefix, new_id};
use keygate_ratelimit::Algorithm;
use std::sync::Arc;

impl<S: RbacStore> RbacService<S> {
    /// The override for `identifier` in the namespace and the epoch it was loaded under, from
    /// the cache only: `Some` with `(found, epoch)`, or `None` when the store must be asked
    /// ([`Self::load_overrides`]). Never blocks on I/O. When the answer says `refresh`, the
    /// caller should call [`Self::refresh_overrides`] off the request path.
    pub fn override_cached(
        &self,
        namespace_id: &str,
        identifier: &str,
    ) -> Option<Cached<(Option<Effective>, u64, Algorithm)>> {
        self.overrides.find(namespace_id, identifier, self.clock.monotonic_ms())
    }

    /// The namespace's overrides, read under `epoch` or a later one: from the cache when a
    /// caller that missed at the same time has just loaded them, else from the store (and
    /// into the cache). `epoch` is the namespace's overrides epoch in the shared rate-limit
    /// store (0 without one), read *before* this call: a change committed after that read
    /// bumps the epoch after its commit, so a decision made with this set under this epoch
    /// is refused as stale.
    pub fn load_overrides(&self, namespace_id: &str, epoch: u64) -> Result<Arc<OverrideSet>, RbacError> {
        let _loading = self.overrides.load_lock(namespace_id);
        let cached = self
            .overrides
            .peek(namespace_id, self.clock.monotonic_ms(), |(set, at)| (*at >= epoch).then(|| set.clone()));
        match cached.flatten() {
            Some(set) => Ok(set),
            None => self.read_overrides(namespace_id, epoch),
        }
    }

    /// Reads the namespace's overrides again, for [`Self::override_cached`]'s `refresh`
    /// (`epoch` as in [`Self::load_overrides`]).
    pub fn refresh_overrides(&self, namespace_id: &str, epoch: u64) -> Result<(), RbacError> {
        let _loading = self.overrides.load_lock(namespace_id);
        self.read_overrides(namespace_id, epoch).map(drop)
    }

    pub(super) fn read_overrides(
        &self,
        namespace_id: &str,
        epoch: u64,
    ) -> Result<Arc<OverrideSet>, RbacError> {
        let generation = self.overrides.generation();
        let now = self.clock.monotonic_ms();
        let (overrides, algorithm) =
            self.store.read(|tx| Ok((tx.overrides(namespace_id)?, tx.namespace_algorithm(namespace_id)?)))?;
        let algorithm = Algorithm::parse(&algorithm).unwrap_or_default();
        let set = Arc::new(OverrideSet::new(overrides).under(algorithm));
        self.overrides.put(namespace_id.into(), (set.clone(), epoch), now, generation);
        Ok(set)
    }

    /// Resolves a namespace named by id or name (404 when missing) and checks the caller
    /// holds `ratelimit.*.<action>` or `ratelimit.<namespaceId>.<action>` (403).
    pub(super) fn override_namespace(
        &self,
        tx: &mut dyn RbacTx,
        p: &Principal,
        ns: &NamespaceRef,
        action: &str,
    ) -> Result<Named, RbacError> {
        let ws = p.workspace_id.as_str();
        let found = match (&ns.id, &ns.name) {
            (Some(id), name) => {
                let found =
                    if has_prefix(id, IdPrefix::Namespace) { tx.namespace_by_id(ws, id)? } else { None };
                let found = found.ok_or_else(|| RbacError::not_found(Resource::Namespace, id))?;
                if let Some(name) = name
                    && *name != found.name
                {
                    return Err(RbacError::BadRequest(format!(
                        "namespaceName: namespace {id} is named {:?}, not {name:?}",
                        found.name
                    )));
                }
                found
            }
            // A name, else (v2's `namespace` takes both) the id of a namespace.
            (None, Some(name)) => match tx.namespace_by_name(ws, name)? {
                Some(found) => found,
                None if has_prefix(name, IdPrefix::Namespace) => tx
                    .namespace_by_id(ws, name)?
                    .ok_or_else(|| RbacError::not_found(Resource::Namespace, name))?,
                None => return Err(RbacError::not_found(Resource::Namespace, name)),
            },
            (None, None) => {
                // validate() refuses this case; the same 400 if a caller skipped it.
                ns.validate()?;
                return Err(RbacError::BadRequest("namespaceId: is required".into()));
            }
        };
        let any = format!("ratelimit.*.{action}");
        if !p.holds(&any) && !p.holds(&format!("ratelimit.{}.{action}", found.id)) {
            return Err(RbacError::missing(&[any.as_str()]));
        }
        Ok(found)
    }

    /// The early 403: the caller holds the action for all namespaces or for some.
    pub(super) fn check_override_any(&self, p: &Principal, action: &str) -> Result<(), RbacError> {
        let any = format!("ratelimit.*.{action}");
        let suffix = format!(".{action}");
        if p.holds(&any) || p.permissions().any(|x| x.starts_with("ratelimit.") && x.ends_with(&suffix)) {
            Ok(())
        } else {
            Err(RbacError::missing(&[any.as_str()]))
        }
    }

    /// `ratelimits.setOverride`: creates or updates the override of `identifier` (a pattern
    /// when it contains `*`); returns it.
    pub fn set_override(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        identifier: &str,
        limit: u64,
        duration: u64,
        is_async: bool,
    ) -> Result<Override, RbacError> {
        ns.validate()?;
        check_len("identifier", identifier, keygate_domain::MAX_IDENTIFIER_CHARS)?;
        validate_pattern(identifier)?;
        self.check_override_any(p, "set_override")?;
        let ws = p.workspace_id.as_str();
        let stored = self.store.transaction(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "set_override")?;
            tx.lock_namespace(&namespace.id)?;
            let existing = tx.overrides(&namespace.id)?;
            if existing.len() >= MAX_OVERRIDES_PER_NAMESPACE
                && !existing.iter().any(|o| o.identifier == identifier)
            {
                return Err(RbacError::BadRequest(format!(
                    "identifier: namespace {} already has {MAX_OVERRIDES_PER_NAMESPACE} overrides",
                    namespace.name
                )));
            }
            if is_pattern(identifier) {
                let others: usize = existing
                    .iter()
                    .filter(|o| is_pattern(&o.identifier) && o.identifier != identifier)
                    .map(|o| o.identifier.len())
                    .sum();
                if others + identifier.len() > MAX_PATTERN_BYTES_PER_NAMESPACE {
                    return Err(RbacError::BadRequest(format!(
                        "identifier: the patterns of namespace {} may hold at most \
                         {MAX_PATTERN_BYTES_PER_NAMESPACE} bytes together ({others} in use)",
                        namespace.name
                    )));
                }
            }
            let fresh = Override {
                id: new_id(IdPrefix::Override),
                namespace_id: namespace.id.clone(),
                identifier: identifier.to_string(),
                limit,
                duration,
                is_async,
                seq: 0,
            };
            let now = self.now();
            let stored = tx.upsert_override(ws, &fresh, now)?;
            tx.insert_audit_events(&[Self::workspace_event(
                p,
                "ratelimit_override.set",
                "ratelimit_override",
                &stored.id,
                now,
            )])?;
            Ok(stored)
        })?;
        self.overrides_changed(&stored.namespace_id);
        Ok(stored)
    }

    /// `ratelimits.getOverride`: the override of exactly `identifier` (404 otherwise).
    pub fn get_override(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        identifier: &str,
    ) -> Result<Override, RbacError> {
        ns.validate()?;
        check_len("identifier", identifier, keygate_domain::MAX_IDENTIFIER_CHARS)?;
        self.check_override_any(p, "read_override")?;
        self.store.read(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "read_override")?;
            tx.overrides(&namespace.id)?
                .into_iter()
                .find(|o| o.identifier == identifier)
                .ok_or_else(|| RbacError::not_found(Resource::Override, identifier))
        })
    }

    /// `ratelimits.listOverrides`: every override of the namespace, oldest first.
    pub fn list_overrides(&self, p: &Principal, ns: &NamespaceRef) -> Result<Vec<Override>, RbacError> {
        ns.validate()?;
        self.check_override_any(p, "read_override")?;
        self.store.read(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "read_override")?;
            Ok(tx.overrides(&namespace.id)?)
        })
    }

    /// v2's `listOverrides`: a page of the namespace's overrides, by identifier (one keyset
    /// query, as [`Self::list_page`]).
    pub fn list_overrides_page(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Override>, RbacError> {
        ns.validate()?;
        self.check_override_any(p, "read_override")?;
        self.store.read(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "read_override")?;
            let rows = tx.overrides_page(&namespace.id, after, limit.saturating_add(1))?;
            Ok(Page::keyset(rows, limit, |o| o.identifier.as_str()))
        })
    }

    /// `ratelimits.deleteOverride`: deletes the override of exactly `identifier`.
    pub fn delete_override(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        identifier: &str,
    ) -> Result<(), RbacError> {
        ns.validate()?;
        check_len("identifier", identifier, keygate_domain::MAX_IDENTIFIER_CHARS)?;
        self.check_override_any(p, "delete_override")?;
        let namespace_id = self.store.transaction(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "delete_override")?;
            tx.lock_namespace(&namespace.id)?;
            let Some(id) = tx.delete_override(&namespace.id, identifier)? else {
                return Err(RbacError::not_found(Resource::Override, identifier));
            };
            let now = self.now();
            tx.insert_audit_events(&[Self::workspace_event(
                p,
                "ratelimit_override.delete",
                "ratelimit_override",
                &id,
                now,
            )])?;
            Ok(namespace.id)
        })?;
        self.overrides_changed(&namespace_id);
        Ok(())
    }
}
