//! Keys brought in (`keys.migrateKeys`, API-v2.md §15): keys issued elsewhere, given by
//! their hashes (keygate never sees their plaintext), each made as `createKey` would make
//! it, all of one call in one transaction. Written set-wise (one statement per kind of row
//! for the whole call), so a call of 1,000 keys costs a few statements, not thousands.

use crate::perms::{PERM_CREATE_IDENTITY, PERM_CREATE_KEY};
use crate::service::creation_shard;
use crate::service::legacy::placeholder;
use crate::service::links::{
    LinkRules, PERMISSION_RULES, ROLE_RULES, RefPlan, ResolvedLinks, created_action, resolve_links,
};
use crate::{
    AuditEvent, EntityKind, Identity, Key, LimitOwner, MAX_KEY_META_BYTES, MAX_VERIFY_KEY_CHARS, Principal,
    RbacError, RbacService, RbacStore, RbacTx, Resource, Scope, StorageError,
};
use crate::{LegacyRow, Migrated, MigratedKey};
use keygate_cache::counters::CREATION_SHARDS;
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, Named, ValidationError, check_len, digest_hex, new_id, validate_display_name,
    validate_external_id,
};
use std::collections::{BTreeMap, BTreeSet};

/// The most keys one call brings in.
pub const MAX_MIGRATED_KEYS: usize = 1_000;
/// The longest migration id.
const MAX_MIGRATION_ID_CHARS: usize = 255;

