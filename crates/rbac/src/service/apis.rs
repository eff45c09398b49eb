//! API objects (API-v2.md §10): created, read, their keys listed a page at a time, and
//! deleted with every key in them. A key's `apiId` names one; `keys.createKey` creates the
//! API it names when there is none (`ensure_api`).

use crate::perms::PERM_CREATE_API;
use crate::{
    Api, ApiAccess, AuditEvent, Key, KeyChange, Page, Principal, RbacError, RbacService, RbacStore, RbacTx,
    Resource, Scope,
};
use keygate_domain::{AllowedIps, IdPrefix, KeyFormat, MAX_NAME_CHARS, check_len, new_id, validate_api_name};

/// The most APIs [`RbacService::list_apis`] answers.
pub const MAX_LISTED_APIS: usize = 1_000;

impl<S: RbacStore> RbacService<S> {
    /// `apis.createApi`: a new API of the caller's workspace, whose keys are plain. Names
    /// need not be unique.
    pub fn create_api(&self, p: &Principal, name: &str) -> Result<Api, RbacError> {
        self.create_api_of(p, name, KeyFormat::Plain, None)
    }

    /// `apis.createApi` with its `keyFormat` (API-v2.md §24) and `allowedIps` (§25), both
    /// fixed for the API's life.
    pub fn create_api_of(
        &self,
        p: &Principal,
        name: &str,
        key_format: KeyFormat,
        allowed_ips: Option<AllowedIps>,
    ) -> Result<Api, RbacError> {
        validate_api_name("name", name)?;
        if !p.holds(PERM_CREATE_API) {
            return Err(RbacError::missing(&[PERM_CREATE_API]));
        }
        let api = Api {
            id: new_id(IdPrefix::Api),
            workspace_id: p.workspace_id.clone(),
            name: name.to_string(),
            created_at: self.now(),
            key_format,
            allowed_ips,
        };
        self.write(|tx, _| {
            tx.insert_api_if_absent(&api)?;
            tx.insert_audit_events(&[api_event(p, "api.create", &api.id, api.created_at)])?;
            Ok(())
        })?;
        Ok(api)
    }

    /// `apis.getApi`: the API, if the root key may read it (`api.*.read_api` or
    /// `api.<apiId>.read_api`).
    pub fn get_api(&self, p: &Principal, api_id: &str) -> Result<Api, RbacError> {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
        authorize_api(p, "read_api", api_id)?;
        self.store
            .read(|tx| Ok(tx.get_api(&p.workspace_id, api_id)?))?
            .ok_or_else(|| RbacError::not_found(Resource::Api, api_id))
    }

    /// The workspace's APIs the root key may read (`api.*.read_api`, or
    /// `api.<apiId>.read_api` for each), by name: at most `MAX_LISTED_APIS`.
    pub fn list_apis(&self, p: &Principal) -> Result<Vec<Api>, RbacError> {
        let access = ApiAccess::of(p, "read_api").ok_or_else(|| ApiAccess::denied("read_api", None))?;
        let apis = self.store.read(|tx| Ok(tx.list_apis(&p.workspace_id, MAX_LISTED_APIS)?))?;
        Ok(apis.into_iter().filter(|a| access.admits(Some(&a.id))).collect())
    }

    /// `apis.listKeys`: a page of the API's keys by id (those after `after`, at most
    /// `limit`), each described by `describe` in one snapshot with the page. Needs
    /// `read_api` and `read_key`, each for all APIs or this one. `external_id` keeps the keys
    /// of that identity (none when there is no such identity). Answers the page and how many keys the API holds.
    pub fn list_api_keys<T>(
        &self,
        p: &Principal,
        api_id: &str,
        external_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
        describe: impl Fn(&mut dyn RbacTx, Key) -> Result<T, RbacError>,
    ) -> Result<(Page<T>, u64), RbacError> {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
        authorize_api(p, "read_api", api_id)?;
        authorize_api(p, "read_key", api_id)?;
        let ws = p.workspace_id.as_str();
        self.store.snapshot(|tx| {
            if tx.get_api(ws, api_id)?.is_none() {
                return Err(RbacError::not_found(Resource::Api, api_id));
            }
            let total = tx.count_api_keys(ws, api_id)?;
            let identity = match external_id {
                Some(e) => match tx.identity_by_external_id(ws, e)? {
                    Some(i) => Some(i.id),
                    None => return Ok((Page { items: Vec::new(), next: None }, total)),
                },
                None => None,
            };
            let rows = tx.api_keys_page(ws, api_id, identity.as_deref(), after, limit + 1)?;
            let mut page = Page::keyset(rows, limit, |k| k.id.as_str());
            self.live_credits(&mut page.items.iter_mut().collect::<Vec<_>>())?;
            let items = page.items.into_iter().map(|k| describe(tx, k)).collect::<Result<_, _>>()?;
            Ok((Page { items, next: page.next }, total))
        })
    }

