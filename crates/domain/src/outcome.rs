//! What a verification answers, as plain data: its code (Unkey's) and how each rate limit
//! fared. `keygate-rbac`'s `Verification` carries them with the key found.

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
    /// The call's address is outside an `allowedIps` list of the key, its identity or its
    /// API, or none was given while one applies (API-v2.md §25).
    Forbidden,
}

impl VerifyCode {
    /// Every code, in the order the API documents them.
    pub const ALL: [VerifyCode; 8] = [
        VerifyCode::Valid,
        VerifyCode::NotFound,
        VerifyCode::Disabled,
        VerifyCode::Expired,
        VerifyCode::InsufficientPermissions,
        VerifyCode::UsageExceeded,
        VerifyCode::RateLimited,
        VerifyCode::Forbidden,
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
            VerifyCode::Forbidden => "FORBIDDEN",
        }
    }
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
