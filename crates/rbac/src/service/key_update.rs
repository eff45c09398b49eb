//! `keys.updateKey` (API-v2.md §12.3): every part of a key changed in one transaction.

use crate::perms::PERM_UPDATE_KEY;
use crate::service::links::{Owner, PERMISSION_RULES, ROLE_RULES, plan_refs, resolve_links, write_links};
use crate::{
    ApiAccess, AuditEvent, EntityRef, LimitOwner, LinkMode, MAX_KEY_META_BYTES, Principal, RbacError,
    RbacService, RbacStore, Resource, Scope,
};
use keygate_domain::{
    IdPrefix, Patch, ValidationError, has_prefix, validate_display_name, validate_external_id,
    validate_key_id,
};

impl<S: RbacStore> RbacService<S> {
    /// `keys.updateKey` (API-v2.md §12.3): every field of `update` absent (unchanged),
    /// cleared or set; `roles` and `permissions` replace the key's (as `setRoles` and
    /// `setPermissions`). Every check (bounds, references, root-key permissions for every
    /// part) before any write, one transaction; the next verification on every instance
    /// sees it. The root key needs `update_key` for the key's API; with `permissions`, the
    /// rbac permissions of setPermissions; with `roles`, those of setRoles; with a new
    /// `externalId`, `identity.*.create_identity`.
    pub fn update_key(&self, p: &Principal, key_id: &str, update: crate::KeyUpdate) -> Result<(), RbacError> {
        validate_key_id("keyId", key_id)?;
        let crate::KeyUpdate {
            name,
            external_id,
            meta,
            expires,
            credits,
            ratelimits,
            enabled,
            roles,
            permissions,
            allowed_ips,
        } = update;
        if let Some(n) = name.as_set() {
            validate_display_name("name", n)?;
        }
        if let Some(e) = external_id.as_set() {
            validate_external_id("externalId", e)?;
        }
        if meta.as_set().is_some_and(|m| m.len() > MAX_KEY_META_BYTES) {
            let msg = format!("must be at most {MAX_KEY_META_BYTES} bytes when serialized");
            return Err(ValidationError::new("meta", msg).into());
        }
        if let Some(limits) = ratelimits.as_set() {
            keygate_domain::validate_ratelimits("ratelimits", limits)?;
        }
        let listed = |names: &[String], create: bool| -> Vec<EntityRef> {
            names.iter().map(|n| EntityRef::listed(n.clone(), create).or_id()).collect()
        };
        let permission_plan =
            permissions.as_ref().map(|p| plan_refs(&PERMISSION_RULES, &listed(p, true), 0)).transpose()?;
        let role_plan = roles.as_ref().map(|r| plan_refs(&ROLE_RULES, &listed(r, false), 0)).transpose()?;
        // The credits' own rules, before anything is read (an unlimited key's refill is
        // checked in the transaction).
        if let Patch::Set(c) = &credits
            && let Patch::Set(r) = &c.refill
        {
            crate::check_refill("credits.refill", r.clone())?;
        }

        // The permissions the call always needs, in some form.
        let access = ApiAccess::of(p, "update_key");
        let mut missing: Vec<&str> = Vec::new();
        if access.is_none() {
            missing.push(PERM_UPDATE_KEY);
        }
        if permission_plan.is_some() {
            missing.extend(
                [PERMISSION_RULES.link_permission, PERMISSION_RULES.unlink_permission]
                    .into_iter()
                    .filter(|n| !p.holds(n)),
            );
        }
        if role_plan.is_some() {
            missing.extend(
                [ROLE_RULES.link_permission, ROLE_RULES.unlink_permission]
                    .into_iter()
                    .filter(|n| !p.holds(n)),
            );
        }
        if !missing.is_empty() {
            return Err(RbacError::missing(&missing));
        }
        let access = access.ok_or_else(|| ApiAccess::denied("update_key", None))?;
        let ws = p.workspace_id.as_str();
        self.write_holding_credits(key_id, |tx, changes| {
            let not_found = || RbacError::not_found(Resource::Key, key_id);
            if !has_prefix(key_id, IdPrefix::Key) || !tx.lock_key(ws, key_id)? {
                return Err(not_found());
            }
            let mut key = tx.get_key(ws, key_id)?.ok_or_else(not_found)?;
            if !access.admits(key.api_id.as_deref()) {
                return Err(ApiAccess::denied("update_key", key.api_id.as_deref()));
            }
            changes.touch(Scope::Key(key_id));
            let now = self.now();
            // References, and the permissions that depend on them.
            let resolved_permissions = permission_plan
                .as_ref()
                .map(|plan| resolve_links(tx, ws, &PERMISSION_RULES, plan))
                .transpose()?;
            let resolved_roles =
                role_plan.as_ref().map(|plan| resolve_links(tx, ws, &ROLE_RULES, plan)).transpose()?;
            for resolved in resolved_permissions.iter().chain(resolved_roles.iter()) {
                resolved.authorize_creation(p)?;
            }
            let before = key.clone();
            let new_credits = crate::updated_credits(key.credits.clone(), credits)?;
            key.identity_id = match external_id {
                Patch::Absent => key.identity_id,
                Patch::Clear => None,
                Patch::Set(e) => Some(super::identities::ensure_identity(tx, p, &e, now)?),
            };
            // Every check passed: write.
            key.name = name.apply(key.name);
            key.meta = meta.apply(key.meta);
            key.expires = expires.apply(key.expires);
            key.allowed_ips = allowed_ips.apply(key.allowed_ips);
            key.enabled = enabled.unwrap_or(key.enabled);
            // The row's update time moves only when the call changes something (`{keyId}`
            // alone is a no-op).
            let changed = key != before
                || new_credits != key.credits
                || ratelimits.is_given()
                || resolved_permissions.is_some()
                || resolved_roles.is_some();
            if changed {
                tx.update_key(&key, now)?;
            }
            if new_credits != key.credits {
                tx.set_key_credits(key_id, new_credits.as_ref())?;
            }
            if ratelimits.is_given() {
                let owner = LimitOwner::Key(key_id);
                let existing = tx.ratelimits_of(owner)?;
                let wanted = ratelimits.apply(None).unwrap_or_default();
                tx.replace_ratelimits(ws, owner, &keygate_domain::limit_configs(&existing, &wanted), now)?;
            }
            let mut events = vec![AuditEvent::on_key(ws, &p.root_key_id, "key.update", key_id, now)];
            let owner = Owner::Key(key_id);
            for resolved in resolved_permissions.into_iter().chain(resolved_roles) {
                write_links(tx, p, owner, resolved, LinkMode::Replace, now, &mut events)?;
            }
            tx.insert_audit_events(&events)?;
            if changed {
                self.key_event(tx, ws, key_id, crate::KeyChange::Updated, now)?;
            }
            Ok(())
        })
    }
}
