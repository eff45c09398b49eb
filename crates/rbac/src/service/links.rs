//! What the link operations share (a key's permissions and roles, a role's permissions):
//! the rules that differ between them, the plan of a request's entries, resolving them
//! against the store and writing the links with their audit events.

use crate::perms::{
    PERM_ADD_PERMISSION_TO_KEY, PERM_ADD_PERMISSION_TO_ROLE, PERM_ADD_ROLE_TO_KEY, PERM_CREATE_PERMISSION,
    PERM_CREATE_ROLE, PERM_DELETE_PERMISSION, PERM_DELETE_ROLE, PERM_READ_PERMISSION, PERM_READ_ROLE,
    PERM_REMOVE_PERMISSION_FROM_KEY, PERM_REMOVE_PERMISSION_FROM_ROLE, PERM_REMOVE_ROLE_FROM_KEY,
};
use crate::service::MAX_REFS_PER_CALL;
use crate::{AuditEvent, Entity, EntityKind, EntityRef, Principal, RbacError, RbacTx, Resource, RoleView};
use keygate_domain::{
    IdPrefix, Named, ValidationError, check_len, has_prefix, new_id, sort_by_name, validate_display_name,
    validate_permission_name,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What differs between the permission and role operations; everything else is shared.
pub(super) struct LinkRules {
    pub(super) kind: EntityKind,
    pub(super) id_prefix: IdPrefix,
    pub(super) link_permission: &'static str,
    pub(super) unlink_permission: &'static str,
    pub(super) create_permission: &'static str,
    pub(super) read_permission: &'static str,
    pub(super) delete_permission: &'static str,
    /// Whether an unknown name is created when the entry says nothing about `create`.
    pub(super) create_by_default: bool,
    pub(super) validate_name: fn(&str, &str) -> Result<(), ValidationError>,
}

pub(super) const PERMISSION_RULES: LinkRules = LinkRules {
    kind: EntityKind::Permission,
    id_prefix: IdPrefix::Permission,
    link_permission: PERM_ADD_PERMISSION_TO_KEY,
    unlink_permission: PERM_REMOVE_PERMISSION_FROM_KEY,
    create_permission: PERM_CREATE_PERMISSION,
    read_permission: PERM_READ_PERMISSION,
    delete_permission: PERM_DELETE_PERMISSION,
    create_by_default: true,
    validate_name: validate_permission_name,
};

pub(super) const ROLE_RULES: LinkRules = LinkRules {
    kind: EntityKind::Role,
    id_prefix: IdPrefix::Role,
    link_permission: PERM_ADD_ROLE_TO_KEY,
    unlink_permission: PERM_REMOVE_ROLE_FROM_KEY,
    create_permission: PERM_CREATE_ROLE,
    read_permission: PERM_READ_ROLE,
    delete_permission: PERM_DELETE_ROLE,
    create_by_default: false,
    validate_name: validate_display_name,
};

/// Permissions attached to a role (rather than to a key).
pub(super) const ROLE_PERMISSION_RULES: LinkRules = LinkRules {
    link_permission: PERM_ADD_PERMISSION_TO_ROLE,
    unlink_permission: PERM_REMOVE_PERMISSION_FROM_ROLE,
    ..PERMISSION_RULES
};

/// What links are changed on: a key (its permissions or roles) or a role (its permissions).
#[derive(Debug, Clone, Copy)]
pub(super) enum Owner<'a> {
    Key(&'a str),
    Role(&'a str),
    /// A role named by its name or, failing that, its id (v2's `role`), until
    /// [`Owner::lock`] finds which.
    RoleByRef(&'a str),
}

impl Owner<'_> {
    /// The request field that names it.
    pub(super) fn id_field(self) -> &'static str {
        match self {
            Owner::Key(_) => "keyId",
            Owner::Role(_) => "roleId",
            Owner::RoleByRef(_) => "role",
        }
    }

    pub(super) fn resource(self) -> Resource {
        match self {
            Owner::Key(_) => Resource::Key,
            Owner::Role(_) | Owner::RoleByRef(_) => Resource::Role,
        }
    }

    /// The change counter its links' changes bump: the key's own, or for a role (whose
    /// permissions reach every key holding it) the workspace's.
    pub(super) fn counter<'a>(&'a self, ws: &'a str) -> crate::counters::Scope<'a> {
        match self {
            Owner::Key(id) => crate::counters::Scope::Key(id),
            Owner::Role(_) | Owner::RoleByRef(_) => crate::counters::Scope::Workspace(ws),
        }
    }

    pub(super) fn value(&self) -> &str {
        match self {
            Owner::Key(id) | Owner::Role(id) | Owner::RoleByRef(id) => id,
        }
    }

    /// Its id when it exists in the workspace; locks it for the rest of the transaction,
    /// so that concurrent changes of its links serialize.
    pub(super) fn lock(self, tx: &mut dyn RbacTx, ws: &str) -> Result<Option<String>, RbacError> {
        let found = |ok: bool, id: &str| ok.then(|| id.to_string());
        Ok(match self {
            Owner::Key(id) => found(has_prefix(id, IdPrefix::Key) && tx.lock_key(ws, id)?, id),
            Owner::Role(id) => found(has_prefix(id, IdPrefix::Role) && tx.lock_role(ws, id)?, id),
            Owner::RoleByRef(r) => {
                match tx.entities_by_names(EntityKind::Role, ws, &[r.to_string()])?.pop() {
                    Some(role) => found(tx.lock_role(ws, &role.id)?, &role.id),
                    None => found(has_prefix(r, IdPrefix::Role) && tx.lock_role(ws, r)?, r),
                }
            }
        })
    }

    /// The owner with its id as [`Owner::lock`] found it.
    pub(super) fn with_id(self, id: &str) -> Owner<'_> {
        match self {
            Owner::Key(_) => Owner::Key(id),
            Owner::Role(_) | Owner::RoleByRef(_) => Owner::Role(id),
        }
    }

    pub(super) fn current(self, tx: &mut dyn RbacTx, kind: EntityKind) -> Result<Vec<Named>, RbacError> {
        Ok(match self {
            Owner::Key(id) => tx.key_entities(kind, id)?,
            Owner::Role(id) | Owner::RoleByRef(id) => tx.permission_names_of_roles(&[id.to_string()])?,
        })
    }

    pub(super) fn link(
        self,
        tx: &mut dyn RbacTx,
        kind: EntityKind,
        ws: &str,
        ids: &[String],
        now: i64,
    ) -> Result<(), RbacError> {
        match self {
            Owner::Key(id) => tx.link_key_entities(kind, ws, id, ids, now)?,
            Owner::Role(id) | Owner::RoleByRef(id) => tx.link_role_permissions(ws, id, ids, now)?,
        }
        Ok(())
    }

    pub(super) fn unlink(
        self,
        tx: &mut dyn RbacTx,
        kind: EntityKind,
        ids: &[String],
    ) -> Result<(), RbacError> {
        match self {
            Owner::Key(id) => tx.unlink_key_entities(kind, id, ids)?,
            Owner::Role(id) | Owner::RoleByRef(id) => tx.unlink_role_permissions(id, ids)?,
        }
        Ok(())
    }

    /// (attach, detach) audit actions.
    pub(super) fn actions(self, kind: EntityKind) -> (&'static str, &'static str) {
        match (self, kind) {
            (Owner::Key(_), EntityKind::Permission) => ("key.attach_permission", "key.detach_permission"),
            (Owner::Key(_), EntityKind::Role) => ("key.attach_role", "key.detach_role"),
            (Owner::Role(_) | Owner::RoleByRef(_), _) => ("role.attach_permission", "role.detach_permission"),
        }
    }
}

