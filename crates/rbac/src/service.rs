use crate::cache::{self, AuthCache, Cached, NamespaceCache, OverrideCache};
use crate::store::{EntityKind, RbacStore, RbacTx};
use crate::{
    AuditEvent, Entity, Key, KeyView, NewKey, PermissionQuery, Principal, RbacError, RoleView, RootKey,
    Verification, VerifyCode, VerifyScope, Workspace,
};
use crate::{
    Effective, EntityRef, MAX_PATTERN_BYTES_PER_NAMESPACE, NamespaceRef, Override, OverrideSet, StorageError,
    is_pattern, validate_pattern,
};
use keygate_domain::{
    Clock, IdPrefix, MAX_NAME_CHARS, Named, Secret, ValidationError, check_len, digest_hex, has_prefix,
    new_id, random_token, secret_digest, sort_by_name, validate_key_id, validate_permission_name,
    validate_role_name, validate_root_key_secret,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// How long a verified root key is trusted without asking the store again (contract §2).
pub const AUTH_CACHE_TTL_MS: u64 = 10_000;

/// The most entries one `setPermissions`/`addRoles` call may carry.
pub const MAX_REFS_PER_CALL: usize = 1_000;

pub const PERM_ADD_PERMISSION_TO_KEY: &str = "rbac.*.add_permission_to_key";
pub const PERM_CREATE_PERMISSION: &str = "rbac.*.create_permission";
pub const PERM_ADD_ROLE_TO_KEY: &str = "rbac.*.add_role_to_key";
pub const PERM_REMOVE_PERMISSION_FROM_KEY: &str = "rbac.*.remove_permission_from_key";
pub const PERM_REMOVE_ROLE_FROM_KEY: &str = "rbac.*.remove_role_from_key";
pub const PERM_ADD_PERMISSION_TO_ROLE: &str = "rbac.*.add_permission_to_role";
pub const PERM_REMOVE_PERMISSION_FROM_ROLE: &str = "rbac.*.remove_permission_from_role";
pub const PERM_READ_PERMISSION: &str = "rbac.*.read_permission";
pub const PERM_DELETE_PERMISSION: &str = "rbac.*.delete_permission";
pub const PERM_READ_ROLE: &str = "rbac.*.read_role";
pub const PERM_DELETE_ROLE: &str = "rbac.*.delete_role";
/// Longest description of a permission or role.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
pub const PERM_CREATE_ROLE: &str = "rbac.*.create_role";
pub const PERM_READ_KEY: &str = "api.*.read_key";
pub const PERM_CREATE_KEY: &str = "api.*.create_key";
pub const PERM_DELETE_KEY: &str = "api.*.delete_key";
/// Longest `prefix` of `keys.createKey`.
pub const MAX_KEY_PREFIX_CHARS: usize = 8;
/// Largest serialized `meta` of a key.
pub const MAX_KEY_META_BYTES: usize = 64 * 1024;
pub const PERM_LIMIT: &str = "ratelimit.*.limit";
pub const PERM_CREATE_NAMESPACE: &str = "ratelimit.*.create_namespace";
/// How long an instance uses a namespace's overrides before reading them again. A change
/// made through this instance applies at once; through another one, within this time.
pub const OVERRIDE_CACHE_TTL_MS: u64 = 1_000;
/// The most overrides one namespace may hold.
pub const MAX_OVERRIDES_PER_NAMESPACE: usize = 1_000;

/// What differs between the permission and role operations; everything else is shared.
struct LinkRules {
    kind: EntityKind,
    id_prefix: IdPrefix,
    link_permission: &'static str,
    unlink_permission: &'static str,
    create_permission: &'static str,
    read_permission: &'static str,
    delete_permission: &'static str,
    /// Whether an unknown name is created when the entry says nothing about `create`.
    create_by_default: bool,
    validate_name: fn(&str, &str) -> Result<(), ValidationError>,
}

const PERMISSION_RULES: LinkRules = LinkRules {
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

const ROLE_RULES: LinkRules = LinkRules {
    kind: EntityKind::Role,
    id_prefix: IdPrefix::Role,
    link_permission: PERM_ADD_ROLE_TO_KEY,
    unlink_permission: PERM_REMOVE_ROLE_FROM_KEY,
    create_permission: PERM_CREATE_ROLE,
    read_permission: PERM_READ_ROLE,
    delete_permission: PERM_DELETE_ROLE,
    create_by_default: false,
    validate_name: validate_role_name,
};

/// Permissions attached to a role (rather than to a key).
const ROLE_PERMISSION_RULES: LinkRules = LinkRules {
    link_permission: PERM_ADD_PERMISSION_TO_ROLE,
    unlink_permission: PERM_REMOVE_PERMISSION_FROM_ROLE,
    ..PERMISSION_RULES
};

/// What links are changed on: a key (its permissions or roles) or a role (its permissions).
#[derive(Debug, Clone, Copy)]
enum Owner<'a> {
    Key(&'a str),
    Role(&'a str),
}

impl Owner<'_> {
    /// The request field that names it.
    fn id_field(self) -> &'static str {
        match self {
            Owner::Key(_) => "keyId",
            Owner::Role(_) => "roleId",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Owner::Key(_) => "key",
            Owner::Role(_) => "role",
        }
    }

    fn value(&self) -> &str {
        match self {
            Owner::Key(id) | Owner::Role(id) => id,
        }
    }

    /// Whether it exists in the workspace; locks it for the rest of the transaction, so
    /// that concurrent changes of its links serialize.
    fn lock(self, tx: &mut dyn RbacTx, ws: &str, now: i64) -> Result<bool, RbacError> {
        Ok(match self {
            Owner::Key(id) => has_prefix(id, IdPrefix::Key) && tx.lock_key(ws, id, now)?,
            Owner::Role(id) => has_prefix(id, IdPrefix::Role) && tx.lock_role(ws, id)?,
        })
    }

    fn current(self, tx: &mut dyn RbacTx, kind: EntityKind) -> Result<Vec<Named>, RbacError> {
        Ok(match self {
            Owner::Key(id) => tx.key_entities(kind, id)?,
            Owner::Role(id) => tx.role_permissions(&[id.to_string()])?,
        })
    }

    fn link(
        self,
        tx: &mut dyn RbacTx,
        kind: EntityKind,
        ws: &str,
        ids: &[String],
        now: i64,
    ) -> Result<(), RbacError> {
        match self {
            Owner::Key(id) => tx.link_key_entities(kind, ws, id, ids, now)?,
            Owner::Role(id) => tx.link_role_permissions(ws, id, ids, now)?,
        }
        Ok(())
    }

    fn unlink(self, tx: &mut dyn RbacTx, kind: EntityKind, ids: &[String]) -> Result<(), RbacError> {
        match self {
            Owner::Key(id) => tx.unlink_key_entities(kind, id, ids)?,
            Owner::Role(id) => tx.unlink_role_permissions(id, ids)?,
        }
        Ok(())
    }

    /// (attach, detach) audit actions.
    fn actions(self, kind: EntityKind) -> (&'static str, &'static str) {
        match (self, kind) {
            (Owner::Key(_), EntityKind::Permission) => ("key.attach_permission", "key.detach_permission"),
            (Owner::Key(_), EntityKind::Role) => ("key.attach_role", "key.detach_role"),
            (Owner::Role(_), _) => ("role.attach_permission", "role.detach_permission"),
        }
    }
}

fn rules_of(kind: EntityKind) -> &'static LinkRules {
    match kind {
        EntityKind::Permission => &PERMISSION_RULES,
        EntityKind::Role => &ROLE_RULES,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkMode {
    /// The key ends with exactly the listed entities.
    Replace,
    /// The listed entities are attached; the others stay.
    Add,
    /// The listed entities are detached (each must exist; attached or not); the others stay.
    Remove,
}

impl LinkMode {
    /// The root-key permission the operation always needs.
    fn required(self, rules: &LinkRules) -> &'static str {
        match self {
            LinkMode::Replace | LinkMode::Add => rules.link_permission,
            LinkMode::Remove => rules.unlink_permission,
        }
    }
}

/// The validated, de-duplicated content of a list of references.
#[derive(Debug, Default)]
struct RefPlan {
    ids: BTreeSet<String>,
    /// name -> whether to create it when missing.
    names: BTreeMap<String, bool>,
    /// Entries that gave both: (path, id, name); they must agree.
    pairs: Vec<(String, String, String)>,
}

fn plan_refs(rules: &LinkRules, refs: &[EntityRef], min_entries: usize) -> Result<RefPlan, ValidationError> {
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
            }
        }
    }
    Ok(plan)
}

