//! Permissions and roles: create, read, list, delete, and the permissions of a role.

use super::*;

impl<S: RbacStore> RbacService<S> {
    /// `permissions.createPermission` / `permissions.createRole`: 409 when the name is taken.
    pub fn create_entity(
        &self,
        p: &Principal,
        kind: EntityKind,
        name: &str,
        description: Option<String>,
    ) -> Result<Entity, RbacError> {
        let rules = rules_of(kind);
        (rules.validate_name)("name", name)?;
        if let Some(d) = &description
            && d.chars().count() > MAX_DESCRIPTION_CHARS
        {
            let msg = format!("must be at most {MAX_DESCRIPTION_CHARS} characters");
            return Err(ValidationError::new("description", msg).into());
        }
        if !p.holds(rules.create_permission) {
            return Err(RbacError::missing(&[rules.create_permission]));
        }
        let ws = p.workspace_id.as_str();
        let entity = Entity { id: new_id(rules.id_prefix), name: name.to_string(), description };
        self.store.transaction(|tx| {
            let now = self.now();
            if !tx.insert_entity(kind, ws, &entity, now)? {
                return Err(RbacError::Conflict(format!("{} {name} already exists", kind.noun())));
            }
            tx.insert_audit_events(&[Self::workspace_event(
                p,
                created_action(kind),
                kind.noun(),
                &entity.id,
                now,
            )])?;
            Ok(())
        })?;
        Ok(entity)
    }

    /// `permissions.getPermission` / the role of `permissions.getRole`.
    pub fn get_entity(&self, p: &Principal, kind: EntityKind, id: &str) -> Result<Entity, RbacError> {
        let rules = rules_of(kind);
        check_len(id_field(kind), id, MAX_NAME_CHARS)?;
        if !p.holds(rules.read_permission) {
            return Err(RbacError::missing(&[rules.read_permission]));
        }
        let not_found = || RbacError::NotFound(format!("{} {id} not found", kind.noun()));
        if !has_prefix(id, rules.id_prefix) {
            return Err(not_found());
        }
        self.store.read(|tx| tx.get_entity(kind, &p.workspace_id, id)?.ok_or_else(not_found))
    }

    /// `permissions.getRole`: the role and its permissions, sorted by name.
    pub fn get_role(&self, p: &Principal, id: &str) -> Result<RoleView, RbacError> {
        let role = self.get_entity(p, EntityKind::Role, id)?;
        let mut permissions = self.store.read(|tx| Ok(tx.permissions_of_role(&role.id)?))?;
        permissions.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(RoleView { role, permissions })
    }

    /// `permissions.listPermissions` / `permissions.listRoles` (roles without their
    /// permissions; see [`Self::list_roles`]), sorted by name.
    pub fn list_entities(&self, p: &Principal, kind: EntityKind) -> Result<Vec<Entity>, RbacError> {
        let rules = rules_of(kind);
        if !p.holds(rules.read_permission) {
            return Err(RbacError::missing(&[rules.read_permission]));
        }
        let mut all = self.store.read(|tx| Ok(tx.list_entities(kind, &p.workspace_id)?))?;
        all.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(all)
    }

    /// `permissions.listRoles`: every role with its permissions, sorted by name.
    pub fn list_roles(&self, p: &Principal) -> Result<Vec<RoleView>, RbacError> {
        let roles = self.list_entities(p, EntityKind::Role)?;
        self.store.read(|tx| {
            roles
                .into_iter()
                .map(|role| {
                    let mut permissions = tx.permissions_of_role(&role.id)?;
                    permissions.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
                    Ok(RoleView { role, permissions })
                })
                .collect()
        })
    }

    /// `permissions.deletePermission` / `permissions.deleteRole`: deletes it and detaches it
    /// from every key and role, in one transaction.
    pub fn delete_entity(&self, p: &Principal, kind: EntityKind, id: &str) -> Result<(), RbacError> {
        let rules = rules_of(kind);
        check_len(id_field(kind), id, MAX_NAME_CHARS)?;
        if !p.holds(rules.delete_permission) {
            return Err(RbacError::missing(&[rules.delete_permission]));
        }
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            changes.touch(Scope::Workspace(ws));
            if !has_prefix(id, rules.id_prefix) || !tx.delete_entity(kind, ws, id)? {
                return Err(RbacError::NotFound(format!("{} {id} not found", kind.noun())));
            }
            tx.insert_audit_events(&[Self::workspace_event(
                p,
                deleted_action(kind),
                kind.noun(),
                id,
                self.now(),
            )])?;
            Ok(())
        })
    }

    /// An audit event about a workspace object that is not a key's or a role's link.
    pub(super) fn workspace_event(
        p: &Principal,
        action: &'static str,
        resource_type: &'static str,
        id: &str,
        at: i64,
    ) -> AuditEvent {
        AuditEvent {
            workspace_id: p.workspace_id.clone(),
            actor_id: p.root_key_id.clone(),
            action,
            resource_type,
            resource_id: id.to_string(),
            key_id: None,
            role_id: None,
            at,
        }
    }
}
