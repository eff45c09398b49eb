//! What a gateway's forward-auth call asks keygate to check (docs/gateways.md): the
//! permission query the key must satisfy and the rate limit to apply, given by the
//! gateway's configuration (headers on the auth subrequest, or a named policy), never by
//! the end user: a named policy is authoritative, and a root key may be bound to the
//! policies it may use. Parsing and choosing only: the server's `gateway` handler runs the
//! checks.

use keygate_domain::{MAX_SAFE_INTEGER, ValidationError, validate_namespace_name};
use keygate_ratelimit::{MIN_DURATION_MS, MIN_LIMIT};
use keygate_rbac::{PermissionQuery, parse_permission_query};
use std::collections::HashMap;
use std::sync::Arc;

/// Where a gateway's rate limit takes its identifier from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentifierSource {
    /// The verified key's id (the default): one budget per key.
    KeyId,
    /// A request header the gateway sets (`X-Real-IP`, ...), lower-cased.
    Header(String),
}

/// The rate limit a gateway applies: `namespace=api; limit=100; duration=60000; cost=1;
/// identifier=header:x-real-ip` (cost and identifier optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayLimit {
    pub namespace: String,
    pub limit: u64,
    pub duration: u64,
    pub cost: u64,
    pub identifier: IdentifierSource,
}

/// Everything one forward-auth call checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayPolicy {
    /// The permission query (v2's DSL: `a AND (b OR c)`), if any.
    pub permissions: Option<PermissionQuery>,
    pub ratelimit: Option<GatewayLimit>,
    /// The header holding the API key, lower-cased (`None`: `Authorization: Bearer`).
    pub key_header: Option<String>,
}

/// A policy as written (in the policies file, or one field per header), before parsing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    pub permissions: Option<String>,
    pub ratelimit: Option<String>,
    pub key_header: Option<String>,
}

impl PolicySpec {
    /// The parsed policy; errors name the `field` they come from.
    pub fn parse(&self) -> Result<GatewayPolicy, ValidationError> {
        let permissions = match &self.permissions {
            Some(q) => Some(
                parse_permission_query(q).map_err(|e| ValidationError::new("permissions", e.to_string()))?,
            ),
            None => None,
        };
        let ratelimit = self.ratelimit.as_deref().map(parse_ratelimit).transpose()?;
        let key_header = self.key_header.as_deref().map(|h| header_name("keyHeader", h)).transpose()?;
        Ok(GatewayPolicy { permissions, ratelimit, key_header })
    }

    fn is_empty(&self) -> bool {
        self.permissions.is_none() && self.ratelimit.is_none() && self.key_header.is_none()
    }

    /// The headers that set this spec's fields, for a refusal's message.
    fn headers(&self) -> Vec<&'static str> {
        let given = [
            (self.permissions.is_some(), "X-Keygate-Permissions"),
            (self.ratelimit.is_some(), "X-Keygate-Ratelimit"),
            (self.key_header.is_some(), "X-Keygate-Key-Header"),
        ];
        given.into_iter().filter_map(|(set, name)| set.then_some(name)).collect()
    }
}

/// Why a forward-auth call's policy is refused (docs/gateways.md, *Who decides the
/// policy*): never a pass, and nothing spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyRefusal {
    /// A malformed field (inline or named): 400.
    Malformed(ValidationError),
    /// No policy of that name: 400.
    Unknown(String),
    /// A named policy and inline fields in one call (a named policy is authoritative:
    /// nothing lays over it), or inline fields from a root key bound to policies: 400.
    Overridden { headers: Vec<&'static str>, named: Option<String> },
    /// A root key bound to several policies, called without naming one: 400.
    Unnamed { allowed: Vec<String> },
    /// A root key bound to policies, calling with another: 403.
    NotBound { policy: String, allowed: Vec<String> },
}

impl std::fmt::Display for PolicyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "{e}"),
            Self::Unknown(name) => {
                write!(f, "X-Keygate-Policy: no policy {name:?} in KEYGATE_GATEWAY_POLICIES")
            }
            Self::Overridden { headers, named: Some(name) } => write!(
                f,
                "{} with X-Keygate-Policy {name:?}: a named policy is authoritative, nothing overrides it \
                 (strip end users' X-Keygate-* headers at the gateway: docs/gateways.md)",
                headers.join(", ")
            ),
            Self::Overridden { headers, named: None } => write!(
                f,
                "{}: this root key is bound to named policies (KEYGATE_GATEWAY_POLICIES rootKeys) and takes no \
                 inline policy headers",
                headers.join(", ")
            ),
            Self::Unnamed { allowed } => {
                write!(
                    f,
                    "this root key is bound to several policies: send X-Keygate-Policy, one of {allowed:?}"
                )
            }
            Self::NotBound { policy, allowed } => write!(
                f,
                "this root key may use only the policies {allowed:?} (KEYGATE_GATEWAY_POLICIES rootKeys), not {policy:?}"
            ),
        }
    }
}

