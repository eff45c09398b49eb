//! What `keys.verifyKey` answers: the verification (the key found, shared with the
//! verification cache, and what the call spent), with its code and how each rate limit
//! fared (`keygate_domain`'s [`VerifyCode`] and [`LimitOutcome`]).

use crate::{IdentityView, LimitOutcome, VerifyCode};
use keygate_cache::{CachedKey, Name};

/// A verified key: the key found (absent when the secret is unknown or out of scope), as
/// the verification cache holds it, with the names of its effective permissions (direct
/// and through its roles) and of its roles, each sorted by name, and its identity (read
/// through [`Self::key`], [`Self::permissions`], [`Self::roles`], [`Self::identity`]: a
/// verification copies nothing of the key); and what the call spent (API-v2.md §13.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub code: VerifyCode,
    /// The key's snapshot, shared with the cache.
    pub found: Option<crate::Snapshot>,
    /// The key's remaining credits after the call, when it has credits and the call got as
    /// far as them (a VALID or USAGE_EXCEEDED answer).
    pub credits: Option<u64>,
    /// Every rate limit that applied, sorted by name (empty unless the call got as far as
    /// them).
    pub ratelimits: Vec<LimitOutcome>,
}

impl Verification {
    pub fn valid(&self) -> bool {
        self.code == VerifyCode::Valid
    }

    /// The key found.
    pub fn key(&self) -> Option<&CachedKey> {
        self.found.as_ref().map(|s| s.key())
    }

    /// The names of the key's effective permissions, sorted (none when no key was found).
    pub fn permissions(&self) -> &[Name] {
        self.found.as_ref().map_or(&[], |s| s.key().permissions())
    }

    /// The names of the key's roles, sorted (none when no key was found).
    pub fn roles(&self) -> &[Name] {
        self.found.as_ref().map_or(&[], |s| s.key().roles())
    }

    /// The identity the key is linked to, with its limits.
    pub fn identity(&self) -> Option<&IdentityView> {
        self.found.as_ref().and_then(|s| s.key().identity())
    }
}
