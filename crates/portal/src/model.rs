//! Portals, sessions and scopes (API-v2.md §17), and the checks of what a request may set.

use keygate_domain::{MAX_NAME_CHARS, ValidationError, check_len, validate_display_name};

/// How long a session's code may be redeemed: 15 minutes.
pub const CODE_TTL_MS: i64 = 15 * 60_000;
/// How long an access token lasts: 24 hours.
pub const TOKEN_TTL_MS: i64 = 24 * 3_600_000;
/// The longest URL kept (logo, return URL).
pub const MAX_URL_CHARS: usize = 2048;

/// A portal: the pages at `/portal/<slug>` for the end users of one API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Portal {
    pub id: String,
    pub workspace_id: String,
    pub slug: String,
    pub display_name: String,
    /// The API (`keyspaceId` on the wire).
    pub api_id: String,
    pub enabled: bool,
    pub logo_url: Option<String>,
    /// `#rrggbb`.
    pub primary_color: Option<String>,
    pub created_at: i64,
    pub updated_at: Option<i64>,
}

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PortalScope {
    KeysRead,
    KeysCreate,
    KeysReroll,
    AnalyticsRead,
}

impl PortalScope {
    pub const ALL: [PortalScope; 4] =
        [PortalScope::KeysRead, PortalScope::KeysCreate, PortalScope::KeysReroll, PortalScope::AnalyticsRead];

    pub const fn as_str(self) -> &'static str {
        match self {
            PortalScope::KeysRead => "keys:read",
            PortalScope::KeysCreate => "keys:create",
            PortalScope::KeysReroll => "keys:reroll",
            PortalScope::AnalyticsRead => "analytics:read",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// The key permissions the minting root key must hold on the portal's API (each as
    /// `api.*.<action>` or `api.<apiId>.<action>`).
    pub const fn needs(self) -> &'static [&'static str] {
        match self {
            PortalScope::KeysRead => &["read_key", "read_api"],
            PortalScope::KeysCreate | PortalScope::KeysReroll => &["create_key"],
            PortalScope::AnalyticsRead => &["read_analytics"],
        }
    }
}

/// A portal session as stored (never its code or token: their hashes are kept apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalSession {
    /// `ps_…`: not a credential.
    pub id: String,
    pub workspace_id: String,
    pub portal_id: String,
    pub external_id: String,
    pub scopes: Vec<PortalScope>,
    /// A preview (the team looking at what its user sees): no changes.
    pub preview: bool,
    pub return_url: Option<String>,
    /// The root key that minted it: the session ends with it.
    pub root_key_id: String,
    pub code_expires_at: i64,
    /// Set once the code is exchanged.
    pub token_expires_at: Option<i64>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

impl PortalSession {
    /// `pending` until its code is exchanged, then `active`.
    pub fn status(&self) -> &'static str {
        match self.token_expires_at {
            Some(_) => "active",
            None => "pending",
        }
    }

    /// When it stops being usable: its code's expiry while pending, its token's after.
    pub fn expires_at(&self) -> i64 {
        self.token_expires_at.unwrap_or(self.code_expires_at)
    }

    pub fn has(&self, scope: PortalScope) -> bool {
        self.scopes.contains(&scope)
    }

    /// The scopes as stored: space-separated.
    pub fn scopes_text(&self) -> String {
        self.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
    }

    /// Scopes as stored back (unknown words are dropped).
    pub fn parse_scopes(text: &str) -> Vec<PortalScope> {
        text.split(' ').filter_map(PortalScope::parse).collect()
    }
}

/// `portal.createPortal`'s input.
#[derive(Debug, Clone, Default)]
pub struct NewPortal {
    pub slug: String,
    pub display_name: String,
    pub api_id: String,
    pub enabled: Option<bool>,
    pub logo_url: Option<String>,
    pub primary_color: Option<String>,
}

/// `portal.updatePortal`'s changes (absent: unchanged; `Some(None)`: cleared).
#[derive(Debug, Clone, Default)]
pub struct PortalChange {
    pub slug: Option<String>,
    pub display_name: Option<String>,
    pub api_id: Option<String>,
    pub enabled: Option<bool>,
    pub logo_url: Option<Option<String>>,
    pub primary_color: Option<Option<String>>,
}

/// A slug: 3–64 of `a-z 0-9 -`.
pub fn validate_slug(path: &str, slug: &str) -> Result<(), ValidationError> {
    check_len(path, slug, 64)?;
    if slug.len() < 3 {
        return Err(ValidationError::new(path, "must be at least 3 characters"));
    }
    if let Some(bad) = slug.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        return Err(ValidationError::new(path, format!("invalid character {bad:?}; slugs use a-z 0-9 -")));
    }
    Ok(())
}

pub fn validate_portal_name(path: &str, name: &str) -> Result<(), ValidationError> {
    validate_display_name(path, name)
}

