//! The storage the portal is defined over: its two tables, read and written in the same
//! transaction as the keys, identities and counts ([`PortalTx`] extends `AnalyticsTx`).

use crate::{Portal, PortalSession};
use keygate_analytics::{AnalyticsStore, AnalyticsTx};
use keygate_rbac::{RbacError, StorageError};

type R<T> = Result<T, StorageError>;

/// Portals and their sessions.
pub trait PortalTx: AnalyticsTx {
    fn insert_portal(&mut self, portal: &Portal) -> R<()>;
    /// The workspace's portal whose id or slug is `id_or_slug`.
    fn portal(&mut self, workspace_id: &str, id_or_slug: &str) -> R<Option<Portal>>;
    /// The workspace's portal of an API.
    fn portal_of_api(&mut self, workspace_id: &str, api_id: &str) -> R<Option<Portal>>;
    /// Whether any key of the API is recoverable (its plaintext sealed in the vault).
    fn api_has_recoverable_keys(&mut self, workspace_id: &str, api_id: &str) -> R<bool>;
    /// The workspace's portals, by slug.
    fn workspace_portals(&mut self, workspace_id: &str) -> R<Vec<Portal>>;
    /// The portal with this slug, in any workspace (its pages).
    fn portal_by_slug(&mut self, slug: &str) -> R<Option<Portal>>;
    /// A portal by id, in any workspace.
    fn portal_by_id(&mut self, id: &str) -> R<Option<Portal>>;
    /// Writes its slug, name, API, enabled flag, branding and `updated_at`.
    fn update_portal(&mut self, portal: &Portal) -> R<()>;
    /// Deletes the portal and its sessions; whether it existed.
    fn delete_portal(&mut self, workspace_id: &str, id: &str) -> R<bool>;

    /// A new (pending) session, its code stored as `code_hash`.
    fn insert_portal_session(&mut self, session: &PortalSession, code_hash: &str) -> R<()>;
    /// Redeems a code: the session whose code hashes to `code_hash`, pending, not revoked
    /// and unexpired at `now`, becomes active with `token_hash` until `token_expires_at`
    /// (its code cleared: it cannot be redeemed again). One statement: of concurrent
    /// redemptions exactly one gets the session.
    fn redeem_portal_code(
        &mut self,
        code_hash: &str,
        token_hash: &str,
        now: i64,
        token_expires_at: i64,
    ) -> R<Option<PortalSession>>;
    /// The session holding this access token (revoked or expired ones included).
    fn portal_session_by_token(&mut self, token_hash: &str) -> R<Option<PortalSession>>;
    /// The portal's live sessions at `now` (pending with an unexpired code, or active with
    /// an unexpired token, not revoked) of the first `limit` external ids (ascending)
    /// after `after` that start with `prefix` (taken literally).
    fn live_portal_sessions(
        &mut self,
        portal_id: &str,
        prefix: Option<&str>,
        after: Option<&str>,
        limit: usize,
        now: i64,
    ) -> R<Vec<PortalSession>>;
    /// Revokes the portal's live sessions of `external_id` at `now`: how many.
    fn revoke_portal_sessions(&mut self, portal_id: &str, external_id: &str, now: i64) -> R<usize>;
}

/// A store that hands out portal transactions besides the others. A closure returning
/// `Err` rolls its transaction back.
pub trait PortalStore: AnalyticsStore {
    fn portal_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn PortalTx) -> Result<T, RbacError>;

    /// Reads outside a transaction.
    fn portal_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn PortalTx) -> Result<T, RbacError>,
    {
        self.portal_transaction(f)
    }
}
