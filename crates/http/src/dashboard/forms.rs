//! What the dashboard's forms share: the token check and how fields are read.

use super::answer::DashError;
use super::csrf::matches;
use super::session::Signed;

/// 403 (nothing done) unless `given` is the session's form token.
pub(super) fn token_ok(signed: &Signed, given: Option<&str>) -> Result<(), DashError> {
    match matches(given.unwrap_or(""), &signed.session.csrf_token) {
        true => Ok(()),
        false => Err(DashError::BadToken { layout: signed.layout.clone() }),
    }
}

/// A text field: trimmed, `None` when empty.
pub(super) fn field(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Names one per line (or comma-separated), trimmed, empty ones left out.
pub(super) fn names(text: Option<String>) -> Vec<String> {
    text.unwrap_or_default()
        .split(['\n', ','])
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// A whole number field within `0..=max`, or the form error `message`.
pub(super) fn number(signed: &Signed, v: &str, max: u64, message: &str) -> Result<u64, DashError> {
    match v.trim().parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(DashError::Invalid { layout: signed.layout.clone(), message: message.into() }),
    }
}

/// A query value, percent-encoded (everything but unreserved characters).
pub(super) fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` (UTC).
pub(crate) fn when(at: i64) -> String {
    jiff::Timestamp::from_millisecond(at)
        .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}
