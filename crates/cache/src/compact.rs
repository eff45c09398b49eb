//! A cached key in 56 bytes, its id and what it shares (issue 82): what `keys.verifyKey`
//! reads of a key, made once from the store's [`KeySummary`] when it is loaded. Its
//! workspace and API, its permissions and roles,
//! and its identity are the [`Interner`]'s shared copies, one pointer each; what few keys
//! have (a name, meta, credits, rate limits of their own) sits behind one pointer that keys
//! without any leave empty.

use crate::intern::{Grants, Interner, KeyScope, Name, share_of_grants};
use keygate_domain::allowlist::{self, AllowedIps};
use keygate_domain::{Credits, IdentityView, KeySummary, RateLimitConfig};
use std::sync::Arc;

/// A key as the verification cache holds it; see the module docs.
pub struct CachedKey {
    /// On the heap of its own: the entry and its id fall in the allocator's 128- and
    /// 32-byte classes, where an id in place made the entry a 160-byte one, and reading it
    /// in place checked its UTF-8 at every use.
    pub(crate) id: Box<str>,
    pub(crate) scope: Arc<KeyScope>,
    pub(crate) grants: Arc<Grants>,
    pub(crate) identity: Option<Arc<IdentityView>>,
    pub(crate) rare: Option<Box<Rare>>,
    /// When the key expires and whether it is enabled, in one word ([`Lifetime`]): the
    /// byte a flag of its own took cost the entry its room for what analytics keep beside
    /// it (`VerifyEntry::tally`) within the allocator's 128-byte class.
    pub(crate) lifetime: Lifetime,
}

/// A key's expiry (Unix ms, or never) and whether it is enabled, packed: the expiry
/// shifted left by one, the low bit set for a disabled key. Expiries beyond +-2^62 ms
/// (146 million years) are held at that bound, which neither side reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lifetime(i64);

/// The expiry (shifted out) of a key that never expires.
const NEVER: i64 = i64::MIN >> 1;

impl Lifetime {
    pub(crate) fn new(expires: Option<i64>, enabled: bool) -> Self {
        let at = expires.map_or(NEVER, |e| e.clamp(NEVER + 1, i64::MAX >> 1));
        Self((at << 1) | i64::from(!enabled))
    }

    pub(crate) fn enabled(self) -> bool {
        self.0 & 1 == 0
    }

    pub(crate) fn expires(self) -> Option<i64> {
        let at = self.0 >> 1;
        (at != NEVER).then_some(at)
    }
}

/// What few keys have.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Rare {
    pub(crate) name: Option<Box<str>>,
    pub(crate) meta: Option<Box<str>>,
    pub(crate) credits: Option<KeyCredits>,
    pub(crate) ratelimits: Box<[RateLimitConfig]>,
    /// An identity id whose identity the store did not find with the key (a link to an
    /// identity deleted meanwhile).
    pub(crate) identity_id: Option<Box<str>>,
    /// Its own `allowedIps`, and its API's (API-v2.md §25; its identity's is the identity's).
    pub(crate) allowed_ips: Option<AllowedIps>,
    pub(crate) api_allowed_ips: Option<AllowedIps>,
}

/// A key's credits, with when the key was created (refills count from then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCredits {
    pub credits: Credits,
    pub created_at: i64,
}

