//! What the middlewares share, whatever the web framework: where the key is read, what a
//! request asks of it (a permission query, rate limits, a credit cost), and how a refusal
//! is answered (401, 403, 429 with `Retry-After` and `RateLimit-*`, or 503).

use crate::error::Error;
use crate::keys::{VerifyCode, VerifyCredits, VerifyKeyRequest, VerifyKeyResult, VerifyRatelimit};
use crate::verifier::Verifier;
use std::net::IpAddr;
use std::sync::Arc;

/// The longest key read from a request (as keygate's `keys.verifyKey` takes): a longer
/// one is refused as not valid without being sent.
pub const MAX_KEY_CHARS: usize = 512;

/// Protects routes: verifies the key each request carries with a [`Verifier`], and lets
/// the request through (with the verification in its extensions) or answers the refusal.
/// The tower layer and the actix-web middleware are built from one. Cheap to clone.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Policy>,
}

/// A guard's settings (shared by its clones: a request clones none of them).
#[derive(Clone)]
struct Policy {
    verifier: Verifier,
    source: KeySource,
    permissions: Option<String>,
    ratelimits: Vec<VerifyRatelimit>,
    cost: Option<u64>,
    tags: Vec<String>,
    format: ErrorFormat,
    /// What every request asks, read once for the embedded back end (its permission query
    /// parsed): on first use, and again after a change. `None`: it does not read (the
    /// request is then sent as it is, and refused as it would be).
    #[cfg(feature = "embedded")]
    prepared: std::sync::OnceLock<Option<crate::embedded::PreparedVerify>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &*self.inner;
        f.debug_struct("Guard")
            .field("verifier", &p.verifier)
            .field("source", &p.source)
            .field("permissions", &p.permissions)
            .field("ratelimits", &p.ratelimits)
            .field("cost", &p.cost)
            .finish_non_exhaustive()
    }
}

/// Where the key is in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeySource {
    /// `Authorization: Bearer <key>` (the default).
    Bearer,
    /// The whole value of this header (`X-API-Key`).
    Header(String),
}

/// How a refusal's body is written.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum ErrorFormat {
    /// `application/problem+json` (RFC 9457): `{type, title, status, detail, code}`, with
    /// `code` the verification's (`NOT_FOUND`, `RATE_LIMITED`, ...) or `MISSING_KEY`,
    /// `UNAVAILABLE`. The default.
    #[default]
    Problem,
    /// `text/plain`: the detail alone.
    Text,
    /// Your own: the content type and body for a refusal.
    Custom(Arc<RenderRejection>),
}

/// A function writing a refusal: its content type and body.
pub type RenderRejection = dyn Fn(&Rejection) -> (String, Vec<u8>) + Send + Sync;

impl std::fmt::Debug for ErrorFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorFormat::Problem => "Problem",
            ErrorFormat::Text => "Text",
            ErrorFormat::Custom(_) => "Custom",
        })
    }
}

/// A request the guard refused, with what the answer says.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Rejection {
    /// 401, 403, 429, 503 (keygate unreachable) or 500 (keygate refused the guard's own
    /// request: its permission query or root key).
    pub status: u16,
    /// `MISSING_KEY`, `MALFORMED_KEY`, `UNAVAILABLE`, `MISCONFIGURED`, or the
    /// verification's code (`NOT_FOUND`, ...).
    pub code: &'static str,
    /// What went wrong, for the caller.
    pub detail: String,
    /// Headers of the answer (`Retry-After`, `RateLimit-*`, `WWW-Authenticate`).
    pub headers: Vec<(&'static str, String)>,
    /// The verification, when there was one.
    pub verification: Option<Box<VerifyKeyResult>>,
}

impl Rejection {
    fn new(status: u16, code: &'static str, detail: impl Into<String>) -> Self {
        Self { status, code, detail: detail.into(), headers: Vec::new(), verification: None }
    }

    /// The answer's content type and body in `format`.
    pub fn body(&self, format: &ErrorFormat) -> (String, Vec<u8>) {
        match format {
            ErrorFormat::Problem => {
                let title = match self.status {
                    401 => "Unauthorized",
                    403 => "Forbidden",
                    429 => "Too Many Requests",
                    500 => "Internal Server Error",
                    _ => "Service Unavailable",
                };
                let body = serde_json::json!({
                    "type": format!("about:blank#{}", self.code.to_ascii_lowercase()),
                    "title": title,
                    "status": self.status,
                    "detail": self.detail,
                    "code": self.code,
                });
                ("application/problem+json".into(), body.to_string().into_bytes())
            }
            ErrorFormat::Text => ("text/plain; charset=utf-8".into(), self.detail.clone().into_bytes()),
            ErrorFormat::Custom(f) => f(self),
        }
    }
}