/// Named policies (`KEYGATE_GATEWAY_POLICIES`: `{"policies": {"name": {...}}, "rootKeys":
/// {"rk_...": ["name"]}}`), each parsed when loaded.
#[derive(Debug, Clone, Default)]
pub struct GatewayPolicies {
    named: HashMap<String, Arc<GatewayPolicy>>,
    /// Root keys bound to the policies they may use (by root key id), in the file's order.
    bound: HashMap<String, Vec<String>>,
}

impl GatewayPolicies {
    /// Parses the policies file; every policy must parse, and every binding name root keys
    /// (`rk_...`) and policies of the file.
    pub fn from_json(text: &str) -> Result<Self, ValidationError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct File {
            policies: HashMap<String, PolicySpec>,
            #[serde(default)]
            root_keys: HashMap<String, Vec<String>>,
        }
        let file: File =
            serde_json::from_str(text).map_err(|e| ValidationError::new("policies", e.to_string()))?;
        let mut named = HashMap::new();
        for (name, spec) in &file.policies {
            let parsed = spec
                .parse()
                .map_err(|e| ValidationError::new(format!("policies.{name}.{}", e.path), e.message))?;
            named.insert(name.clone(), Arc::new(parsed));
        }
        for (id, policies) in &file.root_keys {
            let path = format!("rootKeys.{id}");
            if !id.starts_with("rk_") {
                return Err(ValidationError::new(path, "must be a root key's id (rk_...)"));
            }
            if policies.is_empty() {
                return Err(ValidationError::new(path, "must name at least one policy"));
            }
            if let Some(missing) = policies.iter().find(|p| !named.contains_key(*p)) {
                return Err(ValidationError::new(path, format!("{missing:?} is not a policy of the file")));
            }
        }
        Ok(Self { named, bound: file.root_keys })
    }

    /// The policy a call from `root_key_id` gets: the named one (`policy`), authoritative,
    /// or the `inline` fields; a root key bound to policies gets only those (its one
    /// policy when it names none).
    pub fn resolve(
        &self,
        root_key_id: &str,
        policy: Option<&str>,
        inline: PolicySpec,
    ) -> Result<Arc<GatewayPolicy>, PolicyRefusal> {
        let bound = self.bound.get(root_key_id);
        if !inline.is_empty() && (policy.is_some() || bound.is_some()) {
            return Err(PolicyRefusal::Overridden {
                headers: inline.headers(),
                named: policy.map(str::to_owned),
            });
        }
        let name = match (policy, bound) {
            (Some(name), _) => name,
            (None, Some(allowed)) => match allowed.as_slice() {
                [only] => only.as_str(),
                _ => return Err(PolicyRefusal::Unnamed { allowed: allowed.clone() }),
            },
            (None, None) => return inline.parse().map(Arc::new).map_err(PolicyRefusal::Malformed),
        };
        let found = self.named.get(name).ok_or_else(|| PolicyRefusal::Unknown(name.to_owned()))?;
        match bound {
            Some(allowed) if !allowed.iter().any(|a| a == name) => {
                Err(PolicyRefusal::NotBound { policy: name.to_owned(), allowed: allowed.clone() })
            }
            _ => Ok(found.clone()),
        }
    }
}

/// `namespace=api; limit=100; duration=60000; cost=1; identifier=header:x-real-ip`.
pub fn parse_ratelimit(spec: &str) -> Result<GatewayLimit, ValidationError> {
    let bad = |msg: String| ValidationError::new("ratelimit", msg);
    let mut fields: HashMap<&str, &str> = HashMap::new();
    for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| bad(format!("{part:?} is not name=value")))?;
        let (k, v) = (k.trim(), v.trim());
        if !["namespace", "limit", "duration", "cost", "identifier"].contains(&k) {
            return Err(bad(format!("{k:?} is not one of namespace, limit, duration, cost, identifier")));
        }
        if fields.insert(k, v).is_some() {
            return Err(bad(format!("{k} is given twice")));
        }
    }
    let number = |k: &str, min: u64| -> Result<u64, ValidationError> {
        let v = fields.get(k).ok_or_else(|| bad(format!("{k} is required")))?;
        let n: u64 = v.parse().map_err(|_| bad(format!("{k}: {v:?} is not a whole number")))?;
        if n < min || n > MAX_SAFE_INTEGER {
            return Err(bad(format!("{k}: must be {min} to {MAX_SAFE_INTEGER}")));
        }
        Ok(n)
    };
    let namespace = fields.get("namespace").ok_or_else(|| bad("namespace is required".into()))?.to_string();
    validate_namespace_name("ratelimit.namespace", &namespace)?;
    let limit = number("limit", MIN_LIMIT)?;
    let duration = number("duration", MIN_DURATION_MS)?;
    let cost = if fields.contains_key("cost") { number("cost", 0)? } else { 1 };
    let identifier = match fields.get("identifier").copied() {
        None | Some("key") => IdentifierSource::KeyId,
        Some(v) => match v.strip_prefix("header:") {
            Some(h) => IdentifierSource::Header(header_name("ratelimit.identifier", h)?),
            None => return Err(bad(format!("identifier: {v:?} is not key or header:<name>"))),
        },
    };
    Ok(GatewayLimit { namespace, limit, duration, cost, identifier })
}