impl CachedKey {
    /// The compact form of `s`, its shared parts from `interner`.
    pub fn new(s: KeySummary, interner: &Interner) -> Self {
        let KeySummary { key, permissions, roles, identity, ratelimits, last_used: _, api_allowed_ips } = s;
        let identity_id = key.identity_id.filter(|id| identity.as_ref().is_none_or(|i| i.identity.id != *id));
        let rare = Rare {
            name: key.name.map(Into::into),
            meta: key.meta.map(Into::into),
            credits: key.credits.map(|credits| KeyCredits { credits, created_at: key.created_at }),
            ratelimits: ratelimits.into(),
            identity_id: identity_id.map(Into::into),
            allowed_ips: key.allowed_ips,
            api_allowed_ips,
        };
        Self {
            id: key.id.into(),
            scope: interner.scope(&key.workspace_id, key.api_id.as_deref()),
            grants: interner.grants(&permissions, &roles),
            identity: identity.map(|i| interner.identity(i)),
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
            lifetime: Lifetime::new(key.expires, key.enabled),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn workspace_id(&self) -> &str {
        &self.scope.workspace_id
    }

    /// The API the key belongs to (v1 keys may have none).
    pub fn api_id(&self) -> Option<&str> {
        self.scope.api_id.as_deref()
    }

    /// The identity the key is linked to, if any.
    pub fn identity_id(&self) -> Option<&str> {
        match &self.identity {
            Some(i) => Some(&i.identity.id),
            None => self.rare.as_ref().and_then(|r| r.identity_id.as_deref()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.lifetime.enabled()
    }

    /// Unix ms from which the key is expired.
    pub fn expires(&self) -> Option<i64> {
        self.lifetime.expires()
    }

    pub fn name(&self) -> Option<&str> {
        self.rare.as_ref().and_then(|r| r.name.as_deref())
    }

    /// A JSON object as text.
    pub fn meta(&self) -> Option<&str> {
        self.rare.as_ref().and_then(|r| r.meta.as_deref())
    }

    /// Its credits as loaded (the live count is the credit ledger's); `None`: unlimited.
    pub fn credits(&self) -> Option<&KeyCredits> {
        self.rare.as_ref().and_then(|r| r.credits.as_ref())
    }

    /// Its own rate limits, by name.
    pub fn ratelimits(&self) -> &[RateLimitConfig] {
        self.rare.as_ref().map_or(&[], |r| &r.ratelimits)
    }

    /// Its effective permissions' names (direct and through its roles), sorted.
    pub fn permissions(&self) -> &[Name] {
        &self.grants.permissions
    }

    /// Its roles' names, sorted.
    pub fn roles(&self) -> &[Name] {
        &self.grants.roles
    }

    /// Whether it holds `permission` (directly or through a role).
    pub fn holds(&self, permission: &str) -> bool {
        self.grants.permissions.binary_search_by(|held| held.as_str().cmp(permission)).is_ok()
    }

    /// The identity the key is linked to, with its limits.
    pub fn identity(&self) -> Option<&IdentityView> {
        self.identity.as_deref()
    }

    /// Whether a verification from `ip` may use the key: `ip` is in every `allowedIps` list
    /// of the key, its identity and its API that is set (API-v2.md §25).
    pub fn admits_ip(&self, ip: Option<std::net::IpAddr>) -> bool {
        let own =
            self.rare.as_ref().map_or([None, None], |r| [r.allowed_ips.as_ref(), r.api_allowed_ips.as_ref()]);
        let identity = self.identity.as_ref().and_then(|i| i.identity.allowed_ips.as_ref());
        allowlist::admits(own.into_iter().chain([identity]), ip)
    }

    /// About the bytes it holds besides its own size: its own heap, and its share of what
    /// it holds with other keys (a set, an identity: their size over the keys holding
    /// them when this one was made, so that a thousand keys of one identity count it
    /// about once).
    pub fn heap_weight(&self) -> usize {
        let rare = self.rare.as_ref().map_or(0, |r| {
            std::mem::size_of::<Rare>()
                + r.name.as_ref().map_or(0, |n| n.len())
                + r.meta.as_ref().map_or(0, |m| m.len())
                + r.identity_id.as_ref().map_or(0, |i| i.len())
                + r.allowed_ips.as_ref().map_or(0, AllowedIps::heap_bytes)
                + r.api_allowed_ips.as_ref().map_or(0, AllowedIps::heap_bytes)
                + r.ratelimits.iter().map(limit_bytes).sum::<usize>()
        });
        let identity = self.identity.as_ref().map_or(0, |i| {
            let id = &i.identity;
            let bytes = std::mem::size_of::<IdentityView>()
                + 16
                + id.id.len()
                + id.workspace_id.len()
                + id.external_id.len()
                + id.meta.as_ref().map_or(0, String::len)
                + i.ratelimits.iter().map(limit_bytes).sum::<usize>();
            bytes / Arc::strong_count(i).saturating_sub(1).max(1)
        });
        self.id.len() + rare + identity + share_of_grants(&self.grants)
    }
}

fn limit_bytes(l: &RateLimitConfig) -> usize {
    std::mem::size_of::<RateLimitConfig>() + l.id.len() + l.name.len()
}

impl std::fmt::Debug for CachedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedKey")
            .field("id", &self.id())
            .field("workspace_id", &self.workspace_id())
            .field("api_id", &self.api_id())
            .field("enabled", &self.enabled())
            .field("expires", &self.expires())
            .field("permissions", &self.permissions())
            .field("roles", &self.roles())
            .field("identity_id", &self.identity_id())
            .field("rare", &self.rare)
            .finish()
    }
}

impl PartialEq for CachedKey {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
            && self.scope == o.scope
            && self.grants == o.grants
            && self.identity == o.identity
            && self.rare == o.rare
            && self.lifetime == o.lifetime
    }
}

impl Eq for CachedKey {}

#[cfg(test)]
mod tests {
    use super::*;
    use keygate_domain::{Identity, Key};