impl<S: RbacStore> RbacService<S> {
    /// `keys.migrateKeys`: the keys of `entries` into the API `api_id` (which must exist),
    /// their hashes computed as migration `migration_id` says. An entry whose hash is a
    /// key's already, or repeats an earlier one, is skipped and listed in `failed`, so an
    /// interrupted import runs again safely; a hash that does not decode, and every other
    /// check, fails the whole call and nothing is written. Needs `create_key` for all APIs or
    /// this one; creating permissions needs `create_permission`, identities
    /// `create_identity`. One `key.create` audit event per key, naming the migration.
    pub fn migrate_keys(
        &self,
        p: &Principal,
        migration_id: &str,
        api_id: &str,
        entries: &[MigratedKey],
    ) -> Result<Migrated, RbacError> {
        check_len("migrationId", migration_id, MAX_MIGRATION_ID_CHARS)?;
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
        if entries.is_empty() || entries.len() > MAX_MIGRATED_KEYS {
            let msg = format!("must hold 1 to {MAX_MIGRATED_KEYS} entries");
            return Err(ValidationError::new("keys", msg).into());
        }
        for (i, e) in entries.iter().enumerate() {
            validate_entry(i, e)?;
        }
        let scoped = format!("api.{api_id}.create_key");
        if !p.holds(PERM_CREATE_KEY) && !p.holds(&scoped) {
            return Err(RbacError::missing(&[PERM_CREATE_KEY]));
        }
        let scheme = self.migrations.scheme(migration_id).ok_or_else(|| {
            RbacError::NotFound(Resource::Migration, format!("migration {migration_id} not found"))
        })?;
        let digests = scheme.import(entries, |h| self.legacy_refusal(h))?;
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            let now = self.now();
            if !tx.lock_api(ws, api_id)? {
                return Err(RbacError::not_found(Resource::Api, api_id));
            }
            // Which entries make a key: not a hash already stored, nor an earlier entry's.
            // (A legacy entry's old hash stands for it: `existing_hashes` knows those too.)
            let hexes: Vec<String> = entries
                .iter()
                .zip(&digests)
                .map(|(e, d)| d.as_ref().map_or_else(|| e.hash.clone(), digest_hex))
                .collect();
            let stored: BTreeSet<String> = tx.existing_hashes(&hexes)?.into_iter().collect();
            let mut seen = BTreeSet::new();
            let fresh: Vec<bool> =
                hexes.iter().map(|h| !stored.contains(h) && seen.insert(h.as_str())).collect();
            let kept = || entries.iter().zip(&fresh).filter(|(_, f)| **f).map(|(e, _)| e);

            // References, resolved once for the whole call.
            let mut events = Vec::new();
            let permissions =
                resolve_names(tx, p, ws, &PERMISSION_RULES, kept().flat_map(|e| &e.permissions))?;
            let roles = resolve_names(tx, p, ws, &ROLE_RULES, kept().flat_map(|e| &e.roles))?;
            let permission_ids = create_missing(tx, p, permissions, now, &mut events)?;
            let role_ids = create_missing(tx, p, roles, now, &mut events)?;
            let identity_ids =
                ensure_identities(tx, p, kept().filter_map(|e| e.external_id.as_ref()), now, &mut events)?;

            // The keys, their links and limits, each kind in one statement.
            let mut out = Migrated::default();
            let (mut rows, mut legacy) = (Vec::new(), Vec::new());
            let (mut permission_links, mut role_links) = (Vec::new(), Vec::new());
            for (i, e) in entries.iter().enumerate() {
                if !fresh[i] {
                    out.failed.push(e.hash.clone());
                    continue;
                }
                let key = Key {
                    id: new_id(IdPrefix::Key),
                    workspace_id: ws.to_string(),
                    api_id: Some(api_id.to_string()),
                    identity_id: e
                        .external_id
                        .as_ref()
                        .map(|x| resolved(&identity_ids, x).cloned())
                        .transpose()?,
                    credits: e.credits.clone(),
                    prefix: None,
                    byte_length: None,
                    start: String::new(),
                    name: e.name.clone(),
                    meta: e.meta.clone(),
                    enabled: e.enabled,
                    expires: e.expires,
                    allowed_ips: None,
                    created_at: now,
                    updated_at: now,
                };
                let hash = match &digests[i] {
                    Some(digest) => {
                        changes.touch(Scope::KeysCreated(creation_shard(digest)));
                        hexes[i].clone()
                    }
                    None => {
                        let lookup = e.lookup.clone().unwrap_or_default();
                        let (key_id, workspace_id) = (key.id.clone(), ws.to_string());
                        legacy.push(LegacyRow { key_id, workspace_id, lookup, hash: e.hash.clone() });
                        placeholder(&key.id)
                    }
                };
                for (names, by_name, links) in [
                    (&e.permissions, &permission_ids, &mut permission_links),
                    (&e.roles, &role_ids, &mut role_links),
                ] {
                    let ids: BTreeSet<&String> =
                        names.iter().map(|n| resolved(by_name, n)).collect::<Result<_, _>>()?;
                    links.extend(ids.into_iter().map(|id| (key.id.clone(), id.clone())));
                }
                let detail = Some(format!("migration {migration_id}"));
                events.push(AuditEvent {
                    detail,
                    ..AuditEvent::on_key(ws, &p.root_key_id, "key.create", &key.id, now)
                });
                out.migrated.push((e.hash.clone(), key.id.clone()));
                rows.push((key, hash));
            }
            tx.insert_keys(&rows)?;
            if !legacy.is_empty() {
                tx.insert_legacy_hashes(&legacy)?;
                // Its secret's digest is not known yet: any "no such key" remembered may be its.
                (0..CREATION_SHARDS).for_each(|s| changes.touch(Scope::KeysCreated(s)));
            }
            for ((key, _), e) in rows.iter().zip(kept()) {
                if !e.ratelimits.is_empty() {
                    let limits = keygate_domain::limit_configs(&[], &e.ratelimits);
                    tx.replace_ratelimits(ws, LimitOwner::Key(&key.id), &limits, now)?;
                }
            }
            tx.link_keys_entities(EntityKind::Permission, ws, &permission_links, now)?;
            tx.link_keys_entities(EntityKind::Role, ws, &role_links, now)?;
            tx.insert_audit_events(&events)?;
            let ids = |_: &mut dyn RbacTx| Ok(rows.iter().map(|(k, _)| k.id.clone()).collect());
            self.keys_event(tx, ws, ids, crate::KeyChange::Created, now)?;
            Ok(out)
        })
    }
}

/// What `name` was resolved to (every name of the call was: a miss is a bug).
fn resolved<'m>(by_name: &'m BTreeMap<String, String>, name: &str) -> Result<&'m String, RbacError> {
    by_name.get(name).ok_or_else(|| StorageError::Internal(format!("{name} was not resolved")).into())
}

/// An entry's own bounds, at `keys.<i>.<field>`, as `createKey` checks them.
fn validate_entry(i: usize, e: &MigratedKey) -> Result<(), ValidationError> {
    let at = |field: &str| format!("keys.{i}.{field}");
    check_len(&at("hash"), &e.hash, MAX_VERIFY_KEY_CHARS)?;
    if let Some(n) = &e.name {
        validate_display_name(&at("name"), n)?;
    }
    if let Some(x) = &e.external_id {
        validate_external_id(&at("externalId"), x)?;
    }
    if e.meta.as_ref().is_some_and(|m| m.len() > MAX_KEY_META_BYTES) {
        let msg = format!("must be at most {MAX_KEY_META_BYTES} bytes when serialized");
        return Err(ValidationError::new(at("meta"), msg));
    }
    for (j, name) in e.permissions.iter().enumerate() {
        (PERMISSION_RULES.validate_name)(&format!("{}.{j}", at("permissions")), name)?;
    }
    for (j, name) in e.roles.iter().enumerate() {
        (ROLE_RULES.validate_name)(&format!("{}.{j}", at("roles")), name)?;
    }
    keygate_domain::validate_ratelimits(&at("ratelimits"), &e.ratelimits)
}

