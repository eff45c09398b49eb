//! The records the capabilities store and answer with: workspaces, APIs, keys and their
//! settings, identities and their rate limits, permissions and roles (entities), namespaces,
//! audit events, and pages of them. Plain data: what may be done with them, and by whom,
//! is `keygate-rbac`'s.

use crate::{Credits, CreditsUpdate, Named};

/// A workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub created_at: i64,
}

/// An API object (API-v2.md §10): a group of keys, named; deleting it deletes its keys.
/// Its id is `api_…`, or the `apiId` label keys carried before API objects existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Api {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub created_at: i64,
    /// How its keys are made (API-v2.md §24).
    pub key_format: crate::checksum::KeyFormat,
    /// Where its keys may be used from (API-v2.md §25); `None`: anywhere.
    pub allowed_ips: Option<crate::AllowedIps>,
}

/// `keys.updateKey` (API-v2.md §12.3): each field absent (unchanged), cleared or set;
/// `enabled`, `roles` and `permissions` absent or set (the lists replace, as `setRoles`
/// and `setPermissions` do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyUpdate {
    pub name: crate::Patch<String>,
    /// The identity's `externalId` (created when missing); cleared: unlinked.
    pub external_id: crate::Patch<String>,
    /// A JSON object as text.
    pub meta: crate::Patch<String>,
    pub expires: crate::Patch<i64>,
    /// Cleared: unlimited.
    pub credits: crate::Patch<CreditsUpdate>,
    /// The whole set (cleared: none); a kept name keeps its id.
    pub ratelimits: crate::Patch<Vec<NewRateLimit>>,
    pub enabled: Option<bool>,
    pub roles: Option<Vec<String>>,
    pub permissions: Option<Vec<String>>,
    /// Cleared: anywhere.
    pub allowed_ips: crate::Patch<crate::AllowedIps>,
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
    /// Where its keys may be used from (API-v2.md §25); `None`: anywhere.
    pub allowed_ips: Option<crate::AllowedIps>,
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
    /// What it decides by (API-v2.md §26; `fixed` unless given).
    pub algorithm: crate::Algorithm,
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
    pub algorithm: crate::Algorithm,
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
    /// Where it may be used from (API-v2.md §25); `None`: anywhere.
    pub allowed_ips: Option<crate::AllowedIps>,
    pub created_at: i64,
    /// When the key's row was last changed by an update (`created_at` until then).
    pub updated_at: i64,
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
    /// Where it may be used from (API-v2.md §25).
    pub allowed_ips: Option<crate::AllowedIps>,
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
            allowed_ips: None,
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
    /// Its API's `allowedIps` (read with the key for a verification; `None` elsewhere).
    pub api_allowed_ips: Option<crate::AllowedIps>,
}

impl KeySummary {
    /// `key` as v2 shows it: its permissions (`permissions`: direct and through its roles,
    /// in any order, repeats allowed) and `roles`' names sorted and each once; its own
    /// limits by name (byte order).
    pub fn new(
        key: Key,
        permissions: impl IntoIterator<Item = String>,
        roles: impl IntoIterator<Item = String>,
        identity: Option<IdentityView>,
        mut ratelimits: Vec<RateLimitConfig>,
    ) -> Self {
        let once = |names: &mut Vec<String>| {
            names.sort_unstable();
            names.dedup();
        };
        let mut permissions: Vec<String> = permissions.into_iter().collect();
        let mut roles: Vec<String> = roles.into_iter().collect();
        once(&mut permissions);
        once(&mut roles);
        ratelimits.sort_by(|a, b| a.name.cmp(&b.name));
        KeySummary { key, permissions, roles, identity, ratelimits, last_used: None, api_allowed_ips: None }
    }
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

/// A rate-limit namespace as `ratelimit.getNamespace` shows it (API-v2.md §26): its
/// `algorithm` is the stored name (`fixed`, `sliding`, `token_bucket`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub id: String,
    pub name: String,
    pub algorithm: String,
    pub created_at: i64,
}

/// A rate-limit namespace named by id or by name (the override endpoints); at least one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceRef {
    pub id: Option<String>,
    pub name: Option<String>,
}

impl NamespaceRef {
    pub fn validate(&self) -> Result<(), crate::ValidationError> {
        match (&self.id, &self.name) {
            (None, None) => Err(crate::ValidationError::new(
                "namespaceId",
                "one of namespaceId or namespaceName is required",
            )),
            (id, name) => {
                if let Some(id) = id {
                    crate::check_len("namespaceId", id, crate::MAX_IDENTIFIER_CHARS)?;
                }
                if let Some(name) = name {
                    crate::validate_namespace_name("namespaceName", name)?;
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

/// A webhook event (API-v2.md §23), written in the transaction of the change that causes
/// it, with a pending delivery to each endpoint subscribed to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// `msg_…`: the `webhook-id` of every delivery of it.
    pub id: String,
    pub workspace_id: String,
    /// `key.created`, `key.credits.low`, …
    pub event_type: &'static str,
    /// The body every attempt sends: `{type, timestamp, data}`.
    pub body: String,
    /// Unix ms.
    pub created_at: i64,
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

impl AuditEvent {
    /// `actor_id`'s `action` on the `resource_type` `resource_id`, and nothing more.
    pub fn new(
        workspace_id: &str,
        actor_id: &str,
        action: &'static str,
        resource_type: &'static str,
        resource_id: &str,
        at: i64,
    ) -> Self {
        Self {
            workspace_id: workspace_id.to_string(),
            actor_id: actor_id.to_string(),
            action,
            resource_type,
            resource_id: resource_id.to_string(),
            key_id: None,
            role_id: None,
            at,
            detail: None,
        }
    }

    /// `actor_id`'s `action` on the key `key_id`.
    pub fn on_key(workspace_id: &str, actor_id: &str, action: &'static str, key_id: &str, at: i64) -> Self {
        Self {
            key_id: Some(key_id.to_string()),
            ..Self::new(workspace_id, actor_id, action, "key", key_id, at)
        }
    }
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
