//! The one place where connection strings lose their credentials before they reach a log
//! line, an error message or a `Debug` output.

/// Replaced credentials read as this.
const MASK: &str = "***";

/// Names of connection parameters whose value is a secret (libpq keywords and URL query
/// parameters alike), compared case-insensitively.
const SECRET_PARAMS: [&str; 4] = ["password", "pass", "sslpassword", "passfile"];

/// `url` with every credential replaced by `***`: the user information of a
/// `scheme://user:password@host` URL (user too: it is often half of the secret), and the
/// value of any `password=`-like parameter in a query string or a libpq keyword string
/// (`host=db password=... dbname=k`). Anything else is kept, so the result still tells an
/// operator which server was meant. A list of URLs separated by commas (a Redis Cluster's
/// seed nodes) has each URL redacted.
pub fn redact_url(url: &str) -> String {
    match url_list(url) {
        Some(urls) => urls.iter().map(|u| redact_one(u)).collect::<Vec<_>>().join(","),
        None => redact_one(url),
    }
}

/// The URLs of a comma-separated list of two or more `scheme://` URLs; `None` for anything
/// else (a comma inside one URL's query stays part of it).
fn url_list(text: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = text.split(',').collect();
    (parts.len() > 1 && parts.iter().all(|p| p.trim_start().contains("://"))).then_some(parts)
}

fn redact_one(url: &str) -> String {
    let mut out = match url.find("://") {
        Some(scheme_end) => {
            let after = scheme_end + 3;
            // The authority ends at the first '/', '?' or '#'; its last '@' ends the user info.
            let authority_end = url[after..].find(['/', '?', '#']).map_or(url.len(), |i| after + i);
            match url[after..authority_end].rfind('@') {
                Some(at) => format!("{}{MASK}@{}", &url[..after], &url[after + at + 1..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    for name in SECRET_PARAMS {
        out = mask_param(&out, name);
    }
    out
}

/// `text` with every occurrence of the credentials found in `url` (its password, and its
/// user information as a whole) replaced by `***`: for messages that a library built from
/// the URL, which [`redact_url`] cannot see into.
pub fn redact_in(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact_url(url));
    let urls = url_list(url).unwrap_or_else(|| vec![url]);
    for secret in urls.iter().flat_map(|u| credentials(u)) {
        if secret.len() >= 3 {
            out = out.replace(&secret, MASK);
        }
    }
    out
}

/// The password-like values a connection string holds.
fn credentials(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(scheme_end) = url.find("://") {
        let after = scheme_end + 3;
        let authority_end = url[after..].find(['/', '?', '#']).map_or(url.len(), |i| after + i);
        if let Some(at) = url[after..authority_end].rfind('@') {
            let userinfo = &url[after..after + at];
            if let Some((_, password)) = userinfo.split_once(':') {
                found.push(password.to_string());
            }
        }
    }
    let lower = url.to_ascii_lowercase();
    for name in SECRET_PARAMS {
        let mut from = 0;
        while let Some((start, end)) = param_value(&lower, name, from) {
            found.push(url[start..end].to_string());
            from = end;
        }
    }
    found
}

/// The byte range of the value of the next `name=` parameter at or after `from`, where the
/// name starts the string or follows `?`, `&`, `;` or whitespace.
fn param_value(lower: &str, name: &str, from: usize) -> Option<(usize, usize)> {
    let pattern = format!("{name}=");
    let mut search = from;
    while let Some(i) = lower[search..].find(&pattern) {
        let start = search + i;
        let boundary =
            start == 0 || matches!(lower.as_bytes()[start - 1], b'?' | b'&' | b';' | b' ' | b'\t' | b'\n');
        let value_start = start + pattern.len();
        if boundary {
            let bytes = lower.as_bytes();
            let end = if bytes.get(value_start) == Some(&b'\'') {
                // libpq's quoted value: up to the closing quote (kept inside the range).
                lower[value_start + 1..].find('\'').map_or(lower.len(), |j| value_start + 1 + j + 1)
            } else {
                lower[value_start..]
                    .find(['&', ';', ' ', '\t', '\n', '#'])
                    .map_or(lower.len(), |j| value_start + j)
            };
            return Some((value_start, end));
        }
        search = value_start;
    }
    None
}

fn mask_param(url: &str, name: &str) -> String {
    let mut out = url.to_string();
    let mut from = 0;
    while let Some((start, end)) = param_value(&out.to_ascii_lowercase(), name, from) {
        out.replace_range(start..end, MASK);
        from = start + MASK.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_masked() {
        assert_eq!(redact_url("postgres://postgres:SECRETPW@db:5432/k"), "postgres://***@db:5432/k");
        assert_eq!(redact_url("redis://:pw@127.0.0.1:6379/0"), "redis://***@127.0.0.1:6379/0");
        assert_eq!(redact_url("rediss://user:p%40ss@h"), "rediss://***@h");
        // A password that holds '@' still ends at the last '@' before the host.
        assert_eq!(redact_url("postgres://u:a@b@h/db"), "postgres://***@h/db");
        // An '@' after the authority is not user information.
        assert_eq!(
            redact_url("postgres://h/db?application_name=a@b"),
            "postgres://h/db?application_name=a@b"
        );
        assert_eq!(redact_url("sqlite://keygate.db"), "sqlite://keygate.db");
        assert_eq!(redact_url("./k@1.db"), "./k@1.db");
    }

    #[test]
    fn each_url_of_a_seed_list_is_masked() {
        let list = "redis://:PW1@n1:7000,redis://u:PW2@n2:7000, rediss://:PW3@n3:7000/0";
        let clean = redact_url(list);
        assert_eq!(clean, "redis://***@n1:7000,redis://***@n2:7000, rediss://***@n3:7000/0");
        let msg = format!("cannot connect to {list}: auth PW2 and PW3 failed");
        let clean = redact_in(&msg, list);
        assert!(!["PW1", "PW2", "PW3"].iter().any(|p| clean.contains(p)), "{clean}");
        // A comma inside one URL is not a list.
        assert_eq!(redact_url("postgres://u:PW@h/db?options=a,b"), "postgres://***@h/db?options=a,b");
    }

    #[test]
    fn password_parameters_are_masked() {
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=SECRET&sslmode=off"),
            "postgres://h/db?user=u&password=***&sslmode=off"
        );
        assert_eq!(redact_url("host=db PASSWORD=SECRET dbname=k"), "host=db PASSWORD=*** dbname=k");
        assert_eq!(redact_url("host=db password='se cret' dbname=k"), "host=db password=*** dbname=k");
        assert_eq!(redact_url("postgres://h/db?mypassword=x"), "postgres://h/db?mypassword=x");
    }

    #[test]
    fn secrets_are_removed_from_messages_built_from_the_url() {
        let url = "postgres://postgres:SECRETPW@db/k?sslpassword=KEYPASS";
        let msg = format!("could not connect to {url}: password SECRETPW rejected, key KEYPASS");
        let clean = redact_in(&msg, url);
        assert!(!clean.contains("SECRETPW") && !clean.contains("KEYPASS"), "{clean}");
        assert!(clean.contains("@db/k"), "{clean}");
    }
}