/// A key that passed the guard: its verification. Handlers read it with the framework's
/// extractor (`VerifiedKey` in axum and actix-web handlers). Cheap to clone.
///
/// With the embedded back end it holds the verification as keygate made it (sharing the
/// key's cached snapshot): [`Self::key_id`], [`Self::has_permission`] and
/// [`Self::external_id`] read it in place, and the whole [`VerifyKeyResult`] (copies of the
/// key's name, permissions, roles, meta parsed from its JSON...) is built only when a
/// handler first asks for it ([`Self::result`], or through `Deref`), once per request.
#[derive(Debug, Clone)]
pub struct VerifiedKey(Arc<Verified>);

#[derive(Debug)]
enum Verified {
    /// An answer already in the client's type (the remote back end).
    Result(VerifyKeyResult),
    /// keygate's own verification, converted on first use.
    #[cfg(feature = "embedded")]
    Embedded(keygate_rbac::Verification, std::sync::OnceLock<VerifyKeyResult>),
}

impl VerifiedKey {
    fn new(verified: Verified) -> Self {
        Self(Arc::new(verified))
    }

    /// The verification.
    pub fn result(&self) -> &VerifyKeyResult {
        match &*self.0 {
            Verified::Result(r) => r,
            #[cfg(feature = "embedded")]
            Verified::Embedded(v, result) => result.get_or_init(|| crate::embedded::result(v)),
        }
    }

    /// The key's id.
    pub fn key_id(&self) -> &str {
        match &*self.0 {
            Verified::Result(r) => r.key_id.as_deref().unwrap_or_default(),
            #[cfg(feature = "embedded")]
            Verified::Embedded(v, _) => v.key().map_or("", |k| k.id()),
        }
    }

    /// Whether the key holds `permission` (directly or through a role).
    pub fn has_permission(&self, permission: &str) -> bool {
        match &*self.0 {
            Verified::Result(r) => r.permissions.iter().any(|p| p == permission),
            #[cfg(feature = "embedded")]
            Verified::Embedded(v, _) => v.permissions().iter().any(|p| p == permission),
        }
    }

    /// The externalId of the identity the key is linked to.
    pub fn external_id(&self) -> Option<&str> {
        match &*self.0 {
            Verified::Result(r) => r.identity.as_ref().map(|i| i.external_id.as_str()),
            #[cfg(feature = "embedded")]
            Verified::Embedded(v, _) => v.identity().map(|i| i.identity.external_id.as_str()),
        }
    }
}

impl PartialEq for VerifiedKey {
    fn eq(&self, other: &Self) -> bool {
        self.result() == other.result()
    }
}

impl std::ops::Deref for VerifiedKey {
    type Target = VerifyKeyResult;
    fn deref(&self) -> &VerifyKeyResult {
        self.result()
    }
}

impl Guard {
    /// A guard that lets through any valid key, read from `Authorization: Bearer`.
    pub fn new(verifier: Verifier) -> Self {
        let inner = Policy {
            verifier,
            source: KeySource::Bearer,
            permissions: None,
            ratelimits: Vec::new(),
            cost: None,
            tags: Vec::new(),
            #[cfg(feature = "embedded")]
            prepared: std::sync::OnceLock::new(),
            format: ErrorFormat::Problem,
        };
        Self { inner: Arc::new(inner) }
    }

    fn with(mut self, change: impl FnOnce(&mut Policy)) -> Self {
        let policy = Arc::make_mut(&mut self.inner);
        change(policy);
        #[cfg(feature = "embedded")]
        {
            policy.prepared = std::sync::OnceLock::new();
        }
        self
    }

    /// Reads the key from `source`.
    pub fn key_source(self, source: KeySource) -> Self {
        self.with(|p| p.source = source)
    }

    /// Reads the key from the header `name` (its whole value).
    pub fn key_header(self, name: impl Into<String>) -> Self {
        self.key_source(KeySource::Header(name.into().to_ascii_lowercase()))
    }

