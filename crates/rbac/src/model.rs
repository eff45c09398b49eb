use crate::{Credits, CreditsUpdate};
use keygate_domain::Named;

/// A workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

/// A root key as stored (the secret itself is never stored, only its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootKey {
    pub id: String,
    pub workspace_id: String,
    /// The secret's first characters (`start`).
    pub prefix: String,
    /// The secret's last 4 characters (`end`; `""` for keys made before it was kept).
    pub end: String,
    pub name: Option<String>,
    /// A disabled root key is refused (403) until enabled again.
    pub enabled: bool,
    pub permissions: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    /// When it last authenticated a request (unix ms), written behind: within a minute.
    pub last_used_at: Option<i64>,
}

impl RootKey {
    /// Whether it may authenticate at `now`: `Err` says why not (disabled, or expired).
    pub fn usable_at(&self, now: i64) -> Result<(), crate::RbacError> {
        if !self.enabled {
            return Err(crate::RbacError::Forbidden("the root key is disabled".into()));
        }
        if self.expires_at.is_some_and(|e| e <= now) {
            return Err(crate::RbacError::Forbidden("the root key has expired".into()));
        }
        Ok(())
    }
}

/// An authenticated root key: who calls, in which workspace, holding what.
#[derive(Debug)]
pub struct Principal {
    pub root_key_id: String,
    pub workspace_id: String,
    permissions: foldhash::HashSet<String>,
    /// Whether `permissions` holds `*` (asked on every request: kept, not looked up).
    wildcard: bool,
    /// The root key's change counter when it was loaded (`None`: not loaded from a store).
    tag: Option<crate::counters::Tag>,
    /// That counter's name (`Scope::RootKey(id).name()`), kept: checked on every decision
    /// in Redis mode.
    counter: String,
    /// When this instance last noted the key's use (the clock's monotonic ms;
    /// `RbacService::note_root_key_use`), `i64::MIN` before the first.
    noted_use: std::sync::atomic::AtomicI64,
}

impl Clone for Principal {
    fn clone(&self) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        Self {
            root_key_id: self.root_key_id.clone(),
            workspace_id: self.workspace_id.clone(),
            permissions: self.permissions.clone(),
            wildcard: self.wildcard,
            tag: self.tag,
            counter: self.counter.clone(),
            noted_use: self.noted_use.load(Relaxed).into(),
        }
    }
}

impl Principal {
    pub fn new(
        root_key_id: String,
        workspace_id: String,
        permissions: impl IntoIterator<Item = String>,
    ) -> Self {
        let permissions: foldhash::HashSet<String> = permissions.into_iter().collect();
        let wildcard = permissions.contains("*");
        let counter = crate::counters::Scope::RootKey(&root_key_id).name();
        Self {
            root_key_id,
            workspace_id,
            permissions,
            wildcard,
            tag: None,
            counter,
            noted_use: i64::MIN.into(),
        }
    }

    /// Whether this use should be written down (the last one noted is a minute old or
    /// more, on the monotonic clock `monotonic_ms`): true for one caller per minute and
    /// instance.
    pub(crate) fn take_use(&self, monotonic_ms: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = i64::try_from(monotonic_ms).unwrap_or(i64::MAX);
        let noted = self.noted_use.load(Relaxed);
        now.saturating_sub(noted) >= 60_000
            && self.noted_use.compare_exchange(noted, now, Relaxed, Relaxed).is_ok()
    }

    /// The principal as loaded under the root key's change counter `tag`.
    pub(crate) fn loaded_under(mut self, tag: crate::counters::Tag) -> Self {
        self.tag = Some(tag);
        self
    }

    /// The root key's change counter as it was loaded under (`None` with counters in
    /// memory, where the cache is kept exact by evictions instead).
    pub fn tag(&self) -> Option<crate::counters::Tag> {
        self.tag
    }

    /// The name of the root key's change counter ([`crate::counters::Scope::RootKey`]).
    pub fn counter_name(&self) -> &str {
        &self.counter
    }

    /// `*` or exactly `permission`; strings are compared literally.
    pub fn holds(&self, permission: &str) -> bool {
        self.wildcard || self.permissions.contains(permission)
    }

    pub fn permissions(&self) -> impl Iterator<Item = &str> {
        self.permissions.iter().map(String::as_str)
    }
}

/// An API object (API-v2.md §10): a group of keys, named; deleting it deletes its keys.
/// Its id is `api_…`, or the `apiId` label keys carried before API objects existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub created_at: i64,
}

