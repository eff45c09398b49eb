use rand::RngCore;

/// Base-62 alphabet of ids: URL-safe, no separators.
pub(crate) const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// An id's time part: milliseconds since the Unix epoch in 8 base-62 digits (62^8 ms is
/// some 6,900 years), most significant first.
const TIME_CHARS: usize = 8;
/// An id's random part: 17 base-62 characters carry 17 * log2(62) = 101 random bits.
const RANDOM_CHARS: usize = 17;

/// The id prefixes of contract §1.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdPrefix {
    Workspace,
    Api,
    Identity,
    RateLimit,
    RootKey,
    Key,
    Permission,
    Role,
    Namespace,
    Override,
    Request,
    AuditEvent,
    /// A customer portal (API-v2.md §17).
    Portal,
    /// A portal session (not a credential).
    PortalSession,
    /// A webhook endpoint (API-v2.md §23).
    WebhookEndpoint,
    /// A webhook event: its id is the `webhook-id` of every delivery of it.
    WebhookEvent,
    /// A delivery of a webhook event to one endpoint.
    WebhookDelivery,
}

impl IdPrefix {
    pub const fn as_str(self) -> &'static str {
        match self {
            IdPrefix::Workspace => "ws",
            IdPrefix::Api => "api",
            IdPrefix::Identity => "id",
            IdPrefix::RateLimit => "rl",
            IdPrefix::RootKey => "rk",
            IdPrefix::Key => "key",
            IdPrefix::Permission => "perm",
            IdPrefix::Role => "role",
            IdPrefix::Namespace => "rlns",
            IdPrefix::Override => "rlor",
            IdPrefix::Request => "req",
            IdPrefix::AuditEvent => "evt",
            IdPrefix::Portal => "portal",
            IdPrefix::PortalSession => "ps",
            IdPrefix::WebhookEndpoint => "whep",
            IdPrefix::WebhookEvent => "msg",
            IdPrefix::WebhookDelivery => "whdl",
        }
    }
}

/// `<prefix>_<8 base-62 digits of the time in ms><17 random base-62 characters>`:
/// URL-safe, 101 random bits (contract §1.2: at least 96). Ids sort by the millisecond
/// they were made in (as Unkey's do), so rows inserted together land together in every
/// index keyed by id: a bulk insert appends pages instead of touching one page per row.
pub fn new_id(prefix: IdPrefix) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut time = [0u8; TIME_CHARS];
    let mut rest = ms;
    for digit in time.iter_mut().rev() {
        *digit = ALPHABET[(rest % 62) as usize];
        rest /= 62;
    }
    let prefix = prefix.as_str();
    let mut out = String::with_capacity(prefix.len() + 1 + TIME_CHARS + RANDOM_CHARS);
    out.push_str(prefix);
    out.push('_');
    time.iter().for_each(|&c| out.push(char::from(c)));
    push_random(&mut out, RANDOM_CHARS);
    out
}

/// Random bits per character drawn: a 6-bit chunk of a u64 draw, ten chunks per draw.
const BITS_PER_CHUNK: u32 = 6;
const CHUNKS_PER_DRAW: usize = 10;

/// `<prefix>_` followed by `chars` uniformly random base-62 characters. Each character is
/// a 6-bit chunk of a random u64; chunks 62 and 63 are rejected (1 in 32), so every
/// character is uniform and independent, and no division is needed (request ids are made
/// on every response).
pub(crate) fn random_string(prefix: &str, chars: usize) -> String {
    let mut out = String::with_capacity(prefix.len() + 1 + chars);
    out.push_str(prefix);
    out.push('_');
    push_random(&mut out, chars);
    out
}

/// Appends `chars` uniformly random base-62 characters (see [`random_string`]).
fn push_random(out: &mut String, chars: usize) {
    let mut rng = rand::rng();
    let mut left = chars;
    while left > 0 {
        let mut r = rng.next_u64();
        for _ in 0..CHUNKS_PER_DRAW {
            let chunk = (r & ((1 << BITS_PER_CHUNK) - 1)) as usize;
            r >>= BITS_PER_CHUNK;
            if let Some(&c) = ALPHABET.get(chunk) {
                out.push(char::from(c));
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
    }
}

/// A secret token: `<prefix>_<43 random base-62 characters>` (256 random bits).
pub fn random_token(prefix: &str) -> String {
    random_string(prefix, 43)
}

/// A secret token in Unkey v2's form: the base58 encoding of `bytes` random bytes, after
/// `<prefix>_` when a prefix is given. (A key's: [`crate::checksum::plain_token`].)
pub fn random_base58_token(prefix: Option<&str>, bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut raw);
    let body = bs58::encode(&raw).into_string();
    match prefix {
        Some(p) => format!("{p}_{body}"),
        None => body,
    }
}

/// Whether `id` could be an id of this kind: `<prefix>_` followed by ASCII letters and
/// digits only. Anything else (a wrong prefix, other characters, a NUL that PostgreSQL
/// text cannot even hold) cannot exist, so callers answer "not found" without a lookup.
pub fn has_prefix(id: &str, prefix: IdPrefix) -> bool {
    id.strip_prefix(prefix.as_str())
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|body| !body.is_empty() && body.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_prefix_and_enough_entropy() {
        let a = new_id(IdPrefix::Permission);
        let b = new_id(IdPrefix::Permission);
        assert_ne!(a, b);
        assert!(a.starts_with("perm_"));
        let body = &a["perm_".len()..];
        assert_eq!(body.len(), TIME_CHARS + RANDOM_CHARS, "{a}");
        assert!(body.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(has_prefix(&a, IdPrefix::Permission));
        assert!(!has_prefix(&a, IdPrefix::Role));
        assert!(!has_prefix("permx_1", IdPrefix::Permission));
        assert!(has_prefix("key_123", IdPrefix::Key));
        for bad in ["key_", "key_a\u{0}b", "key_a b", "key_é", "key_a-b"] {
            assert!(!has_prefix(bad, IdPrefix::Key), "{bad:?}");
        }
    }

    #[test]
    fn characters_are_spread_over_the_whole_alphabet() {
        let mut seen = [0u32; 128];
        for _ in 0..2_000 {
            for b in new_id(IdPrefix::Request)["req_".len() + TIME_CHARS..].bytes() {
                seen[b as usize] += 1;
            }
        }
        // The random parts: 34,000 characters over 62 symbols, ~550 each; every symbol
        // appears, none dominates.
        for &c in ALPHABET {
            let n = seen[c as usize];
            assert!((380..740).contains(&n), "{} seen {n} times", c as char);
        }
    }

    #[test]
    fn ids_sort_by_the_millisecond_they_were_made_in() {
        let first = new_id(IdPrefix::Key);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later: Vec<String> = (0..100).map(|_| new_id(IdPrefix::Key)).collect();
        assert!(later.iter().all(|id| *id > first), "{first} {later:?}");
        let time = |id: &str| id["key_".len().."key_".len() + TIME_CHARS].to_string();
        assert!(later.iter().all(|id| time(id) >= time(&first)));
        // 2026 in ms is 13 decimal digits: 8 base-62 digits, led by '0'.
        assert!(first["key_".len()..].starts_with('0'), "{first}");
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let t = random_token("kg");
        let body = t.strip_prefix("kg_").expect("the prefix");
        assert_eq!(body.len(), 43, "{t}");
        assert!(body.bytes().all(|b| b.is_ascii_alphanumeric()), "{t}");
        assert_ne!(t, random_token("kg"));
    }
}
