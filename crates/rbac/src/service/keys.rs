//! Keys: create (and reroll), read and delete them. Their links are [`super::key_links`],
//! an update [`super::key_update`], verification [`super::verify`].

use crate::perms::{PERM_CREATE_KEY, PERM_READ_KEY, PERM_UPDATE_KEY};
use crate::service::creation_shard;
use crate::service::links::{Owner, PERMISSION_RULES, ROLE_RULES, plan_refs, resolve_links, write_links};
use crate::{
    ApiAccess, AuditEvent, EntityKind, EntityRef, Key, KeyChange, KeyLookup, KeySummary, KeyView, LimitOwner,
    LinkMode, MAX_KEY_META_BYTES, MAX_KEY_PREFIX_CHARS, MAX_V2_KEY_PREFIX_CHARS, MAX_VERIFY_KEY_CHARS,
    NewKey, Principal, RateLimitConfig, RbacError, RbacService, RbacStore, RbacTx, Resource, Scope,
    StorageError,
};
use keygate_domain::checksum::{checksum_token, plain_token};
use keygate_domain::{
    IdPrefix, KeyFormat, MAX_NAME_CHARS, Secret, ValidationError, check_len, has_prefix, hash_secret, new_id,
    random_token, secret_digest, sort_by_name, validate_display_name, validate_external_id, validate_key_id,
};

impl<S: RbacStore> RbacService<S> {
    /// `keys.getKey`: the key with its direct permissions and its roles, sorted by name.
    pub fn get_key(&self, p: &Principal, key_id: &str) -> Result<KeyView, RbacError> {
        validate_key_id("keyId", key_id)?;
        if !p.holds(PERM_READ_KEY) {
            return Err(RbacError::missing(&[PERM_READ_KEY]));
        }
        let not_found = || RbacError::not_found(Resource::Key, key_id);
        if !has_prefix(key_id, IdPrefix::Key) {
            return Err(not_found());
        }
        self.store.snapshot(|tx| {
            let mut key = tx.get_key(&p.workspace_id, key_id)?.ok_or_else(not_found)?;
            self.live_credits(&mut [&mut key])?;
            key_view(tx, key)
        })
    }

    /// Creates a key in a workspace (the admin CLI: no root key involved); returns it and
    /// its secret (shown once).
    pub fn create_key(&self, workspace_id: &str, name: Option<String>) -> Result<(Key, Secret), RbacError> {
        if let Some(n) = &name {
            validate_display_name("name", n)?;
        }
        let (key, secret) =
            self.new_key(workspace_id, NewKey { name, ..NewKey::default() }, KeyFormat::Plain);
        self.write(|tx, changes| {
            changes.touch(Scope::KeysCreated(creation_shard(&secret_digest(secret.expose()))));
            Ok(tx.insert_key(&key, &secret.hash())?)
        })?;
        Ok((key, secret))
    }