pub(super) fn rules_of(kind: EntityKind) -> &'static LinkRules {
    match kind {
        EntityKind::Permission => &PERMISSION_RULES,
        EntityKind::Role => &ROLE_RULES,
    }
}

/// A change of an owner's links, as one API call asks for it.
pub(super) struct LinkCall<'a> {
    pub(super) rules: &'static LinkRules,
    pub(super) mode: LinkMode,
    pub(super) refs: &'a [EntityRef],
    pub(super) min_entries: usize,
    /// v2's root-key permissions (API-v2.md §1.2): a `Replace` needs the unlink
    /// permission too, and a key's links `update_key` for the key's `apiId`.
    pub(super) v2: bool,
}

/// Links in detail, read in the transaction that wrote them: each entity with its
/// description and display name and, for a role, its permissions (v2's answers).
pub(super) fn describe(
    tx: &mut dyn RbacTx,
    kind: EntityKind,
    ws: &str,
    links: Vec<Named>,
) -> Result<Vec<RoleView>, RbacError> {
    let ids: Vec<String> = links.iter().map(|l| l.id.clone()).collect();
    let mut found: HashMap<String, Entity> =
        tx.entities_in_detail(kind, ws, &ids)?.into_iter().map(|e| (e.id.clone(), e)).collect();
    let entities = links.into_iter().filter_map(|l| found.remove(&l.id)).collect();
    with_permissions(tx, kind, entities)
}

