//! Keys: create, read, delete and verify them; set, add and remove their permissions and roles.

use super::*;

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
        rules: &LinkRules,
        mode: LinkMode,
        min_entries: usize,
    ) -> Result<Vec<Named>, RbacError> {
        validate_key_id("keyId", key_id)?;
        self.change_links_of(p, Owner::Key(key_id), refs, rules, mode, min_entries)
    }

    pub(super) fn change_links_of(
        &self,
        p: &Principal,
        owner: Owner<'_>,
        refs: &[EntityRef],
        rules: &LinkRules,
        mode: LinkMode,
        min_entries: usize,
    ) -> Result<Vec<Named>, RbacError> {
        check_len(owner.id_field(), owner.value(), MAX_NAME_CHARS)?;
        let plan = plan_refs(rules, refs, min_entries)?;
        let required = mode.required(rules);
        if !p.holds(required) {
            return Err(RbacError::missing(&[required]));
        }
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            let now = self.now();
            changes.touch(owner.counter(ws));
            if !owner.lock(tx, ws)? {
                return Err(RbacError::NotFound(format!("{} {} not found", owner.noun(), owner.value())));
            }
            let resolved = resolve_links(tx, ws, rules, &plan)?;
            resolved.authorize_creation(p)?;
            // Every check passed: write.
            let mut events = Vec::new();
            let result = write_links(tx, p, owner, resolved, mode, now, &mut events)?;
            if !events.is_empty() {
                tx.insert_audit_events(&events)?;
            }
            Ok(result)
        })
    }

    /// `permissions.addPermissionsToRole`: attaches `refs` (at least one; missing names are
    /// created, as for keys) to the role; returns all its permissions.
    pub fn add_role_permissions(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links_of(p, Owner::Role(role_id), refs, &ROLE_PERMISSION_RULES, LinkMode::Add, 1)
    }

    /// `permissions.setRolePermissions`: the role's permissions become exactly `refs`.
    pub fn set_role_permissions(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.change_links_of(p, Owner::Role(role_id), refs, &ROLE_PERMISSION_RULES, LinkMode::Replace, 0)
    }

    /// `permissions.removePermissionsFromRole`: detaches `refs` (each must exist); returns the
    /// permissions still attached.
    pub fn remove_role_permissions(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        let refs = never_create(refs);
        self.change_links_of(p, Owner::Role(role_id), &refs, &ROLE_PERMISSION_RULES, LinkMode::Remove, 1)
    }

    /// `keys.getKey`: the key with its direct permissions and its roles, sorted by name.
    pub fn get_key(&self, p: &Principal, key_id: &str) -> Result<KeyView, RbacError> {
        validate_key_id("keyId", key_id)?;
        if !p.holds(PERM_READ_KEY) {
            return Err(RbacError::missing(&[PERM_READ_KEY]));
        }
        let not_found = || RbacError::NotFound(format!("key {key_id} not found"));
        if !has_prefix(key_id, IdPrefix::Key) {
            return Err(not_found());
        }
        self.store.snapshot(|tx| {
            let key = tx.get_key(&p.workspace_id, key_id)?.ok_or_else(not_found)?;
            let mut permissions = tx.key_entities(EntityKind::Permission, key_id)?;
            let mut roles = tx.key_entities(EntityKind::Role, key_id)?;
            sort_by_name(&mut permissions);
            sort_by_name(&mut roles);
            Ok(KeyView { key, permissions, roles })
        })
    }

    /// Creates a key in a workspace (the admin CLI: no root key involved); returns it and
    /// its secret (shown once).
    pub fn create_key(&self, workspace_id: &str, name: Option<String>) -> Result<(Key, Secret), RbacError> {
        if let Some(n) = &name {
            validate_display_name("name", n)?;
        }
        let (key, secret) = self.new_key(workspace_id, NewKey { name, ..NewKey::default() });
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
            check_len("prefix", prefix, MAX_KEY_PREFIX_CHARS)?;
            if !prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ValidationError::new("prefix", "use only A-Z a-z 0-9 and _").into());
            }
        }
        if new.meta.as_ref().is_some_and(|m| m.len() > MAX_KEY_META_BYTES) {
            let msg = format!("must be at most {MAX_KEY_META_BYTES} bytes when serialized");
            return Err(ValidationError::new("meta", msg).into());
        }
        // A past `expires` is accepted (as in Unkey's v2 API, over the same data): the key
        // then verifies EXPIRED.
        let by_name = |names: &[String], create: bool| -> Vec<EntityRef> {
            let entry = |n: &String| EntityRef {
                name: Some(n.clone()),
                create: Some(create),
                name_field: "",
                id: None,
            };
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
        if !new.permissions.is_empty() && !p.holds(PERMISSION_RULES.link_permission) {
            missing.push(PERMISSION_RULES.link_permission);
        }
        if !new.roles.is_empty() && !p.holds(ROLE_RULES.link_permission) {
            missing.push(ROLE_RULES.link_permission);
        }
        if !missing.is_empty() {
            return Err(RbacError::missing(&missing));
        }

        let ws = p.workspace_id.as_str();
        let (key, secret) = self.new_key(ws, new);
        self.write(|tx, changes| {
            changes.touch(Scope::KeysCreated(creation_shard(&secret_digest(secret.expose()))));
            let permissions = resolve_links(tx, ws, &PERMISSION_RULES, &permission_plan)?;
            let roles = resolve_links(tx, ws, &ROLE_RULES, &role_plan)?;
            permissions.authorize_creation(p)?;
            roles.authorize_creation(p)?;
            // Every check passed: write.
            tx.insert_key(&key, &secret.hash())?;
            let mut events = vec![AuditEvent {
                workspace_id: ws.to_string(),
                actor_id: p.root_key_id.clone(),
                action: "key.create",
                resource_type: "key",
                resource_id: key.id.clone(),
                key_id: Some(key.id.clone()),
                role_id: None,
                at: key.created_at,
            }];
            let owner = Owner::Key(&key.id);
            write_links(tx, p, owner, permissions, LinkMode::Add, key.created_at, &mut events)?;
            write_links(tx, p, owner, roles, LinkMode::Add, key.created_at, &mut events)?;
            tx.insert_audit_events(&events)?;
            Ok(())
        })?;
        Ok((key, secret))
    }

    /// A new key's row and secret (not stored).
    pub(super) fn new_key(&self, workspace_id: &str, new: NewKey) -> (Key, Secret) {
        let secret = Secret::new(random_token(new.prefix.as_deref().unwrap_or("kg")));
        let key = Key {
            id: new_id(IdPrefix::Key),
            workspace_id: workspace_id.to_string(),
            api_id: new.api_id,
            start: secret.visible_prefix(),
            name: new.name,
            meta: new.meta,
            enabled: new.enabled,
            expires: new.expires,
            created_at: self.now(),
        };
        (key, secret)
    }

    /// `keys.deleteKey`: deletes the key and its links to permissions and roles.
    pub fn delete_key(&self, p: &Principal, key_id: &str) -> Result<(), RbacError> {
        validate_key_id("keyId", key_id)?;
        if !p.holds(PERM_DELETE_KEY) {
            return Err(RbacError::missing(&[PERM_DELETE_KEY]));
        }
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            changes.touch(Scope::Key(key_id));
            if !has_prefix(key_id, IdPrefix::Key) || !tx.delete_key(ws, key_id)? {
                return Err(RbacError::NotFound(format!("key {key_id} not found")));
            }
            tx.insert_audit_events(&[AuditEvent {
                workspace_id: ws.to_string(),
                actor_id: p.root_key_id.clone(),
                action: "key.delete",
                resource_type: "key",
                resource_id: key_id.to_string(),
                key_id: Some(key_id.to_string()),
                role_id: None,
                at: self.now(),
            }])?;
            Ok(())
        })
    }
}