    /// `keys.createKey`: creates a key in the caller's workspace with its permissions
    /// (missing names created) and roles (which must exist), all in one transaction.
    pub fn create_key_as(&self, p: &Principal, new: NewKey) -> Result<(Key, Secret), RbacError> {
        // The body: shape and bounds.
        if let Some(api_id) = &new.api_id {
            check_len("apiId", api_id, MAX_NAME_CHARS)?;
        }
        if let Some(n) = &new.name {
            validate_display_name("name", n)?;
        }
        if let Some(prefix) = &new.prefix {
            let max = if new.byte_length.is_some() { MAX_V2_KEY_PREFIX_CHARS } else { MAX_KEY_PREFIX_CHARS };
            check_len("prefix", prefix, max)?;
            if !prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ValidationError::new("prefix", "use only A-Z a-z 0-9 and _").into());
            }
        }
        if new.meta.as_ref().is_some_and(|m| m.len() > MAX_KEY_META_BYTES) {
            let msg = format!("must be at most {MAX_KEY_META_BYTES} bytes when serialized");
            return Err(ValidationError::new("meta", msg).into());
        }
        if let Some(external_id) = &new.external_id {
            validate_external_id("externalId", external_id)?;
        }
        keygate_domain::validate_ratelimits("ratelimits", &new.ratelimits)?;
        // A past `expires` is accepted (as in Unkey's v2 API, over the same data): the key
        // then verifies EXPIRED.
        // v2 (`byte_length` set): a role may be named by its id too.
        let v2 = new.byte_length.is_some();
        let by_name = |names: &[String], create: bool| -> Vec<EntityRef> {
            let entry =
                |n: &String| EntityRef { or_id: v2 && !create, ..EntityRef::listed(n.clone(), create) };
            names.iter().map(entry).collect()
        };
        let permission_plan = plan_refs(&PERMISSION_RULES, &by_name(&new.permissions, true), 0)?;
        let role_plan = plan_refs(&ROLE_RULES, &by_name(&new.roles, false), 0)?;

        // The permissions the request always needs.
        let scoped = new.api_id.as_ref().map(|id| format!("api.{id}.create_key"));
        let mut missing = Vec::new();
        if !p.holds(PERM_CREATE_KEY) && !scoped.as_deref().is_some_and(|s| p.holds(s)) {
            missing.push(PERM_CREATE_KEY);
        }
        // v1 also needs the link permissions for what the key starts with; v2 needs only
        // `create_key` (and `create_permission` for a new slug, below: API-v2.md §1.2).
        if !v2 && !new.permissions.is_empty() && !p.holds(PERMISSION_RULES.link_permission) {
            missing.push(PERMISSION_RULES.link_permission);
        }
        if !v2 && !new.roles.is_empty() && !p.holds(ROLE_RULES.link_permission) {
            missing.push(ROLE_RULES.link_permission);
        }
        if !missing.is_empty() {
            return Err(RbacError::missing(&missing));
        }
        // Recoverable: `encrypt_key` too (403), and a keyring (412).
        let keyring = new.recoverable.then(|| self.sealing_keyring(p, new.api_id.as_deref())).transpose()?;

        let ws = p.workspace_id.as_str();
        let external_id = new.external_id.clone();
        let limits = keygate_domain::limit_configs(&[], &new.ratelimits);
        let format = match &new.api_id {
            Some(api_id) => self.store.read(|tx| Ok(tx.get_api(ws, api_id)?))?.map(|a| a.key_format),
            None => None,
        };
        let (mut key, secret) = self.new_key(ws, new, format.unwrap_or_default());
        let key = self.write(|tx, changes| {
            changes.touch(Scope::KeysCreated(creation_shard(&secret_digest(secret.expose()))));
            let permissions = resolve_links(tx, ws, &PERMISSION_RULES, &permission_plan)?;
            let roles = resolve_links(tx, ws, &ROLE_RULES, &role_plan)?;
            permissions.authorize_creation(p)?;
            roles.authorize_creation(p)?;
            // Every check passed: write.
            if let Some(api_id) = &key.api_id {
                super::apis::ensure_api(tx, p, api_id, key.created_at)?;
            }
            if let Some(external_id) = &external_id {
                key.identity_id =
                    Some(super::identities::ensure_identity(tx, p, external_id, key.created_at)?);
            }
            tx.insert_key(&key, &secret.hash())?;
            if let Some(keyring) = &keyring {
                self.seal_key(tx, keyring, &key, &secret)?;
            }
            if !limits.is_empty() {
                tx.replace_ratelimits(ws, LimitOwner::Key(&key.id), &limits, key.created_at)?;
            }
            let mut events =
                vec![AuditEvent::on_key(ws, &p.root_key_id, "key.create", &key.id, key.created_at)];
            let owner = Owner::Key(&key.id);
            write_links(tx, p, owner, permissions, LinkMode::Add, key.created_at, &mut events)?;
            write_links(tx, p, owner, roles, LinkMode::Add, key.created_at, &mut events)?;
            tx.insert_audit_events(&events)?;
            self.key_event(tx, ws, &key.id, KeyChange::Created, key.created_at)?;
            Ok(key)
        })?;
        Ok((key, secret))
    }

    /// A new key's row and secret (not stored).
    pub(super) fn new_key(&self, workspace_id: &str, new: NewKey, format: KeyFormat) -> (Key, Secret) {
        let checksum = format == KeyFormat::Checksum;
        let (secret, start) = match new.byte_length {
            _ if checksum => {
                let prefix = new.prefix.as_deref().unwrap_or("kg");
                let secret = Secret::new(checksum_token(prefix));
                let start = secret.expose().chars().take(prefix.len() + 5).collect();
                (secret, start)
            }
            None => {
                let secret = Secret::new(random_token(new.prefix.as_deref().unwrap_or("kg")));
                let start = secret.visible_prefix();
                (secret, start)
            }
            Some(bytes) => {
                let secret = Secret::new(plain_token(new.prefix.as_deref(), bytes));
                let shown = new.prefix.as_ref().map_or(0, |p| p.len() + 1) + 4;
                let start = secret.expose().chars().take(shown).collect();
                (secret, start)
            }
        };
        let now = self.now();
        let key = Key {
            id: new_id(IdPrefix::Key),
            workspace_id: workspace_id.to_string(),
            api_id: new.api_id,
            identity_id: None,
            credits: new.credits,
            prefix: if checksum { new.prefix.or(Some("kg".into())) } else { new.byte_length.and(new.prefix) },
            byte_length: new.byte_length.and_then(|b| u32::try_from(b).ok()),
            start,
            name: new.name,
            meta: new.meta,
            enabled: new.enabled,
            expires: new.expires,
            allowed_ips: new.allowed_ips,
            created_at: now,
            updated_at: now,
        };
        (key, secret)
    }

    /// `keys.deleteKey`: deletes the key and its links to permissions and roles. The root
    /// key needs `api.*.delete_key`, or `api.<apiId>.delete_key` for the key's `apiId`.
    pub fn delete_key(&self, p: &Principal, key_id: &str) -> Result<(), RbacError> {
        validate_key_id("keyId", key_id)?;
        let access = ApiAccess::of(p, "delete_key").ok_or_else(|| ApiAccess::denied("delete_key", None))?;
        let ws = p.workspace_id.as_str();
        let hash = self.write(|tx, changes| {
            changes.touch(Scope::Key(key_id));
            let not_found = || RbacError::not_found(Resource::Key, key_id);
            if access != ApiAccess::All {
                let key = has_prefix(key_id, IdPrefix::Key).then(|| tx.get_key(ws, key_id)).transpose()?;
                let key = key.flatten().ok_or_else(not_found)?;
                if !access.admits(key.api_id.as_deref()) {
                    return Err(ApiAccess::denied("delete_key", key.api_id.as_deref()));
                }
            }
            if has_prefix(key_id, IdPrefix::Key) && tx.get_key(ws, key_id)?.is_some() {
                self.key_event(tx, ws, key_id, KeyChange::Deleted, self.now())?;
            }
            let hash = has_prefix(key_id, IdPrefix::Key).then(|| tx.delete_key(ws, key_id)).transpose()?;
            let hash = hash.flatten().ok_or_else(not_found)?;
            tx.insert_audit_events(&[AuditEvent::on_key(
                ws,
                &p.root_key_id,
                "key.delete",
                key_id,
                self.now(),
            )])?;
            Ok(hash)
        })?;
        // The change counter touched above already keeps every instance from serving the key;
        // this frees its cache entry here now rather than when the cache's bound pushes it out.
        self.verify_cache.forget(&hash);
        Ok(())
    }

    /// v2's `keys.getKey` / `keys.whoami`: a key of the caller's workspace with the slugs of
    /// its effective permissions and its roles' names (`last_used` is analytics' to fill). The root key needs `api.*.read_key`,
    /// or `api.<apiId>.read_key` for the key's `apiId`.
    pub fn key_summary(&self, p: &Principal, lookup: KeyLookup<'_>) -> Result<KeySummary, RbacError> {
        match lookup {
            KeyLookup::Id(id) => validate_key_id("keyId", id)?,
            KeyLookup::Secret(secret) => check_len("key", secret, MAX_VERIFY_KEY_CHARS)?,
        }
        let access = ApiAccess::of(p, "read_key").ok_or_else(|| ApiAccess::denied("read_key", None))?;
        let ws = p.workspace_id.as_str();
        let not_found = || match lookup {
            KeyLookup::Id(id) => RbacError::not_found(Resource::Key, id),
            KeyLookup::Secret(_) => RbacError::NotFound(Resource::Key, "the key was not found".into()),
        };
        self.store.snapshot(|tx| {
            let key = match lookup {
                KeyLookup::Id(id) if has_prefix(id, IdPrefix::Key) => tx.get_key(ws, id)?,
                KeyLookup::Id(_) => None,
                KeyLookup::Secret(secret) => {
                    tx.key_by_hash(&hash_secret(secret))?.filter(|k| k.workspace_id == ws)
                }
            };
            let mut key = key.ok_or_else(not_found)?;
            if !access.admits(key.api_id.as_deref()) {
                return Err(ApiAccess::denied("read_key", key.api_id.as_deref()));
            }
            self.live_credits(&mut [&mut key])?;
            key_summary(tx, key)
        })
    }
}

