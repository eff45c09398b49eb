//! Administration: bootstrap, workspaces, root keys (the admin CLI and the server start).

use super::*;

impl<S: RbacStore> RbacService<S> {
    /// First start: when no workspace exists, creates workspace `default` and a root key
    /// holding `*` (the given secret, or a fresh one). `None` when already bootstrapped.
    pub fn bootstrap(
        &self,
        secret: Option<Secret>,
    ) -> Result<Option<(Workspace, RootKey, Secret)>, RbacError> {
        let result = self.write(|tx, changes| {
            changes.touch(Scope::RootKeysCreated);
            if tx.count_workspaces()? > 0 {
                return Ok(None);
            }
            if let Some(chosen) = &secret {
                validate_root_key_secret(chosen.expose())?;
            }
            let ws =
                Workspace { id: new_id(IdPrefix::Workspace), name: "default".into(), created_at: self.now() };
            tx.insert_workspace(&ws)?;
            let (rk, secret) = self.insert_root_key(tx, &ws.id, vec!["*".into()], secret)?;
            Ok(Some((ws, rk, secret)))
        });
        match result {
            // Another instance bootstrapped at the same moment.
            Err(RbacError::Storage(StorageError::Conflict(_))) => Ok(None),
            other => other,
        }
    }

    pub fn create_workspace(&self, name: &str) -> Result<Workspace, RbacError> {
        validate_display_name("name", name)?;
        if has_prefix(name, IdPrefix::Workspace) {
            return Err(ValidationError::new("name", "must not look like a workspace id (ws_...)").into());
        }
        self.store.transaction(|tx| {
            if tx.find_workspace(name)?.is_some() {
                return Err(RbacError::Conflict(
                    Resource::Workspace,
                    format!("workspace {name} already exists"),
                ));
            }
            let ws = Workspace { id: new_id(IdPrefix::Workspace), name: name.into(), created_at: self.now() };
            tx.insert_workspace(&ws)?;
            Ok(ws)
        })
    }

    /// Every workspace, oldest first (the admin CLI).
    pub fn list_workspaces(&self) -> Result<Vec<Workspace>, RbacError> {
        self.store.read(|tx| Ok(tx.list_workspaces()?))
    }

    /// The keys of a workspace given by id or name, oldest first (the admin CLI).
    pub fn list_keys(&self, workspace: &str) -> Result<Vec<Key>, RbacError> {
        let ws = self.find_workspace(workspace)?;
        self.store.read(|tx| Ok(tx.list_keys(&ws.id)?))
    }

    /// Deletes a key by id, whatever its workspace (the admin CLI), as `keys.deleteKey`
    /// does (its links go too; audited with the actor `admin-cli`).
    pub fn delete_key_admin(&self, key_id: &str) -> Result<(), RbacError> {
        validate_key_id("id", key_id)?;
        let not_found = || RbacError::not_found(Resource::Key, key_id);
        if !has_prefix(key_id, IdPrefix::Key) {
            return Err(not_found());
        }
        let key = self.store.read(|tx| Ok(tx.find_key(key_id)?))?.ok_or_else(not_found)?;
        let admin = Principal::new("admin-cli".into(), key.workspace_id, ["*".to_string()]);
        self.delete_key(&admin, key_id)
    }

    /// The workspace holding the API `api_id` (the admin CLI, which has no root key to
    /// say it). API ids are unique, so there is at most one.
    pub fn api_workspace(&self, api_id: &str) -> Result<Workspace, RbacError> {
        check_len("api", api_id, MAX_NAME_CHARS)?;
        self.store
            .read(|tx| {
                for ws in tx.list_workspaces()? {
                    if tx.get_api(&ws.id, api_id)?.is_some() {
                        return Ok(Some(ws));
                    }
                }
                Ok(None)
            })?
            .ok_or_else(|| RbacError::not_found(Resource::Api, api_id))
    }

    /// A workspace by id or name.
    pub fn find_workspace(&self, id_or_name: &str) -> Result<Workspace, RbacError> {
        self.store
            .read(|tx| Ok(tx.find_workspace(id_or_name)?))?
            .ok_or_else(|| RbacError::not_found(Resource::Workspace, id_or_name))
    }

    pub(super) fn insert_root_key(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        permissions: Vec<String>,
        secret: Option<Secret>,
    ) -> Result<(RootKey, Secret), RbacError> {
        let secret = secret.unwrap_or_else(|| Secret::new(random_token("kg_root")));
        check_len("rootKey", secret.expose(), 512)?;
        let rk = RootKey {
            id: new_id(IdPrefix::RootKey),
            workspace_id: workspace_id.to_string(),
            prefix: secret.visible_prefix(),
            permissions,
            created_at: self.now(),
            expires_at: None,
        };
        tx.insert_root_key(&rk, &secret.hash())?;
        Ok((rk, secret))
    }

    /// Creates a root key with the given permissions (zero allowed) in a workspace given
    /// by id or name.
    pub fn create_root_key(
        &self,
        workspace: &str,
        permissions: &[String],
    ) -> Result<(RootKey, Secret), RbacError> {
        let mut perms: Vec<String> = Vec::new();
        for (i, p) in permissions.iter().enumerate() {
            validate_permission_name(&format!("permissions.{i}"), p)?;
            if !perms.contains(p) {
                perms.push(p.clone());
            }
        }
        let ws = self.find_workspace(workspace)?;
        self.write(|tx, changes| {
            changes.touch(Scope::RootKeysCreated);
            self.insert_root_key(tx, &ws.id, perms, None)
        })
    }

    pub fn list_root_keys(&self, workspace: &str) -> Result<Vec<RootKey>, RbacError> {
        let ws = self.find_workspace(workspace)?;
        self.store.read(|tx| Ok(tx.list_root_keys(&ws.id)?))
    }

    /// Revokes a root key; this instance rejects it at once.
    pub fn revoke_root_key(&self, id: &str) -> Result<(), RbacError> {
        let now = self.now();
        let revoked = self.write(|tx, changes| {
            changes.touch(Scope::RootKey(id));
            Ok(tx.revoke_root_key(id, now)?)
        })?;
        self.auth.evict_root_key(id);
        if revoked { Ok(()) } else { Err(RbacError::not_found(Resource::RootKey, id)) }
    }
}
