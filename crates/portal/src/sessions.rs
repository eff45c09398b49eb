//! Portal sessions: minted by a root key for one end user (`portal.createSession`), a
//! single-use code redeemed for a 24-hour access token (`portal.exchangeCode`), listed and
//! revoked per end user; and the session behind an access token, checked on every use.

use crate::portals::event;
use crate::{
    CODE_TTL_MS, Portal, PortalRef, PortalScope, PortalService, PortalSession, PortalStore, TOKEN_TTL_MS,
    count, validate_url,
};
use keygate_domain::{IdPrefix, ValidationError, hash_secret, new_id, random_token, validate_external_id};
use keygate_rbac::{ApiAccess, Principal, RbacError};
use std::sync::Arc;

/// `portal.createSession`'s input.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    pub external_id: String,
    pub scopes: Vec<String>,
    pub preview: bool,
    pub return_url: Option<String>,
}

/// One end user's live sessions (`portal.listSessions`).
#[derive(Debug, Clone)]
pub struct SessionGroup {
    pub external_id: String,
    pub sessions: Vec<PortalSession>,
}

/// A session in use: its portal, and who it acts as (a principal holding, on the portal's
/// API only, the key permissions its scopes need; audit events name it
/// `portal:<session id>`).
#[derive(Debug, Clone)]
pub struct PortalContext {
    pub session: PortalSession,
    pub portal: Portal,
    pub principal: Arc<Principal>,
}

/// The longest code or token read (longer ones cannot be ours).
const MAX_SECRET_CHARS: usize = 128;

impl<S: PortalStore> PortalService<S> {
    /// `portal.createSession`: needs `create_portal_session` on the portal (404 without);
    /// each scope needs its key permissions on the portal's API (403 for the whole call
    /// naming the first one missing); a disabled portal mints none (412). The session's id
    /// and its code (the `url` carries it; keygate keeps its hash).
    pub fn create_session(
        &self,
        p: &Principal,
        portal: &str,
        new: NewSession,
    ) -> Result<(PortalSession, String, Portal), RbacError> {
        validate_external_id("externalId", &new.external_id)?;
        let scopes = parse_scopes(&new.scopes)?;
        if let Some(u) = &new.return_url {
            validate_url("returnUrl", u, &["http", "https"])?;
        }
        let now = self.now();
        let code = random_token("kgpc");
        let (session, found) = self.rbac.store().portal_transaction(|tx| {
            let found = self.find(tx, p, PortalRef::Portal(portal), "create_portal_session")?;
            if !found.enabled {
                return Err(RbacError::Precondition(format!("portal {} is disabled: it mints no sessions", found.slug)));
            }
            // A session that creates keys in an API holding recoverable ones seals their
            // successors: it needs encrypt_key too.
            let sealing = scopes.iter().any(|s| matches!(s, PortalScope::KeysCreate | PortalScope::KeysReroll))
                && tx.api_has_recoverable_keys(&p.workspace_id, &found.api_id)?;
            for scope in &scopes {
                let sealed: &[&str] = match sealing && scope.needs().contains(&"create_key") {
                    true => &["encrypt_key"],
                    false => &[],
                };
                for action in scope.needs().iter().chain(sealed) {
                    if !ApiAccess::of(p, action).is_some_and(|a| a.admits(Some(&found.api_id))) {
                        return Err(RbacError::InsufficientPermissions(format!(
                            "the scope {} needs api.*.{action} (or api.{}.{action}), which the root key lacks",
                            scope.as_str(),
                            found.api_id
                        )));
                    }
                }
            }
            let session = PortalSession {
                id: new_id(IdPrefix::PortalSession),
                workspace_id: p.workspace_id.clone(),
                portal_id: found.id.clone(),
                external_id: new.external_id.clone(),
                scopes: scopes.clone(),
                preview: new.preview,
                return_url: new.return_url.clone(),
                root_key_id: p.root_key_id.clone(),
                code_expires_at: now + CODE_TTL_MS,
                token_expires_at: None,
                created_at: now,
                revoked_at: None,
            };
            tx.insert_portal_session(&session, &hash_secret(&code))?;
            let mut e = event(p, "portal.session.create", &found.id, now);
            e.detail = Some(format!("{} for {}", session.id, session.external_id));
            tx.insert_audit_events(&[e])?;
            Ok((session, found))
        })?;
        count("created");
        Ok((session, code, found))
    }

    /// The link a session's code is redeemed at.
    pub fn session_url(&self, portal: &Portal, code: &str) -> String {
        format!("{}/portal/{}?code={code}", self.public_url(), portal.slug)
    }

    /// `portal.exchangeCode` (no root key): the access token and when it expires. An
    /// unknown, expired, revoked or used code, or one whose portal or minting root key is
    /// gone or unusable: 401. Of concurrent exchanges of one code exactly one succeeds.
    pub fn exchange_code(&self, code: &str) -> Result<(String, PortalContext), RbacError> {
        let refused = || {
            count("refused");
            RbacError::Unauthorized("the code is unknown, expired or used".into())
        };
        if code.is_empty() || code.len() > MAX_SECRET_CHARS {
            return Err(refused());
        }
        let now = self.now();
        let token = random_token("kgpt");
        let redeemed = self.rbac.store().portal_transaction(|tx| {
            Ok(tx.redeem_portal_code(&hash_secret(code), &hash_secret(&token), now, now + TOKEN_TTL_MS)?)
        })?;
        let Some(session) = redeemed else { return Err(refused()) };
        let ctx = self.context(session, now)?.ok_or_else(refused)?;
        count("exchanged");
        Ok((token, ctx))
    }

