//! envoyproxy/ratelimit's configuration, as keygate reads it (docs/gateways.md, *Envoy's
//! global rate limit*): YAML files, each one `domain` and its nested `descriptors`
//! (`key`, optional `value` where each `*` matches any run of characters, `rate_limit
//! {unit, requests_per_unit, unlimited, name, replaces}`, `shadow_mode`, `share_threshold`,
//! `detailed_metric` and `value_to_metric` (which name metrics only), nested
//! `descriptors`). Anything else is refused with the file and the line, as are an
//! unknown unit, a limit without its numbers, a domain given twice and a `replaces` that
//! names a limit no rule has.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Why a configuration was refused: the file and what is wrong, with the line where the
/// YAML reader knows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    domain: String,
    #[serde(default)]
    descriptors: Vec<DescriptorConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorConfig {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<RateLimitConfig>,
    #[serde(default)]
    descriptors: Vec<DescriptorConfig>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitConfig {
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<u64>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<Replaces>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Replaces {
    name: String,
}

/// A window's unit, as envoyproxy/ratelimit counts it (fixed lengths: a month is 30 days,
/// a year 365).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "SECOND" => Self::Second,
            "MINUTE" => Self::Minute,
            "HOUR" => Self::Hour,
            "DAY" => Self::Day,
            "WEEK" => Self::Week,
            "MONTH" => Self::Month,
            "YEAR" => Self::Year,
            _ => return None,
        })
    }

    /// The unit's protobuf number (`RateLimitResponse.RateLimit.Unit`).
    pub fn proto(self) -> i32 {
        match self {
            Self::Second => 1,
            Self::Minute => 2,
            Self::Hour => 3,
            Self::Day => 4,
            Self::Month => 5,
            Self::Year => 6,
            Self::Week => 7,
        }
    }

    /// From the protobuf number (`None`: unknown).
    pub fn from_proto(n: i32) -> Option<Self> {
        Some(match n {
            1 => Self::Second,
            2 => Self::Minute,
            3 => Self::Hour,
            4 => Self::Day,
            5 => Self::Month,
            6 => Self::Year,
            7 => Self::Week,
            _ => return None,
        })
    }

    /// The window's length.
    pub fn millis(self) -> u64 {
        const S: u64 = 1_000;
        match self {
            Self::Second => S,
            Self::Minute => 60 * S,
            Self::Hour => 3_600 * S,
            Self::Day => 86_400 * S,
            Self::Week => 7 * 86_400 * S,
            Self::Month => 30 * 86_400 * S,
            Self::Year => 365 * 86_400 * S,
        }
    }
}

/// What a rule allows (`requests` 0: nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    Unlimited,
    Per { requests: u64, unit: Unit },
}

/// A rule with a rate limit: a node of the tree that a descriptor ending there gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub allowance: Allowance,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub shadow: bool,
    pub detailed_metric: bool,
}

/// A level of a domain's tree: its rules by `key_value` and by `key`, and its wildcards
/// in the file's order.
#[derive(Debug, Default, Clone)]
struct Level {
    exact: HashMap<String, Node>,
    wildcards: Vec<Wildcard>,
}

#[derive(Debug, Clone)]
struct Wildcard {
    key: String,
    /// The value, each `*` any run of characters.
    pattern: String,
    /// The values it matches share one budget (named by the pattern).
    shared: bool,
    node: Node,
}