    /// The key must satisfy this permission query (`documents.read`, `a AND (b OR c)`),
    /// else 403.
    pub fn permissions(self, query: impl Into<String>) -> Self {
        let query = query.into();
        self.with(|p| p.permissions = Some(query))
    }

    /// The per-route helper: this guard with `query` required as well (`AND`ed to the
    /// query it has), for one route or a group of them.
    pub fn require(&self, query: &str) -> Self {
        self.clone().with(|p| {
            p.permissions = Some(match &p.permissions {
                Some(q) => format!("({q}) AND ({query})"),
                None => query.to_string(),
            })
        })
    }

    /// Each request also counts against this rate limit of the key or its identity (or an
    /// ad-hoc one of the key, with `limit` and `duration`), else 429.
    pub fn ratelimit(self, limit: VerifyRatelimit) -> Self {
        self.with(|p| p.ratelimits.push(limit))
    }

    /// Each request spends `cost` credits of a key that has credits (default 1), else 429.
    pub fn cost(self, cost: u64) -> Self {
        self.with(|p| p.cost = Some(cost))
    }

    /// Counts the verifications with this tag in analytics.
    pub fn tag(self, tag: impl Into<String>) -> Self {
        let tag = tag.into();
        self.with(|p| p.tags.push(tag))
    }

    /// How refusals are written (default [`ErrorFormat::Problem`]).
    pub fn error_format(self, format: ErrorFormat) -> Self {
        self.with(|p| p.format = format)
    }

    /// The format refusals are written in.
    pub fn format(&self) -> &ErrorFormat {
        &self.inner.format
    }

    /// The key in a request, given a way to read its headers by (lower-case) name:
    /// `Ok(None)` when it carries none.
    pub fn key_in<'a>(&self, header: impl Fn(&str) -> Option<&'a [u8]>) -> Result<Option<String>, Rejection> {
        let name = match &self.inner.source {
            KeySource::Bearer => "authorization",
            KeySource::Header(h) => h.as_str(),
        };
        let Some(raw) = header(name) else { return Ok(None) };
        let value = std::str::from_utf8(raw)
            .map_err(|_| self.unauthorized("MALFORMED_KEY", "the API key is not valid text"))?
            .trim();
        let key = match &self.inner.source {
            KeySource::Header(_) => value,
            KeySource::Bearer => match value.split_once(' ') {
                Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
                _ => {
                    return Err(
                        self.unauthorized("MALFORMED_KEY", "send the API key as Authorization: Bearer <key>")
                    );
                }
            },
        };
        if key.chars().count() > MAX_KEY_CHARS {
            return Err(self.unauthorized("NOT_FOUND", "the API key is not valid"));
        }
        Ok((!key.is_empty()).then(|| key.to_string()))
    }

    /// Verifies `key` (the result of [`Self::key_in`]): the verification when the key may
    /// pass, else the refusal. No address is given: a key under an `allowedIps` list is
    /// refused ([`Self::check_from`]).
    pub async fn check(&self, key: Option<String>) -> Result<VerifiedKey, Rejection> {
        self.check_from(key, None).await
    }

    /// [`Self::check`] of a request from `ip` (the middleware's: the connection's address,
    /// or [`ClientAddr`]), which a key's `allowedIps` lists are checked against.
    pub async fn check_from(
        &self,
        key: Option<String>,
        ip: Option<IpAddr>,
    ) -> Result<VerifiedKey, Rejection> {
        let Some(key) = key else {
            return Err(self.unauthorized("MISSING_KEY", "this route needs an API key"));
        };
        let p = &*self.inner;
        #[cfg(feature = "embedded")]
        if let Some(embedded) = p.verifier.as_embedded()
            && let Some(asks) = p
                .prepared
                .get_or_init(|| crate::embedded::PreparedVerify::new(&p.request(String::new())).ok())
        {
            return match embedded.verification_prepared(&key, asks, ip).await {
                Ok(v) if v.valid() => Ok(VerifiedKey::new(Verified::Embedded(v, Default::default()))),
                verified => answer(verified.map(|v| crate::embedded::result(&v))),
            };
        }
        let req = VerifyKeyRequest { ip: ip.map(|ip| ip.to_string()), ..p.request(key) };
        answer(p.verifier.verify(&req).await)
    }

    fn unauthorized(&self, code: &'static str, detail: &str) -> Rejection {
        let mut r = Rejection::new(401, code, detail);
        r.headers.push(("www-authenticate", "Bearer".into()));
        r
    }
}

