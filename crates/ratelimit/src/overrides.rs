//! Rate-limit overrides and how one is chosen for an identifier (contract §6): an exact
//! match wins over a pattern; among patterns (`*` matches any run of characters) the most
//! specific, the one with the longest literal part, wins; ties go to the older override.
//!
//! Patterns are compiled once, when a namespace's overrides are loaded: each becomes its
//! literal segments (the text between the `*`s). Matching checks the first segment as a
//! prefix and the last as a suffix, then finds the middle ones left to right with
//! `memchr::memmem` (linear in the identifier, no backtracking, no allocation). So one
//! pattern costs O(identifier) at worst, and a namespace's [`MAX_OVERRIDES_PER_NAMESPACE`]
//! patterns O(patterns × identifier); the bounds below keep that and the compiled sets
//! small whatever a root key stores.
//!
//! Storing overrides, and the cache of a namespace's compiled set, are `keygate-rbac`'s.

use memchr::memmem::Finder;
use std::collections::HashMap;

/// The most overrides one namespace may hold.
pub const MAX_OVERRIDES_PER_NAMESPACE: usize = 1_000;

/// The most `*` one pattern may hold.
pub const MAX_STARS_PER_PATTERN: usize = 8;

/// The most bytes the patterns of one namespace may hold together (exact identifiers do not
/// count: they are one hash lookup whatever their number).
pub const MAX_PATTERN_BYTES_PER_NAMESPACE: usize = 64 * 1024;

/// Checks a pattern's own bound (the namespace's is checked where overrides are stored).
pub fn validate_pattern(identifier: &str) -> Result<(), keygate_domain::ValidationError> {
    let stars = identifier.bytes().filter(|&b| b == b'*').count();
    if stars > MAX_STARS_PER_PATTERN {
        return Err(keygate_domain::ValidationError::new(
            "identifier",
            format!("a pattern holds at most {MAX_STARS_PER_PATTERN} '*' (this one has {stars})"),
        ));
    }
    Ok(())
}

/// Whether `identifier` is a pattern (holds a `*`).
pub fn is_pattern(identifier: &str) -> bool {
    identifier.contains('*')
}

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

/// The limit and duration an override sets, and its id (v2 answers it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub limit: u64,
    pub duration: u64,
    pub id: std::sync::Arc<str>,
}

/// The overrides of one namespace, ready for lookups.
#[derive(Debug, Default)]
pub struct OverrideSet {
    exact: HashMap<String, Effective>,
    /// Patterns, most specific first, then oldest first.
    patterns: Vec<(Pattern, Effective)>,
    /// The namespace's algorithm (read with its overrides, so that a change of either
    /// reaches every instance the same way).
    pub algorithm: crate::Algorithm,
}

impl OverrideSet {
    pub fn new(overrides: impl IntoIterator<Item = Override>) -> Self {
        let mut exact = HashMap::new();
        let mut patterns = Vec::new();
        for o in overrides {
            let e = Effective { limit: o.limit, duration: o.duration, id: o.id.into() };
            if is_pattern(&o.identifier) {
                patterns.push((literal_len(&o.identifier), o.seq, Pattern::new(&o.identifier), e));
            } else {
                exact.insert(o.identifier, e);
            }
        }
        patterns.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let patterns = patterns.into_iter().map(|(_, _, p, e)| (p, e)).collect();
        Self { exact, patterns, algorithm: crate::Algorithm::Fixed }
    }

    /// The set, for a namespace of `algorithm`.
    pub fn under(self, algorithm: crate::Algorithm) -> Self {
        Self { algorithm, ..self }
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.patterns.is_empty()
    }

    /// Whether any override is a pattern (a lookup may then have to match).
    pub fn has_patterns(&self) -> bool {
        !self.patterns.is_empty()
    }

    /// The override of exactly `identifier`: one hash lookup.
    pub fn find_exact(&self, identifier: &str) -> Option<Effective> {
        self.exact.get(identifier).cloned()
    }

