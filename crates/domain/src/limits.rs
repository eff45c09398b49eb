//! The rate limits keys and identities carry (API-v2.md §13): their bounds, their check,
//! and their stored form.

use crate::{IdPrefix, NewRateLimit, RateLimitConfig, ValidationError, check_len, new_id};
use std::collections::BTreeSet;

/// The most rate limits one identity or key carries.
pub const MAX_RATELIMITS: usize = 50;
/// Longest name of a rate limit.
pub const MAX_LIMIT_NAME_CHARS: usize = 128;
/// Largest `limit` of a rate limit.
pub const MAX_LIMIT_TOKENS: u64 = 1_000_000;
/// Longest window of a rate limit: 30 days.
pub const MAX_LIMIT_DURATION_MS: u64 = 2_592_000_000;

/// Checks a request's rate limits (`path` is the field: `ratelimits`): at most 50, each
/// name 1–128 characters and given once, limit 1–1,000,000, window 1 s–30 days.
pub fn validate_ratelimits(path: &str, limits: &[NewRateLimit]) -> Result<(), ValidationError> {
    if limits.len() > MAX_RATELIMITS {
        return Err(ValidationError::new(path, format!("at most {MAX_RATELIMITS} entries")));
    }
    let mut names = BTreeSet::new();
    for (i, l) in limits.iter().enumerate() {
        let at = |field: &str| format!("{path}.{i}.{field}");
        check_len(&at("name"), &l.name, MAX_LIMIT_NAME_CHARS)?;
        if !names.insert(l.name.as_str()) {
            return Err(ValidationError::new(at("name"), "is given twice"));
        }
        check_limit_bounds(at, Some(l.limit), Some(l.duration))?;
    }
    Ok(())
}

/// A limit's `limit` (1–1,000,000) and `duration` (1 s–30 days), each when given, checked
/// at `at("limit")` and `at("duration")`: the bounds of a stored limit, which a
/// verification's own overrides of one keep too.
pub fn check_limit_bounds(
    at: impl Fn(&str) -> String,
    limit: Option<u64>,
    duration: Option<u64>,
) -> Result<(), ValidationError> {
    if limit.is_some_and(|l| !(1..=MAX_LIMIT_TOKENS).contains(&l)) {
        return Err(ValidationError::new(at("limit"), format!("must be 1 to {MAX_LIMIT_TOKENS}")));
    }
    if duration.is_some_and(|d| !(1_000..=MAX_LIMIT_DURATION_MS).contains(&d)) {
        return Err(ValidationError::new(at("duration"), format!("must be 1000 to {MAX_LIMIT_DURATION_MS}")));
    }
    Ok(())
}

/// The stored form of a request's rate limits: a limit whose name the owner already has
/// keeps its id (and so its budget's count); the others get new ids. Sorted by name.
pub fn limit_configs(existing: &[RateLimitConfig], new: &[NewRateLimit]) -> Vec<RateLimitConfig> {
    let mut out: Vec<RateLimitConfig> = new
        .iter()
        .map(|n| RateLimitConfig {
            id: existing
                .iter()
                .find(|e| e.name == n.name)
                .map_or_else(|| new_id(IdPrefix::RateLimit), |e| e.id.clone()),
            name: n.name.clone(),
            limit: n.limit,
            duration: n.duration,
            auto_apply: n.auto_apply,
            algorithm: n.algorithm,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The algorithm a rate limit decides by (API-v2.md §26): a namespace's, or a key's or
/// identity's limit's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Epoch-aligned fixed windows (the default).
    #[default]
    Fixed,
    /// The weighted two-window count.
    Sliding,
    /// GCRA: `limit` tokens refilled evenly over `duration`.
    TokenBucket,
}

impl Algorithm {
    pub const ALL: [Algorithm; 3] = [Algorithm::Fixed, Algorithm::Sliding, Algorithm::TokenBucket];

    /// The name the API and the store use.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Fixed => "fixed",
            Algorithm::Sliding => "sliding",
            Algorithm::TokenBucket => "token_bucket",
        }
    }

    /// The algorithm named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The algorithm named `name` in the request field `field`, or a 400 listing the names.
    pub fn parse_field(field: &str, name: &str) -> Result<Self, crate::ValidationError> {
        Self::parse(name)
            .ok_or_else(|| crate::ValidationError::new(field, "must be one of fixed, sliding, token_bucket"))
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