impl Policy {
    /// The verification of `key` this guard asks for.
    fn request(&self, key: String) -> VerifyKeyRequest {
        VerifyKeyRequest {
            key,
            permissions: self.permissions.clone(),
            credits: self.cost.map(|cost| VerifyCredits { cost }),
            ratelimits: self.ratelimits.clone(),
            tags: self.tags.clone(),
            ip: None,
        }
    }
}

/// The end user's address, for a service whose connections come through a proxy or whose
/// server does not tell the middleware the peer: insert it into the request's extensions
/// before the keygate layer (tower: `http::Request::extensions_mut`; actix-web:
/// `HttpMessage::extensions_mut`), and the guard checks keys' `allowedIps` against it
/// instead of the connection's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The guard's answer to a verification: through, or the refusal.
fn answer(verified: Result<VerifyKeyResult, Error>) -> Result<VerifiedKey, Rejection> {
    match verified {
        Ok(v) => refuse_unless_valid(v, now_ms()),
        Err(e) if e.is_transient() => Err(unavailable(&e)),
        Err(e) => Err(misconfigured(&e)),
    }
}

/// 503 when no verification could be made: the guard fails closed.
fn unavailable(e: &Error) -> Rejection {
    log::warn!("keygate: verification failed, refusing the request: {e}");
    let mut r = Rejection::new(503, "UNAVAILABLE", "the API key could not be verified now: try again");
    r.headers.push(("retry-after", "1".into()));
    r
}

/// 500 when keygate refused the verification itself (a permission query that does not
/// parse, a root key without `api.*.verify_key`): the service's setup is wrong, not the
/// caller's request; logged as an error.
fn misconfigured(e: &Error) -> Rejection {
    log::error!("keygate: the guard's verification was refused, check its settings and root key: {e}");
    Rejection::new(500, "MISCONFIGURED", "the API key could not be verified: the service is misconfigured")
}

/// keygate's gateway answer to a verification that is not VALID: 403 for missing
/// permissions, 429 for the key's rate limits (with `Retry-After`: when the first exceeded
/// window ends, and `RateLimit-*` of that limit) or its credits (without: they come back
/// only by a refill or an update), 401 otherwise.
fn refuse_unless_valid(v: VerifyKeyResult, now: u64) -> Result<VerifiedKey, Rejection> {
    let mut r = match v.code {
        VerifyCode::Valid => return Ok(VerifiedKey::new(Verified::Result(v))),
        VerifyCode::InsufficientPermissions => {
            Rejection::new(403, "INSUFFICIENT_PERMISSIONS", "the key lacks the required permissions")
        }
        VerifyCode::RateLimited => {
            let mut r = Rejection::new(
                429,
                "RATE_LIMITED",
                "the key's rate limit is exceeded: retry after the window resets",
            );
            if let Some(l) = v.ratelimits.iter().filter(|l| l.exceeded).min_by_key(|l| l.reset) {
                let secs = seconds_until(l.reset, now).to_string();
                r.headers.push(("retry-after", secs.clone()));
                r.headers.push(("ratelimit-limit", l.limit.to_string()));
                r.headers.push(("ratelimit-remaining", l.remaining.to_string()));
                r.headers.push(("ratelimit-reset", secs));
            }
            r
        }
        VerifyCode::UsageExceeded => {
            Rejection::new(429, "USAGE_EXCEEDED", "the key has no credits left for this request")
        }
        VerifyCode::Forbidden => {
            Rejection::new(403, "FORBIDDEN", "the API key may not be used from this address")
        }
        code => {
            let mut r =
                Rejection::new(401, code.as_str(), format!("the API key is not valid ({})", code.as_str()));
            r.headers.push(("www-authenticate", "Bearer".into()));
            r
        }
    };
    r.verification = Some(Box::new(v));
    Err(r)
}

