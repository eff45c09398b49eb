//! The storage traits the RBAC service is defined over. `keygate-store` implements them
//! with diesel for SQLite and PostgreSQL (the service is tested over that real store, in
//! `crates/rbac/tests/`).

use crate::{
    Api, AuditEvent, AuditFilter, AuditRecord, Entity, Identity, Key, KeySummary, LimitOwner, OutboxEvent,
    Override, RateLimitConfig, RbacError, RootKey, StorageError, Workspace,
};
use keygate_domain::{Named, NamespaceInfo};

/// Permissions and roles share one shape (id, workspace, unique name) and one set of
/// storage operations, selected by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityKind {
    Permission,
    Role,
}

impl EntityKind {
    pub const fn noun(self) -> &'static str {
        match self {
            EntityKind::Permission => "permission",
            EntityKind::Role => "role",
        }
    }
    pub const fn resource(self) -> crate::Resource {
        match self {
            EntityKind::Permission => crate::Resource::Permission,
            EntityKind::Role => crate::Resource::Role,
        }
    }
    pub const fn plural(self) -> &'static str {
        match self {
            EntityKind::Permission => "permissions",
            EntityKind::Role => "roles",
        }
    }
}

type R<T> = Result<T, StorageError>;

/// Workspaces.
pub trait WorkspaceTx {
    fn count_workspaces(&mut self) -> R<i64>;
    fn insert_workspace(&mut self, ws: &Workspace) -> R<()>;
    /// By id, else by name.
    fn find_workspace(&mut self, id_or_name: &str) -> R<Option<Workspace>>;
    /// Every workspace, oldest first.
    fn list_workspaces(&mut self) -> R<Vec<Workspace>>;
}

/// Root keys: stored by hash, never in clear.
pub trait RootKeyTx {
    fn insert_root_key(&mut self, key: &RootKey, hash: &str) -> R<()>;
    /// A root key that is not revoked (disabled or expired ones included).
    fn root_key_by_hash(&mut self, hash: &str) -> R<Option<RootKey>>;
    /// Up to `limit` root keys of a workspace (not revoked) by id, those after `after`.
    fn root_keys_page(&mut self, workspace_id: &str, after: Option<&str>, limit: usize) -> R<Vec<RootKey>>;
    /// Whether the root key exists, is not revoked and is enabled.
    fn root_key_active(&mut self, id: &str) -> R<bool>;
    /// A root key by id, unless revoked.
    fn root_key_by_id(&mut self, id: &str) -> R<Option<RootKey>>;
    /// Writes a root key's name, enabled flag, permissions and expiry; false when there is
    /// no such (unrevoked) key.
    fn update_root_key(&mut self, key: &RootKey) -> R<bool>;
    /// Marks a root key revoked; false when there is no such (unrevoked) key.
    fn revoke_root_key(&mut self, id: &str, now: i64) -> R<bool>;
    /// Sets a root key's `last_used_at` to `at` unless it is later already.
    fn note_root_key_use(&mut self, id: &str, at: i64) -> R<()>;
    /// The soonest expiry after `now` of the root keys (every workspace's) that are enabled,
    /// not revoked and not expired; `None` when none expires.
    fn next_root_key_expiry(&mut self, now: i64) -> R<Option<i64>>;
}