    /// The API's keys whose id is `text` or whose name contains it (the dashboard's
    /// search), by id, at most `limit`. Needs what `apis.listKeys` needs.
    pub fn search_api_keys(
        &self,
        p: &Principal,
        api_id: &str,
        text: &str,
        limit: usize,
    ) -> Result<Vec<Key>, RbacError> {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
        check_len("search", text, MAX_NAME_CHARS)?;
        authorize_api(p, "read_api", api_id)?;
        authorize_api(p, "read_key", api_id)?;
        let ws = p.workspace_id.as_str();
        self.store.snapshot(|tx| {
            if tx.get_api(ws, api_id)?.is_none() {
                return Err(RbacError::not_found(Resource::Api, api_id));
            }
            Ok(tx.search_api_keys(ws, api_id, text, limit)?)
        })
    }

    /// `apis.deleteApi`: the API and every key in it, in one transaction; the keys verify
    /// NOT_FOUND on the next request on every instance. Needs `api.*.delete_api` or
    /// `api.<apiId>.delete_api`.
    pub fn delete_api(&self, p: &Principal, api_id: &str) -> Result<(), RbacError> {
        check_len("apiId", api_id, MAX_NAME_CHARS)?;
        authorize_api(p, "delete_api", api_id)?;
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            if !tx.lock_api(ws, api_id)? {
                return Err(RbacError::not_found(Resource::Api, api_id));
            }
            let now = self.now();
            // `key.deleted` of each key, read before it goes.
            self.keys_event(tx, ws, |tx| Ok(tx.api_key_ids(ws, api_id)?), KeyChange::Deleted, now)?;
            let deleted = tx.delete_api_keys(ws, api_id)?;
            tx.delete_api(ws, api_id)?;
            // Many keys at once: the workspace's counter ends every cached answer of it.
            if !deleted.is_empty() {
                changes.touch(Scope::Workspace(ws));
            }
            let mut events = vec![api_event(p, "api.delete", api_id, now)];
            events.extend(
                deleted
                    .into_iter()
                    .map(|key_id| AuditEvent::on_key(ws, &p.root_key_id, "key.delete", &key_id, now)),
            );
            tx.insert_audit_events(&events)?;
            Ok(())
        })
    }
}

/// The API a new key names, in the key's transaction: locked when it exists (its deletion
/// waits for the key, or the key for its deletion), else created, named after its id
/// (API-v2.md §2.1: v1's free-form labels keep working).
pub(super) fn ensure_api(
    tx: &mut dyn RbacTx,
    p: &Principal,
    api_id: &str,
    now: i64,
) -> Result<(), RbacError> {
    let ws = p.workspace_id.as_str();
    if tx.lock_api(ws, api_id)? {
        return Ok(());
    }
    let api = Api {
        id: api_id.to_string(),
        workspace_id: ws.to_string(),
        name: api_id.to_string(),
        created_at: now,
        key_format: KeyFormat::Plain,
        allowed_ips: None,
    };
    if tx.insert_api_if_absent(&api)? {
        tx.insert_audit_events(&[api_event(p, "api.create", api_id, now)])?;
    }
    tx.lock_api(ws, api_id)?;
    Ok(())
}

/// 403 unless the root key holds `api.*.<action>` or `api.<apiId>.<action>`.
fn authorize_api(p: &Principal, action: &str, api_id: &str) -> Result<(), RbacError> {
    match ApiAccess::of(p, action) {
        Some(access) if access.admits(Some(api_id)) => Ok(()),
        Some(_) => Err(ApiAccess::denied(action, Some(api_id))),
        None => Err(ApiAccess::denied(action, None)),
    }
}

fn api_event(p: &Principal, action: &'static str, api_id: &str, at: i64) -> AuditEvent {
    AuditEvent::new(&p.workspace_id, &p.root_key_id, action, "api", api_id, at)
}
