//! The settings' own value parsers (clap's `value_parser`s of [`super::ServeArgs`] and
//! [`super::Cli`]): each checks one value and says what a valid one looks like.

/// One `ID=SCHEME` entry of `KEYGATE_MIGRATIONS`.
pub(super) fn migration_entry(s: &str) -> Result<String, String> {
    keygate_rbac::Migrations::parse(&[s]).map(|_| s.trim().to_string()).map_err(|e| e.to_string())
}

/// File permissions in octal, `0000` to `0777` (`660` and `0o660` too).
pub(super) fn file_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim().trim_start_matches("0o");
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 && !digits.is_empty() => Ok(mode),
        _ => Err("must be permissions in octal, 0000 to 0777 (e.g. 0660)".into()),
    }
}

/// A count of at least 1 (0 workers or connections would be a server that cannot serve).
pub(super) fn positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// An OTLP endpoint: an absolute http(s) URL with a host and no query.
pub(super) fn otlp_endpoint(s: &str) -> Result<String, String> {
    http_url("KEYGATE_OTLP_ENDPOINT", s, "http://collector:4318")
}

/// A public URL: an absolute http(s) URL with a host and no query (a trailing `/` dropped).
pub(super) fn public_url(s: &str) -> Result<String, String> {
    http_url("KEYGATE_PUBLIC_URL", s, "https://keys.example.com")
}

/// The URL setting `name`: absolute, http(s), with a host and no query or fragment; a
/// trailing `/` dropped.
fn http_url(name: &str, s: &str, example: &str) -> Result<String, String> {
    let trimmed = s.trim_end_matches('/');
    keygate_portal::validate_url(name, trimmed, &["http", "https"]).map_err(|e| e.to_string()).and_then(
        |origin| match trimmed[origin.len()..].contains(['?', '#']) {
            true => Err(format!("a URL without a query or fragment, such as {example}")),
            false => Ok(trimmed.to_string()),
        },
    )
}

/// A dashboard base path: `/` then path characters, not ending in `/` (it goes into HTML
/// attributes and cookie paths).
pub(super) fn dashboard_base(s: &str) -> Result<String, String> {
    let ok = s.starts_with('/')
        && s.len() > 1
        && !s.ends_with('/')
        && s.len() <= 200
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~".contains(&b));
    match ok {
        true => Ok(s.to_string()),
        false => {
            Err("a path such as /dashboard or /admin/keygate: letters, digits and / - . _ ~, not ending in /"
                .into())
        }
    }
}
