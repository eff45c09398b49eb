//! A verification's sequence, written once: v1's and v2's `keys.verifyKey`, forward auth and
//! the embedded client verify through [`Runtime::verify`]: from the cache inline when no
//! step needs I/O; on shared change counters, from the cache once a read that concurrent
//! verifications share confirms them, when what it spends needs no I/O; else on the
//! caller's blocking pool ([`Offload`]); answered once its credit spend is committed;
//! counted in analytics.

use crate::Runtime;
use crate::offload::{CallError, Offload, blocking};
use keygate_rbac::{ApiAccess, PermissionQuery, Principal, Verification, VerifyScope};
use keygate_usage::Usage;
use std::sync::Arc;

/// A verification to run: the secret, who may find which keys, the permission query and
/// what it spends. Borrowed: a cached verification copies none of it (a miss copies it
/// once, for the blocking pool). Its `Debug` leaves the secret out.
#[derive(Clone, Copy)]
pub struct VerifyCall<'a> {
    pub secret: &'a str,
    /// The caller's root key, when it sent one: the keys of its workspace are found, and it
    /// is checked still current by the verification (with the key's counters, off the
    /// inline path).
    pub principal: Option<&'a Arc<Principal>>,
    /// Without a root key (the embedded client): only this workspace's keys, if set.
    pub workspace_id: Option<&'a str>,
    /// Only this API's keys, if set.
    pub api_id: Option<&'a str>,
    /// The APIs the root key may verify in, when it may not verify in all.
    pub access: Option<&'a ApiAccess>,
    /// The address the verified request comes from (API-v2.md §25), when known.
    pub ip: Option<std::net::IpAddr>,
    /// The legacy migration a key not found is looked for under (API-v2.md §25; `None`: any).
    pub migration: Option<&'a str>,
    pub query: Option<&'a PermissionQuery>,
    pub usage: &'a Usage,
    /// The request's tags (v2), counted with its outcome in analytics.
    pub tags: &'a [String],
}

impl std::fmt::Debug for VerifyCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyCall")
            .field("secret", &"<redacted>")
            .field("api_id", &self.api_id)
            .field("query", &self.query)
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

impl VerifyCall<'_> {
    /// Which keys the secret may find.
    pub fn scope(&self) -> VerifyScope<'_> {
        VerifyScope {
            ip: self.ip,
            migration: self.migration,
            ..scope(self.principal, self.workspace_id, self.api_id, self.access)
        }
    }
}

fn scope<'a>(
    principal: Option<&'a Arc<Principal>>,
    workspace_id: Option<&'a str>,
    api_id: Option<&'a str>,
    access: Option<&'a ApiAccess>,
) -> VerifyScope<'a> {
    VerifyScope {
        workspace_id: match principal {
            Some(p) => Some(p.workspace_id.as_str()),
            None => workspace_id,
        },
        api_id,
        access,
        root_key: principal.map(|p| &**p),
        ip: None,
        migration: None,
    }
}

impl Runtime {
    /// Runs a verification: from the cache inline when that needs no I/O, or once a shared
    /// read confirms its change counters (`UsageService::verify_confirmed`), else through
    /// `offload`; answered once its credit spend is committed; counted in analytics (a
    /// check that spends nothing is counted by the call that follows it).
    pub async fn verify<O: Offload>(
        &self,
        offload: &O,
        call: VerifyCall<'_>,
    ) -> Result<Verification, CallError> {
        let within = call.scope();
        let mut pending = self.usage.verify_cached(call.secret, &within, call.query, call.usage);
        if pending.is_none() {
            pending = self
                .usage
                .verify_confirmed(call.secret, call.principal, &within, call.query, call.usage)
                .await;
        }
        if pending.is_none() {
            pending = self.usage.verify_assumed_queued(call.secret, &within, call.query, call.usage).await;
        }
        let pending = match pending {
            Some(pending) => pending?,
            None => {
                let usage = self.usage.clone();
                let secret = call.secret.to_string();
                let (principal, workspace_id) =
                    (call.principal.cloned(), call.workspace_id.map(String::from));
                let (api_id, access) = (call.api_id.map(String::from), call.access.cloned());
                let (query, asks, ip) = (call.query.cloned(), call.usage.clone(), call.ip);
                let migration = call.migration.map(String::from);
                // The root key is checked still current by the verification itself, with
                // the key's change counters (one read).
                let load = move || {
                    let scope = VerifyScope {
                        ip,
                        migration: migration.as_deref(),
                        ..scope(
                            principal.as_ref(),
                            workspace_id.as_deref(),
                            api_id.as_deref(),
                            access.as_ref(),
                        )
                    };
                    Ok(usage.verify(&secret, &scope, query.as_ref(), &asks)?)
                };
                // A key to load joins the queue of loads (bounded: its thread's CPU is the
                // cached verifications'); a key cached is spending or confirming, not loading.
                match &self.loading {
                    Some(queue) if !self.rbac.is_cached(call.secret) => queue.run(offload, load).await?,
                    _ => blocking(offload, load).await?,
                }
            }
        };
        let verification = pending.settle().await?;
        if !call.usage.check_only {
            let spent = call.usage.charged(&verification);
            self.analytics.record_verification(&verification, &within, call.tags, spent);
        }
        Ok(verification)
    }
}
