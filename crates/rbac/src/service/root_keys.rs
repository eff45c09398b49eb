//! Root keys: made by the bootstrap and the admin CLI, and managed over the API and the
//! dashboard (`rootKeys.*`, API-v2.md §19). A root key grants only what it holds, gives
//! no child a longer life than its own, and cannot delete, disable or reroll itself, nor
//! change its own permissions.
//! Every change bumps the key's change counter: the next request on every instance sees it.

use crate::cache::RootKeyEntries;
use crate::{
    AuditEvent, Page, Principal, RbacError, RbacService, RbacStore, RbacTx, Resource, RootKey, Scope,
};
use keygate_domain::root_permissions::{
    PERM_CREATE_ROOT_KEY, PERM_DELETE_ROOT_KEY, PERM_READ_ROOT_KEY, PERM_UPDATE_ROOT_KEY,
    checked_permissions, permission_covers,
};
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, Patch, Secret, ValidationError, check_len, new_id, random_token,
    validate_display_name,
};

/// The latest expiry (or reroll `expiration`) accepted, in unix ms (2100-01-01).
pub const MAX_ROOT_KEY_EXPIRES_MS: i64 = 4_102_444_800_000;

/// `rootKeys.createKey`'s settings.
#[derive(Debug, Clone, Default)]
pub struct NewRootKey {
    pub name: Option<String>,
    pub permissions: Vec<String>,
    /// Unix ms; `None`: never.
    pub expires: Option<i64>,
}

/// `rootKeys.updateKey`'s changes: each absent field is unchanged.
#[derive(Debug, Clone, Default)]
pub struct RootKeyChange {
    pub name: Patch<String>,
    pub enabled: Option<bool>,
    /// Replaces the whole set.
    pub permissions: Option<Vec<String>>,
}

/// The permissions of `wanted` that `p` does not cover (a 403 names them).
fn uncovered<'a>(p: &Principal, wanted: &'a [String]) -> Vec<&'a str> {
    let held: Vec<&str> = p.permissions().collect();
    wanted.iter().filter(|w| !held.iter().any(|h| permission_covers(h, w))).map(String::as_str).collect()
}

/// A root key's last 4 characters (`end`).
fn last_chars(secret: &Secret) -> String {
    let chars: Vec<char> = secret.expose().chars().collect();
    chars[chars.len().saturating_sub(4)..].iter().collect()
}

impl<S: RbacStore> RbacService<S> {
    pub(super) fn insert_root_key(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        new: NewRootKey,
        secret: Option<Secret>,
    ) -> Result<(RootKey, Secret), RbacError> {
        let secret = secret.unwrap_or_else(|| Secret::new(random_token("kg_root")));
        check_len("rootKey", secret.expose(), 512)?;
        let rk = RootKey {
            id: new_id(IdPrefix::RootKey),
            workspace_id: workspace_id.to_string(),
            prefix: secret.visible_prefix(),
            end: last_chars(&secret),
            name: new.name,
            enabled: true,
            permissions: new.permissions,
            created_at: self.now(),
            expires_at: new.expires,
            last_used_at: None,
        };
        tx.insert_root_key(&rk, &secret.hash())?;
        Ok((rk, secret))
    }

    /// Creates a root key with the given permissions (zero allowed) in a workspace given
    /// by id or name (the admin CLI).
    pub fn create_root_key(
        &self,
        workspace: &str,
        permissions: &[String],
    ) -> Result<(RootKey, Secret), RbacError> {
        let permissions = checked_permissions(permissions, true)?;
        let ws = self.find_workspace(workspace)?;
        self.write(|tx, changes| {
            changes.touch(Scope::RootKeysCreated);
            self.insert_root_key(tx, &ws.id, NewRootKey { permissions, ..Default::default() }, None)
        })
    }

