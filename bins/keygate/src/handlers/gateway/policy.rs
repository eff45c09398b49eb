//! What a gateway's forward-auth call asks keygate to check (docs/gateways.md): the
//! permission query the key must satisfy and the rate limit to apply, given by the
//! gateway's configuration (headers on the auth subrequest, or a named policy), never by
//! the end user. Parsing only: the server's `gateway` handler runs the checks.

use keygate_domain::{MAX_SAFE_INTEGER, ValidationError, validate_namespace_name};
use keygate_rbac::{PermissionQuery, parse_permission_query};
use std::collections::HashMap;

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

    /// This spec with `other`'s fields where it gives them (headers over a named policy).
    pub fn overlaid(mut self, other: &PolicySpec) -> Self {
        if other.permissions.is_some() {
            self.permissions.clone_from(&other.permissions);
        }
        if other.ratelimit.is_some() {
            self.ratelimit.clone_from(&other.ratelimit);
        }
        if other.key_header.is_some() {
            self.key_header.clone_from(&other.key_header);
        }
        self
    }
}

/// Named policies (`KEYGATE_GATEWAY_POLICIES`: `{"policies": {"name": {...}}}`), each
/// checked when loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayPolicies {
    specs: HashMap<String, PolicySpec>,
}

impl GatewayPolicies {
    /// Parses the policies file; every policy must parse.
    pub fn from_json(text: &str) -> Result<Self, ValidationError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            policies: HashMap<String, PolicySpec>,
        }
        let file: File =
            serde_json::from_str(text).map_err(|e| ValidationError::new("policies", e.to_string()))?;
        for (name, spec) in &file.policies {
            spec.parse()
                .map_err(|e| ValidationError::new(format!("policies.{name}.{}", e.path), e.message))?;
        }
        Ok(Self { specs: file.policies })
    }

    pub fn get(&self, name: &str) -> Option<&PolicySpec> {
        self.specs.get(name)
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
    let limit = number("limit", 1)?;
    let duration = number("duration", 1_000)?;
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
    fn policies_load_checked_and_headers_overlay_them() {
        let p = GatewayPolicies::from_json(
            r#"{"policies": {"docs": {"permissions": "docs.read OR admin", "ratelimit": "namespace=docs; limit=10; duration=1000", "keyHeader": "X-API-Key"}}}"#,
        )
        .unwrap();
        let spec = p.get("docs").unwrap().clone();
        let parsed = spec.parse().unwrap();
        assert_eq!(parsed.key_header.as_deref(), Some("x-api-key"));
        assert!(parsed.permissions.is_some() && parsed.ratelimit.is_some());
        let over = spec.overlaid(&PolicySpec { permissions: Some("admin".into()), ..PolicySpec::default() });
        assert_eq!(over.permissions.as_deref(), Some("admin"));
        assert_eq!(over.ratelimit.as_deref(), Some("namespace=docs; limit=10; duration=1000"));
        for bad in [
            r#"{"policies": {"x": {"permissions": "a AND"}}}"#,
            r#"{"policies": {"x": {"ratelimit": "limit=1"}}}"#,
            r#"{"policies": {"x": {"perms": "a"}}}"#,
            r#"{"nope": {}}"#,
            "not json",
        ] {
            assert!(GatewayPolicies::from_json(bad).is_err(), "{bad}");
        }
    }
}
