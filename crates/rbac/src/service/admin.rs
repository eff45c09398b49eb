//! Administration: bootstrap and workspaces (the admin CLI and the server start).

use crate::{
    Key, NewRootKey, Principal, RbacError, RbacService, RbacStore, Resource, RootKey, Scope, StorageError,
    Workspace,
};
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, Secret, ValidationError, check_len, has_prefix, new_id, validate_display_name,
    validate_key_id, validate_root_key_secret,
};

impl<S: RbacStore> RbacService<S> {
    /// First start: when no workspace exists, creates workspace `default` and a root key
    /// holding `*` (the given secret, or a fresh one). `None` when already bootstrapped.
    pub fn bootstrap(
        &self,
        secret: Option<Secret>,
    ) -> Result<Option<(Workspace, RootKey, Secret)>, RbacError> {
        let result = self.write(|tx, changes| {
            // Already set up: nothing written, no counter bumped (a start changes nothing a
            // cached answer depends on, so a snapshot of the cache stays usable).
            if tx.count_workspaces()? > 0 {
                return Ok(None);
            }
            changes.touch(Scope::RootKeysCreated);
            if let Some(chosen) = &secret {
                validate_root_key_secret(chosen.expose())?;
            }
            let ws =
                Workspace { id: new_id(IdPrefix::Workspace), name: "default".into(), created_at: self.now() };
            tx.insert_workspace(&ws)?;
            let all = NewRootKey { permissions: vec!["*".into()], ..Default::default() };
            let (rk, secret) = self.insert_root_key(tx, &ws.id, all, secret)?;
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
}
