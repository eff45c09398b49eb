//! What `keys.verifyKey` answers: its code (Unkey's), the verification (the key found,
//! shared with the verification cache, and what the call spent) and how each rate limit
//! fared.

use crate::{IdentityView, Key};

/// The outcome of `keys.verifyKey` (Unkey's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerifyCode {
    Valid,
    NotFound,
    Disabled,
    Expired,
    InsufficientPermissions,
    /// The key's credits could not pay the call's cost (nothing spent).
    UsageExceeded,
    /// A rate limit of the key or its identity was exceeded (nothing spent).
    RateLimited,
}

impl VerifyCode {
    /// Every code, in the order the API documents them.
    pub const ALL: [VerifyCode; 7] = [
        VerifyCode::Valid,
        VerifyCode::NotFound,
        VerifyCode::Disabled,
        VerifyCode::Expired,
        VerifyCode::InsufficientPermissions,
        VerifyCode::UsageExceeded,
        VerifyCode::RateLimited,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            VerifyCode::Valid => "VALID",
            VerifyCode::NotFound => "NOT_FOUND",
            VerifyCode::Disabled => "DISABLED",
            VerifyCode::Expired => "EXPIRED",
            VerifyCode::InsufficientPermissions => "INSUFFICIENT_PERMISSIONS",
            VerifyCode::UsageExceeded => "USAGE_EXCEEDED",
            VerifyCode::RateLimited => "RATE_LIMITED",
        }
    }
}

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

/// How a rate limit fared in a verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitOutcome {
    /// The stored limit's id (an ad-hoc limit: `adhoc:<name>`); shared with the key's
    /// cached limits, so an answer copies no string.
    pub id: std::sync::Arc<str>,
    pub name: std::sync::Arc<str>,
    pub limit: u64,
    pub duration: u64,
    /// Unix ms at which the window ends.
    pub reset: u64,
    /// What is left in the window after the call (nothing was spent unless it was VALID).
    pub remaining: u64,
    pub exceeded: bool,
    pub auto_apply: bool,
    /// A limit of the key's identity (its budget shared by the identity's keys), not the
    /// key's own.
    pub identity: bool,
}

impl Verification {
    pub fn valid(&self) -> bool {
        self.code == VerifyCode::Valid
    }

    /// The key found.
    pub fn key(&self) -> Option<&Key> {
        self.found.as_ref().map(|s| &s.summary().key)
    }

    /// The names of the key's effective permissions, sorted (none when no key was found).
    pub fn permissions(&self) -> &[String] {
        self.found.as_ref().map_or(&[], |s| &s.summary().permissions)
    }

    /// The names of the key's roles, sorted (none when no key was found).
    pub fn roles(&self) -> &[String] {
        self.found.as_ref().map_or(&[], |s| &s.summary().roles)
    }

    /// The identity the key is linked to, with its limits.
    pub fn identity(&self) -> Option<&IdentityView> {
        self.found.as_ref().and_then(|s| s.summary().identity.as_ref())
    }
}