/// v1's view of a key: its direct permissions and its roles, each sorted by name.
pub fn key_view(tx: &mut dyn RbacTx, key: Key) -> Result<KeyView, RbacError> {
    let mut permissions = tx.key_entities(EntityKind::Permission, &key.id)?;
    let mut roles = tx.key_entities(EntityKind::Role, &key.id)?;
    sort_by_name(&mut permissions);
    sort_by_name(&mut roles);
    Ok(KeyView { key, permissions, roles })
}

/// v2's view of a key: the slugs of its effective permissions (direct and through its
/// roles) and its roles' names, each sorted and once.
pub fn key_summary(tx: &mut dyn RbacTx, key: Key) -> Result<KeySummary, RbacError> {
    let direct = tx.key_entities(EntityKind::Permission, &key.id)?;
    let roles = tx.key_entities(EntityKind::Role, &key.id)?;
    let role_ids: Vec<String> = roles.iter().map(|r| r.id.clone()).collect();
    let inherited = if role_ids.is_empty() { Vec::new() } else { tx.permission_names_of_roles(&role_ids)? };
    let identity = match &key.identity_id {
        Some(id) => match tx.identity_by_id(&key.workspace_id, id)? {
            Some(i) => Some(super::identities::identity_view(tx, i)?),
            None => None,
        },
        None => None,
    };
    let ratelimits = tx.ratelimits_of(LimitOwner::Key(&key.id))?;
    let permissions = direct.into_iter().chain(inherited).map(|n| n.name);
    Ok(KeySummary::new(key, permissions, roles.into_iter().map(|r| r.name), identity, ratelimits))
}