    /// Every root key of a workspace given by id or name (the admin CLI), by id.
    pub fn list_root_keys(&self, workspace: &str) -> Result<Vec<RootKey>, RbacError> {
        let ws = self.find_workspace(workspace)?;
        self.flush_root_key_uses();
        self.store.read(|tx| Ok(tx.root_keys_page(&ws.id, None, usize::MAX >> 1)?))
    }

    /// When the next root key of any workspace expires (unix ms): the soonest expiry ahead
    /// of the enabled, unrevoked root keys; `None` when none is set to expire (the
    /// `keygate_root_key_next_expiry_timestamp_seconds` metric and its alert).
    pub fn next_root_key_expiry(&self) -> Result<Option<i64>, RbacError> {
        let now = self.clock.now_ms() as i64;
        self.store.read(|tx| Ok(tx.next_root_key_expiry(now)?))
    }

    /// Revokes a root key by id, whatever its workspace (the admin CLI); this instance
    /// rejects it at once, the others at their next request.
    pub fn revoke_root_key(&self, id: &str) -> Result<(), RbacError> {
        let now = self.now();
        let revoked = self.write(|tx, changes| {
            changes.touch(Scope::RootKey(id));
            Ok(tx.revoke_root_key(id, now)?)
        })?;
        self.auth.evict_root_key(id);
        if revoked { Ok(()) } else { Err(RbacError::not_found(Resource::RootKey, id)) }
    }

    /// `rootKeys.createKey`: a root key of the caller's workspace holding only permissions
    /// the caller covers, expiring no later than the caller.
    pub fn create_root_key_for(
        &self,
        p: &Principal,
        new: NewRootKey,
    ) -> Result<(RootKey, Secret), RbacError> {
        let permissions = checked_permissions(&new.permissions, false)?;
        if let Some(name) = &new.name {
            validate_display_name("name", name)?;
        }
        let now = self.now();
        if let Some(e) = new.expires
            && (e <= now || e > MAX_ROOT_KEY_EXPIRES_MS)
        {
            return Err(ValidationError::new(
                "expires",
                "must be a time in the future (unix ms, before 2100)",
            )
            .into());
        }
        if !p.holds(PERM_CREATE_ROOT_KEY) {
            return Err(RbacError::missing(&[PERM_CREATE_ROOT_KEY]));
        }
        self.check_grant(p, &permissions)?;
        let new = NewRootKey { permissions, ..new };
        self.write(|tx, changes| {
            changes.touch(Scope::RootKeysCreated);
            check_lifetime(tx, p, new.expires, "expires")?;
            let (rk, secret) = self.insert_root_key(tx, &p.workspace_id, new, None)?;
            tx.insert_audit_events(&[self.root_key_event(p, "rootkey.create", &rk.id)])?;
            Ok((rk, secret))
        })
    }