/// Each entity as a [`RoleView`]: a role with its permissions (by name), a permission alone.
pub(super) fn with_permissions(
    tx: &mut dyn RbacTx,
    kind: EntityKind,
    entities: Vec<Entity>,
) -> Result<Vec<RoleView>, RbacError> {
    entities
        .into_iter()
        .map(|e| {
            let mut permissions = match kind {
                EntityKind::Role => tx.permissions_of_role(&e.id)?,
                EntityKind::Permission => Vec::new(),
            };
            permissions.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
            Ok(RoleView { role: e, permissions })
        })
        .collect()
}

/// How a call changes an owner's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// The key ends with exactly the listed entities.
    Replace,
    /// The listed entities are attached; the others stay.
    Add,
    /// The listed entities are detached (each must exist; attached or not); the others stay.
    Remove,
}

impl LinkMode {
    /// The root-key permission the operation always needs.
    pub(super) fn required(self, rules: &LinkRules) -> &'static str {
        match self {
            LinkMode::Replace | LinkMode::Add => rules.link_permission,
            LinkMode::Remove => rules.unlink_permission,
        }
    }
}

/// The validated, de-duplicated content of a list of references.
#[derive(Debug, Default)]
pub(super) struct RefPlan {
    pub(super) ids: BTreeSet<String>,
    /// name -> whether to create it when missing.
    pub(super) names: BTreeMap<String, bool>,
    /// Entries that gave both: (path, id, name); they must agree.
    pub(super) pairs: Vec<(String, String, String)>,
    /// Names that may also be ids (v2's plain strings), tried as ids when no entity has
    /// the name.
    pub(super) or_id: BTreeSet<String>,
}

pub(super) fn plan_refs(
    rules: &LinkRules,
    refs: &[EntityRef],
    min_entries: usize,
) -> Result<RefPlan, ValidationError> {
    let field = rules.kind.plural();
    if refs.len() < min_entries {
        return Err(ValidationError::new(field, format!("needs at least {min_entries} entry")));
    }
    if refs.len() > MAX_REFS_PER_CALL {
        return Err(ValidationError::new(field, format!("at most {MAX_REFS_PER_CALL} entries")));
    }
    let mut plan = RefPlan::default();
    for (i, r) in refs.iter().enumerate() {
        let path = format!("{field}.{i}");
        if let Some(name) = &r.name {
            // An empty `name_field`: the entry is the name itself (a list of strings).
            let name_path =
                if r.name_field.is_empty() { path.clone() } else { format!("{path}.{}", r.name_field) };
            (rules.validate_name)(&name_path, name)?;
        }
        match (&r.id, &r.name) {
            (None, None) => {
                return Err(ValidationError::new(path, "an entry needs an id or a name"));
            }
            (Some(id), name) => {
                check_len(&format!("{path}.id"), id, keygate_domain::MAX_NAME_CHARS)?;
                if let Some(name) = name {
                    plan.pairs.push((path, id.clone(), name.clone()));
                }
                plan.ids.insert(id.clone());
            }
            (None, Some(name)) => {
                let create = r.create.unwrap_or(rules.create_by_default);
                if plan.names.get(name).is_some_and(|&previous| previous != create) {
                    return Err(ValidationError::new(
                        path,
                        format!("{} {name} is listed twice with different create flags", rules.kind.noun()),
                    ));
                }
                plan.names.insert(name.clone(), create);
                if r.or_id {
                    plan.or_id.insert(name.clone());
                }
            }
        }
    }
    Ok(plan)
}

