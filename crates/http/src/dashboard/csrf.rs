//! Form tokens. Every state-changing request is a POST carrying `csrf_token`: the
//! session's synchronizer token once signed in; before that (the login form), a random
//! token set in a cookie of its own and repeated in the form (double submit). Compared in
//! constant time.

use super::session::cookie;
use actix_web::HttpRequest;

/// The login form's token cookie.
pub(super) const LOGIN_COOKIE: &str = "kg_login";

/// Whether `given` equals `expected` (non-empty), in time independent of where they differ.
pub(super) fn matches(given: &str, expected: &str) -> bool {
    if expected.is_empty() || given.len() != expected.len() {
        return false;
    }
    given.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Whether a login form's token matches its cookie.
pub(super) fn login_token_ok(req: &HttpRequest, given: &str) -> bool {
    cookie(req, LOGIN_COOKIE).is_some_and(|expected| matches(given, expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        assert!(matches("abc", "abc"));
        assert!(!matches("abd", "abc"));
        assert!(!matches("ab", "abc"));
        assert!(!matches("", ""));
    }
}