    /// The override that applies to `identifier`, if any.
    pub fn find(&self, identifier: &str) -> Option<Effective> {
        self.find_exact(identifier).or_else(|| self.find_pattern(identifier))
    }

    /// The most specific pattern that matches `identifier`.
    pub fn find_pattern(&self, identifier: &str) -> Option<Effective> {
        self.patterns.iter().find(|(p, _)| p.matches(identifier)).map(|(_, e)| e.clone())
    }

    /// As [`Self::find_pattern`], also counting the identifier bytes that the matching
    /// examined (prefix, suffix and searched ranges): the matcher's work, for tests and
    /// benchmarks.
    pub fn find_pattern_counting(&self, identifier: &str) -> (Option<Effective>, usize) {
        let mut work = 0;
        let found = self.patterns.iter().find(|(p, _)| p.matches_counting(identifier, &mut work));
        (found.map(|(_, e)| e.clone()), work)
    }
}

/// Characters of a pattern other than `*`.
fn literal_len(pattern: &str) -> usize {
    pattern.chars().filter(|&c| c != '*').count()
}

/// A `*` pattern compiled into its literal segments: `prefix*middle*...*suffix`.
struct Pattern {
    prefix: Box<[u8]>,
    suffix: Box<[u8]>,
    /// The segments between the first and the last `*`, in order, empty ones dropped.
    middle: Box<[Finder<'static>]>,
    /// Bytes of all segments: a shorter identifier cannot match.
    literal_bytes: usize,
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pattern")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("middle", &self.middle.len())
            .field("suffix", &String::from_utf8_lossy(&self.suffix))
            .finish()
    }
}

impl Pattern {
    /// `pattern` must hold at least one `*`.
    fn new(pattern: &str) -> Self {
        let segments: Vec<&str> = pattern.split('*').collect();
        let (prefix, suffix) = (segments[0], segments[segments.len() - 1]);
        let middle: Box<[Finder<'static>]> = segments[1..segments.len().saturating_sub(1).max(1)]
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| Finder::new(s.as_bytes()).into_owned())
            .collect();
        let literal_bytes = segments.iter().map(|s| s.len()).sum();
        Self { prefix: prefix.as_bytes().into(), suffix: suffix.as_bytes().into(), middle, literal_bytes }
    }

    fn matches(&self, identifier: &str) -> bool {
        self.matches_counting(identifier, &mut 0)
    }

    /// Byte-wise matching is character-wise matching: the segments and the identifier are
    /// UTF-8, whose encoded characters never overlap a shifted match.
    fn matches_counting(&self, identifier: &str, work: &mut usize) -> bool {
        let text = identifier.as_bytes();
        if text.len() < self.literal_bytes {
            return false;
        }
        *work += self.prefix.len() + self.suffix.len();
        if !text.starts_with(&self.prefix) || !text.ends_with(&self.suffix) {
            return false;
        }
        let mut rest = &text[self.prefix.len()..text.len() - self.suffix.len()];
        for segment in &self.middle {
            *work += rest.len();
            match segment.find(rest) {
                Some(at) => rest = &rest[at + segment.needle().len()..],
                None => return false,
            }
        }
        true
    }
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

    /// The compiled matcher, or equality for a plain identifier.
    fn glob(pattern: &str, text: &str) -> bool {
        if is_pattern(pattern) { Pattern::new(pattern).matches(text) } else { pattern == text }
    }

    /// The reference: the textbook dynamic programme over characters, O(pattern × text).
    fn reference(pattern: &str, text: &str) -> bool {
        let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
        // m[j]: the pattern so far matches t[..j].
        let mut m = vec![false; t.len() + 1];
        m[0] = true;
        for &c in &p {
            let mut next = vec![false; t.len() + 1];
            for j in 0..=t.len() {
                next[j] = if c == '*' {
                    m[j] || (j > 0 && next[j - 1])
                } else {
                    j > 0 && m[j - 1] && t[j - 1] == c
                };
            }
            m = next;
        }
        m[t.len()]
    }

