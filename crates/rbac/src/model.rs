/// A root key as stored (the secret itself is never stored, only its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootKey {
    pub id: String,
    pub workspace_id: String,
    /// The secret's first characters (`start`).
    pub prefix: String,
    /// The secret's last 4 characters (`end`; `""` for keys made before it was kept).
    pub end: String,
    pub name: Option<String>,
    /// A disabled root key is refused (403) until enabled again.
    pub enabled: bool,
    pub permissions: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    /// When it last authenticated a request (unix ms), written behind: within a minute.
    pub last_used_at: Option<i64>,
}

impl RootKey {
    /// Whether it may authenticate at `now`: `Err` says why not (disabled, or expired).
    pub fn usable_at(&self, now: i64) -> Result<(), crate::RbacError> {
        if !self.enabled {
            return Err(crate::RbacError::Forbidden("the root key is disabled".into()));
        }
        if self.expires_at.is_some_and(|e| e <= now) {
            return Err(crate::RbacError::Forbidden("the root key has expired".into()));
        }
        Ok(())
    }
}

/// An authenticated root key: who calls, in which workspace, holding what.
#[derive(Debug)]
pub struct Principal {
    pub root_key_id: String,
    pub workspace_id: String,
    permissions: foldhash::HashSet<String>,
    /// Whether `permissions` holds `*` (asked on every request: kept, not looked up).
    wildcard: bool,
    /// The root key's change counter when it was loaded (`None`: not loaded from a store).
    tag: Option<crate::counters::Tag>,
    /// That counter's name (`Scope::RootKey(id).name()`), kept: checked on every decision
    /// in Redis mode.
    counter: String,
    /// When this instance last noted the key's use (the clock's monotonic ms;
    /// `RbacService::note_root_key_use`), `i64::MIN` before the first.
    noted_use: std::sync::atomic::AtomicI64,
}

impl Clone for Principal {
    fn clone(&self) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        Self {
            root_key_id: self.root_key_id.clone(),
            workspace_id: self.workspace_id.clone(),
            permissions: self.permissions.clone(),
            wildcard: self.wildcard,
            tag: self.tag,
            counter: self.counter.clone(),
            noted_use: self.noted_use.load(Relaxed).into(),
        }
    }
}

impl Principal {
    pub fn new(
        root_key_id: String,
        workspace_id: String,
        permissions: impl IntoIterator<Item = String>,
    ) -> Self {
        let permissions: foldhash::HashSet<String> = permissions.into_iter().collect();
        let wildcard = permissions.contains("*");
        let counter = crate::counters::Scope::RootKey(&root_key_id).name();
        Self {
            root_key_id,
            workspace_id,
            permissions,
            wildcard,
            tag: None,
            counter,
            noted_use: i64::MIN.into(),
        }
    }

    /// Whether this use should be written down (the last one noted is a minute old or
    /// more, on the monotonic clock `monotonic_ms`): true for one caller per minute and
    /// instance.
    pub(crate) fn take_use(&self, monotonic_ms: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let now = i64::try_from(monotonic_ms).unwrap_or(i64::MAX);
        let noted = self.noted_use.load(Relaxed);
        now.saturating_sub(noted) >= 60_000
            && self.noted_use.compare_exchange(noted, now, Relaxed, Relaxed).is_ok()
    }

    /// The principal as loaded under the root key's change counter `tag`.
    pub(crate) fn loaded_under(mut self, tag: crate::counters::Tag) -> Self {
        self.tag = Some(tag);
        self
    }

    /// The root key's change counter as it was loaded under (`None` with counters in
    /// memory, where the cache is kept exact by evictions instead).
    pub fn tag(&self) -> Option<crate::counters::Tag> {
        self.tag
    }

    /// The name of the root key's change counter ([`crate::counters::Scope::RootKey`]).
    pub fn counter_name(&self) -> &str {
        &self.counter
    }

    /// `*` or exactly `permission`; strings are compared literally.
    pub fn holds(&self, permission: &str) -> bool {
        self.wildcard || self.permissions.contains(permission)
    }