/// A header name (token characters), lower-cased.
fn header_name(path: &str, name: &str) -> Result<String, ValidationError> {
    let name = name.trim();
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > 256 || !name.chars().all(token) {
        return Err(ValidationError::new(path, format!("{name:?} is not a header name")));
    }
    Ok(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_specs_parse_with_defaults_and_refuse_anything_else() {
        let l = parse_ratelimit("namespace=api; limit=100; duration=60000").unwrap();
        assert_eq!((l.namespace.as_str(), l.limit, l.duration, l.cost), ("api", 100, 60_000, 1));
        assert_eq!(l.identifier, IdentifierSource::KeyId);
        let l = parse_ratelimit(" namespace = a ;limit=1;duration=1000;cost=0;identifier=header:X-Real-IP; ")
            .unwrap();
        assert_eq!((l.cost, l.identifier), (0, IdentifierSource::Header("x-real-ip".into())));
        for bad in [
            "",
            "limit=1; duration=1000",
            "namespace=a; limit=0; duration=1000",
            "namespace=a; limit=1; duration=999",
            "namespace=a; limit=1.5; duration=1000",
            "namespace=a; limit=-1; duration=1000",
            "namespace=a; limit=1; duration=1000; limit=2",
            "namespace=a; limit=1; duration=1000; burst=2",
            "namespace=a; limit=1; duration=1000; identifier=ip",
            "namespace=a; limit=1; duration=1000; identifier=header:bad header",
            "namespace=a limit=1",
            "namespace=; limit=1; duration=1000",
            "namespace=a; limit=99999999999999999999; duration=1000",
        ] {
            assert!(parse_ratelimit(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_named_policy_is_authoritative_and_a_bound_root_key_gets_only_its_policies() {
        let p = GatewayPolicies::from_json(
            r#"{"policies": {"docs": {"permissions": "docs.read OR admin", "ratelimit": "namespace=docs; limit=10; duration=1000", "keyHeader": "X-API-Key"}, "open": {}},
                "rootKeys": {"rk_gw": ["docs"], "rk_two": ["docs", "open"]}}"#,
        )
        .unwrap();
        let none = PolicySpec::default;
        let docs = p.resolve("rk_any", Some("docs"), none()).unwrap();
        assert_eq!(docs.key_header.as_deref(), Some("x-api-key"));
        assert!(docs.permissions.is_some() && docs.ratelimit.is_some());
        let perms = || PolicySpec { permissions: Some("admin".into()), ..PolicySpec::default() };
        // Inline fields never lay over a named policy, whoever calls.
        for root in ["rk_any", "rk_gw"] {
            match p.resolve(root, Some("docs"), perms()) {
                Err(PolicyRefusal::Overridden { headers, .. }) => {
                    assert_eq!(headers, ["X-Keygate-Permissions"])
                }
                other => panic!("{other:?}"),
            }
        }
        // An unbound root key may still send inline fields alone.
        assert!(p.resolve("rk_any", None, perms()).unwrap().permissions.is_some());
        // A bound root key: its one policy implied, inline fields refused, others forbidden.
        assert_eq!(p.resolve("rk_gw", None, none()).unwrap(), docs);
        assert!(matches!(
            p.resolve("rk_gw", None, perms()),
            Err(PolicyRefusal::Overridden { named: None, .. })
        ));
        assert!(matches!(p.resolve("rk_gw", Some("open"), none()), Err(PolicyRefusal::NotBound { .. })));
        assert!(matches!(p.resolve("rk_two", None, none()), Err(PolicyRefusal::Unnamed { .. })));
        assert_eq!(*p.resolve("rk_two", Some("open"), none()).unwrap(), GatewayPolicy::default());
        assert!(matches!(p.resolve("rk_any", Some("nope"), none()), Err(PolicyRefusal::Unknown(_))));
        for bad in [
            r#"{"policies": {"x": {"permissions": "a AND"}}}"#,
            r#"{"policies": {"x": {"ratelimit": "limit=1"}}}"#,
            r#"{"policies": {"x": {"perms": "a"}}}"#,
            r#"{"policies": {"x": {}}, "rootKeys": {"rk_a": ["y"]}}"#,
            r#"{"policies": {"x": {}}, "rootKeys": {"rk_a": []}}"#,
            r#"{"policies": {"x": {}}, "rootKeys": {"kg_root_secret": ["x"]}}"#,
            r#"{"nope": {}}"#,
            "not json",
        ] {
            assert!(GatewayPolicies::from_json(bad).is_err(), "{bad}");
        }
    }
}