/// The entities named (permissions by slug, created when missing; roles by name or id,
/// which must exist), resolved once for every key of the call.
fn resolve_names<'n, 'r>(
    tx: &mut dyn RbacTx,
    p: &Principal,
    ws: &str,
    rules: &'r LinkRules,
    names: impl Iterator<Item = &'n String>,
) -> Result<ResolvedLinks<'r>, RbacError> {
    let mut plan = RefPlan::default();
    for name in names {
        plan.names.insert(name.clone(), rules.create_by_default);
        if !rules.create_by_default {
            plan.or_id.insert(name.clone());
        }
    }
    let resolved = resolve_links(tx, ws, rules, &plan)?;
    resolved.authorize_creation(p)?;
    Ok(resolved)
}

/// Creates the names `resolved` found missing: every name (and id) it resolved, with the
/// id it stands for.
fn create_missing(
    tx: &mut dyn RbacTx,
    p: &Principal,
    resolved: ResolvedLinks<'_>,
    now: i64,
    events: &mut Vec<AuditEvent>,
) -> Result<BTreeMap<String, String>, RbacError> {
    let ResolvedLinks { rules, existing, to_create } = resolved;
    let kind = rules.kind;
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for e in existing.into_values() {
        // A role named by its id is found under its id as well.
        by_name.insert(e.id.clone(), e.id.clone());
        by_name.insert(e.name, e.id);
    }
    let fresh: Vec<Named> =
        to_create.into_iter().map(|name| Named::new(new_id(rules.id_prefix), name)).collect();
    if !fresh.is_empty() {
        for (stored, created) in tx.insert_entities_if_absent(kind, &p.workspace_id, &fresh, now)? {
            if created {
                events.push(AuditEvent::new(
                    &p.workspace_id,
                    &p.root_key_id,
                    created_action(kind),
                    kind.noun(),
                    &stored.id,
                    now,
                ));
            }
            by_name.insert(stored.name, stored.id);
        }
    }
    Ok(by_name)
}

/// The identities of these external ids, created (without meta or limits) where missing,
/// which needs `identity.*.create_identity`; locked until the transaction ends.
fn ensure_identities<'x>(
    tx: &mut dyn RbacTx,
    p: &Principal,
    external_ids: impl Iterator<Item = &'x String>,
    now: i64,
    events: &mut Vec<AuditEvent>,
) -> Result<BTreeMap<String, String>, RbacError> {
    let wanted: Vec<String> = external_ids.cloned().collect::<BTreeSet<_>>().into_iter().collect();
    if wanted.is_empty() {
        return Ok(BTreeMap::new());
    }
    let ws = p.workspace_id.as_str();
    let mut by_external: BTreeMap<String, String> =
        tx.lock_identities_by_external_ids(ws, &wanted)?.into_iter().map(|i| (i.external_id, i.id)).collect();
    let missing: Vec<Identity> = wanted
        .iter()
        .filter(|x| !by_external.contains_key(*x))
        .map(|x| Identity {
            id: new_id(IdPrefix::Identity),
            workspace_id: ws.to_string(),
            external_id: x.clone(),
            meta: None,
            allowed_ips: None,
            created_at: now,
            updated_at: now,
        })
        .collect();
    if missing.is_empty() {
        return Ok(by_external);
    }
    if !p.holds(PERM_CREATE_IDENTITY) {
        return Err(RbacError::missing(&[PERM_CREATE_IDENTITY]));
    }
    for id in tx.insert_identities_if_absent(&missing)? {
        events.push(super::identities::identity_event(p, "identity.create", &id, now));
    }
    // Those created meanwhile by another transaction too.
    let still: Vec<String> = missing.into_iter().map(|i| i.external_id).collect();
    by_external
        .extend(tx.lock_identities_by_external_ids(ws, &still)?.into_iter().map(|i| (i.external_id, i.id)));
    match wanted.iter().find(|x| !by_external.contains_key(*x)) {
        Some(x) => Err(RbacError::not_found(Resource::Identity, x)),
        None => Ok(by_external),
    }
}
