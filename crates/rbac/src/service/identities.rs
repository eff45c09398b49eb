//! Identities (API-v2.md §11): customers of the workspace, named by the caller's
//! `externalId`, whose keys share their `meta` and rate limits (the limits' bounds, check
//! and stored form: `keygate_domain::limits`, the same for keys).

use super::changes::Changes;
use crate::perms::{PERM_CREATE_IDENTITY, PERM_DELETE_IDENTITY, PERM_READ_IDENTITY, PERM_UPDATE_IDENTITY};
use crate::{
    AuditEvent, Identity, IdentityView, LimitOwner, NewRateLimit, Page, Principal, RbacError, RbacService,
    RbacStore, RbacTx, Resource, Scope,
};
use keygate_domain::{
    AllowedIps, IdPrefix, MAX_NAME_CHARS, Patch, ValidationError, check_len, limit_configs, new_id,
    validate_external_id, validate_ratelimits,
};

/// Largest serialized `meta` of an identity.
pub const MAX_IDENTITY_META_BYTES: usize = 64 * 1024;
/// Above this many linked keys, a change of the identity ends the workspace's cached
/// verifications rather than each key's.
const KEYS_TOUCHED_ONE_BY_ONE: usize = 100;

/// `meta` of an identity: at most 64 KiB serialized.
fn check_meta(meta: &str) -> Result<(), ValidationError> {
    if meta.len() > MAX_IDENTITY_META_BYTES {
        let msg = format!("must be at most {MAX_IDENTITY_META_BYTES} bytes when serialized");
        return Err(ValidationError::new("meta", msg));
    }
    Ok(())
}

/// An identity by `externalId`, else by id, in the workspace.
fn find(tx: &mut dyn RbacTx, ws: &str, reference: &str) -> Result<Option<Identity>, RbacError> {
    if let Some(i) = tx.identity_by_external_id(ws, reference)? {
        return Ok(Some(i));
    }
    Ok(tx.identity_by_id(ws, reference)?)
}

/// The identity with its rate limits.
pub(super) fn identity_view(tx: &mut dyn RbacTx, identity: Identity) -> Result<IdentityView, RbacError> {
    let ratelimits = tx.ratelimits_of(LimitOwner::Identity(&identity.id))?;
    Ok(IdentityView { identity, ratelimits })
}

impl<S: RbacStore> RbacService<S> {
    /// `identities.createIdentity`: 409 when the `externalId` is taken.
    pub fn create_identity(
        &self,
        p: &Principal,
        external_id: &str,
        meta: Option<String>,
        ratelimits: &[NewRateLimit],
        allowed_ips: Option<AllowedIps>,
    ) -> Result<IdentityView, RbacError> {
        validate_external_id("externalId", external_id)?;
        if let Some(m) = &meta {
            check_meta(m)?;
        }
        validate_ratelimits("ratelimits", ratelimits)?;
        if !p.holds(PERM_CREATE_IDENTITY) {
            return Err(RbacError::missing(&[PERM_CREATE_IDENTITY]));
        }
        let now = self.now();
        let identity = Identity {
            id: new_id(IdPrefix::Identity),
            workspace_id: p.workspace_id.clone(),
            external_id: external_id.to_string(),
            meta,
            allowed_ips,
            created_at: now,
            updated_at: now,
        };
        self.write(|tx, _| {
            if !tx.insert_identity(&identity)? {
                let msg = format!("an identity with externalId {external_id} already exists");
                return Err(RbacError::Conflict(Resource::Identity, msg));
            }
            let limits = limit_configs(&[], ratelimits);
            tx.replace_ratelimits(&identity.workspace_id, LimitOwner::Identity(&identity.id), &limits, now)?;
            tx.insert_audit_events(&[identity_event(p, "identity.create", &identity.id, now)])?;
            identity_view(tx, identity.clone())
        })
    }

    /// `identities.getIdentity`: by `externalId` or id.
    pub fn get_identity(&self, p: &Principal, reference: &str) -> Result<IdentityView, RbacError> {
        check_len("identity", reference, MAX_NAME_CHARS)?;
        if !p.holds(PERM_READ_IDENTITY) {
            return Err(RbacError::missing(&[PERM_READ_IDENTITY]));
        }
        self.store.snapshot(|tx| {
            let found = find(tx, &p.workspace_id, reference)?;
            identity_view(tx, found.ok_or_else(|| RbacError::not_found(Resource::Identity, reference))?)
        })
    }