/// Whether `value` matches `pattern`, whose every `*` matches any run of characters.
fn glob(pattern: &str, value: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = value.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for p in middle {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A descriptor's rule, the values its budget is named by (a shared wildcard's pattern in
/// place of the value it matched), and its metric's name: each level's `key_value` when
/// the rule names the value (or a wildcard's pattern), the request's value where
/// `detailed_metric` or `value_to_metric` says so, else `key`; joined by `.`.
#[derive(Debug)]
pub struct Matched<'a> {
    pub rule: &'a Rule,
    pub values: Vec<&'a str>,
    pub metric: String,
}

#[derive(Debug, Default, Clone)]
struct Node {
    rule: Option<Rule>,
    below: Level,
    /// The request's value names the metric (`value_to_metric`).
    value_to_metric: bool,
}

/// One domain's rules.
#[derive(Debug, Clone, Default)]
pub struct Domain {
    top: Level,
}

impl Domain {
    /// The rule a descriptor of `entries` (key, value) gets: the one nested as deep as it
    /// has entries, each level matched by `key` and `value` first, then by a wildcard
    /// value (the first in the file's order), then by `key` alone.
    pub fn rule<'a, 'e>(&'a self, entries: &[(&'e str, &'e str)]) -> Option<Matched<'a>>
    where
        'e: 'a,
    {
        let mut level = &self.top;
        let mut values = Vec::with_capacity(entries.len());
        // Per level: the metric's part, and the request's value's part where it may replace it.
        let mut parts: Vec<(String, Option<String>)> = Vec::with_capacity(entries.len());
        for (i, &(key, value)) in entries.iter().enumerate() {
            let node = match level.exact.get(&format!("{key}_{value}")) {
                Some(n) => {
                    values.push(value);
                    parts.push((format!("{key}_{value}"), None));
                    n
                }
                None => match level.wildcards.iter().find(|w| w.key == key && glob(&w.pattern, value)) {
                    Some(w) => {
                        values.push(if w.shared { w.pattern.as_str() } else { value });
                        let runtime = (!w.shared).then(|| format!("{key}_{value}"));
                        parts.push((format!("{key}_{}", w.pattern), runtime));
                        &w.node
                    }
                    None => {
                        values.push(value);
                        parts.push((key.to_string(), Some(format!("{key}_{value}"))));
                        level.exact.get(key)?
                    }
                },
            };
            if node.value_to_metric
                && let Some((part, runtime)) = parts.last_mut()
                && let Some(r) = runtime.take()
            {
                *part = r;
            }
            if i + 1 == entries.len() {
                let rule = node.rule.as_ref()?;
                let metric = parts
                    .into_iter()
                    .map(|(part, runtime)| match (rule.detailed_metric, runtime) {
                        (true, Some(r)) => r,
                        _ => part,
                    })
                    .collect::<Vec<_>>()
                    .join(".");
                return Some(Matched { rule, values, metric });
            }
            level = &node.below;
        }
        None
    }
}

/// Every domain's rules.
#[derive(Debug, Clone, Default)]
pub struct RlsConfig {
    pub domains: BTreeMap<String, Domain>,
}

impl RlsConfig {
    /// The configuration at `path`: a YAML file, or a directory whose `.yaml` and `.yml`
    /// files are read in name order.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = |p: &Path| p.display().to_string();
        let files: Vec<PathBuf> = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                let entries = std::fs::read_dir(path)
                    .map_err(|e| ConfigError { file: shown(path), message: e.to_string() })?;
                let mut files: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                    .collect();
                files.sort();
                files
            }
            Ok(_) => vec![path.to_path_buf()],
            Err(e) => return Err(ConfigError { file: shown(path), message: e.to_string() }),
        };
        let mut config = RlsConfig::default();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| ConfigError { file: shown(&file), message: e.to_string() })?;
            config.add(&shown(&file), &text)?;
        }
        Ok(config)
    }

    /// Adds the domain of one file's `text` (`file` names it in errors).
    pub fn add(&mut self, file: &str, text: &str) -> Result<(), ConfigError> {
        let error = |message: String| ConfigError { file: file.to_string(), message };
        let parsed: FileConfig = serde_norway::from_str(text).map_err(|e| error(e.to_string()))?;
        if parsed.domain.is_empty() {
            return Err(error("`domain` must not be empty".into()));
        }
        if self.domains.contains_key(&parsed.domain) {
            return Err(error(format!("the domain {:?} is configured twice", parsed.domain)));
        }
        let mut names = BTreeMap::new();
        let mut replaced = BTreeSet::new();
        let top = level(&parsed.descriptors, &mut names, &mut replaced).map_err(error)?;
        if let Some(unknown) = replaced.iter().find(|r| !names.contains_key(*r)) {
            return Err(error(format!(
                "`replaces` names {unknown:?}, which no rate_limit of the domain is named"
            )));
        }
        let mut done = BTreeSet::new();
        if let Some(name) = names.keys().find_map(|n| cycle_from(n, &names, &mut Vec::new(), &mut done)) {
            return Err(error(format!("`replaces` goes round in a circle through {name:?}")));
        }
        self.domains.insert(parsed.domain, Domain { top });
        Ok(())
    }
}