pub(super) fn created_action(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Permission => "permission.create",
        EntityKind::Role => "role.create",
    }
}

pub(super) fn deleted_action(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Permission => "permission.delete",
        EntityKind::Role => "role.delete",
    }
}

/// The request field naming an entity by id.
pub(super) fn id_field(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Permission => "permissionId",
        EntityKind::Role => "roleId",
    }
}

/// References for a removal: a name that does not exist is not found, never created.
pub(super) fn never_create(refs: &[EntityRef]) -> Vec<EntityRef> {
    refs.iter().map(|r| EntityRef { create: Some(false), ..r.clone() }).collect()
}

/// A plan's references resolved in a workspace (every 404 and 400 of the references
/// checked), not yet written.
pub(super) struct ResolvedLinks<'r> {
    pub(super) rules: &'r LinkRules,
    /// The existing entities referenced, by id.
    pub(super) existing: BTreeMap<String, Named>,
    /// Names to create, ascending.
    pub(super) to_create: Vec<String>,
}

impl ResolvedLinks<'_> {
    /// The permission that depends on what was resolved: creating a missing name (403).
    pub(super) fn authorize_creation(&self, p: &Principal) -> Result<(), RbacError> {
        if !self.to_create.is_empty() && !p.holds(self.rules.create_permission) {
            return Err(RbacError::missing(&[self.rules.create_permission]));
        }
        Ok(())
    }
}

/// Resolves ids and names (404 for a missing id or a name that may not be created, 400 for
/// an id and a name that disagree). Reads only.
pub(super) fn resolve_links<'r>(
    tx: &mut dyn RbacTx,
    ws: &str,
    rules: &'r LinkRules,
    plan: &RefPlan,
) -> Result<ResolvedLinks<'r>, RbacError> {
    let kind = rules.kind;
    let noun = kind.noun();
    let wanted: Vec<String> = plan.ids.iter().filter(|id| has_prefix(id, rules.id_prefix)).cloned().collect();
    let by_id: HashMap<String, Named> = if wanted.is_empty() {
        HashMap::new()
    } else {
        tx.entities_by_ids(kind, ws, &wanted)?.into_iter().map(|e| (e.id.clone(), e)).collect()
    };
    if let Some(missing) = plan.ids.iter().find(|id| !by_id.contains_key(*id)) {
        return Err(RbacError::not_found(kind.resource(), missing));
    }
    for (path, id, name) in &plan.pairs {
        let actual = &by_id[id].name;
        if actual != name {
            return Err(RbacError::BadRequest(format!(
                "{path}: {noun} {id} is named {actual:?}, not {name:?}"
            )));
        }
    }
    let names: Vec<String> = plan.names.keys().cloned().collect();
    let by_name: HashMap<String, Named> = if names.is_empty() {
        HashMap::new()
    } else {
        tx.entities_by_names(kind, ws, &names)?.into_iter().map(|e| (e.name.clone(), e)).collect()
    };
    // Names no entity has that may be ids (v2): the entities with those ids.
    let maybe_ids: Vec<String> = plan
        .or_id
        .iter()
        .filter(|n| !by_name.contains_key(*n) && has_prefix(n, rules.id_prefix))
        .cloned()
        .collect();
    let by_fallback_id: HashMap<String, Named> = if maybe_ids.is_empty() {
        HashMap::new()
    } else {
        tx.entities_by_ids(kind, ws, &maybe_ids)?.into_iter().map(|e| (e.id.clone(), e)).collect()
    };
    let mut to_create = Vec::new();
    for (name, &create) in &plan.names {
        if !by_name.contains_key(name) && !by_fallback_id.contains_key(name) {
            if !create {
                return Err(RbacError::not_found(kind.resource(), name));
            }
            to_create.push(name.clone());
        }
    }
    let existing = by_id
        .into_values()
        .chain(by_name.into_values())
        .chain(by_fallback_id.into_values())
        .map(|e| (e.id.clone(), e))
        .collect();
    Ok(ResolvedLinks { rules, existing, to_create })
}

