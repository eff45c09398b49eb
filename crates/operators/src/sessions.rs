//! Dashboard sessions (docs/dashboard.md): a root key, given once at login, becomes a
//! random session token; the session acts with that root key's permissions, read again on
//! every use (a revoked or expired root key ends it), and ends after
//! [`SESSION_IDLE_MS`] without use or at logout. Only the token's SHA-256 is stored.

use keygate_domain::{hash_secret, random_base58_token, random_token, validate_root_key_secret};
use keygate_rbac::store::StoredSession;
use keygate_rbac::{Principal, RbacError, RbacService, RbacStore};
use std::sync::Arc;

/// How long a session lasts without use: 12 hours.
pub const SESSION_IDLE_MS: i64 = 12 * 3_600_000;
/// A session's last use is written at most this often (a page view is not a write each).
const TOUCH_EVERY_MS: i64 = 60_000;

/// A session in use: who acts, and the token its forms must carry.
#[derive(Debug, Clone)]
pub struct DashboardSession {
    pub principal: Arc<Principal>,
    /// The synchronizer token of the session's forms.
    pub csrf_token: String,
}

/// The dashboard's sessions, over rbac's service and store.
#[derive(Debug)]
pub struct Sessions<S> {
    rbac: Arc<RbacService<S>>,
}

impl<S: RbacStore> Sessions<S> {
    pub fn new(rbac: Arc<RbacService<S>>) -> Self {
        Self { rbac }
    }

    fn now(&self) -> i64 {
        self.rbac.clock().now_ms() as i64
    }

    /// Logs in with a root key: a new session's token (for the cookie, never stored) and
    /// the session. 401 for a key that is unknown or revoked, 403 for an expired one.
    pub fn create_session(&self, root_key: &str) -> Result<(String, DashboardSession), RbacError> {
        validate_root_key_secret(root_key)?;
        let principal = self.rbac.authenticate(root_key)?;
        self.rbac.ensure_root_key_current(&principal)?;
        let token = random_token("kgs");
        let csrf_token = random_base58_token(None, 24);
        let now = self.now();
        let stored = StoredSession {
            token_hash: hash_secret(&token),
            workspace_id: principal.workspace_id.clone(),
            root_key_id: principal.root_key_id.clone(),
            csrf_token: csrf_token.clone(),
            created_at: now,
            seen_at: now,
        };
        self.rbac.store().transaction(|tx| {
            tx.delete_sessions_seen_before(now - SESSION_IDLE_MS)?;
            Ok(tx.insert_session(&stored)?)
        })?;
        Ok((token, DashboardSession { principal, csrf_token }))
    }

    /// The session of `token`, or `None` when there is none: unknown, idle for
    /// [`SESSION_IDLE_MS`], or its root key revoked or expired since (such a session is
    /// deleted). Notes the use.
    pub fn session(&self, token: &str) -> Result<Option<DashboardSession>, RbacError> {
        if token.is_empty() || token.len() > 128 {
            return Ok(None);
        }
        let hash = hash_secret(token);
        let now = self.now();
        let Some(s) = self.rbac.store().read(|tx| Ok(tx.session_by_hash(&hash)?))? else { return Ok(None) };
        let root_key = match now - s.seen_at > SESSION_IDLE_MS {
            true => None,
            false => self
                .rbac
                .store()
                .read(|tx| Ok(tx.root_key_by_id(&s.root_key_id)?))?
                .filter(|rk| rk.expires_at.is_none_or(|e| e > now)),
        };
        let Some(rk) = root_key else {
            self.rbac.store().transaction(|tx| Ok(tx.delete_session(&hash)?))?;
            return Ok(None);
        };
        if now - s.seen_at >= TOUCH_EVERY_MS {
            self.rbac.store().transaction(|tx| Ok(tx.touch_session(&hash, now)?))?;
        }
        let principal = Arc::new(Principal::new(rk.id, rk.workspace_id, rk.permissions));
        Ok(Some(DashboardSession { principal, csrf_token: s.csrf_token }))
    }

    /// Ends the session of `token` (nothing when there is none).
    pub fn end_session(&self, token: &str) -> Result<(), RbacError> {
        let hash = hash_secret(token);
        self.rbac.store().transaction(|tx| Ok(tx.delete_session(&hash)?)).map(drop)
    }
}