    proptest::proptest! {
        #[test]
        fn the_matcher_agrees_with_the_reference(pattern in "[ab\u{e9}*]{0,12}", text in "[ab\u{e9}]{0,16}") {
            proptest::prop_assert_eq!(glob(&pattern, &text), reference(&pattern, &text), "{} vs {}", pattern, text);
        }

        #[test]
        fn the_set_picks_what_the_reference_picks(
            patterns in proptest::collection::vec("[ab*]{1,6}", 1..12),
            text in "[ab]{0,10}",
        ) {
            let set = OverrideSet::new(patterns.iter().enumerate().map(|(i, p)| o(p, i as u64, i as i64)));
            // Exact first (a later one replaces an earlier one), then the longest literal
            // part, then the oldest.
            let exact = patterns.iter().enumerate().filter(|(_, p)| !is_pattern(p) && **p == text).map(|(i, _)| i).next_back();
            let pattern = || {
                patterns
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| is_pattern(p) && reference(p, &text))
                    .min_by_key(|(i, p)| (std::cmp::Reverse(literal_len(p)), *i))
                    .map(|(i, _)| i)
            };
            let expected = exact.or_else(pattern).map(|i| i as u64);
            proptest::prop_assert_eq!(set.find(&text).map(|e| e.limit), expected);
        }
    }

    #[test]
    fn worst_case_patterns_cost_linear_work_and_well_under_a_millisecond() {
        // 1,000 patterns built to defeat a backtracking matcher and each other's prefilters,
        // against a 512-character identifier that almost matches every one of them.
        let n = MAX_OVERRIDES_PER_NAMESPACE;
        let patterns: Vec<Override> = (0..n)
            .map(|i| {
                let tail = format!("b{i:04}");
                let id = match i % 3 {
                    0 => format!("*{}{tail}", "a".repeat(40)),
                    1 => format!("*{}*{tail}*", "a".repeat(40)),
                    _ => format!("a*a*a*a*a*a*a*{}{tail}", "a".repeat(20)),
                };
                assert!(validate_pattern(&id).is_ok());
                o(&id, i as u64, i as i64)
            })
            .collect();
        let bytes: usize = patterns.iter().map(|p| p.identifier.len()).sum();
        assert!(bytes <= MAX_PATTERN_BYTES_PER_NAMESPACE, "{bytes}");
        let set = OverrideSet::new(patterns);
        let identifier = format!("{}b9999", "a".repeat(507));
        assert_eq!(identifier.chars().count(), keygate_domain::MAX_IDENTIFIER_CHARS);
        let (found, work) = set.find_pattern_counting(&identifier);
        assert_eq!(found, None);
        // Linear: each pattern examines the identifier at most about once (its prefix and
        // suffix checks, and one pass of the middle segments over what lies between them).
        assert!(work <= n * 2 * identifier.len(), "{work} bytes examined");
        // The time of that work, through the matcher's API: the median of 21 lookups.
        let mut times: Vec<std::time::Duration> = (0..21)
            .map(|_| {
                let t = std::time::Instant::now();
                std::hint::black_box(set.find(std::hint::black_box(&identifier)));
                t.elapsed()
            })
            .collect();
        times.sort();
        eprintln!(
            "1,000 worst-case patterns, 512-character identifier: median {:?}, {work} bytes examined",
            times[10]
        );
        assert!(times[10] < std::time::Duration::from_millis(1), "median {:?}", times[10]);
    }

    #[test]
    fn stars_per_pattern_are_bounded() {
        assert!(validate_pattern(&"a*".repeat(MAX_STARS_PER_PATTERN)).is_ok());
        let e = validate_pattern(&"a*".repeat(MAX_STARS_PER_PATTERN + 1)).expect_err("too many");
        assert!(e.to_string().starts_with("identifier: a pattern holds at most 8"), "{e}");
        assert!(validate_pattern("no_star").is_ok());
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
        assert!(!glob("a*a", "a"), "segments do not overlap");
        assert!(glob("*aa*aa*", "aaaa"));
        assert!(!glob("*aa*aa*", "aaa"));
        assert!(glob("**", "x"));
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