    fn summary(id: &str, permissions: &[&str]) -> KeySummary {
        KeySummary {
            api_allowed_ips: None,
            key: Key {
                allowed_ips: None,
                id: id.into(),
                workspace_id: "ws_2abcdefgh0123456789abcdef".into(),
                api_id: Some("api_2abcdefgh0123456789abcdef".into()),
                identity_id: Some("id_2abcdefgh0123456789abcdef".into()),
                credits: None,
                prefix: None,
                byte_length: None,
                start: "sk_ab".into(),
                name: None,
                meta: None,
                enabled: true,
                expires: Some(5),
                created_at: 1,
                updated_at: 2,
            },
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
            roles: vec!["reader".into()],
            identity: Some(IdentityView {
                identity: Identity {
                    allowed_ips: None,
                    id: "id_2abcdefgh0123456789abcdef".into(),
                    workspace_id: "ws_2abcdefgh0123456789abcdef".into(),
                    external_id: "customer_1".into(),
                    meta: None,
                    created_at: 1,
                    updated_at: 1,
                },
                ratelimits: Vec::new(),
            }),
            ratelimits: Vec::new(),
            last_used: None,
        }
    }

    #[test]
    fn reads_back_what_it_was_made_of() {
        let interner = Interner::default();
        let mut s = summary("key_2abcdefgh0123456789abcdef", &["a.read", "b.write"]);
        let k = CachedKey::new(s.clone(), &interner);
        assert_eq!(
            (k.id(), k.workspace_id(), k.api_id()),
            (&*s.key.id, &*s.key.workspace_id, s.key.api_id.as_deref())
        );
        assert_eq!(k.identity_id(), s.key.identity_id.as_deref());
        assert_eq!(
            (k.enabled(), k.expires(), k.name(), k.meta(), k.credits()),
            (true, Some(5), None, None, None)
        );
        assert_eq!(k.permissions(), ["a.read", "b.write"]);
        assert_eq!(k.roles(), ["reader"]);
        assert!(k.holds("b.write") && !k.holds("b"));
        assert_eq!(k.identity(), s.identity.as_ref());
        assert!(k.rare.is_none(), "nothing rare: no second allocation");

        // What few keys have, and an id longer than keygate's own.
        s.key.id = "k".repeat(64);
        s.key.name = Some("a name".into());
        s.key.meta = Some("{\"plan\":\"pro\"}".into());
        s.key.credits = Some(Credits { remaining: 7, refill: None });
        s.ratelimits = vec![RateLimitConfig {
            id: "rl_1".into(),
            name: "requests".into(),
            limit: 10,
            duration: 1_000,
            auto_apply: true,
            algorithm: keygate_domain::Algorithm::TokenBucket,
        }];
        s.identity = None;
        let k = CachedKey::new(s.clone(), &interner);
        assert_eq!(k.id(), s.key.id);
        assert_eq!((k.name(), k.meta()), (Some("a name"), Some("{\"plan\":\"pro\"}")));
        assert_eq!(k.credits().map(|c| (c.credits.remaining, c.created_at)), Some((7, 1)));
        assert_eq!(k.ratelimits(), &s.ratelimits[..]);
        assert_eq!(k.identity_id(), s.key.identity_id.as_deref(), "an identity not found keeps its id");
        assert!(k.identity().is_none());
    }

    #[test]
    fn keys_alike_share_their_names_and_identity_and_weigh_little() {
        let interner = Interner::default();
        // Ids of keygate's form: "key_", 8 characters of time, 17 random ones.
        let make = |i: usize| {
            CachedKey::new(summary(&format!("key_2abcdefg{i:017}"), &["a.read", "b.write"]), &interner)
        };
        let first = make(0).heap_weight();
        let keys: Vec<CachedKey> = (0..1_000).map(make).collect();
        assert!(std::ptr::eq(keys[0].permissions().as_ptr(), keys[999].permissions().as_ptr()));
        assert!(std::ptr::eq(keys[0].identity().unwrap(), keys[999].identity().unwrap()));
        assert_eq!(std::mem::size_of::<CachedKey>(), 56);
        assert!(keys[999].heap_weight() < 48, "{}", keys[999].heap_weight());
        assert!(first > 200, "the first of its kind counts what it shares: {first}");
    }
}