/// `keys.updateKey` (API-v2.md §12.3): each field absent (unchanged), cleared or set;
/// `enabled`, `roles` and `permissions` absent or set (the lists replace, as `setRoles`
/// and `setPermissions` do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyUpdate {
    pub name: keygate_domain::Patch<String>,
    /// The identity's `externalId` (created when missing); cleared: unlinked.
    pub external_id: keygate_domain::Patch<String>,
    /// A JSON object as text.
    pub meta: keygate_domain::Patch<String>,
    pub expires: keygate_domain::Patch<i64>,
    /// Cleared: unlimited.
    pub credits: keygate_domain::Patch<CreditsUpdate>,
    /// The whole set (cleared: none); a kept name keeps its id.
    pub ratelimits: keygate_domain::Patch<Vec<NewRateLimit>>,
    pub enabled: Option<bool>,
    pub roles: Option<Vec<String>>,
    pub permissions: Option<Vec<String>>,
}

/// An identity (API-v2.md §11): one customer of the workspace, named by the caller's
/// `external_id`; its keys share its `meta` and its rate limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub id: String,
    pub workspace_id: String,
    pub external_id: String,
    /// A JSON object as text.
    pub meta: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A rate-limit configuration of an identity or a key: applied by verifications that name
/// it, or by every one when `auto_apply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    pub id: String,
    pub name: String,
    pub limit: u64,
    pub duration: u64,
    pub auto_apply: bool,
}

/// Whose rate limits: an identity's or a key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitOwner<'a> {
    Identity(&'a str),
    Key(&'a str),
}

/// An identity with its rate limits (sorted by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityView {
    pub identity: Identity,
    pub ratelimits: Vec<RateLimitConfig>,
}

/// A rate limit as a request gives it (`RatelimitRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRateLimit {
    pub name: String,
    pub limit: u64,
    pub duration: u64,
    pub auto_apply: bool,
}

/// A key (an API key of the workspace's users).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub id: String,
    pub workspace_id: String,
    /// The API the key belongs to ([`Api`]; v1 keys may have none).
    pub api_id: Option<String>,
    /// The identity the key is linked to, if any.
    pub identity_id: Option<String>,
    /// Its credits (remaining uses and their refill); `None`: unlimited.
    pub credits: Option<Credits>,
    /// The secret's prefix and random byte length (v2's form; what a reroll copies).
    pub prefix: Option<String>,
    pub byte_length: Option<u32>,
    /// The visible start of the secret, for recognising the key.
    pub start: String,
    pub name: Option<String>,
    /// JSON object as text, as given at creation.
    pub meta: Option<String>,
    pub enabled: bool,
    pub expires: Option<i64>,
    pub created_at: i64,
    /// When the key's row was last changed by an update (`created_at` until then).
    pub updated_at: i64,
}

/// Which keys a verification may find (tenancy): `None` fields do not narrow.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyScope<'a> {
    /// The workspace of the root key the call carries, if it carries one.
    pub workspace_id: Option<&'a str>,
    /// The `apiId` the call names, if it names one: the key must carry exactly this label.
    pub api_id: Option<&'a str>,
    /// The root key's reach (v2: `api.<apiId>.verify_key`), if it is narrowed.
    pub access: Option<&'a crate::ApiAccess>,
    /// The root key the call carries, checked still current by the verification itself:
    /// with counters in the database or Redis, its change counter is read with the key's,
    /// in one read, and a root key revoked meanwhile is refused
    /// ([`crate::RbacService::ensure_root_key_current`]'s check).
    pub root_key: Option<&'a Principal>,
}

impl VerifyScope<'_> {
    /// Whether `key` is inside this scope.
    pub fn admits(&self, key: &Key) -> bool {
        self.workspace_id.is_none_or(|ws| key.workspace_id == ws)
            && self.api_id.is_none_or(|api| key.api_id.as_deref() == Some(api))
            && self.access.is_none_or(|a| a.admits(key.api_id.as_deref()))
    }
}

/// What `keys.createKey` asks for. Names in `permissions` are created when missing (as in
/// `keys.setPermissions`); names in `roles` must exist (as in `keys.addRoles` without
/// `create`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewKey {
    /// The API the key goes into (created when missing); it also widens the accepted
    /// root-key permission to `api.<apiId>.create_key`.
    pub api_id: Option<String>,
    /// The identity to link, by its `externalId` (created when missing).
    pub external_id: Option<String>,
    /// The key's own rate limits.
    pub ratelimits: Vec<NewRateLimit>,
    /// Its credits; `None`: unlimited.
    pub credits: Option<Credits>,
    pub name: Option<String>,
    /// The secret starts with `<prefix>_` (default `kg`).
    pub prefix: Option<String>,
    /// A JSON object as text.
    pub meta: Option<String>,
    /// Unix ms from which the key is expired (a past value: expired from the start).
    pub expires: Option<i64>,
    pub enabled: bool,
    pub permissions: Vec<String>,
    pub roles: Vec<String>,
    /// v2: the secret is the base58 of this many random bytes (after `<prefix>_` when a
    /// prefix is given), `start` the prefix and separator plus 4 characters; v2's roles
    /// may be ids, and only `create_key` is needed to start the key with permissions and
    /// roles. `None`: v1's form (`kg_` and 43 base-62 characters) and rules.
    pub byte_length: Option<usize>,
    /// Its plaintext kept sealed in the vault, to be revealed (API-v2.md §16).
    pub recoverable: bool,
}