    /// `rootKeys.listKeys`: a page of the caller's workspace's root keys, by id.
    pub fn root_keys_page(
        &self,
        p: &Principal,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<RootKey>, RbacError> {
        if !p.holds(PERM_READ_ROOT_KEY) {
            return Err(RbacError::missing(&[PERM_READ_ROOT_KEY]));
        }
        // This instance's recent uses first, so that the caller's own is in the page.
        self.flush_root_key_uses();
        let rows = self.store.read(|tx| Ok(tx.root_keys_page(&p.workspace_id, after, limit + 1)?))?;
        Ok(Page::keyset(rows, limit, |k| k.id.as_str()))
    }

    /// A root key of the caller's workspace (the dashboard's pages).
    pub fn get_root_key(&self, p: &Principal, id: &str) -> Result<RootKey, RbacError> {
        if !p.holds(PERM_READ_ROOT_KEY) {
            return Err(RbacError::missing(&[PERM_READ_ROOT_KEY]));
        }
        self.store.read(|tx| find_root_key(tx, p, id))
    }

    /// `rootKeys.updateKey`: name, enabled flag, permissions (replaced: 1 to 1000, each one
    /// covered by the caller). A root key cannot disable itself or change its own permissions.
    pub fn update_root_key(&self, p: &Principal, id: &str, change: RootKeyChange) -> Result<(), RbacError> {
        check_len("keyId", id, MAX_NAME_CHARS)?;
        if let Patch::Set(name) = &change.name {
            validate_display_name("name", name)?;
        }
        let permissions =
            change.permissions.as_deref().map(|ps| checked_permissions(ps, false)).transpose()?;
        if !p.holds(PERM_UPDATE_ROOT_KEY) {
            return Err(RbacError::missing(&[PERM_UPDATE_ROOT_KEY]));
        }
        // A key cannot lock itself out: not disabled, nor its permissions changed, by itself.
        if id == p.root_key_id {
            if change.enabled == Some(false) {
                return Err(ValidationError::new("enabled", "a root key cannot disable itself").into());
            }
            if permissions.is_some() {
                return Err(ValidationError::new(
                    "permissions",
                    "a root key cannot change its own permissions",
                )
                .into());
            }
        }
        self.write(|tx, changes| {
            changes.touch(Scope::RootKey(id));
            let mut rk = find_root_key(tx, p, id)?;
            if let Some(ps) = permissions {
                self.check_grant(p, &ps)?;
                rk.permissions = ps;
            }
            match change.name {
                Patch::Absent => {}
                Patch::Clear => rk.name = None,
                Patch::Set(name) => rk.name = Some(name),
            }
            rk.enabled = change.enabled.unwrap_or(rk.enabled);
            tx.update_root_key(&rk)?;
            tx.insert_audit_events(&[self.root_key_event(p, "rootkey.update", id)])?;
            Ok(())
        })?;
        self.auth.evict_root_key(id);
        Ok(())
    }

    /// `rootKeys.rerollKey`: a new root key with the old one's name, permissions, enabled
    /// flag and expiry (the caller must cover them, as for a new one); the old one then
    /// expires `expiration` ms from now (`None`: unchanged). Not the caller itself.
    pub fn reroll_root_key(
        &self,
        p: &Principal,
        id: &str,
        expiration: Option<i64>,
    ) -> Result<(RootKey, Secret), RbacError> {
        check_len("keyId", id, MAX_NAME_CHARS)?;
        if let Some(ms) = expiration
            && !(0..=MAX_ROOT_KEY_EXPIRES_MS).contains(&ms)
        {
            return Err(ValidationError::new(
                "expiration",
                format!("must be 0 to {MAX_ROOT_KEY_EXPIRES_MS}"),
            )
            .into());
        }
        let missing: Vec<&str> =
            [PERM_CREATE_ROOT_KEY, PERM_UPDATE_ROOT_KEY].into_iter().filter(|x| !p.holds(x)).collect();
        if !missing.is_empty() {
            return Err(RbacError::missing(&missing));
        }
        if id == p.root_key_id {
            return Err(ValidationError::new("keyId", "a root key cannot reroll itself").into());
        }
        let now = self.now();
        let rerolled = self.write(|tx, changes| {
            changes.touch(Scope::RootKey(id));
            changes.touch(Scope::RootKeysCreated);
            let mut old = find_root_key(tx, p, id)?;
            self.check_grant(p, &old.permissions)?;
            check_lifetime(tx, p, old.expires_at, "keyId")?;
            let new = NewRootKey {
                name: old.name.clone(),
                permissions: old.permissions.clone(),
                expires: old.expires_at,
            };
            let (mut rk, secret) = self.insert_root_key(tx, &p.workspace_id, new, None)?;
            if !old.enabled {
                rk.enabled = false;
                tx.update_root_key(&rk)?;
            }
            if let Some(ms) = expiration {
                old.expires_at = Some(now.saturating_add(ms));
                tx.update_root_key(&old)?;
            }
            tx.insert_audit_events(&[self.root_key_event(p, "rootkey.reroll", id)])?;
            Ok((rk, secret))
        })?;
        self.auth.evict_root_key(id);
        Ok(rerolled)
    }

    /// `rootKeys.deleteKey`: the key is refused from the next request on. Not the caller.
    pub fn delete_root_key(&self, p: &Principal, id: &str) -> Result<(), RbacError> {
        check_len("keyId", id, MAX_NAME_CHARS)?;
        if !p.holds(PERM_DELETE_ROOT_KEY) {
            return Err(RbacError::missing(&[PERM_DELETE_ROOT_KEY]));
        }
        if id == p.root_key_id {
            return Err(ValidationError::new("keyId", "a root key cannot delete itself").into());
        }
        let now = self.now();
        self.write(|tx, changes| {
            changes.touch(Scope::RootKey(id));
            find_root_key(tx, p, id)?;
            tx.revoke_root_key(id, now)?;
            tx.insert_audit_events(&[self.root_key_event(p, "rootkey.delete", id)])?;
            Ok(())
        })?;
        self.auth.evict_root_key(id);
        Ok(())
    }

    /// 403 naming the permissions of `wanted` the caller does not cover.
    fn check_grant(&self, p: &Principal, wanted: &[String]) -> Result<(), RbacError> {
        let lacking = uncovered(p, wanted);
        if lacking.is_empty() {
            return Ok(());
        }
        Err(RbacError::InsufficientPermissions(format!(
            "a root key can only grant permissions it holds; it lacks {}",
            lacking.join(", ")
        )))
    }

    fn root_key_event(&self, p: &Principal, action: &'static str, id: &str) -> AuditEvent {
        AuditEvent::new(&p.workspace_id, &p.root_key_id, action, "rootKey", id, self.now())
    }

    /// Notes that `p` authenticated a request now (`monotonic_ms`, the caller's reading of
    /// the monotonic clock): at most once a minute per key and instance, a lock-free check
    /// otherwise (the wall clock is read only then). Written by
    /// [`Self::flush_root_key_uses`].
    pub(super) fn note_root_key_use(&self, p: &Principal, monotonic_ms: u64) {
        if p.take_use(monotonic_ms) {
            let now = self.now();
            let mut uses = self.root_key_uses.lock();
            let at = uses.entry(p.root_key_id.clone()).or_insert(now);
            *at = (*at).max(now);
        }
    }

    /// Writes the root keys' uses noted since the last call (`lastUsedAt`); what cannot be
    /// written now stays for the next call (at most one entry per root key).
    pub fn flush_root_key_uses(&self) {
        let uses = std::mem::take(&mut *self.root_key_uses.lock());
        if uses.is_empty() {
            return;
        }
        let written = self.store.transaction(|tx| {
            for (id, at) in &uses {
                tx.note_root_key_use(id, *at)?;
            }
            Ok(())
        });
        if let Err(e) = written {
            log::debug!("root keys: writing when they were last used failed (kept for the next try): {e}");
            let mut pending = self.root_key_uses.lock();
            for (id, at) in uses {
                let kept = pending.entry(id).or_insert(at);
                *kept = (*kept).max(at);
            }
        }
    }
}

/// A root key of the caller's workspace, or 404.
fn find_root_key(tx: &mut dyn RbacTx, p: &Principal, id: &str) -> Result<RootKey, RbacError> {
    tx.root_key_by_id(id)?
        .filter(|rk| rk.workspace_id == p.workspace_id)
        .ok_or_else(|| RbacError::not_found(Resource::RootKey, id))
}

/// An expiring caller gives no key a later expiry than its own (400 on `field`).
fn check_lifetime(
    tx: &mut dyn RbacTx,
    p: &Principal,
    expires: Option<i64>,
    field: &str,
) -> Result<(), RbacError> {
    let Some(own) = tx.root_key_by_id(&p.root_key_id)?.and_then(|rk| rk.expires_at) else { return Ok(()) };
    match expires {
        Some(e) if e <= own => Ok(()),
        _ => Err(ValidationError::new(
            field,
            format!("the calling root key expires at {own}: the new key must expire no later"),
        )
        .into()),
    }
}