    /// `identities.listIdentities`: a page by `externalId` (those after `after`), keeping
    /// those whose id or externalId contains `search`.
    pub fn list_identities(
        &self,
        p: &Principal,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<IdentityView>, RbacError> {
        if !p.holds(PERM_READ_IDENTITY) {
            return Err(RbacError::missing(&[PERM_READ_IDENTITY]));
        }
        self.store.snapshot(|tx| {
            let rows = tx.identities_page(&p.workspace_id, search, after, limit + 1)?;
            let page = Page::keyset(rows, limit, |i| i.external_id.as_str());
            let items = page.items.into_iter().map(|i| identity_view(tx, i)).collect::<Result<_, _>>()?;
            Ok(Page { items, next: page.next })
        })
    }

    /// `identities.updateIdentity`: `meta` absent, cleared or set; `ratelimits` absent or
    /// replacing the whole set (cleared: none). Every key of the identity sees the change at
    /// its next verification.
    pub fn update_identity(
        &self,
        p: &Principal,
        reference: &str,
        meta: Patch<String>,
        ratelimits: Patch<Vec<NewRateLimit>>,
        allowed_ips: Patch<AllowedIps>,
    ) -> Result<IdentityView, RbacError> {
        check_len("identity", reference, MAX_NAME_CHARS)?;
        if let Patch::Set(m) = &meta {
            check_meta(m)?;
        }
        if let Patch::Set(limits) = &ratelimits {
            validate_ratelimits("ratelimits", limits)?;
        }
        if !p.holds(PERM_UPDATE_IDENTITY) {
            return Err(RbacError::missing(&[PERM_UPDATE_IDENTITY]));
        }
        let ws = p.workspace_id.as_str();
        let missing = || RbacError::not_found(Resource::Identity, reference);
        self.write(|tx, changes| {
            let found = find(tx, ws, reference)?.ok_or_else(missing)?;
            tx.lock_identity(ws, &found.id)?;
            let now = self.now();
            if meta.is_given() {
                tx.set_identity_meta(&found.id, meta.as_set().map(String::as_str), now)?;
            }
            if allowed_ips.is_given() {
                tx.set_identity_allowed_ips(&found.id, allowed_ips.as_set(), now)?;
            }
            if ratelimits.is_given() {
                let owner = LimitOwner::Identity(&found.id);
                let existing = tx.ratelimits_of(owner)?;
                let wanted = ratelimits.apply(None).unwrap_or_default();
                tx.replace_ratelimits(ws, owner, &limit_configs(&existing, &wanted), now)?;
            }
            let keys = tx.identity_key_ids(ws, &found.id)?;
            touch_keys(changes, ws, &keys);
            tx.insert_audit_events(&[identity_event(p, "identity.update", &found.id, now)])?;
            let updated = tx.identity_by_id(ws, &found.id)?.ok_or_else(missing)?;
            identity_view(tx, updated)
        })
    }

    /// `identities.deleteIdentity`: its keys are unlinked (they keep working, without the
    /// identity's meta or limits) and its limits deleted, in one transaction.
    pub fn delete_identity(&self, p: &Principal, reference: &str) -> Result<(), RbacError> {
        check_len("identity", reference, MAX_NAME_CHARS)?;
        if !p.holds(PERM_DELETE_IDENTITY) {
            return Err(RbacError::missing(&[PERM_DELETE_IDENTITY]));
        }
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            let missing = || RbacError::not_found(Resource::Identity, reference);
            let found = find(tx, ws, reference)?.ok_or_else(missing)?;
            tx.lock_identity(ws, &found.id)?;
            let keys = tx.unlink_identity_keys(ws, &found.id)?;
            touch_keys(changes, ws, &keys);
            tx.delete_identity(ws, &found.id)?;
            tx.insert_audit_events(&[identity_event(p, "identity.delete", &found.id, self.now())])?;
            Ok(())
        })
    }
}

/// The identity a new key names by `externalId`, in the key's transaction: the existing
/// one, or a new one without meta or limits, which needs `identity.*.create_identity`
/// (403 otherwise, and the transaction, key included, is rolled back).
pub(super) fn ensure_identity(
    tx: &mut dyn RbacTx,
    p: &Principal,
    external_id: &str,
    now: i64,
) -> Result<String, RbacError> {
    let ws = p.workspace_id.as_str();
    if let Some(found) = tx.identity_by_external_id(ws, external_id)? {
        tx.lock_identity(ws, &found.id)?;
        return Ok(found.id);
    }
    if !p.holds(PERM_CREATE_IDENTITY) {
        return Err(RbacError::missing(&[PERM_CREATE_IDENTITY]));
    }
    let identity = Identity {
        id: new_id(IdPrefix::Identity),
        workspace_id: ws.to_string(),
        external_id: external_id.to_string(),
        meta: None,
        allowed_ips: None,
        created_at: now,
        updated_at: now,
    };
    if tx.insert_identity(&identity)? {
        tx.insert_audit_events(&[identity_event(p, "identity.create", &identity.id, now)])?;
        return Ok(identity.id);
    }
    // Created meanwhile by another transaction.
    let found = tx.identity_by_external_id(ws, external_id)?;
    found.map(|i| i.id).ok_or_else(|| RbacError::not_found(Resource::Identity, external_id))
}

/// Ends the cached verifications of these keys: each key's counter, or the workspace's when
/// there are many.
fn touch_keys(changes: &mut Changes, ws: &str, keys: &[String]) {
    if keys.len() > KEYS_TOUCHED_ONE_BY_ONE {
        changes.touch(Scope::Workspace(ws));
    } else {
        for k in keys {
            changes.touch(Scope::Key(k));
        }
    }
}

pub(super) fn identity_event(p: &Principal, action: &'static str, id: &str, at: i64) -> AuditEvent {
    AuditEvent::new(&p.workspace_id, &p.root_key_id, action, "identity", id, at)
}