impl<S: RbacStore> RbacService<S> {
    /// `keys.rerollKey` (API-v2.md §12.5): a new key in the same API with a new secret and
    /// id, a copy of the original's prefix, byte length (v2's form), name, meta, expiry,
    /// enabled flag, identity, direct permissions, roles, rate limits and credits (as they
    /// are now); then the original expires `expiration` ms from now (0: at once; `None`:
    /// unchanged). One transaction. Needs `create_key` and `update_key`, each for all APIs
    /// or the key's.
    pub fn reroll_key(
        &self,
        p: &Principal,
        key_id: &str,
        expiration: Option<u64>,
    ) -> Result<(Key, Secret), RbacError> {
        validate_key_id("keyId", key_id)?;
        let create = ApiAccess::of(p, "create_key");
        let update = ApiAccess::of(p, "update_key");
        let mut missing = Vec::new();
        if create.is_none() {
            missing.push(PERM_CREATE_KEY);
        }
        if update.is_none() {
            missing.push(PERM_UPDATE_KEY);
        }
        let (Some(create), Some(update)) = (create, update) else {
            return Err(RbacError::missing(&missing));
        };
        let ws = p.workspace_id.as_str();
        let mut secret_out = None;
        let key = self.write_holding_credits(key_id, |tx, changes| {
            let not_found = || RbacError::not_found(Resource::Key, key_id);
            if !has_prefix(key_id, IdPrefix::Key) || !tx.lock_key(ws, key_id)? {
                return Err(not_found());
            }
            let mut original = tx.get_key(ws, key_id)?.ok_or_else(not_found)?;
            for (access, action) in [(&create, "create_key"), (&update, "update_key")] {
                if !access.admits(original.api_id.as_deref()) {
                    return Err(ApiAccess::denied(action, original.api_id.as_deref()));
                }
            }
            let now = self.now();
            // The copy: the same shape of secret, the same settings.
            let prefix = original
                .prefix
                .clone()
                .or_else(|| original.start.rsplit_once('_').map(|(prefix, _)| prefix.to_string()));
            let new = NewKey {
                api_id: original.api_id.clone(),
                name: original.name.clone(),
                prefix,
                meta: original.meta.clone(),
                expires: original.expires,
                enabled: original.enabled,
                credits: original.credits.clone(),
                byte_length: Some(original.byte_length.unwrap_or(16) as usize),
                ..NewKey::default()
            };
            // A recoverable key's successor is recoverable: `encrypt_key` and a keyring.
            let keyring = match self.is_recoverable(tx, ws, key_id)? {
                true => Some(self.sealing_keyring(p, original.api_id.as_deref())?),
                false => None,
            };
            let format = match &original.api_id {
                Some(api_id) => tx.get_api(ws, api_id)?.map(|a| a.key_format),
                None => None,
            };
            let (mut key, secret) = self.new_key(ws, new, format.unwrap_or_default());
            key.identity_id = original.identity_id.clone();
            changes.touch(Scope::KeysCreated(creation_shard(&secret_digest(secret.expose()))));
            changes.touch(Scope::Key(key_id));
            tx.insert_key(&key, &secret.hash())?;
            if let Some(keyring) = &keyring {
                self.seal_key(tx, keyring, &key, &secret)?;
            }
            for kind in [EntityKind::Permission, EntityKind::Role] {
                let ids: Vec<String> = tx.key_entities(kind, key_id)?.into_iter().map(|n| n.id).collect();
                if !ids.is_empty() {
                    tx.link_key_entities(kind, ws, &key.id, &ids, now)?;
                }
            }
            let limits: Vec<RateLimitConfig> = tx
                .ratelimits_of(LimitOwner::Key(key_id))?
                .into_iter()
                .map(|l| RateLimitConfig { id: new_id(IdPrefix::RateLimit), ..l })
                .collect();
            if !limits.is_empty() {
                tx.replace_ratelimits(ws, LimitOwner::Key(&key.id), &limits, now)?;
            }
            if let Some(ms) = expiration {
                original.expires = Some(now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)));
                tx.update_key(&original, now)?;
            }
            let event =
                |action: &'static str, id: &str| AuditEvent::on_key(ws, &p.root_key_id, action, id, now);
            tx.insert_audit_events(&[event("key.create", &key.id), event("key.reroll", key_id)])?;
            self.key_event(tx, ws, &key.id, KeyChange::Rerolled { from: key_id }, now)?;
            secret_out = Some(secret);
            Ok(key)
        })?;
        let secret =
            secret_out.ok_or_else(|| RbacError::Storage(StorageError::Internal("no secret".into())))?;
        Ok((key, secret))
    }
}