/// `#rrggbb`.
pub fn validate_color(path: &str, color: &str) -> Result<(), ValidationError> {
    let ok = color.len() == 7 && color.starts_with('#') && color[1..].bytes().all(|b| b.is_ascii_hexdigit());
    match ok {
        true => Ok(()),
        false => Err(ValidationError::new(path, "must be a colour as #rrggbb")),
    }
}

/// An absolute URL of one of `schemes`, with a host, at most [`MAX_URL_CHARS`], without
/// spaces, quotes, angle brackets, backslashes or control characters (it is written into
/// pages and a CSP). Returns its origin (`scheme://host[:port]`).
pub fn validate_url<'a>(path: &str, url: &'a str, schemes: &[&str]) -> Result<&'a str, ValidationError> {
    check_len(path, url, MAX_URL_CHARS)?;
    let bad = |why: &str| ValidationError::new(path, why.to_string());
    if url
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '\\' | '`'))
    {
        return Err(bad("must be a URL without spaces, quotes or control characters"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("must be an absolute URL"));
    };
    if !schemes.contains(&scheme) {
        return Err(bad(&format!("must be an absolute {} URL", schemes.join(" or "))));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(bad("must not carry credentials"));
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port))
            if !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            h
        }
        _ => authority,
    };
    if host.is_empty()
        || host.starts_with(['.', '-'])
        || !host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
    {
        return Err(bad("must name a host (a DNS name or an IPv4 address, and an optional port)"));
    }
    Ok(&url[..scheme.len() + 3 + authority.len()])
}

/// Checks what a new portal carries.
pub(crate) fn check_new(p: &NewPortal) -> Result<(), ValidationError> {
    validate_slug("slug", &p.slug)?;
    validate_portal_name("displayName", &p.display_name)?;
    check_len("keyspaceId", &p.api_id, MAX_NAME_CHARS)?;
    if let Some(u) = &p.logo_url {
        validate_url("logoUrl", u, &["https"])?;
    }
    if let Some(c) = &p.primary_color {
        validate_color("primaryColor", c)?;
    }
    Ok(())
}

/// Checks what a change carries.
pub(crate) fn check_change(c: &PortalChange) -> Result<(), ValidationError> {
    if let Some(s) = &c.slug {
        validate_slug("slug", s)?;
    }
    if let Some(n) = &c.display_name {
        validate_portal_name("displayName", n)?;
    }
    if let Some(a) = &c.api_id {
        check_len("keyspaceId", a, MAX_NAME_CHARS)?;
    }
    if let Some(Some(u)) = &c.logo_url {
        validate_url("logoUrl", u, &["https"])?;
    }
    if let Some(Some(col)) = &c.primary_color {
        validate_color("primaryColor", col)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_absolute_with_a_host_and_nothing_that_breaks_out_of_an_attribute() {
        assert_eq!(
            validate_url("u", "https://cdn.example.com/logo.png", &["https"]).unwrap(),
            "https://cdn.example.com"
        );
        assert_eq!(
            validate_url("u", "https://cdn.example.com:8443/a?b#c", &["https"]).unwrap(),
            "https://cdn.example.com:8443"
        );
        assert_eq!(
            validate_url("u", "http://localhost:3000", &["http", "https"]).unwrap(),
            "http://localhost:3000"
        );
        for bad in [
            "http://cdn.example.com/logo.png",
            "javascript:alert(1)",
            "https://",
            "https:///x",
            "//cdn.example.com/x",
            "https://a b.com/",
            "https://cdn.example.com/\"onerror=x",
            "https://user:pw@cdn.example.com/",
            "https://cdn.example.com;script-src/x",
            "data:image/png;base64,AAAA",
        ] {
            assert!(validate_url("u", bad, &["https"]).is_err(), "{bad}");
        }
    }

    #[test]
    fn slugs_and_colours() {
        assert!(validate_slug("s", "acme-portal-1").is_ok());
        for bad in ["ab", "Acme", "a_b", "a b", "é-accent", &"a".repeat(65)] {
            assert!(validate_slug("s", bad).is_err(), "{bad}");
        }
        assert!(validate_color("c", "#1a2B3c").is_ok());
        for bad in ["1a2b3c", "#1a2b3", "#1a2b3cc", "#gggggg", "red"] {
            assert!(validate_color("c", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scopes_round_trip() {
        let s = PortalSession {
            id: "ps_1".into(),
            workspace_id: "ws".into(),
            portal_id: "portal_1".into(),
            external_id: "u".into(),
            scopes: vec![PortalScope::KeysRead, PortalScope::AnalyticsRead],
            preview: false,
            return_url: None,
            root_key_id: "rk".into(),
            code_expires_at: 1,
            token_expires_at: None,
            created_at: 0,
            revoked_at: None,
        };
        assert_eq!(PortalSession::parse_scopes(&s.scopes_text()), s.scopes);
        assert_eq!(s.status(), "pending");
    }
}
