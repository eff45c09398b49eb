//! The one path every verification takes (v1's and v2's `verifyKey`, the gateway's forward
//! auth): from the cache inline when no step needs I/O, else off the async workers;
//! answered once its credit spend is committed; counted for analytics.

use crate::error::ApiError;
use crate::plumbing::blocking;
use crate::state::AppState;
use actix_web::web;
use keygate_rbac::{PermissionQuery, Principal, Verification, VerifyScope};
use keygate_usage::Usage;
use std::sync::Arc;

/// A verification to run: the secret, who may find which keys, the permission query and
/// what it spends. Its `Debug` leaves the secret out.
pub(crate) struct VerifyCall {
    pub secret: String,
    /// The caller's root key, when it sent one: checked still current by the verification
    /// (with the key's counters, off the inline path).
    pub principal: Option<Arc<Principal>>,
    pub api_id: Option<String>,
    pub access: Option<keygate_rbac::ApiAccess>,
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

impl VerifyCall {
    fn scope(&self) -> VerifyScope<'_> {
        VerifyScope {
            workspace_id: self.principal.as_ref().map(|p| p.workspace_id.as_str()),
            api_id: self.api_id.as_deref(),
            access: self.access.as_ref(),
            root_key: self.principal.as_deref(),
        }
    }
}

/// Runs a verification for every path that verifies (v1, v2, the gateway): from the cache
/// inline when that needs no I/O, else off the async workers; answered once its credit
/// spend is committed.
pub(crate) async fn verification(
    state: &web::Data<AppState>,
    call: VerifyCall,
) -> Result<Verification, ApiError> {
    let cached = state.usage.verify_cached(&call.secret, &call.scope(), call.query.as_ref(), &call.usage);
    let (pending, call) = match cached {
        Some(pending) => (pending?, call),
        None => {
            let st = state.clone();
            // The root key is checked still current by the verification itself, with the
            // key's change counters (one read).
            blocking(st.metrics.queued(), move || {
                let pending =
                    st.usage.verify(&call.secret, &call.scope(), call.query.as_ref(), &call.usage)?;
                Ok((pending, call))
            })
            .await?
        }
    };
    let verification = pending.settle().await?;
    // Analytics: counted in memory (a check that spends nothing is counted by the call
    // that follows it).
    if !call.usage.check_only {
        state.analytics.record_verification(&verification, &call.scope(), &call.tags);
    }
    Ok(verification)
}
