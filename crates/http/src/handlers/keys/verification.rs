//! The one path every verification takes (v1's and v2's `verifyKey`, the gateway's forward
//! auth): what a request asks, read into a [`VerifyCall`], run by the runtime
//! ([`keygate_runtime::Runtime::verify`]: from the cache inline when no step needs I/O, else
//! on actix's blocking pool; answered once its credit spend is committed; counted for
//! analytics).

use crate::error::ApiError;
use crate::state::AppState;
use actix_web::web;
use keygate_rbac::{PermissionQuery, Principal, Verification};
use keygate_usage::Usage;
use std::sync::Arc;

/// A verification to run, as a request asked it: the secret, who may find which keys, the
/// permission query and what it spends. Its `Debug` leaves the secret out.
pub(crate) struct VerifyCall {
    pub secret: String,
    /// The caller's root key, when it sent one: checked still current by the verification
    /// (with the key's counters, off the inline path).
    pub principal: Option<Arc<Principal>>,
    pub api_id: Option<String>,
    pub access: Option<keygate_rbac::ApiAccess>,
    /// The address the verified request comes from (API-v2.md §25), when known.
    pub ip: Option<std::net::IpAddr>,
    /// v2's `migrationId`: the legacy migration to look for a key not found under.
    pub migration: Option<String>,
    pub query: Option<PermissionQuery>,
    pub usage: Usage,
    /// The request's tags (v2), counted with its outcome in analytics.
    pub tags: Vec<String>,
}

impl std::fmt::Debug for VerifyCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyCall")
            .field("secret", &"<redacted>")
            .field("api_id", &self.api_id)
            .field("query", &self.query)
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

/// Runs a verification for every path that verifies (v1, v2, the gateway).
pub(crate) async fn verification(
    state: &web::Data<AppState>,
    call: VerifyCall,
) -> Result<Verification, ApiError> {
    let call = keygate_runtime::VerifyCall {
        secret: &call.secret,
        principal: call.principal.as_ref(),
        workspace_id: None,
        api_id: call.api_id.as_deref(),
        access: call.access.as_ref(),
        ip: call.ip,
        migration: call.migration.as_deref(),
        query: call.query.as_ref(),
        usage: &call.usage,
        tags: &call.tags,
    };
    Ok(state.runtime.verify(state.get_ref(), call).await?)
}