fn created_action(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Permission => "permission.create",
        EntityKind::Role => "role.create",
    }
}

fn deleted_action(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Permission => "permission.delete",
        EntityKind::Role => "role.delete",
    }
}

/// The request field naming an entity by id.
fn id_field(kind: EntityKind) -> &'static str {
    match kind {
        EntityKind::Permission => "permissionId",
        EntityKind::Role => "roleId",
    }
}

/// References for a removal: a name that does not exist is not found, never created.
fn never_create(refs: &[EntityRef]) -> Vec<EntityRef> {
    refs.iter().map(|r| EntityRef { create: Some(false), ..r.clone() }).collect()
}

/// A plan's references resolved in a workspace (every 404 and 400 of the references
/// checked), not yet written.
struct ResolvedLinks<'r> {
    rules: &'r LinkRules,
    /// The existing entities referenced, by id.
    existing: BTreeMap<String, Named>,
    /// Names to create, ascending.
    to_create: Vec<String>,
}

impl ResolvedLinks<'_> {
    /// The permission that depends on what was resolved: creating a missing name (403).
    fn authorize_creation(&self, p: &Principal) -> Result<(), RbacError> {
        if !self.to_create.is_empty() && !p.holds(self.rules.create_permission) {
            return Err(RbacError::missing(&[self.rules.create_permission]));
        }
        Ok(())
    }
}

