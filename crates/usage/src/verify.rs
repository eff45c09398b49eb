//! `keys.verifyKey` whole: rbac's check ([`keygate_rbac::RbacService::check`]: the key,
//! its state, its permissions), then what a valid key spends ([`crate::spend`]). The
//! server, the gateway and the embedded verifier all verify through these.

use crate::limits::{Usage, validate_usage};
use crate::spend::Pending;
use crate::{UsageService, UsageStore};
use keygate_rbac::{
    Assumed, CachedKey, Checked, PermissionQuery, Principal, RbacError, Verification, VerifyCode, VerifyScope,
};
use std::sync::Arc;

impl<S: UsageStore + 'static> UsageService<S> {
    /// [`Self::verify`] answered inline, when no step needs I/O (local change counters and
    /// a current cache entry, an in-process limiter, a credit spend only queued): `None`
    /// means ask [`Self::verify`] where the caller may block.
    pub fn verify_cached(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Option<Result<Pending, RbacError>> {
        if let Err(e) = validate_usage(usage) {
            return Some(Err(e.into()));
        }
        self.rbac.check_cached(secret, scope, query, |checked| self.spend(checked, usage, false, None))
    }

    /// [`Self::verify`] of a cached key on shared change counters, when what it spends
    /// needs no I/O (it spends nothing, or only limits decided in this process): its
    /// counters confirmed by one read that the concurrent verifications' confirmations
    /// share ([`keygate_rbac::RbacService::check_unconfirmed`]), awaited on the caller's
    /// tokio runtime, then answered here. `root` is `scope`'s root key. `None`: verify the
    /// usual way (not cached, a counter moved, the shared store did not answer, or the
    /// spend needs I/O after all); nothing was spent. `usage` was validated.
    pub async fn verify_confirmed(
        &self,
        secret: &str,
        root: Option<&Arc<Principal>>,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Option<Result<Pending, RbacError>> {
        let remote = self.limiter.is_remote();
        // A shared ledger that cannot check the counters with the spend (a cluster: they
        // are in another slot) queues the spends of confirmed answers instead.
        let queues = self.ledger.takes_limits() && !self.ledger.assumes_counters();
        let inline = |k: &CachedKey| {
            usage.check_only
                || (k.credits().is_none()
                    && (!remote
                        || (usage.ratelimits.is_empty()
                            && k.ratelimits()
                                .iter()
                                .chain(k.identity().iter().flat_map(|i| &i.ratelimits))
                                .all(|l| !l.auto_apply))))
                || (queues && assumes(k))
        };
        let (unconfirmed, confirming) = self.rbac.check_unconfirmed(secret, root, inline)?;
        if !matches!(confirming.await, Ok(true)) {
            unconfirmed.stale();
            return None;
        }
        let checked = self.rbac.confirmed(unconfirmed, scope, query);
        let credits = checked.snapshot.as_ref().is_some_and(|s| s.key().credits().is_some());
        if queues && credits && !usage.check_only {
            return self.spend_queued(checked, usage, None).await;
        }
        self.spend(checked, usage, false, None)
    }

    /// `keys.verifyKey`: whether `secret` is a key that is enabled, not expired and, when
    /// `query` is given, holds the permissions it asks for, within `scope` (rbac's
    /// check); then, for such a key, what `usage` spends: its rate limits and its credits
    /// (API-v2.md §13; RATE_LIMITED or USAGE_EXCEEDED when they do not suffice, nothing
    /// spent). Needs no root key: the secret is the credential. Answered once the spend is
    /// committed ([`Pending`]).
    pub fn verify(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Result<Pending, RbacError> {
        validate_usage(usage)?;
        if let Some(answer) = self.verify_assuming(secret, scope, query, usage) {
            return answer;
        }
        let checked = self.rbac.check(secret, scope, query)?;
        self.spend(checked, usage, true, None).expect("may wait: always answers")
    }

    /// [`Self::verify`] in one round trip to the shared store where it can: a cached key
    /// that spends credits (and has no identity limits, which live elsewhere) is answered
    /// from its cache entry, and its change counters are checked by the credit spend's own
    /// script (one Redis), which does nothing when one moved. `None`: verify the usual
    /// way (counters read, then the spend).
    fn verify_assuming(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Option<Result<Pending, RbacError>> {
        let (checked, assumed) = self.assumed(secret, scope, query, usage)?;
        self.spend(checked, usage, true, Some(&assumed))
    }

    /// The cached answer a spend that checks its counters can confirm, and what it
    /// assumes, when the ledger can (`RbacService::check_assuming`): a VALID one.
    fn assumed(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Option<(Checked, Assumed)> {
        if usage.check_only || !self.ledger.assumes_counters() {
            return None;
        }
        let (checked, assumed) = self.rbac.check_assuming(secret, scope, query, assumes)?;
        (checked.verification.code == VerifyCode::Valid).then_some((checked, assumed))
    }

    /// [`Self::verify`]'s one-step spend of a cached key through the ledger's queued path,
    /// on the caller's tokio runtime: the spend (which checks the change counters the
    /// cached answer assumed) sent with the round trips of other requests instead of one
    /// of its own on the blocking pool. `None`: verify the usual way; nothing was spent. `usage` was
    /// validated.
    pub async fn verify_assumed_queued(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Option<Result<Pending, RbacError>> {
        let (checked, assumed) = self.assumed(secret, scope, query, usage)?;
        self.spend_queued(checked, usage, Some(&assumed)).await
    }

    /// [`Self::verify`] with the default usage (cost 1, the auto-applied limits), waiting
    /// for its spend to commit.
    pub fn verify_key(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Result<Verification, RbacError> {
        self.verify(secret, scope, query, &Usage::default())?.wait()
    }
}

/// Whether a verification of this key can be answered in one step of the shared ledger
/// that checks its assumed counters: it spends credits and has no identity limits (which
/// live elsewhere).
fn assumes(k: &CachedKey) -> bool {
    k.credits().is_some() && k.identity().is_none_or(|i| i.ratelimits.is_empty())
}
