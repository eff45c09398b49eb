//! Rate-limit overrides and how one is chosen for an identifier (contract §6): an exact
//! match wins over a pattern; among patterns (`*` matches any run of characters) the most
//! specific, the one with the longest literal part, wins; ties go to the older override.

use std::collections::HashMap;

/// An override as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub id: String,
    pub namespace_id: String,
    /// An identifier, or a pattern when it contains `*`.
    pub identifier: String,
    pub limit: u64,
    pub duration: u64,
    pub is_async: bool,
    /// Creation order within the namespace.
    pub seq: i64,
}

/// The limit and duration an override sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    pub limit: u64,
    pub duration: u64,
}

/// The overrides of one namespace, ready for lookups.
#[derive(Debug, Default)]
pub struct OverrideSet {
    exact: HashMap<String, Effective>,
    /// Patterns, most specific first, then oldest first.
    patterns: Vec<(String, Effective)>,
}

impl OverrideSet {
    pub fn new(overrides: impl IntoIterator<Item = Override>) -> Self {
        let mut exact = HashMap::new();
        let mut patterns = Vec::new();
        for o in overrides {
            let e = Effective { limit: o.limit, duration: o.duration };
            if o.identifier.contains('*') {
                patterns.push((literal_len(&o.identifier), o.seq, o.identifier, e));
            } else {
                exact.insert(o.identifier, e);
            }
        }
        patterns.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        Self { exact, patterns: patterns.into_iter().map(|(_, _, p, e)| (p, e)).collect() }
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.patterns.is_empty()
    }

    /// The override that applies to `identifier`, if any.
    pub fn find(&self, identifier: &str) -> Option<Effective> {
        if let Some(e) = self.exact.get(identifier) {
            return Some(*e);
        }
        self.patterns.iter().find(|(p, _)| glob(p, identifier)).map(|(_, e)| *e)
    }
}

/// Characters of a pattern other than `*`.
fn literal_len(pattern: &str) -> usize {
    pattern.chars().filter(|&c| c != '*').count()
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (none too).
/// Linear in practice: the classic backtracking over the last `*` only.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(identifier: &str, limit: u64, seq: i64) -> Override {
        Override {
            id: format!("rlor_{seq}"),
            namespace_id: "rlns_1".into(),
            identifier: identifier.into(),
            limit,
            duration: 1_000,
            is_async: false,
            seq,
        }
    }

    #[test]
    fn glob_matches_runs() {
        assert!(glob("*", ""));
        assert!(glob("user_*", "user_42"));
        assert!(glob("*@example.com", "a@example.com"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(glob("a*b*c", "abc"));
        assert!(!glob("a*b*c", "acb"));
        assert!(!glob("user_*", "admin_1"));
        assert!(glob("é*", "été"));
        assert!(!glob("abc", "abcd"));
    }

    #[test]
    fn exact_beats_patterns_then_specificity_then_age() {
        let set = OverrideSet::new([
            o("*", 1, 1),
            o("user_*", 2, 2),
            o("*_42", 3, 3),
            o("user_42", 4, 4),
            o("user_4*", 5, 5),
            o("*er_4*", 6, 6),
        ]);
        let limit = |id: &str| set.find(id).map(|e| e.limit);
        assert_eq!(limit("user_42"), Some(4), "exact wins");
        // user_4* (6 literal chars) and *er_4* (4) both match user_43: the longer wins.
        assert_eq!(limit("user_43"), Some(5));
        // user_* and *_42 have 5 and 3 literal characters.
        assert_eq!(limit("user_1"), Some(2));
        assert_eq!(limit("bot_42"), Some(3));
        assert_eq!(limit("anything"), Some(1));
        // Same literal length: the older one wins.
        let tie = OverrideSet::new([o("b*", 8, 9), o("*a", 7, 3)]);
        assert_eq!(tie.find("ba").map(|e| e.limit), Some(7));
        assert!(OverrideSet::new([]).find("x").is_none());
    }
}