    pub fn permissions(&self) -> impl Iterator<Item = &str> {
        self.permissions.iter().map(String::as_str)
    }
}

/// Which keys a verification may find (tenancy): `None` fields do not narrow.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyScope<'a> {
    /// The workspace of the root key the call carries, if it carries one.
    pub workspace_id: Option<&'a str>,
    /// The `apiId` the call names, if it names one: the key must carry exactly this label.
    pub api_id: Option<&'a str>,
    /// The root key's reach (v2: `api.<apiId>.verify_key`), if it is narrowed.
    pub access: Option<&'a crate::ApiAccess>,
    /// The root key the call carries, checked still current by the verification itself:
    /// with counters in the database or Redis, its change counter is read with the key's,
    /// in one read, and a root key revoked meanwhile is refused
    /// ([`crate::RbacService::ensure_root_key_current`]'s check).
    pub root_key: Option<&'a Principal>,
    /// The address the call comes from, when known (API-v2.md §25: a key with an
    /// `allowedIps` list answers FORBIDDEN without one).
    pub ip: Option<std::net::IpAddr>,
    /// The legacy migration to look for a key not found under (API-v2.md §25; `None`: any).
    pub migration: Option<&'a str>,
}

impl VerifyScope<'_> {
    /// Whether `key` is inside this scope.
    pub fn admits(&self, workspace_id: &str, api_id: Option<&str>) -> bool {
        self.workspace_id.is_none_or(|ws| workspace_id == ws)
            && self.api_id.is_none_or(|api| api_id == Some(api))
            && self.access.is_none_or(|a| a.admits(api_id))
    }
}

#[cfg(test)]
mod tests {
    use keygate_domain::PermissionQuery::{self, And, Or, Permission};
    use std::collections::HashSet;

    fn p(name: &str) -> PermissionQuery {
        Permission(name.to_string())
    }

    #[test]
    fn a_root_key_use_is_noted_at_once_then_once_a_minute_on_the_monotonic_clock() {
        let principal = super::Principal::new("rk_a".into(), "ws_a".into(), ["*".to_string()]);
        // The monotonic clock starts near 0 in a new process: the first use is noted.
        assert!(principal.take_use(5), "the first use is noted");
        assert!(!principal.take_use(5), "once per minute");
        assert!(!principal.take_use(60_004), "59.999 s later: not yet");
        assert!(principal.take_use(60_005), "a minute later");
        assert!(!principal.clone().take_use(60_006), "a clone carries when it was noted");
    }

    #[test]
    fn queries_combine_and_or_over_literal_names() {
        let held: HashSet<&str> = ["a.read", "b.write", "*"].into_iter().collect();
        assert!(p("a.read").satisfied_by(&|p| held.contains(p)));
        assert!(!p("a.write").satisfied_by(&|p| held.contains(p)), "`*` held is a name, not a wildcard");
        assert!(And(vec![p("a.read"), p("b.write")]).satisfied_by(&|p| held.contains(p)));
        assert!(!And(vec![p("a.read"), p("c")]).satisfied_by(&|p| held.contains(p)));
        assert!(Or(vec![p("c"), And(vec![p("a.read"), p("*")])]).satisfied_by(&|p| held.contains(p)));
        assert!(!Or(vec![p("c"), p("A.READ")]).satisfied_by(&|p| held.contains(p)));
        assert!(!p("a.read").satisfied_by(&|_| false));
    }

    #[test]
    fn a_root_key_holds_its_permissions_literally_or_everything_with_star() {
        let some = super::Principal::new("rk".into(), "ws".into(), ["ratelimit.*.limit".to_string()]);
        assert!(some.holds("ratelimit.*.limit"));
        assert!(!some.holds("ratelimit.rlns_1.limit"), "`*` inside a name is literal");
        assert!(!some.holds("*"));
        let all = super::Principal::new("rk".into(), "ws".into(), ["a".to_string(), "*".to_string()]);
        assert!(all.holds("anything.at.all") && all.holds("a"));
        let none = super::Principal::new("rk".into(), "ws".into(), Vec::new());
        assert!(!none.holds("a") && none.permissions().next().is_none());
    }
}