/// Whole seconds from `now` to `reset` (ms), rounded up.
fn seconds_until(reset: u64, now: u64) -> u64 {
    reset.saturating_sub(now).div_ceil(1000)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::client::Client;

    fn guard() -> Guard {
        Guard::new(Verifier::remote(Client::new("http://127.0.0.1:9", "kg_root_x").unwrap()))
    }

    fn key(g: &Guard, name: &'static str, value: &'static str) -> Result<Option<String>, Rejection> {
        g.key_in(|n| (n == name).then_some(value.as_bytes()))
    }

    #[test]
    fn the_key_is_read_from_a_bearer_authorization_or_the_configured_header() {
        let g = guard();
        assert_eq!(key(&g, "authorization", "Bearer  abc ").unwrap().as_deref(), Some("abc"));
        assert_eq!(key(&g, "authorization", "bearer abc").unwrap().as_deref(), Some("abc"));
        assert_eq!(key(&g, "x-api-key", "abc").unwrap(), None, "not where the guard looks");
        assert_eq!(key(&g, "authorization", "Bearer ").unwrap_err().code, "MALFORMED_KEY");
        assert_eq!(key(&g, "authorization", "Basic abc").unwrap_err().code, "MALFORMED_KEY");
        let g = g.key_header("X-API-Key");
        assert_eq!(key(&g, "x-api-key", " abc ").unwrap().as_deref(), Some("abc"));
        assert_eq!(key(&g, "x-api-key", "").unwrap(), None, "an empty header is no key");
        let long: &'static str = Box::leak("k".repeat(MAX_KEY_CHARS + 1).into_boxed_str());
        assert_eq!(key(&g, "x-api-key", long).unwrap_err().status, 401);
    }

    #[test]
    fn require_ands_the_route_query_with_the_guards() {
        let g = guard().permissions("a OR b");
        assert_eq!(g.require("c").inner.permissions.as_deref(), Some("(a OR b) AND (c)"));
        assert_eq!(guard().require("c").inner.permissions.as_deref(), Some("c"));
        assert_eq!(g.inner.permissions.as_deref(), Some("a OR b"), "the original guard is unchanged");
    }

    #[test]
    fn refusals_map_codes_to_statuses_and_rate_limit_headers() {
        let mut v = VerifyKeyResult::not_found();
        assert_eq!(refuse_unless_valid(v.clone(), 0).unwrap_err().status, 401);
        v.code = VerifyCode::InsufficientPermissions;
        assert_eq!(refuse_unless_valid(v.clone(), 0).unwrap_err().status, 403);
        v.code = VerifyCode::UsageExceeded;
        let r = refuse_unless_valid(v.clone(), 0).unwrap_err();
        assert_eq!((r.status, r.headers.len()), (429, 0), "credits come back by refill: no Retry-After");
        v.code = VerifyCode::RateLimited;
        let limit = |name: &str, reset, exceeded| crate::keys::VerifyRatelimitResult {
            id: name.into(),
            name: name.into(),
            limit: 5,
            duration: 60_000,
            reset,
            remaining: 0,
            exceeded,
            auto_apply: false,
        };
        v.ratelimits = vec![limit("a", 90_000, true), limit("b", 30_000, false), limit("c", 61_001, true)];
        let r = refuse_unless_valid(v.clone(), 1_000).unwrap_err();
        let header = |n: &str| r.headers.iter().find(|(h, _)| *h == n).map(|(_, v)| v.as_str());
        assert_eq!(r.status, 429);
        assert_eq!(header("retry-after"), Some("61"), "the first exceeded window's end, rounded up");
        assert_eq!((header("ratelimit-limit"), header("ratelimit-remaining")), (Some("5"), Some("0")));
        v.code = VerifyCode::Valid;
        assert!(refuse_unless_valid(v, 0).is_ok());
    }

    #[test]
    fn refusal_bodies_are_problem_details_text_or_custom() {
        let r = Rejection::new(403, "INSUFFICIENT_PERMISSIONS", "no");
        let (ct, body) = r.body(&ErrorFormat::Problem);
        assert_eq!(ct, "application/problem+json");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (json["status"].as_u64(), json["code"].as_str()),
            (Some(403), Some("INSUFFICIENT_PERMISSIONS"))
        );
        assert_eq!(r.body(&ErrorFormat::Text).1, b"no");
        let custom =
            ErrorFormat::Custom(Arc::new(|r: &Rejection| ("text/x".into(), r.code.as_bytes().to_vec())));
        assert_eq!(r.body(&custom), ("text/x".to_string(), b"INSUFFICIENT_PERMISSIONS".to_vec()));
    }
}
