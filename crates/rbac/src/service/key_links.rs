//! A key's permissions and roles: set, add and remove them (v1's references, v2's plain
//! strings); the rules and steps they share with a role's permissions are in [`super::links`].

use crate::perms::PERM_UPDATE_KEY;
use crate::service::links::{
    LinkCall, LinkRules, Owner, PERMISSION_RULES, ROLE_RULES, describe, never_create, plan_refs,
    resolve_links, rules_of, write_links,
};
use crate::{
    ApiAccess, EntityKind, EntityRef, LinkMode, Principal, RbacError, RbacService, RbacStore, RbacTx,
    Resource, RoleView,
};
use keygate_domain::{MAX_NAME_CHARS, Named, check_len, validate_key_id};

impl<S: RbacStore> RbacService<S> {
    /// `keys.setPermissions`: the key's direct permissions become exactly `refs`.
    pub fn set_permissions(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links(p, key_id, refs, &PERMISSION_RULES, LinkMode::Replace, 0)
    }

    /// `keys.addRoles`: attaches `refs` (at least one) and keeps the key's other roles.
    pub fn add_roles(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links(p, key_id, refs, &ROLE_RULES, LinkMode::Add, 1)
    }

    /// `keys.addPermissions`: attaches `refs` (at least one; missing names are created as in
    /// setPermissions) and keeps the key's other permissions.
    pub fn add_permissions(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links(p, key_id, refs, &PERMISSION_RULES, LinkMode::Add, 1)
    }

    /// `keys.removePermissions`: detaches `refs` (at least one; each must exist); returns the
    /// permissions still attached.
    pub fn remove_permissions(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links(p, key_id, &never_create(refs), &PERMISSION_RULES, LinkMode::Remove, 1)
    }

    /// `keys.setRoles`: the key's roles become exactly `refs` (new names need `create: true`).
    pub fn set_roles(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links(p, key_id, refs, &ROLE_RULES, LinkMode::Replace, 0)
    }

    /// `keys.removeRoles`: detaches `refs` (at least one; each must exist); returns the roles
    /// still attached.
    pub fn remove_roles(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links(p, key_id, &never_create(refs), &ROLE_RULES, LinkMode::Remove, 1)
    }

    pub(super) fn change_links(
        &self,
        p: &Principal,
        key_id: &str,
        refs: &[EntityRef],
        rules: &'static LinkRules,
        mode: LinkMode,
        min_entries: usize,
    ) -> Result<Vec<Named>, RbacError> {
        validate_key_id("keyId", key_id)?;
        let call = LinkCall { rules, mode, refs, min_entries, v2: false };
        self.change_links_of(p, Owner::Key(key_id), call, |_, links| Ok(links))
    }

    /// v2's key calls (API-v2.md §3): `refs` are plain strings, each a slug (a role's name)
    /// or an id; unknown permission slugs are created, roles never. The root key needs
    /// `update_key` for the key's `apiId` besides the rbac permissions, both of them for a
    /// `Replace`. Answers every permission or role now on the key, in detail.
    pub fn change_key_links(
        &self,
        p: &Principal,
        key_id: &str,
        kind: EntityKind,
        mode: LinkMode,
        refs: &[String],
    ) -> Result<Vec<RoleView>, RbacError> {
        validate_key_id("keyId", key_id)?;
        let create = kind == EntityKind::Permission && mode != LinkMode::Remove;
        let refs: Vec<EntityRef> =
            refs.iter().map(|r| EntityRef::listed(r.clone(), create).or_id()).collect();
        let min_entries = if mode == LinkMode::Replace { 0 } else { 1 };
        let call = LinkCall { rules: rules_of(kind), mode, refs: &refs, min_entries, v2: true };
        let ws = p.workspace_id.clone();
        self.change_links_of(p, Owner::Key(key_id), call, |tx, links| describe(tx, kind, &ws, links))
    }

    /// Changes the links of a key or role: validates, authorizes, resolves, then writes
    /// them with their audit events in one transaction; `finish` reads the answer in it.
    pub(super) fn change_links_of<T>(
        &self,
        p: &Principal,
        owner: Owner<'_>,
        call: LinkCall<'_>,
        finish: impl FnOnce(&mut dyn RbacTx, Vec<Named>) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let LinkCall { rules, mode, refs, min_entries, v2 } = call;
        check_len(owner.id_field(), owner.value(), MAX_NAME_CHARS)?;
        let plan = plan_refs(rules, refs, min_entries)?;
        // The permissions the call always needs (v2: a key's `update_key` in some form).
        let key_access = match (v2, owner) {
            (true, Owner::Key(_)) => Some(ApiAccess::of(p, "update_key")),
            _ => None,
        };
        let mut missing: Vec<&str> = Vec::new();
        if key_access.as_ref().is_some_and(Option::is_none) {
            missing.push(PERM_UPDATE_KEY);
        }
        let mut needed = vec![mode.required(rules)];
        if v2 && mode == LinkMode::Replace {
            needed.push(rules.unlink_permission);
        }
        missing.extend(needed.into_iter().filter(|n| !p.holds(n)));
        if !missing.is_empty() {
            return Err(RbacError::missing(&missing));
        }
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            let now = self.now();
            changes.touch(owner.counter(ws));
            let Some(owner_id) = owner.lock(tx, ws)? else {
                return Err(RbacError::not_found(owner.resource(), owner.value()));
            };
            let owner = owner.with_id(&owner_id);
            let resolved = resolve_links(tx, ws, rules, &plan)?;
            // The permissions that depend on what was resolved.
            if let (Some(Some(access)), Owner::Key(id)) = (&key_access, owner) {
                let key = tx.get_key(ws, id)?.ok_or_else(|| RbacError::not_found(Resource::Key, id))?;
                if !access.admits(key.api_id.as_deref()) {
                    return Err(ApiAccess::denied("update_key", key.api_id.as_deref()));
                }
            }
            resolved.authorize_creation(p)?;
            // Every check passed: write.
            let mut events = Vec::new();
            let result = write_links(tx, p, owner, resolved, mode, now, &mut events)?;
            if !events.is_empty() {
                tx.insert_audit_events(&events)?;
                if let Owner::Key(key_id) = owner {
                    self.key_event(tx, ws, key_id, crate::KeyChange::Updated, now)?;
                }
            }
            finish(tx, result)
        })
    }
}