impl Default for NewKey {
    fn default() -> Self {
        Self {
            api_id: None,
            external_id: None,
            ratelimits: Vec::new(),
            credits: None,
            name: None,
            prefix: None,
            meta: None,
            expires: None,
            enabled: true,
            permissions: Vec::new(),
            roles: Vec::new(),
            byte_length: None,
            recoverable: false,
        }
    }
}

/// A key as v2 shows it: the key, the slugs of its permissions (direct and through its
/// roles, each once) and its roles' names, both sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySummary {
    pub key: Key,
    pub permissions: Vec<String>,
    pub roles: Vec<String>,
    /// The identity the key is linked to, with its limits.
    pub identity: Option<IdentityView>,
    /// The key's own rate limits, by name.
    pub ratelimits: Vec<RateLimitConfig>,
    /// When the key was last verified (Unix ms, the start of that minute), from the
    /// analytics counts (`RbacService::fill_last_used`).
    pub last_used: Option<i64>,
}

/// One page of a list (v2's cursor pagination): its items and, when more follow, the sort
/// key of its last item, after which the next page starts. Keyset pages: a walk visits
/// every item that exists for the whole walk exactly once, whatever is added meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// The page made of a keyset query's rows: the query asked for `limit + 1` rows after
    /// the cursor, in key order; a row past `limit` means more follow, and the cursor is
    /// the last kept row's key.
    pub fn keyset(mut rows: Vec<T>, limit: usize, key: impl Fn(&T) -> &str) -> Self {
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more { rows.last().map(|i| key(i).to_string()) } else { None };
        Self { items: rows, next }
    }
}

/// How v2 names a key: by id (`getKey`) or by its secret (`whoami`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyLookup<'a> {
    Id(&'a str),
    Secret(&'a str),
}

/// What `permissions.createPermission` / `createRole` ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewEntity {
    /// The unique name (a permission's slug).
    pub name: String,
    /// The request field that holds it (`name`; v2's permissions: `slug`), for error paths.
    pub name_field: &'static str,
    pub description: Option<String>,
    /// A permission's display name (v2).
    pub title: Option<String>,
    /// A role's permissions, by name; missing ones are created.
    pub permissions: Vec<String>,
}

/// A rate-limit namespace named by id or by name (the override endpoints); at least one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceRef {
    pub id: Option<String>,
    pub name: Option<String>,
}

impl NamespaceRef {
    pub fn validate(&self) -> Result<(), keygate_domain::ValidationError> {
        match (&self.id, &self.name) {
            (None, None) => Err(keygate_domain::ValidationError::new(
                "namespaceId",
                "one of namespaceId or namespaceName is required",
            )),
            (id, name) => {
                if let Some(id) = id {
                    keygate_domain::check_len("namespaceId", id, keygate_domain::MAX_IDENTIFIER_CHARS)?;
                }
                if let Some(name) = name {
                    keygate_domain::validate_namespace_name("namespaceName", name)?;
                }
                Ok(())
            }
        }
    }
}

/// A permission or role with its description (the CRUD endpoints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    pub id: String,
    /// The unique name: a permission's slug (v1's `name`), a role's name.
    pub name: String,
    pub description: Option<String>,
    /// A permission's display name (v2's `name`; the slug when absent). Roles: none.
    pub title: Option<String>,
}

impl Entity {
    /// The display name: the title, else the name.
    pub fn display_name(&self) -> &str {
        self.title.as_deref().unwrap_or(&self.name)
    }
}

/// A role with the permissions attached to it, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleView {
    pub role: Entity,
    pub permissions: Vec<Entity>,
}

/// A permission query of `keys.verifyKey`: a permission name, or all / any of sub-queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionQuery {
    Permission(String),
    And(Vec<PermissionQuery>),
    Or(Vec<PermissionQuery>),
}

impl PermissionQuery {
    /// Whether a key holding exactly `held` satisfies the query. Names are compared
    /// literally, like root-key permissions (`*` in a key's permission is not a pattern).
    pub fn satisfied_by(&self, held: &impl Fn(&str) -> bool) -> bool {
        match self {
            PermissionQuery::Permission(p) => held(p.as_str()),
            PermissionQuery::And(all) => all.iter().all(|q| q.satisfied_by(held)),
            PermissionQuery::Or(any) => any.iter().any(|q| q.satisfied_by(held)),
        }
    }
}

