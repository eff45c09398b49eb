//! Permissions and roles: create, read, list, delete, and the permissions of a role.

use crate::service::MAX_DESCRIPTION_CHARS;
use crate::service::links::{
    LinkCall, Owner, ROLE_PERMISSION_RULES, created_action, deleted_action, describe, id_field, never_create,
    plan_refs, resolve_links, rules_of, with_permissions, write_links,
};
use crate::{
    AuditEvent, Entity, EntityKind, EntityRef, LinkMode, NewEntity, Page, Principal, RbacError, RbacService,
    RbacStore, RbacTx, Resource, RoleView, Scope,
};
use keygate_domain::{MAX_NAME_CHARS, Named, ValidationError, check_len, has_prefix, new_id};

impl<S: RbacStore> RbacService<S> {
    /// `permissions.createPermission` / `permissions.createRole`: 409 when the name is taken.
    /// A role may come with permissions (slugs; missing ones are created), attached in the
    /// same transaction.
    pub fn create_entity(
        &self,
        p: &Principal,
        kind: EntityKind,
        new: NewEntity,
    ) -> Result<Entity, RbacError> {
        let rules = rules_of(kind);
        (rules.validate_name)(new.name_field, &new.name)?;
        if let Some(d) = &new.description
            && d.chars().count() > MAX_DESCRIPTION_CHARS
        {
            let msg = format!("must be at most {MAX_DESCRIPTION_CHARS} characters");
            return Err(ValidationError::new("description", msg).into());
        }
        let refs: Vec<EntityRef> =
            new.permissions.iter().map(|n| EntityRef::listed(n.clone(), true)).collect();
        let plan = plan_refs(&ROLE_PERMISSION_RULES, &refs, 0)?;
        let mut missing = Vec::new();
        if !p.holds(rules.create_permission) {
            missing.push(rules.create_permission);
        }
        if !refs.is_empty() && !p.holds(ROLE_PERMISSION_RULES.link_permission) {
            missing.push(ROLE_PERMISSION_RULES.link_permission);
        }
        if !missing.is_empty() {
            return Err(RbacError::missing(&missing));
        }
        let ws = p.workspace_id.as_str();
        let entity = Entity {
            id: new_id(rules.id_prefix),
            name: new.name,
            description: new.description,
            title: new.title,
        };
        self.write(|tx, changes| {
            let now = self.now();
            if !tx.insert_entity(kind, ws, &entity, now)? {
                let msg = format!("{} {} already exists", kind.noun(), entity.name);
                return Err(RbacError::Conflict(kind.resource(), msg));
            }
            let mut events =
                vec![Self::workspace_event(p, created_action(kind), kind.noun(), &entity.id, now)];
            if !refs.is_empty() {
                changes.touch(Scope::Workspace(ws));
                let resolved = resolve_links(tx, ws, &ROLE_PERMISSION_RULES, &plan)?;
                resolved.authorize_creation(p)?;
                let owner = Owner::Role(&entity.id);
                write_links(tx, p, owner, resolved, LinkMode::Add, now, &mut events)?;
            }
            tx.insert_audit_events(&events)?;
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
        let not_found = || RbacError::not_found(kind.resource(), id);
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
                return Err(RbacError::not_found(kind.resource(), id));
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

    /// `permissions.addPermissionsToRole`: attaches `refs` (at least one; missing names are
    /// created, as for keys) to the role; returns all its permissions.
    pub fn add_role_permissions(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.role_links(p, role_id, refs, LinkMode::Add, 1)
    }

    /// `permissions.setRolePermissions`: the role's permissions become exactly `refs`.
    pub fn set_role_permissions(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.role_links(p, role_id, refs, LinkMode::Replace, 0)
    }

    /// `permissions.removePermissionsFromRole`: detaches `refs` (each must exist); returns the
    /// permissions still attached.
    pub fn remove_role_permissions(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
    ) -> Result<Vec<Named>, RbacError> {
        self.role_links(p, role_id, &never_create(refs), LinkMode::Remove, 1)
    }

    fn role_links(
        &self,
        p: &Principal,
        role_id: &str,
        refs: &[EntityRef],
        mode: LinkMode,
        min_entries: usize,
    ) -> Result<Vec<Named>, RbacError> {
        let call = LinkCall { rules: &ROLE_PERMISSION_RULES, mode, refs, min_entries, v2: false };
        self.change_links_of(p, Owner::Role(role_id), call, |_, links| Ok(links))
    }

    /// v2's `permissions.setRolePermissions`: the role (a name, else an id) gets exactly
    /// `refs` (slugs or ids; missing slugs are created); answers its permissions in detail.
    pub fn set_role_permissions_by_ref(
        &self,
        p: &Principal,
        role: &str,
        refs: &[String],
    ) -> Result<Vec<Entity>, RbacError> {
        let refs: Vec<EntityRef> = refs.iter().map(|r| EntityRef::listed(r.clone(), true).or_id()).collect();
        let call = LinkCall {
            rules: &ROLE_PERMISSION_RULES,
            mode: LinkMode::Replace,
            refs: &refs,
            min_entries: 0,
            v2: true,
        };
        let ws = p.workspace_id.clone();
        self.change_links_of(p, Owner::RoleByRef(role), call, |tx, links| {
            Ok(describe(tx, EntityKind::Permission, &ws, links)?.into_iter().map(|v| v.role).collect())
        })
    }

    /// A permission (by slug, else id) or role (by name, else id) of the caller's
    /// workspace, as v2 names them; 403 without the read permission, 404 when missing.
    pub fn find_entity(
        &self,
        p: &Principal,
        kind: EntityKind,
        field: &str,
        r: &str,
    ) -> Result<Entity, RbacError> {
        let rules = rules_of(kind);
        check_len(field, r, MAX_NAME_CHARS)?;
        if !p.holds(rules.read_permission) {
            return Err(RbacError::missing(&[rules.read_permission]));
        }
        self.store.read(|tx| {
            let id = resolve_ref(tx, kind, &p.workspace_id, r)?;
            let found = match id {
                Some(id) => tx.get_entity(kind, &p.workspace_id, &id)?,
                None => None,
            };
            found.ok_or_else(|| RbacError::not_found(kind.resource(), r))
        })
    }

    /// [`Self::find_entity`] for a role, with its permissions sorted by slug.
    pub fn find_role(&self, p: &Principal, r: &str) -> Result<RoleView, RbacError> {
        let role = self.find_entity(p, EntityKind::Role, "role", r)?;
        let mut permissions = self.store.read(|tx| Ok(tx.permissions_of_role(&role.id)?))?;
        permissions.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(RoleView { role, permissions })
    }

    /// Whether two v2 references (a name, else an id) name one role: 404 when either names
    /// none.
    pub fn same_role(&self, p: &Principal, a: &str, b: &str) -> Result<bool, RbacError> {
        self.store.read(|tx| {
            let found = |tx: &mut dyn RbacTx, r: &str| {
                resolve_ref(tx, EntityKind::Role, &p.workspace_id, r)?
                    .ok_or_else(|| RbacError::not_found(Resource::Role, r))
            };
            Ok(found(tx, a)? == found(tx, b)?)
        })
    }

    /// v2's delete: a permission (by slug, else id) or role (by name, else id).
    pub fn delete_entity_by_ref(
        &self,
        p: &Principal,
        kind: EntityKind,
        field: &str,
        r: &str,
    ) -> Result<(), RbacError> {
        check_len(field, r, MAX_NAME_CHARS)?;
        let rules = rules_of(kind);
        if !p.holds(rules.delete_permission) {
            return Err(RbacError::missing(&[rules.delete_permission]));
        }
        let id = self.store.read(|tx| resolve_ref(tx, kind, &p.workspace_id, r))?;
        let id = id.ok_or_else(|| RbacError::not_found(kind.resource(), r))?;
        self.delete_entity(p, kind, &id)
    }

    /// v2's `listPermissions` / `listRoles`: a page of the workspace's permissions (by
    /// slug) or roles (by name, each with its permissions), keeping those whose id, name,
    /// display name or description contains `search`, ASCII case-insensitively. The page
    /// is one keyset query (names after the cursor, `limit + 1` rows to know whether more
    /// follow): its cost does not grow with the workspace.
    pub fn list_page(
        &self,
        p: &Principal,
        kind: EntityKind,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page<RoleView>, RbacError> {
        let rules = rules_of(kind);
        if !p.holds(rules.read_permission) {
            return Err(RbacError::missing(&[rules.read_permission]));
        }
        let ws = p.workspace_id.as_str();
        self.store.read(|tx| {
            let rows = tx.entities_page(kind, ws, search, after, limit.saturating_add(1))?;
            let page = Page::keyset(rows, limit, |e| e.name.as_str());
            Ok(Page { items: with_permissions(tx, kind, page.items)?, next: page.next })
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
        AuditEvent::new(&p.workspace_id, &p.root_key_id, action, resource_type, id, at)
    }
}

/// The id of the entity a v2 string names: by name (slug) first, then as an id.
fn resolve_ref(
    tx: &mut dyn RbacTx,
    kind: EntityKind,
    ws: &str,
    r: &str,
) -> Result<Option<String>, RbacError> {
    if let Some(found) = tx.entities_by_names(kind, ws, &[r.to_string()])?.pop() {
        return Ok(Some(found.id));
    }
    if !has_prefix(r, rules_of(kind).id_prefix) {
        return Ok(None);
    }
    Ok(tx.entities_by_ids(kind, ws, &[r.to_string()])?.pop().map(|e| e.id))
}