/// Resolves ids and names (404 for a missing id or a name that may not be created, 400 for
/// an id and a name that disagree). Reads only.
fn resolve_links<'r>(
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
        return Err(RbacError::NotFound(format!("{noun} {missing} not found")));
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
    let mut to_create = Vec::new();
    for (name, &create) in &plan.names {
        if !by_name.contains_key(name) {
            if !create {
                return Err(RbacError::NotFound(format!("{noun} {name} not found")));
            }
            to_create.push(name.clone());
        }
    }
    let existing = by_id.into_values().chain(by_name.into_values()).map(|e| (e.id.clone(), e)).collect();
    Ok(ResolvedLinks { rules, existing, to_create })
}

/// Writes resolved links of `owner`: creates the missing names, attaches and detaches as
/// `mode` says, and appends the audit events to `events`. Returns every entity of the kind
/// now attached to the owner, sorted by name.
fn write_links(
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
        workspace_id: ws.to_string(),
        actor_id: p.root_key_id.clone(),
        action,
        resource_type,
        resource_id: id.to_string(),
        key_id: match owner {
            Owner::Key(key_id) => Some(key_id.to_string()),
            Owner::Role(_) => None,
        },
        role_id: match owner {
            Owner::Key(_) => None,
            Owner::Role(role_id) => Some(role_id.to_string()),
        },
        at: now,
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

/// Told after a namespace's rate-limit overrides changed (committed). The server passes
/// it on to a shared rate-limit store, so that every instance reloads them on its next
/// request (contract §6), not only this one.
pub trait OverridesListener: Send + Sync + std::fmt::Debug {
    fn overrides_changed(&self, namespace_id: &str);
}

/// The RBAC service: authentication, authorization and the key/permission/role/namespace
/// operations, over any [`RbacStore`].
#[derive(Debug)]
pub struct RbacService<S> {
    store: S,
    clock: Arc<dyn Clock>,
    auth: AuthCache,
    namespaces: NamespaceCache,
    overrides: OverrideCache,
    overrides_listener: Option<Arc<dyn OverridesListener>>,
}

impl<S: RbacStore> RbacService<S> {
    pub fn new(store: S, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            auth: AuthCache::for_root_keys(AUTH_CACHE_TTL_MS),
            namespaces: NamespaceCache::default(),
            overrides: OverrideCache::new(OVERRIDE_CACHE_TTL_MS),
            overrides_listener: None,
        }
    }

    /// Registers the one [`OverridesListener`].
    pub fn with_overrides_listener(mut self, listener: Arc<dyn OverridesListener>) -> Self {
        self.overrides_listener = Some(listener);
        self
    }

    /// A namespace's overrides changed: drop this instance's copy, tell the listener.
    fn overrides_changed(&self, namespace_id: &str) {
        self.overrides.evict(namespace_id);
        if let Some(l) = &self.overrides_listener {
            l.overrides_changed(namespace_id);
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn now(&self) -> i64 {
        self.clock.now_ms() as i64
    }

    // ---------------------------------------------------------------- authentication

    fn check_principal(&self, p: Option<Arc<Principal>>) -> Result<Arc<Principal>, RbacError> {
        p.ok_or_else(|| RbacError::Unauthorized("the root key is unknown or revoked".into()))
    }

    /// Answers from the cache only: `None` means the store must be asked
    /// ([`Self::authenticate`]). Never blocks on I/O. When the answer says `refresh`, the
    /// caller should call [`Self::refresh_root_key`] off the request path.
    pub fn authenticate_cached(&self, token: &str) -> Option<Cached<Result<Arc<Principal>, RbacError>>> {
        let digest = secret_digest(token);
        self.auth.lookup(&digest, self.clock.monotonic_ms(), |p| self.check_principal(p.clone()))
    }

    /// Verifies a root key: cache first, then the store (one read per key at a time).
    pub fn authenticate(&self, token: &str) -> Result<Arc<Principal>, RbacError> {
        let digest = secret_digest(token);
        // This caller loads on a miss: it never takes an entry's refresh (see TtlCache::peek).
        let cached =
            || self.auth.peek(&digest, self.clock.monotonic_ms(), |p| self.check_principal(p.clone()));
        if let Some(answer) = cached() {
            return answer;
        }
        let _loading = self.auth.load_lock(&digest);
        if let Some(answer) = cached() {
            return answer;
        }
        self.check_principal(self.load_root_key(&digest)?)
    }

    /// Reads a cached root key again (revoked or changed since?), for
    /// [`Self::authenticate_cached`]'s `refresh`.
    pub fn refresh_root_key(&self, token: &str) -> Result<(), RbacError> {
        let digest = secret_digest(token);
        let _loading = self.auth.load_lock(&digest);
        self.load_root_key(&digest).map(drop)
    }

    /// The root key from the store, into the cache. An expired key is 403 and not cached.
    fn load_root_key(&self, digest: &cache::Digest) -> Result<Option<Arc<Principal>>, RbacError> {
        let generation = self.auth.generation();
        let (now, age_origin) = (self.clock.now_ms(), self.clock.monotonic_ms());
        let hash = digest_hex(digest);
        let found = self.store.read(|tx| Ok(tx.root_key_by_hash(&hash)?))?;
        if found.as_ref().is_some_and(|rk| rk.expires_at.is_some_and(|e| e <= now as i64)) {
            self.auth.evict(digest);
            return Err(RbacError::Forbidden("the root key has expired".into()));
        }
        let principal = found.map(|rk| Arc::new(Principal::new(rk.id, rk.workspace_id, rk.permissions)));
        self.auth.put(*digest, principal.clone(), age_origin, generation);
        Ok(principal)
    }

    // ---------------------------------------------------------------- keys and links

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

    fn change_links(
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

    fn change_links_of(
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
        self.store.transaction(|tx| {
            let now = self.now();
            if !owner.lock(tx, ws, now)? {
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
        self.store.read(|tx| {
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
            validate_role_name("name", n)?;
        }
        let (key, secret) = self.new_key(workspace_id, NewKey { name, ..NewKey::default() });
        self.store.transaction(|tx| Ok(tx.insert_key(&key, &secret.hash())?))?;
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
            validate_role_name("name", n)?;
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
        self.store.transaction(|tx| {
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
    fn new_key(&self, workspace_id: &str, new: NewKey) -> (Key, Secret) {
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

    /// `keys.verifyKey`: whether `secret` is a key that is enabled, not expired and, when
    /// `query` is given, holds the permissions it asks for (directly or through its roles).
    /// Needs no root key: the secret is the credential. Reads the store on every call, so a
    /// change (setPermissions, deleteKey) is visible to the next verification.
    ///
    /// `scope` narrows which keys can be found: a key outside it answers `NOT_FOUND`,
    /// exactly as a key that does not exist (a gateway of one tenant never sees another
    /// tenant's keys as valid).
    pub fn verify_key(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Result<Verification, RbacError> {
        let not_found = Verification {
            code: VerifyCode::NotFound,
            key: None,
            permissions: Vec::new(),
            roles: Vec::new(),
        };
        if secret.is_empty() {
            return Ok(not_found);
        }
        let hash = digest_hex(&secret_digest(secret));
        let now = self.now();
        self.store.read(|tx| {
            let Some(key) = tx.key_by_hash(&hash)?.filter(|k| scope.admits(k)) else {
                return Ok(not_found);
            };
            let mut roles = tx.key_entities(EntityKind::Role, &key.id)?;
            let role_ids: Vec<String> = roles.iter().map(|r| r.id.clone()).collect();
            // Direct and through roles, each once; a BTreeSet's order is byte order.
            let permissions: Vec<String> = tx
                .key_entities(EntityKind::Permission, &key.id)?
                .into_iter()
                .chain(if role_ids.is_empty() { Vec::new() } else { tx.role_permissions(&role_ids)? })
                .map(|p| p.name)
                .collect::<BTreeSet<String>>()
                .into_iter()
                .collect();
            sort_by_name(&mut roles);
            let code = if !key.enabled {
                VerifyCode::Disabled
            } else if key.expires.is_some_and(|e| e <= now) {
                VerifyCode::Expired
            } else if query
                .is_some_and(|q| !q.satisfied_by(&permissions.iter().map(String::as_str).collect()))
            {
                VerifyCode::InsufficientPermissions
            } else {
                VerifyCode::Valid
            };
            Ok(Verification {
                code,
                key: Some(key),
                permissions,
                roles: roles.into_iter().map(|r| r.name).collect(),
            })
        })
    }

    /// `keys.deleteKey`: deletes the key and its links to permissions and roles.
    pub fn delete_key(&self, p: &Principal, key_id: &str) -> Result<(), RbacError> {
        validate_key_id("keyId", key_id)?;
        if !p.holds(PERM_DELETE_KEY) {
            return Err(RbacError::missing(&[PERM_DELETE_KEY]));
        }
        let ws = p.workspace_id.as_str();
        self.store.transaction(|tx| {
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

    // ---------------------------------------------------------------- permissions and roles

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
        self.store.transaction(|tx| {
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
    fn workspace_event(
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

    // ---------------------------------------------------------------- overrides

    /// The override for `identifier` in the namespace and the epoch it was loaded under, from
    /// the cache only: `Some` with `(found, epoch)`, or `None` when the store must be asked
    /// ([`Self::load_overrides`]). Never blocks on I/O. When the answer says `refresh`, the
    /// caller should call [`Self::refresh_overrides`] off the request path.
    pub fn override_cached(
        &self,
        namespace_id: &str,
        identifier: &str,
    ) -> Option<Cached<(Option<Effective>, u64)>> {
        self.overrides.find(namespace_id, identifier, self.clock.monotonic_ms())
    }

    /// The namespace's overrides, read under `epoch` or a later one: from the cache when a
    /// caller that missed at the same time has just loaded them, else from the store (and
    /// into the cache). `epoch` is the namespace's overrides epoch in the shared rate-limit
    /// store (0 without one), read *before* this call: a change committed after that read
    /// bumps the epoch after its commit, so a decision made with this set under this epoch
    /// is refused as stale.
    pub fn load_overrides(&self, namespace_id: &str, epoch: u64) -> Result<Arc<OverrideSet>, RbacError> {
        let _loading = self.overrides.load_lock(namespace_id);
        let cached = self
            .overrides
            .peek(namespace_id, self.clock.monotonic_ms(), |(set, at)| (*at >= epoch).then(|| set.clone()));
        match cached.flatten() {
            Some(set) => Ok(set),
            None => self.read_overrides(namespace_id, epoch),
        }
    }

    /// Reads the namespace's overrides again, for [`Self::override_cached`]'s `refresh`
    /// (`epoch` as in [`Self::load_overrides`]).
    pub fn refresh_overrides(&self, namespace_id: &str, epoch: u64) -> Result<(), RbacError> {
        let _loading = self.overrides.load_lock(namespace_id);
        self.read_overrides(namespace_id, epoch).map(drop)
    }

    fn read_overrides(&self, namespace_id: &str, epoch: u64) -> Result<Arc<OverrideSet>, RbacError> {
        let generation = self.overrides.generation();
        let now = self.clock.monotonic_ms();
        let set = Arc::new(OverrideSet::new(self.store.read(|tx| Ok(tx.overrides(namespace_id)?))?));
        self.overrides.put(namespace_id.into(), (set.clone(), epoch), now, generation);
        Ok(set)
    }

    /// Resolves a namespace named by id or name (404 when missing) and checks the caller
    /// holds `ratelimit.*.<action>` or `ratelimit.<namespaceId>.<action>` (403).
    fn override_namespace(
        &self,
        tx: &mut dyn RbacTx,
        p: &Principal,
        ns: &NamespaceRef,
        action: &str,
    ) -> Result<Named, RbacError> {
        let ws = p.workspace_id.as_str();
        let found = match (&ns.id, &ns.name) {
            (Some(id), name) => {
                let found =
                    if has_prefix(id, IdPrefix::Namespace) { tx.namespace_by_id(ws, id)? } else { None };
                let found = found.ok_or_else(|| RbacError::NotFound(format!("namespace {id} not found")))?;
                if let Some(name) = name
                    && *name != found.name
                {
                    return Err(RbacError::BadRequest(format!(
                        "namespaceName: namespace {id} is named {:?}, not {name:?}",
                        found.name
                    )));
                }
                found
            }
            (None, Some(name)) => tx
                .namespace_by_name(ws, name)?
                .ok_or_else(|| RbacError::NotFound(format!("namespace {name} not found")))?,
            (None, None) => {
                // validate() refuses this case; the same 400 if a caller skipped it.
                ns.validate()?;
                return Err(RbacError::BadRequest("namespaceId: is required".into()));
            }
        };
        let any = format!("ratelimit.*.{action}");
        if !p.holds(&any) && !p.holds(&format!("ratelimit.{}.{action}", found.id)) {
            return Err(RbacError::missing(&[any.as_str()]));
        }
        Ok(found)
    }

    /// The early 403: the caller holds the action for all namespaces or for some.
    fn check_override_any(&self, p: &Principal, action: &str) -> Result<(), RbacError> {
        let any = format!("ratelimit.*.{action}");
        let suffix = format!(".{action}");
        if p.holds(&any) || p.permissions().any(|x| x.starts_with("ratelimit.") && x.ends_with(&suffix)) {
            Ok(())
        } else {
            Err(RbacError::missing(&[any.as_str()]))
        }
    }

    /// `ratelimits.setOverride`: creates or updates the override of `identifier` (a pattern
    /// when it contains `*`); returns it.
    pub fn set_override(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        identifier: &str,
        limit: u64,
        duration: u64,
        is_async: bool,
    ) -> Result<Override, RbacError> {
        ns.validate()?;
        check_len("identifier", identifier, keygate_domain::MAX_IDENTIFIER_CHARS)?;
        validate_pattern(identifier)?;
        self.check_override_any(p, "set_override")?;
        let ws = p.workspace_id.as_str();
        let stored = self.store.transaction(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "set_override")?;
            tx.lock_namespace(&namespace.id)?;
            let existing = tx.overrides(&namespace.id)?;
            if existing.len() >= MAX_OVERRIDES_PER_NAMESPACE
                && !existing.iter().any(|o| o.identifier == identifier)
            {
                return Err(RbacError::BadRequest(format!(
                    "identifier: namespace {} already has {MAX_OVERRIDES_PER_NAMESPACE} overrides",
                    namespace.name
                )));
            }
            if is_pattern(identifier) {
                let others: usize = existing
                    .iter()
                    .filter(|o| is_pattern(&o.identifier) && o.identifier != identifier)
                    .map(|o| o.identifier.len())
                    .sum();
                if others + identifier.len() > MAX_PATTERN_BYTES_PER_NAMESPACE {
                    return Err(RbacError::BadRequest(format!(
                        "identifier: the patterns of namespace {} may hold at most \
                         {MAX_PATTERN_BYTES_PER_NAMESPACE} bytes together ({others} in use)",
                        namespace.name
                    )));
                }
            }
            let fresh = Override {
                id: new_id(IdPrefix::Override),
                namespace_id: namespace.id.clone(),
                identifier: identifier.to_string(),
                limit,
                duration,
                is_async,
                seq: 0,
            };
            let now = self.now();
            let stored = tx.upsert_override(ws, &fresh, now)?;
            tx.insert_audit_events(&[Self::workspace_event(
                p,
                "ratelimit_override.set",
                "ratelimit_override",
                &stored.id,
                now,
            )])?;
            Ok(stored)
        })?;
        self.overrides_changed(&stored.namespace_id);
        Ok(stored)
    }

    /// `ratelimits.getOverride`: the override of exactly `identifier` (404 otherwise).
    pub fn get_override(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        identifier: &str,
    ) -> Result<Override, RbacError> {
        ns.validate()?;
        check_len("identifier", identifier, keygate_domain::MAX_IDENTIFIER_CHARS)?;
        self.check_override_any(p, "read_override")?;
        self.store.read(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "read_override")?;
            tx.overrides(&namespace.id)?
                .into_iter()
                .find(|o| o.identifier == identifier)
                .ok_or_else(|| RbacError::NotFound(format!("override {identifier} not found")))
        })
    }

    /// `ratelimits.listOverrides`: every override of the namespace, oldest first.
    pub fn list_overrides(&self, p: &Principal, ns: &NamespaceRef) -> Result<Vec<Override>, RbacError> {
        ns.validate()?;
        self.check_override_any(p, "read_override")?;
        self.store.read(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "read_override")?;
            Ok(tx.overrides(&namespace.id)?)
        })
    }

    /// `ratelimits.deleteOverride`: deletes the override of exactly `identifier`.
    pub fn delete_override(
        &self,
        p: &Principal,
        ns: &NamespaceRef,
        identifier: &str,
    ) -> Result<(), RbacError> {
        ns.validate()?;
        check_len("identifier", identifier, keygate_domain::MAX_IDENTIFIER_CHARS)?;
        self.check_override_any(p, "delete_override")?;
        let namespace_id = self.store.transaction(|tx| {
            let namespace = self.override_namespace(tx, p, ns, "delete_override")?;
            tx.lock_namespace(&namespace.id)?;
            let Some(id) = tx.delete_override(&namespace.id, identifier)? else {
                return Err(RbacError::NotFound(format!("override {identifier} not found")));
            };
            let now = self.now();
            tx.insert_audit_events(&[Self::workspace_event(
                p,
                "ratelimit_override.delete",
                "ratelimit_override",
                &id,
                now,
            )])?;
            Ok(namespace.id)
        })?;
        self.overrides_changed(&namespace_id);
        Ok(())
    }

    // ---------------------------------------------------------------- namespaces

    /// Early check: the caller can limit in at least some namespace.
    fn check_limit_any(&self, p: &Principal) -> Result<bool, RbacError> {
        if p.holds(PERM_LIMIT) {
            return Ok(true);
        }
        if p.permissions().any(|x| x.starts_with("ratelimit.") && x.ends_with(".limit")) {
            return Ok(false);
        }
        Err(RbacError::missing(&[PERM_LIMIT]))
    }

    fn check_limit_in(
        &self,
        p: &Principal,
        all: bool,
        ns_name: &str,
        ns_id: Arc<String>,
    ) -> Result<Arc<String>, RbacError> {
        if all || p.holds(&format!("ratelimit.{ns_id}.limit")) {
            Ok(ns_id)
        } else {
            Err(RbacError::InsufficientPermissions(format!(
                "the root key lacks the permission {PERM_LIMIT} (or ratelimit.{ns_id}.limit for namespace {ns_name})"
            )))
        }
    }

    /// The namespace id for `name`, from the cache only; `None` means the store must be
    /// asked ([`Self::resolve_namespace`]). Never blocks on I/O.
    pub fn namespace_cached(&self, p: &Principal, name: &str) -> Option<Result<Arc<String>, RbacError>> {
        let all = match self.check_limit_any(p) {
            Ok(all) => all,
            Err(e) => return Some(Err(e)),
        };
        let id = self.namespaces.get(&p.workspace_id, name)?;
        Some(self.check_limit_in(p, all, name, id))
    }

    /// The namespace id for `name`, creating the namespace when the caller may.
    pub fn resolve_namespace(&self, p: &Principal, name: &str) -> Result<Arc<String>, RbacError> {
        keygate_domain::validate_namespace_name("namespace", name)?;
        let all = self.check_limit_any(p)?;
        let ws = p.workspace_id.as_str();
        if let Some(id) = self.namespaces.get(ws, name) {
            return self.check_limit_in(p, all, name, id);
        }
        let found = self.store.read(|tx| Ok(tx.namespace_by_name(ws, name)?))?;
        let ns = match found {
            Some(ns) => ns,
            None => {
                if !p.holds(PERM_CREATE_NAMESPACE) {
                    return Err(RbacError::InsufficientPermissions(format!(
                        "namespace {name} does not exist; the root key needs {PERM_CREATE_NAMESPACE} to create it"
                    )));
                }
                if !all {
                    return Err(RbacError::missing(&[PERM_LIMIT]));
                }
                self.store.transaction(|tx| {
                    let fresh = Named::new(new_id(IdPrefix::Namespace), name);
                    let (ns, created) = tx.insert_namespace_if_absent(ws, &fresh, self.now())?;
                    if created {
                        tx.insert_audit_events(&[Self::workspace_event(
                            p,
                            "ratelimit_namespace.create",
                            "ratelimit_namespace",
                            &ns.id,
                            self.now(),
                        )])?;
                    }
                    Ok(ns)
                })?
            }
        };
        let id = Arc::new(ns.id);
        self.namespaces.put(ws, name, id.clone());
        self.check_limit_in(p, all, name, id)
    }

    // ---------------------------------------------------------------- administration

    /// First start: when no workspace exists, creates workspace `default` and a root key
    /// holding `*` (the given secret, or a fresh one). `None` when already bootstrapped.
    pub fn bootstrap(
        &self,
        secret: Option<Secret>,
    ) -> Result<Option<(Workspace, RootKey, Secret)>, RbacError> {
        let result = self.store.transaction(|tx| {
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
        validate_role_name("name", name)?;
        if has_prefix(name, IdPrefix::Workspace) {
            return Err(ValidationError::new("name", "must not look like a workspace id (ws_...)").into());
        }
        self.store.transaction(|tx| {
            if tx.find_workspace(name)?.is_some() {
                return Err(RbacError::Conflict(format!("workspace {name} already exists")));
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
        let not_found = || RbacError::NotFound(format!("key {key_id} not found"));
        if !has_prefix(key_id, IdPrefix::Key) {
            return Err(not_found());
        }
        let key = self.store.read(|tx| Ok(tx.find_key(key_id)?))?.ok_or_else(not_found)?;
        let admin = Principal::new("admin-cli".into(), key.workspace_id, ["*".to_string()]);
        self.delete_key(&admin, key_id)
    }

    /// A workspace by id or name.
    pub fn find_workspace(&self, id_or_name: &str) -> Result<Workspace, RbacError> {
        self.store
            .read(|tx| Ok(tx.find_workspace(id_or_name)?))?
            .ok_or_else(|| RbacError::NotFound(format!("workspace {id_or_name} not found")))
    }

    fn insert_root_key(
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
        self.store.transaction(|tx| self.insert_root_key(tx, &ws.id, perms, None))
    }

    pub fn list_root_keys(&self, workspace: &str) -> Result<Vec<RootKey>, RbacError> {
        let ws = self.find_workspace(workspace)?;
        self.store.read(|tx| Ok(tx.list_root_keys(&ws.id)?))
    }

    /// Revokes a root key; this instance rejects it at once.
    pub fn revoke_root_key(&self, id: &str) -> Result<(), RbacError> {
        let now = self.now();
        let revoked = self.store.transaction(|tx| Ok(tx.revoke_root_key(id, now)?))?;
        self.auth.evict_root_key(id);
        if revoked { Ok(()) } else { Err(RbacError::NotFound(format!("root key {id} not found"))) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(rules: &LinkRules, refs: &[EntityRef]) -> Result<RefPlan, String> {
        plan_refs(rules, refs, 0).map_err(|e| e.to_string())
    }

    #[test]
    fn entries_need_an_id_or_a_name() {
        let err = plan(&PERMISSION_RULES, &[EntityRef::by_name("a"), EntityRef::default()]).unwrap_err();
        assert_eq!(err, "permissions.1: an entry needs an id or a name");
        let err = plan(&ROLE_RULES, &[EntityRef { create: Some(true), ..EntityRef::default() }]).unwrap_err();
        assert_eq!(err, "roles.0: an entry needs an id or a name");
    }

    #[test]
    fn duplicates_merge_and_create_defaults_differ_by_kind() {
        let refs = [
            EntityRef::by_name("a"),
            EntityRef::by_name("a"),
            EntityRef::by_id("perm_1"),
            EntityRef::by_id("perm_1"),
        ];
        let p = plan(&PERMISSION_RULES, &refs).unwrap();
        assert_eq!(p.ids.len(), 1);
        assert_eq!(p.names.get("a"), Some(&true), "permissions are created by default");
        let p = plan(&ROLE_RULES, &[EntityRef::by_name("r")]).unwrap();
        assert_eq!(p.names.get("r"), Some(&false), "roles are not");
        // Absent and true are the same effective flag for permissions: merged.
        assert!(
            plan(&PERMISSION_RULES, &[EntityRef::by_name("a"), EntityRef::by_name("a").with_create(true)])
                .is_ok()
        );
        let err =
            plan(&PERMISSION_RULES, &[EntityRef::by_name("a"), EntityRef::by_name("a").with_create(false)])
                .unwrap_err();
        assert!(err.starts_with("permissions.1: "), "{err}");
    }

    #[test]
    fn names_are_validated_at_the_field_they_came_from() {
        let slug = EntityRef { name: Some("bad name".into()), name_field: "slug", ..EntityRef::default() };
        assert!(plan(&PERMISSION_RULES, &[slug]).unwrap_err().starts_with("permissions.0.slug: "));
        assert!(
            plan(&ROLE_RULES, &[EntityRef::by_name("bad\u{7}")]).unwrap_err().starts_with("roles.0.name: ")
        );
        assert!(
            plan(&PERMISSION_RULES, &[EntityRef::by_id("")]).unwrap_err().starts_with("permissions.0.id: ")
        );
        let both = EntityRef { id: Some("perm_1".into()), name: Some("a".into()), ..EntityRef::by_name("a") };
        let p = plan(&PERMISSION_RULES, &[both]).unwrap();
        assert_eq!(p.pairs, vec![("permissions.0".to_string(), "perm_1".to_string(), "a".to_string())]);
        assert!(p.names.is_empty(), "an entry with an id is resolved by id");
    }

    #[test]
    fn entry_counts_are_bounded() {
        assert_eq!(plan_refs(&ROLE_RULES, &[], 1).unwrap_err().to_string(), "roles: needs at least 1 entry");
        let many: Vec<EntityRef> =
            (0..=MAX_REFS_PER_CALL).map(|i| EntityRef::by_name(format!("p{i}"))).collect();
        assert_eq!(plan(&PERMISSION_RULES, &many).unwrap_err(), "permissions: at most 1000 entries");
    }

    #[test]
    fn principals_hold_star_or_the_exact_string() {
        let p = Principal::new("rk".into(), "ws".into(), ["rbac.*.create_role".to_string()]);
        assert!(p.holds("rbac.*.create_role"));
        assert!(!p.holds("rbac.x.create_role"), "`*` inside a permission is not a pattern");
        assert!(!p.holds("rbac.*.create_permission"));
        let all = Principal::new("rk".into(), "ws".into(), ["*".to_string()]);
        assert!(all.holds("anything.at.all"));
    }
}