/// Writes resolved links of `owner`: creates the missing names, attaches and detaches as
/// `mode` says, and appends the audit events to `events`. Returns every entity of the kind
/// now attached to the owner, sorted by name.
pub(super) fn write_links(
    tx: &mut dyn RbacTx,
    p: &Principal,
    owner: Owner<'_>,
    resolved: ResolvedLinks<'_>,
    mode: LinkMode,
    now: i64,
    events: &mut Vec<AuditEvent>,
) -> Result<Vec<Named>, RbacError> {
    let ResolvedLinks { rules, existing: mut target, to_create } = resolved;
    let kind = rules.kind;
    let noun = kind.noun();
    let ws = p.workspace_id.as_str();
    let event = |action: &'static str, resource_type: &'static str, id: &str| AuditEvent {
        key_id: match owner {
            Owner::Key(key_id) => Some(key_id.to_string()),
            Owner::Role(_) | Owner::RoleByRef(_) => None,
        },
        role_id: match owner {
            Owner::Key(_) => None,
            Owner::Role(role_id) | Owner::RoleByRef(role_id) => Some(role_id.to_string()),
        },
        ..AuditEvent::new(ws, &p.root_key_id, action, resource_type, id, now)
    };
    let created_action = created_action(kind);
    let (attach_action, detach_action) = owner.actions(kind);
    // `to_create` is in ascending name order (it comes from a BTreeMap).
    let fresh: Vec<Named> =
        to_create.into_iter().map(|name| Named::new(new_id(rules.id_prefix), name)).collect();
    if !fresh.is_empty() {
        for (stored, created) in tx.insert_entities_if_absent(kind, ws, &fresh, now)? {
            if created {
                events.push(event(created_action, noun, &stored.id));
            }
            target.insert(stored.id.clone(), stored);
        }
    }

    let current: BTreeMap<String, Named> =
        owner.current(tx, kind)?.into_iter().map(|e| (e.id.clone(), e)).collect();
    let attach: Vec<String> = match mode {
        LinkMode::Replace | LinkMode::Add => {
            target.keys().filter(|id| !current.contains_key(*id)).cloned().collect()
        }
        LinkMode::Remove => Vec::new(),
    };
    let detach: Vec<String> = match mode {
        LinkMode::Replace => current.keys().filter(|id| !target.contains_key(*id)).cloned().collect(),
        LinkMode::Add => Vec::new(),
        LinkMode::Remove => target.keys().filter(|id| current.contains_key(*id)).cloned().collect(),
    };
    if !detach.is_empty() {
        owner.unlink(tx, kind, &detach)?;
        events.extend(detach.iter().map(|id| event(detach_action, noun, id)));
    }
    if !attach.is_empty() {
        owner.link(tx, kind, ws, &attach, now)?;
        events.extend(attach.iter().map(|id| event(attach_action, noun, id)));
    }

    let mut result: Vec<Named> = match mode {
        LinkMode::Replace => target.into_values().collect(),
        LinkMode::Add => {
            let mut all = current;
            all.extend(target);
            all.into_values().collect()
        }
        LinkMode::Remove => current.into_values().filter(|e| !target.contains_key(&e.id)).collect(),
    };
    sort_by_name(&mut result);
    Ok(result)
}