/// Recoverable keys' sealed plaintexts (`keys.vault_key_id`, `keys.ciphertext`).
pub trait KeySecretTx {
    /// Stores (or with `None` clears) a key's sealed plaintext.
    fn set_key_secret(&mut self, key_id: &str, sealed: Option<&keygate_vault::Sealed>) -> R<()>;
    /// The sealed plaintexts of those of `key_ids` (in the workspace) that have one.
    fn key_secrets(
        &mut self,
        workspace_id: &str,
        key_ids: &[&str],
    ) -> R<Vec<(String, keygate_vault::Sealed)>>;
    /// Every keyring key id a key is sealed under, with how many keys each seals.
    fn vault_key_ids(&mut self) -> R<Vec<(String, u64)>>;
    /// Up to `limit` recoverable keys (by id, after `after`) not sealed under `key_id`:
    /// `(keyId, workspaceId, sealed)`.
    fn key_secrets_not_under(
        &mut self,
        key_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<(String, String, keygate_vault::Sealed)>>;
}

/// Keys and their links to permissions and roles.
pub trait KeyTx {
    fn insert_key(&mut self, key: &Key, hash: &str) -> R<()>;
    fn get_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<Key>>;
    /// Writes a key's name, meta, enabled flag, expiry and identity link.
    fn update_key(&mut self, key: &Key, now: i64) -> R<()>;
    /// Sets a key's credits and refill (`None`: unlimited).
    fn set_key_credits(&mut self, key_id: &str, credits: Option<&crate::Credits>) -> R<()>;
    /// A key by id, whatever its workspace (the admin CLI).
    fn find_key(&mut self, key_id: &str) -> R<Option<Key>>;
    /// The keys of a workspace, oldest first.
    fn list_keys(&mut self, workspace_id: &str) -> R<Vec<Key>>;
    /// The key whose secret hashes to `hash`, in any workspace (keys.verifyKey).
    fn key_by_hash(&mut self, hash: &str) -> R<Option<Key>>;
    /// Deletes the key of the workspace (its links go with it); whether it existed.
    /// Deletes the key; its stored hash, or `None` when there was no such key.
    fn delete_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<String>>;
    /// Takes the write lock on the key (PostgreSQL: a row lock; SQLite: the transaction
    /// already holds the database write lock); false when the key does not exist in the
    /// workspace. Must be the first statement of a transaction that changes a key's links,
    /// so that concurrent changes of one key serialize.
    fn lock_key(&mut self, workspace_id: &str, key_id: &str) -> R<bool>;
    /// The entities directly linked to a key.
    fn key_entities(&mut self, kind: EntityKind, key_id: &str) -> R<Vec<Named>>;
    fn link_key_entities(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        key_id: &str,
        ids: &[String],
        now: i64,
    ) -> R<()>;
    fn unlink_key_entities(&mut self, kind: EntityKind, key_id: &str, ids: &[String]) -> R<()>;
    /// Keys brought in (`keys.migrateKeys`): several at once, each with its hash and
    /// credits, in as few statements as the backend allows.
    fn insert_keys(&mut self, keys: &[(Key, String)]) -> R<()>;
    /// The hashes among `hashes` that are a key's, or a key's old system's kept for its
    /// first use, in any workspace.
    fn existing_hashes(&mut self, hashes: &[String]) -> R<Vec<String>>;
    /// Links of several keys at once: (key id, entity id) pairs, none there yet.
    fn link_keys_entities(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        links: &[(String, String)],
        now: i64,
    ) -> R<()>;
}

/// API objects, and the keys of one.
pub trait ApiTx {
    /// Inserts the API unless one with its id exists in the workspace; whether it was
    /// inserted (safe against a concurrent insert of the same id).
    fn insert_api_if_absent(&mut self, api: &Api) -> R<bool>;
    fn get_api(&mut self, workspace_id: &str, api_id: &str) -> R<Option<Api>>;
    /// The workspace's APIs by name (then id), at most `limit`.
    fn list_apis(&mut self, workspace_id: &str, limit: usize) -> R<Vec<Api>>;
    /// Whether the API exists in the workspace; locks it until the transaction ends (a key
    /// created into it and its deletion serialize).
    fn lock_api(&mut self, workspace_id: &str, api_id: &str) -> R<bool>;
    /// The ids of the API's keys.
    fn api_key_ids(&mut self, workspace_id: &str, api_id: &str) -> R<Vec<String>>;
    /// Deletes the API's keys (their links go with them); their ids.
    fn delete_api_keys(&mut self, workspace_id: &str, api_id: &str) -> R<Vec<String>>;
    /// Deletes the API itself; whether it existed.
    fn delete_api(&mut self, workspace_id: &str, api_id: &str) -> R<bool>;
    /// A keyset page of the API's keys (those linked to `identity_id` when given): ids
    /// sorting (bytes ascending) after `after`, at most `limit`, by id. One indexed range
    /// scan.
    fn api_keys_page(
        &mut self,
        workspace_id: &str,
        api_id: &str,
        identity_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Key>>;
    /// How many keys the API holds.
    fn count_api_keys(&mut self, workspace_id: &str, api_id: &str) -> R<u64>;
    /// The API's keys whose id is `text` or whose name contains it (SQL `LIKE`, `%` and
    /// `_` taken literally), by id, at most `limit`.
    fn search_api_keys(&mut self, workspace_id: &str, api_id: &str, text: &str, limit: usize) -> R<Vec<Key>>;
}

/// Identities, the links of keys to them, and the rate limits of identities and keys.
pub trait IdentityTx {
    /// Inserts the identity unless its `external_id` is taken in the workspace; whether it
    /// was inserted.
    fn insert_identity(&mut self, identity: &Identity) -> R<bool>;
    fn identity_by_id(&mut self, workspace_id: &str, id: &str) -> R<Option<Identity>>;
    fn identity_by_external_id(&mut self, workspace_id: &str, external_id: &str) -> R<Option<Identity>>;
    /// The identities with these external ids in the workspace, locked until the
    /// transaction ends (as [`Self::lock_identity`]).
    fn lock_identities_by_external_ids(
        &mut self,
        workspace_id: &str,
        external_ids: &[String],
    ) -> R<Vec<Identity>>;
    /// Inserts the identities whose `external_id` is not taken in the workspace, in as few
    /// statements as the backend allows: the ids of those inserted.
    fn insert_identities_if_absent(&mut self, identities: &[Identity]) -> R<Vec<String>>;
    /// Whether the identity exists in the workspace; locks it until the transaction ends.
    fn lock_identity(&mut self, workspace_id: &str, id: &str) -> R<bool>;
    /// A keyset page of the workspace's identities: `external_id`s sorting (bytes
    /// ascending) after `after`, keeping those whose id or external id contains `search`
    /// ASCII case-insensitively, at most `limit`, by external id.
    fn identities_page(
        &mut self,
        workspace_id: &str,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Identity>>;
    fn set_identity_meta(&mut self, id: &str, meta: Option<&str>, now: i64) -> R<()>;
    /// Sets (or with `None` clears) the identity's `allowedIps`.
    fn set_identity_allowed_ips(
        &mut self,
        id: &str,
        allowed: Option<&keygate_domain::AllowedIps>,
        now: i64,
    ) -> R<()>;
    /// Deletes the identity (its rate limits go with it); whether it existed.
    fn delete_identity(&mut self, workspace_id: &str, id: &str) -> R<bool>;
    /// Unlinks every key of the identity; their ids.
    fn unlink_identity_keys(&mut self, workspace_id: &str, id: &str) -> R<Vec<String>>;
    /// The ids of the identity's keys.
    fn identity_key_ids(&mut self, workspace_id: &str, id: &str) -> R<Vec<String>>;
    /// Links a key to an identity, or unlinks it (`None`).
    fn set_key_identity(&mut self, key_id: &str, identity_id: Option<&str>) -> R<()>;
    /// The owner's rate limits, by name.
    fn ratelimits_of(&mut self, owner: LimitOwner<'_>) -> R<Vec<RateLimitConfig>>;
    /// The owner's rate limits become exactly `limits`: those whose name is gone are
    /// deleted, those whose name stays keep their id (the caller passes it) and are updated,
    /// the others inserted.
    fn replace_ratelimits(
        &mut self,
        workspace_id: &str,
        owner: LimitOwner<'_>,
        limits: &[RateLimitConfig],
        now: i64,
    ) -> R<()>;
}

/// Permissions and roles, and the permissions of a role.
pub trait EntityTx {
    /// Inserts a permission or role unless its name is taken; whether it was inserted.
    fn insert_entity(&mut self, kind: EntityKind, workspace_id: &str, e: &Entity, now: i64) -> R<bool>;
    fn get_entity(&mut self, kind: EntityKind, workspace_id: &str, id: &str) -> R<Option<Entity>>;
    fn list_entities(&mut self, kind: EntityKind, workspace_id: &str) -> R<Vec<Entity>>;
    /// A keyset page of the workspace's entities: those whose name sorts (bytes ascending)
    /// after `after`, keeping those whose id, name, title or description contains `search`
    /// ASCII case-insensitively, at most `limit`, by name. One indexed range scan: the
    /// table is never loaded whole.
    fn entities_page(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Entity>>;
    /// Deletes a permission or role of the workspace; its links go with it.
    fn delete_entity(&mut self, kind: EntityKind, workspace_id: &str, id: &str) -> R<bool>;
    /// Whether the role exists in the workspace; locks it until the transaction ends.
    fn lock_role(&mut self, workspace_id: &str, role_id: &str) -> R<bool>;
    fn link_role_permissions(&mut self, workspace_id: &str, role_id: &str, ids: &[String], now: i64)
    -> R<()>;
    fn unlink_role_permissions(&mut self, role_id: &str, ids: &[String]) -> R<()>;
    /// The permissions attached to a role, with descriptions.
    fn permissions_of_role(&mut self, role_id: &str) -> R<Vec<Entity>>;
    /// The permissions attached to any of these roles, each once.
    fn permission_names_of_roles(&mut self, role_ids: &[String]) -> R<Vec<Named>>;
    fn entities_by_ids(&mut self, kind: EntityKind, workspace_id: &str, ids: &[String]) -> R<Vec<Named>>;
    fn entities_by_names(&mut self, kind: EntityKind, workspace_id: &str, names: &[String]) -> R<Vec<Named>>;
    /// The entities with these ids in the workspace, with descriptions and titles.
    fn entities_in_detail(&mut self, kind: EntityKind, workspace_id: &str, ids: &[String]) -> R<Vec<Entity>>;
    /// Inserts each entity whose name does not exist yet, in one statement; returns the
    /// stored entity for every name (the existing row when another transaction created it
    /// meanwhile) and whether this call created it. Safe against concurrent creation of the
    /// same names; callers pass names in ascending order so that concurrent inserters lock
    /// in one order.
    fn insert_entities_if_absent(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        entities: &[Named],
        now: i64,
    ) -> R<Vec<(Named, bool)>>;
}

/// Rate-limit namespaces and their overrides.
pub trait NamespaceTx {
    fn namespace_by_name(&mut self, workspace_id: &str, name: &str) -> R<Option<Named>>;
    fn namespace_by_id(&mut self, workspace_id: &str, id: &str) -> R<Option<Named>>;
    /// A keyset page of the workspace's namespaces: names (bytes ascending) after `after`.
    fn namespaces_page(&mut self, ws: &str, after: Option<&str>, limit: usize) -> R<Vec<NamespaceInfo>>;
    fn namespace_info(&mut self, workspace_id: &str, id: &str) -> R<Option<NamespaceInfo>>;
    /// The namespace's algorithm's stored name (`fixed` when the namespace is gone).
    fn namespace_algorithm(&mut self, namespace_id: &str) -> R<String>;
    fn set_namespace_algorithm(&mut self, namespace_id: &str, algorithm: &str) -> R<()>;
    /// Locks the namespace's row until the transaction ends (override writes serialize).
    fn lock_namespace(&mut self, namespace_id: &str) -> R<()>;
    fn overrides(&mut self, namespace_id: &str) -> R<Vec<Override>>;
    /// A keyset page of the namespace's overrides: identifiers sorting (bytes ascending)
    /// after `after`, at most `limit`, by identifier.
    fn overrides_page(&mut self, namespace_id: &str, after: Option<&str>, limit: usize) -> R<Vec<Override>>;
    /// Inserts the override, or updates the limit, duration and async flag of the one with
    /// the same identifier (keeping its id and creation order); returns what is stored.
    fn upsert_override(&mut self, workspace_id: &str, o: &Override, now: i64) -> R<Override>;
    fn delete_override(&mut self, namespace_id: &str, identifier: &str) -> R<Option<String>>;
    /// A new namespace is created with the algorithm `alg`; an existing one is found as it is.
    fn insert_namespace_if_absent(&mut self, ws: &str, ns: &Named, alg: &str, now: i64) -> R<(Named, bool)>;
}

/// The audit log.
pub trait AuditTx {
    fn insert_audit_events(&mut self, events: &[AuditEvent]) -> R<()>;
    /// The workspace's events that match `filter`, newest first (by time, then by id,
    /// descending), those after `after` (the time and id of the last one seen), at most
    /// `limit`.
    fn list_audit_events(
        &mut self,
        workspace_id: &str,
        filter: &AuditFilter,
        after: Option<(i64, &str)>,
        limit: usize,
    ) -> R<Vec<AuditRecord>>;
    /// Deletes at most `max` events (of any workspace) older than `before` (Unix ms);
    /// returns how many.
    fn delete_audit_events_before(&mut self, before: i64, max: usize) -> R<usize>;
}

/// Dashboard sessions, by the hash of their token.
pub trait SessionTx {
    fn insert_session(&mut self, session: &StoredSession) -> R<()>;
    fn session_by_hash(&mut self, token_hash: &str) -> R<Option<StoredSession>>;
    /// Sets the session's last use.
    fn touch_session(&mut self, token_hash: &str, now: i64) -> R<()>;
    /// Whether it existed.
    fn delete_session(&mut self, token_hash: &str) -> R<bool>;
    /// Deletes the sessions last used before `before`: how many.
    fn delete_sessions_seen_before(&mut self, before: i64) -> R<usize>;
}

/// A dashboard session as stored: never its token, only the token's SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    pub token_hash: String,
    pub workspace_id: String,
    pub root_key_id: String,
    pub csrf_token: String,
    pub created_at: i64,
    pub seen_at: i64,
}

/// Change counters (`crate::counters`), by name.
pub trait CounterTx {
    /// Adds one to each named counter (an absent one becomes 1) in this transaction, under
    /// one new sequence number; returns the new values, in order.
    fn bump_counters(&mut self, names: &[String], now: i64) -> R<Vec<u64>>;
    /// The counters' values (0 for an absent one), in order.
    fn counters(&mut self, names: &[String]) -> R<Vec<u64>>;
    /// The highest sequence number written (0 when none).
    fn counters_seq(&mut self) -> R<i64>;
    /// The counters written under a sequence number above `seq`, with the highest one seen.
    fn counters_since(&mut self, seq: i64) -> R<(Vec<(String, u64)>, i64)>;
    /// The counters changed at or after `at` (Unix ms).
    fn counters_changed_since(&mut self, at: i64) -> R<Vec<(String, u64)>>;
    /// The root keys' counters (`rk:<id>` and `rk-created`): one per revoked root key.
    fn root_key_counters(&mut self) -> R<Vec<(String, u64)>>;
}

/// The webhook outbox (API-v2.md §23): an event is written in the transaction of the
/// change that causes it, with a pending delivery to each endpoint subscribed to it
/// (`keygate-webhooks` owns the endpoints and the deliveries' lives).
pub trait OutboxTx {
    /// The ids of the workspace's enabled endpoints subscribed to `event_type`.
    fn webhook_subscribers(&mut self, workspace_id: &str, event_type: &str) -> R<Vec<String>>;
    /// Writes `event` and a delivery of it to each of `endpoint_ids`, due at its creation.
    fn insert_webhook_event(&mut self, event: &OutboxEvent, endpoint_ids: &[String]) -> R<()>;
    /// The enabled endpoints of the keys' workspaces, with each key's credit base: one row
    /// per (key, endpoint), none for a key whose workspace has no enabled endpoint.
    fn credit_subscribers(&mut self, key_ids: &[&str]) -> R<Vec<CreditSubscriber>>;
}

/// A key and an enabled endpoint of its workspace ([`OutboxTx::credit_subscribers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditSubscriber {
    pub key_id: String,
    pub workspace_id: String,
    /// What a share of the credits is of: the refill amount, else the credits when last
    /// set by a write (`None`: unknown).
    pub base: Option<u64>,
    pub endpoint_id: String,
    /// The endpoint's event types, space-separated (`*`: all).
    pub events: String,
    /// Its `creditsLow` percents, comma-separated.
    pub credits_low: String,
}

/// Keys from other systems waiting for their first use (`service::legacy`).
pub trait LegacyTx {
    /// Keys brought in under a legacy migration: their lookups and old hashes.
    fn insert_legacy_hashes(&mut self, rows: &[crate::LegacyRow]) -> R<()>;
    /// The keys (at most `limit`) waiting for their first use under `lookup`: id, old hash.
    fn legacy_candidates(&mut self, lookup: &str, limit: usize) -> R<Vec<(String, String)>>;
    /// Key `key_id`, waiting for its first use, stored under `hash` from now on and its old
    /// hash forgotten; false when it was not waiting (another verification came first).
    fn adopt_legacy_key(&mut self, key_id: &str, hash: &str) -> R<bool>;
}

/// Everything an RBAC transaction offers: what the service's closures receive. The other
/// capabilities' transactions extend it (`keygate_usage::UsageTx`,
/// `keygate_analytics::AnalyticsTx`), so their operations read keys, identities and APIs in
/// the same transaction as their own rows.
pub trait RbacTx:
    WorkspaceTx
    + RootKeyTx
    + KeySecretTx
    + ApiTx
    + IdentityTx
    + KeyTx
    + EntityTx
    + NamespaceTx
    + AuditTx
    + SessionTx
    + CounterTx
    + OutboxTx
    + LegacyTx
{
}

impl<T> RbacTx for T where
    T: WorkspaceTx
        + RootKeyTx
        + KeySecretTx
        + ApiTx
        + IdentityTx
        + KeyTx
        + EntityTx
        + NamespaceTx
        + AuditTx
        + SessionTx
        + CounterTx
        + OutboxTx
        + LegacyTx
        + ?Sized
{
}

/// The change counters a verification reads with its key ([`RbacStore::verification_read`]):
/// their names, given the key's id and workspace (`None`: no such key).
pub type CounterNames<'a> = dyn Fn(Option<(&str, &str)>) -> Vec<String> + 'a;

/// A store: hands out transactions. A closure returning `Err` rolls its transaction back.
/// The other capabilities' stores extend it with transactions of their own kind
/// (`keygate_usage::UsageStore`, `keygate_analytics::AnalyticsStore`), which `keygate-store`
/// serves with the same connection and the same transaction.
pub trait RbacStore: Send + Sync + std::fmt::Debug {
    fn transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>;

    /// Reads outside a transaction (one statement or a few, no consistency needed across).
    fn read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>,
    {
        self.transaction(f)
    }

    /// Several reads that must agree with each other (one consistent snapshot, no write
    /// lock): a key with its permissions and roles, as `keys.verifyKey` and
    /// `keys.getKey` answer them.
    fn snapshot<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>,
    {
        self.transaction(f)
    }

    /// What a verification reads of the key whose secret hashes to `hash` (`None`: no
    /// such key), with the values of the change counters `counters` names for it (given
    /// the key's id and workspace, or `None` for no key; no names, none read), all of one
    /// snapshot: a snapshot of several reads ([`crate::verification_read`]) unless the
    /// backend has a cheaper way (`keygate-store` on PostgreSQL: one statement).
    fn verification_read(
        &self,
        hash: &str,
        counters: &CounterNames<'_>,
    ) -> Result<(Option<KeySummary>, Vec<u64>), RbacError> {
        self.snapshot(|tx| crate::verification_read(tx, hash, counters))
    }

    /// A short name for logs and liveness ("sqlite", "postgres").
    fn kind(&self) -> &'static str;

    /// Whether the store answers now (for liveness).
    fn ping(&self) -> Result<(), StorageError>;
}