/// A name on a circle of `replaces` from `name` (`path`: the names on the way; `done`: the
/// names whose every way on was followed already and found no circle), if any. Each name is
/// followed once, so a file of many rules replacing each other in layers is checked in
/// time linear in its `replaces`, not in the number of ways through them.
fn cycle_from<'a>(
    name: &'a str,
    edges: &'a BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
) -> Option<String> {
    if path.contains(&name) {
        return Some(name.to_string());
    }
    if done.contains(name) {
        return None;
    }
    path.push(name);
    let mut found = None;
    for next in edges.get(name).into_iter().flatten() {
        found = cycle_from(next, edges, path, done);
        if found.is_some() {
            break;
        }
    }
    path.pop();
    done.insert(name);
    found
}

/// A level of descriptors as a tree's level (`shadow_mode` is each descriptor's own, as
/// envoyproxy/ratelimit reads it); the rules' names (each with the names its rules
/// replace) and every name replaced gathered.
fn level(
    descriptors: &[DescriptorConfig],
    names: &mut BTreeMap<String, BTreeSet<String>>,
    replaced: &mut BTreeSet<String>,
) -> Result<Level, String> {
    let mut out = Level::default();
    for d in descriptors {
        if d.key.is_empty() {
            return Err("a descriptor's `key` must not be empty".into());
        }
        let rule = match &d.rate_limit {
            None => None,
            Some(r) => {
                let allowance = match (r.unlimited, r.unit.as_deref(), r.requests_per_unit) {
                    (true, None, None) => Allowance::Unlimited,
                    (true, _, _) => {
                        return Err(format!(
                            "{}: an `unlimited` rate_limit has no unit nor requests_per_unit",
                            d.key
                        ));
                    }
                    (false, Some(unit), Some(requests)) => {
                        let unit = Unit::parse(unit).ok_or_else(|| {
                            format!(
                                "{}: unknown unit {unit:?} (second, minute, hour, day, week, month, year)",
                                d.key
                            )
                        })?;
                        if requests > keygate_domain::MAX_SAFE_INTEGER {
                            return Err(format!("{}: requests_per_unit must be 0 to 2^53-1", d.key));
                        }
                        Allowance::Per { requests, unit }
                    }
                    _ => return Err(format!("{}: a rate_limit needs unit and requests_per_unit", d.key)),
                };
                if let Some(name) = &r.name {
                    names.entry(name.clone()).or_default().extend(r.replaces.iter().map(|x| x.name.clone()));
                }
                replaced.extend(r.replaces.iter().map(|x| x.name.clone()));
                Some(Rule {
                    allowance,
                    name: r.name.clone(),
                    replaces: r.replaces.iter().map(|x| x.name.clone()).collect(),
                    shadow: d.shadow_mode,
                    detailed_metric: d.detailed_metric,
                })
            }
        };
        let node =
            Node { rule, below: level(&d.descriptors, names, replaced)?, value_to_metric: d.value_to_metric };
        if d.share_threshold && !d.value.as_deref().is_some_and(|v| v.contains('*')) {
            return Err(format!("{}: share_threshold is for a wildcard value (one with a `*`)", d.key));
        }
        match d.value.as_deref() {
            Some(v) if v.contains('*') => {
                let (key, pattern, shared) = (d.key.clone(), v.to_string(), d.share_threshold);
                out.wildcards.push(Wildcard { key, pattern, shared, node });
            }
            Some(v) => {
                if out.exact.insert(format!("{}_{v}", d.key), node).is_some() {
                    return Err(format!("the descriptor {}={v} is configured twice at one level", d.key));
                }
            }
            None => {
                if out.exact.insert(d.key.clone(), node).is_some() {
                    return Err(format!("the descriptor {} is configured twice at one level", d.key));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