/// A key with its direct permissions and roles, each sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyView {
    pub key: Key,
    pub permissions: Vec<Named>,
    pub roles: Vec<Named>,
}

/// A reference to a permission or role in a request: by id, by name, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntityRef {
    pub id: Option<String>,
    pub name: Option<String>,
    pub create: Option<bool>,
    /// The request field the name came from (`name` or `slug`), for error paths.
    pub name_field: &'static str,
    /// The name may also be an id (v2's plain strings): matched as a name first, then as
    /// an id of the workspace, and only then created (when `create`) or missing.
    pub or_id: bool,
}

impl EntityRef {
    pub fn by_id(id: impl Into<String>) -> Self {
        Self { id: Some(id.into()), name_field: "name", ..Self::default() }
    }
    pub fn by_name(name: impl Into<String>) -> Self {
        Self { name: Some(name.into()), name_field: "name", ..Self::default() }
    }
    /// An entry of a list of plain strings (v2, `createKey`): its name is the string, which
    /// may also be an id when `or_id` is set on it.
    pub fn listed(name: String, create: bool) -> Self {
        Self { name: Some(name), create: Some(create), ..Self::default() }
    }
    /// The same entry, which may also name an id (v2).
    pub fn or_id(mut self) -> Self {
        self.or_id = true;
        self
    }
    pub fn with_create(mut self, create: bool) -> Self {
        self.create = Some(create);
        self
    }
}

/// An audit event, written in the transaction of the change it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub workspace_id: String,
    pub actor_id: String,
    pub action: &'static str,
    pub resource_type: &'static str,
    pub resource_id: String,
    pub key_id: Option<String>,
    /// The role whose permissions changed, for `role.attach_permission` and the like.
    pub role_id: Option<String>,
    pub at: i64,
    /// More about the change where an event needs it (a migrated key: its migration id).
    pub detail: Option<String>,
}

/// An audit event as read back (`audit.listEvents`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub id: String,
    pub workspace_id: String,
    pub actor_id: String,
    pub action: String,
    pub resource_type: String,
    pub resource_id: String,
    pub key_id: Option<String>,
    pub role_id: Option<String>,
    pub at: i64,
    pub detail: Option<String>,
}

/// Which audit events to list; `None` fields do not narrow. `since` is inclusive, `until`
/// exclusive (Unix ms).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub actor_id: Option<String>,
    pub resource_id: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::PermissionQuery::{self, And, Or, Permission};
    use std::collections::HashSet;

    fn p(name: &str) -> PermissionQuery {
        Permission(name.to_string())
    }

    #[test]
    fn a_root_key_use_is_noted_at_once_then_once_a_minute_on_the_monotonic_clock() {
        let principal = super::Principal::new("rk_a".into(), "ws_a".into(), ["*".to_string()]);
        // The monotonic clock starts near 0 in a new process: the first use is noted.
        assert!(principal.take_use(5), "the first use is noted");
        assert!(!principal.take_use(5), "once per minute");
        assert!(!principal.take_use(60_004), "59.999 s later: not yet");
        assert!(principal.take_use(60_005), "a minute later");
        assert!(!principal.clone().take_use(60_006), "a clone carries when it was noted");
    }

    #[test]
    fn queries_combine_and_or_over_literal_names() {
        let held: HashSet<&str> = ["a.read", "b.write", "*"].into_iter().collect();
        assert!(p("a.read").satisfied_by(&|p| held.contains(p)));
        assert!(!p("a.write").satisfied_by(&|p| held.contains(p)), "`*` held is a name, not a wildcard");
        assert!(And(vec![p("a.read"), p("b.write")]).satisfied_by(&|p| held.contains(p)));
        assert!(!And(vec![p("a.read"), p("c")]).satisfied_by(&|p| held.contains(p)));
        assert!(Or(vec![p("c"), And(vec![p("a.read"), p("*")])]).satisfied_by(&|p| held.contains(p)));
        assert!(!Or(vec![p("c"), p("A.READ")]).satisfied_by(&|p| held.contains(p)));
        assert!(!p("a.read").satisfied_by(&|_| false));
    }

    #[test]
    fn a_root_key_holds_its_permissions_literally_or_everything_with_star() {
        let some = super::Principal::new("rk".into(), "ws".into(), ["ratelimit.*.limit".to_string()]);
        assert!(some.holds("ratelimit.*.limit"));
        assert!(!some.holds("ratelimit.rlns_1.limit"), "`*` inside a name is literal");
        assert!(!some.holds("*"));
        let all = super::Principal::new("rk".into(), "ws".into(), ["a".to_string(), "*".to_string()]);
        assert!(all.holds("anything.at.all") && all.holds("a"));
        let none = super::Principal::new("rk".into(), "ws".into(), Vec::new());
        assert!(!none.holds("a") && none.permissions().next().is_none());
    }
}