    /// The session of an access token, or `None` (401) when there is none: unknown,
    /// expired, revoked, its portal deleted or disabled, its root key deleted, disabled or
    /// expired. Read from the database on every call.
    pub fn session(&self, token: &str) -> Result<Option<PortalContext>, RbacError> {
        if token.is_empty() || token.len() > MAX_SECRET_CHARS {
            return Ok(None);
        }
        let now = self.now();
        let hash = hash_secret(token);
        let Some(session) = self.rbac.store().portal_read(|tx| Ok(tx.portal_session_by_token(&hash)?))?
        else {
            return Ok(None);
        };
        if session.revoked_at.is_some() || session.token_expires_at.is_none_or(|e| e <= now) {
            return Ok(None);
        }
        self.context(session, now)
    }

    /// The session with its portal and principal, when the portal is there and enabled
    /// and the root key that minted it is still usable.
    fn context(&self, session: PortalSession, now: i64) -> Result<Option<PortalContext>, RbacError> {
        let (portal, root_key) = self.rbac.store().portal_read(|tx| {
            Ok((tx.portal_by_id(&session.portal_id)?, tx.root_key_by_id(&session.root_key_id)?))
        })?;
        let (Some(portal), Some(root_key)) = (portal, root_key) else { return Ok(None) };
        if !portal.enabled || root_key.usable_at(now).is_err() {
            return Ok(None);
        }
        let api = &portal.api_id;
        // A scope works while the minting root key still holds what it needed at mint; a
        // recoverable key's successor is sealed only if that key may encrypt.
        let minter =
            Principal::new(root_key.id.clone(), root_key.workspace_id.clone(), root_key.permissions.clone());
        let holds = |action: &str| ApiAccess::of(&minter, action).is_some_and(|x| x.admits(Some(api)));
        let mut permissions = Vec::new();
        for scope in session.scopes.iter().filter(|s| s.needs().iter().all(|a| holds(a))) {
            let actions: &[&str] = match scope {
                PortalScope::KeysRead => &["read_key", "read_api"],
                PortalScope::KeysCreate => &["create_key", "read_api", "encrypt_key"],
                // A reroll creates the successor and expires the original.
                PortalScope::KeysReroll => &["create_key", "update_key", "encrypt_key"],
                PortalScope::AnalyticsRead => &["read_analytics"],
            };
            let granted = actions.iter().filter(|a| **a != "encrypt_key" || holds(a));
            permissions.extend(granted.map(|a| format!("api.{api}.{a}")));
        }
        let principal = Arc::new(Principal::new(
            format!("portal:{}", session.id),
            session.workspace_id.clone(),
            permissions,
        ));
        Ok(Some(PortalContext { session, portal, principal }))
    }

    /// `portal.listSessions`: the live sessions of up to `limit` end users (by externalId,
    /// after `after`, starting with `search`). Needs `create_portal_session`.
    pub fn list_sessions(
        &self,
        p: &Principal,
        portal: &str,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<SessionGroup>, Option<String>), RbacError> {
        if let Some(s) = search {
            keygate_domain::check_len("search", s, keygate_domain::MAX_NAME_CHARS)?;
        }
        let now = self.now();
        let sessions = self.rbac.store().portal_read(|tx| {
            let found = self.find(tx, p, PortalRef::Portal(portal), "create_portal_session")?;
            Ok(tx.live_portal_sessions(&found.id, search, after, limit + 1, now)?)
        })?;
        let mut groups: Vec<SessionGroup> = Vec::new();
        for s in sessions {
            match groups.last_mut() {
                Some(g) if g.external_id == s.external_id => g.sessions.push(s),
                _ => groups.push(SessionGroup { external_id: s.external_id.clone(), sessions: vec![s] }),
            }
        }
        let next = match groups.len() > limit {
            true => {
                groups.truncate(limit);
                groups.last().map(|g| g.external_id.clone())
            }
            false => None,
        };
        Ok((groups, next))
    }

    /// `portal.revokeSession`: ends every live session (pending ones too) of the end
    /// user; how many. Needs `create_portal_session`.
    pub fn revoke_sessions(
        &self,
        p: &Principal,
        portal: &str,
        external_id: &str,
    ) -> Result<usize, RbacError> {
        validate_external_id("externalId", external_id)?;
        let now = self.now();
        let n = self.rbac.store().portal_transaction(|tx| {
            let found = self.find(tx, p, PortalRef::Portal(portal), "create_portal_session")?;
            let n = tx.revoke_portal_sessions(&found.id, external_id, now)?;
            if n > 0 {
                let mut e = event(p, "portal.session.revoke", &found.id, now);
                e.detail = Some(format!("{n} of {external_id}"));
                tx.insert_audit_events(&[e])?;
            }
            Ok(n)
        })?;
        for _ in 0..n {
            count("revoked");
        }
        Ok(n)
    }
}

/// 1–4 distinct scopes of the four.
fn parse_scopes(scopes: &[String]) -> Result<Vec<PortalScope>, ValidationError> {
    if scopes.is_empty() || scopes.len() > 4 {
        return Err(ValidationError::new("scopes", "must hold 1 to 4 scopes"));
    }
    let mut out = Vec::with_capacity(scopes.len());
    for (i, s) in scopes.iter().enumerate() {
        let scope = PortalScope::parse(s).ok_or_else(|| {
            ValidationError::new(
                format!("scopes[{i}]"),
                "must be one of keys:read, keys:create, keys:reroll, analytics:read",
            )
        })?;
        if out.contains(&scope) {
            return Err(ValidationError::new(format!("scopes[{i}]"), format!("{s} is given twice")));
        }
        out.push(scope);
    }
    Ok(out)
}
