//! The embedded back end: keygate in this process, on the database (and Redis) a keygate
//! server uses, with the server's own verification cache, change counters and rate-limit
//! stores ([`keygate_runtime::Runtime`]). A change made through the server's API is
//! seen by the next verification here as by the server's: on PostgreSQL and with Redis the
//! change counters are read per verification; on SQLite without Redis the file's change
//! number is looked at before a cached answer is trusted (at most every
//! [`CHANGE_PROBE_EVERY`]; under a steady load a write is seen within that, and the
//! first verification after a quiet spell always looks).
//!
//! It rate-limits too ([`Embedded::limit`]): the server's decision path
//! ([`keygate_runtime::Runtime::limit`]) in the budgets the server counts in (the same
//! namespaces, overrides and, with Redis, the same counters).

use crate::error::Error;
use crate::identities::{Identity, RatelimitResponse};
use crate::keys::{VerifyCode, VerifyKeyRequest, VerifyKeyResult, VerifyRatelimitResult};
use crate::ratelimit::{LimitRequest, LimitResult};
use keygate_domain::SystemClock;
use keygate_rbac::{Principal, RbacError, RbacService, Verification};
use keygate_runtime::{CallError, Offload, Runtime, RuntimeSettings, Upkeep};
use keygate_store::SqlStore;
use keygate_usage::{LimitAsk, Usage};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use keygate_runtime::AnalyticsSettings;

/// SQLite without Redis: the longest a cached verification is trusted without looking at
/// the file's change number (a verification after a quiet spell this long always looks).
pub const CHANGE_PROBE_EVERY: std::time::Duration = std::time::Duration::from_micros(100);

/// An in-process keygate verifying keys (see the module docs). Cheap to clone: clones
/// share one runtime; its background upkeep stops, and its pending analytics are written,
/// when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Embedded {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    runtime: Arc<Runtime>,
    /// Who the rate limits are decided for: the workspace's namespaces, which it may use
    /// and create (`ratelimit.*.limit`, `ratelimit.*.create_namespace`); none without a
    /// workspace.
    limiter: Option<Arc<Principal>>,
    /// The limiter's workspace was found once (it is looked up on the first limit, so that
    /// one that does not exist is that call's `NOT_FOUND`; workspaces are not deleted).
    workspace_found: AtomicBool,
    workspace_id: Option<String>,
    api_id: Option<String>,
    upkeep: Upkeep,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The background threads first (a task under way finishes), then the last counts.
        self.upkeep.stop();
        if self.runtime.analytics_settings.is_some()
            && let Err(e) = self.runtime.analytics.flush_analytics_final()
        {
            log::warn!("analytics: writing the last counts failed: {e}");
        }
    }
}

/// Builds an [`Embedded`]: [`Embedded::builder`].
#[derive(Debug, Clone)]
pub struct EmbeddedBuilder {
    settings: RuntimeSettings,
    clock: Arc<dyn keygate_domain::Clock>,
    workspace_id: Option<String>,
    api_id: Option<String>,
}

impl EmbeddedBuilder {
    /// Rate limits, credits and change counters in Redis (`redis://...`; several URLs,
    /// comma-separated, for a cluster): the setting a scaled-out server uses, which this
    /// process must share with it.
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.settings.redis_url = Some(url.into());
        self
    }

    /// Redis Cluster (`KEYGATE_REDIS_CLUSTER`).
    pub fn redis_cluster(mut self, cluster: bool) -> Self {
        self.settings.redis.cluster = cluster;
        self
    }

    /// The prefix of every Redis key (`KEYGATE_REDIS_KEY_PREFIX`): the server's, so that
    /// both count in the same budgets and see the same change counters.
    pub fn redis_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.redis.key_prefix = prefix.into();
        self
    }

    /// Only keys of this workspace verify (others answer `NOT_FOUND`).
    pub fn workspace_id(mut self, workspace_id: impl Into<String>) -> Self {
        self.workspace_id = Some(workspace_id.into());
        self
    }

    /// Only keys of this API verify (others answer `NOT_FOUND`).
    pub fn api_id(mut self, api_id: impl Into<String>) -> Self {
        self.api_id = Some(api_id.into());
        self
    }

    /// Usage analytics of the verifications made here (default on, as the server's);
    /// `None` records nothing.
    pub fn analytics(mut self, analytics: Option<AnalyticsSettings>) -> Self {
        self.settings.analytics = analytics;
        self
    }

    /// The clock windows, expiries and caches read (default the system's; a test's manual
    /// clock, shared with a server it runs, makes both count in the same windows).
    pub fn clock(mut self, clock: Arc<dyn keygate_domain::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Largest number of open database connections (default 8).
    pub fn pool_size(mut self, max: u32) -> Self {
        self.settings.pool.max_size = max;
        self
    }

    /// Opens the database (creating or migrating its schema, as the server does), reads
    /// the change counters and starts the upkeep threads.
    pub fn open(self) -> Result<Embedded, Error> {
        let runtime = Runtime::open(&self.settings, self.clock.clone()).map_err(|e| Error::Embedded {
            code: keygate_domain::ErrorCode::ServiceUnavailable.as_str(),
            message: keygate_domain::redact_in(&e.to_string(), &self.settings.database_url),
        })?;
        runtime.sync_counters().map_err(rbac_error)?;
        let runtime = Arc::new(runtime);
        let upkeep = keygate_runtime::spawn_upkeep(Arc::downgrade(&runtime));
        let limiter = self.workspace_id.as_ref().map(|ws| {
            let may = ["ratelimit.*.limit", "ratelimit.*.create_namespace"];
            Arc::new(Principal::new(EMBEDDED_ACTOR.into(), ws.clone(), may.map(String::from)))
        });
        Ok(Embedded {
            inner: Arc::new(Inner {
                runtime,
                limiter,
                workspace_found: AtomicBool::new(false),
                workspace_id: self.workspace_id,
                api_id: self.api_id,
                upkeep,
            }),
        })
    }
}

impl Embedded {
    /// The embedded keygate on `database_url` (`sqlite://<file>` or `postgres://...`), with
    /// the defaults: in-process counters, analytics on.
    pub fn open(database_url: impl Into<String>) -> Result<Self, Error> {
        Self::builder(database_url).open()
    }

    /// A builder, to add Redis, a scope or other settings.
    pub fn builder(database_url: impl Into<String>) -> EmbeddedBuilder {
        let mut settings = RuntimeSettings::new(database_url);
        settings.change_probe = Some(CHANGE_PROBE_EVERY);
        EmbeddedBuilder { settings, clock: Arc::new(SystemClock), workspace_id: None, api_id: None }
    }

    /// The RBAC service itself, for what the verifier does not cover (creating keys,
    /// permissions, roles...; see `keygate-rbac`).
    pub fn rbac(&self) -> &RbacService<SqlStore> {
        &self.inner.runtime.rbac
    }

    /// The whole in-process keygate: its `rbac`, `usage` (credits) and `analytics`
    /// services (see `keygate-runtime`).
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// `keys.verifyKey`, in process: from the cache without I/O when it can, else on the
    /// blocking pool; answered once its credit spend is committed. Bad input (a permission
    /// query that does not parse, a cost out of bounds) is [`Error::Embedded`] with code
    /// `BAD_REQUEST`.
    pub async fn verify(&self, req: &VerifyKeyRequest) -> Result<VerifyKeyResult, Error> {
        let ip = match &req.ip {
            Some(ip) => Some(ip.parse().map_err(|_| Error::Embedded {
                code: "BAD_REQUEST",
                message: "ip: must be an IPv4 or IPv6 address".into(),
            })?),
            None => None,
        };
        Ok(result(&self.verification_prepared(&req.key, &PreparedVerify::new(req)?, ip).await?))
    }

    /// [`Self::verify`] of `key` with what a request asks read once beforehand
    /// ([`PreparedVerify::new`]): a middleware asks the same of every request, so its
    /// permission query is parsed once, not per request.
    pub async fn verify_prepared(&self, key: &str, asks: &PreparedVerify) -> Result<VerifyKeyResult, Error> {
        Ok(result(&self.verification_prepared(key, asks, None).await?))
    }

    /// [`Self::verify_prepared`] as keygate answers it (the guard converts it into a
    /// [`VerifyKeyResult`] only when a handler reads it).
    pub(crate) async fn verification_prepared(
        &self,
        key: &str,
        asks: &PreparedVerify,
        ip: Option<std::net::IpAddr>,
    ) -> Result<Verification, Error> {
        let inner = &self.inner;
        let call = keygate_runtime::VerifyCall {
            secret: key,
            principal: None,
            workspace_id: inner.workspace_id.as_deref(),
            api_id: inner.api_id.as_deref(),
            access: None,
            ip,
            migration: None,
            query: asks.query.as_ref(),
            usage: &asks.usage,
            tags: &asks.tags,
        };
        inner.runtime.verify(&Tokio, call).await.map_err(call_error)
    }
}

impl Embedded {
    /// `ratelimit.limit`, in process: may this caller make one more request? Decided as the
    /// server decides it, in the workspace's namespaces (a namespace named for the first
    /// time is created, its audit event by `embedded`), under their overrides; counted in
    /// analytics. Needs [`EmbeddedBuilder::workspace_id`]; without it, or with bounds the
    /// API refuses, [`Error::Embedded`] with code `BAD_REQUEST`. With Redis unreachable,
    /// code `SERVICE_UNAVAILABLE` (the server's setting to fail open is
    /// `RuntimeSettings::fail_open`).
    pub async fn limit(&self, req: &LimitRequest) -> Result<LimitResult, Error> {
        let Some(principal) = &self.inner.limiter else {
            return Err(bad_request(
                "rate limiting in process needs a workspace: EmbeddedBuilder::workspace_id",
            ));
        };
        let ask = limit_ask(req)?;
        if !self.inner.workspace_found.load(Ordering::Acquire) {
            let (runtime, ws) =
                (self.inner.runtime.clone(), self.inner.workspace_id.clone().unwrap_or_default());
            tokio::task::spawn_blocking(move || runtime.rbac.find_workspace(&ws))
                .await
                .map_err(|e| Error::Embedded {
                    code: keygate_domain::ErrorCode::InternalServerError.as_str(),
                    message: format!("the workspace's lookup did not finish: {e}"),
                })?
                .map_err(rbac_error)?;
            self.inner.workspace_found.store(true, Ordering::Release);
        }
        let limited = self.inner.runtime.limit(&Tokio, principal, ask).await.map_err(call_error)?;
        let d = limited.decision;
        Ok(LimitResult {
            success: d.success,
            limit: d.limit,
            remaining: d.remaining,
            reset: d.reset,
            override_id: limited.applied.map(|o| o.id.to_string()),
        })
    }
}

/// The actor of what [`Embedded::limit`] writes down (a namespace created on first use).
pub const EMBEDDED_ACTOR: &str = "embedded";

/// `req` checked as the server checks a `ratelimit.limit` body (docs/api-v2.md).
fn limit_ask(req: &LimitRequest) -> Result<keygate_runtime::LimitAsk<'_>, Error> {
    let numbers = (req.limit, req.duration, req.cost.unwrap_or(1));
    keygate_runtime::LimitAsk::checked(&req.namespace, &req.identifier, numbers, false)
        .map_err(|e| bad_request(e.to_string()))
}

/// tokio's blocking pool, where the runtime's hot paths read the store on a miss.
#[derive(Debug)]
struct Tokio;

impl Offload for Tokio {
    fn spawn_blocking(&self, job: Box<dyn FnOnce() + Send>) {
        // Detached: the runtime awaits the job's answer, not the handle.
        drop(tokio::task::spawn_blocking(job));
    }
}

fn bad_request(message: impl Into<String>) -> Error {
    Error::Embedded { code: keygate_domain::ErrorCode::BadRequest.as_str(), message: message.into() }
}

fn call_error(e: CallError) -> Error {
    Error::Embedded { code: e.code().as_str(), message: e.to_string() }
}

/// What a verification asks besides the key, read once: the permission query parsed, the
/// credit cost and rate limits as the usage service takes them, the tags
/// ([`Embedded::verify_prepared`]).
#[derive(Debug, Clone)]
pub struct PreparedVerify {
    query: Option<keygate_rbac::PermissionQuery>,
    usage: Usage,
    tags: Vec<String>,
}

impl PreparedVerify {
    /// `req`'s asks (its `key` is not kept). A permission query that does not parse is
    /// [`Error::Embedded`] with code `BAD_REQUEST`.
    pub fn new(req: &VerifyKeyRequest) -> Result<Self, Error> {
        let query = match req.permissions.as_deref() {
            Some(q) => Some(keygate_rbac::parse_permission_query(q).map_err(|e| Error::Embedded {
                code: keygate_domain::ErrorCode::BadRequest.as_str(),
                message: format!("permissions: {e}"),
            })?),
            None => None,
        };
        let usage = Usage {
            cost: req.credits.map(|c| c.cost),
            ratelimits: req
                .ratelimits
                .iter()
                .map(|r| LimitAsk {
                    name: r.name.clone(),
                    cost: r.cost,
                    limit: r.limit,
                    duration: r.duration,
                    if_present: false,
                })
                .collect(),
            check_only: false,
        };
        Ok(Self { query, usage, tags: req.tags.clone() })
    }
}

fn rbac_error(e: RbacError) -> Error {
    Error::Embedded { code: e.code().as_str(), message: e.to_string() }
}

/// A verification as `keys.verifyKey` answers it (NOT_FOUND says nothing else).
pub(crate) fn result(v: &Verification) -> VerifyKeyResult {
    let code = match v.code {
        keygate_rbac::VerifyCode::Valid => VerifyCode::Valid,
        keygate_rbac::VerifyCode::NotFound => VerifyCode::NotFound,
        keygate_rbac::VerifyCode::Disabled => VerifyCode::Disabled,
        keygate_rbac::VerifyCode::Expired => VerifyCode::Expired,
        keygate_rbac::VerifyCode::InsufficientPermissions => VerifyCode::InsufficientPermissions,
        keygate_rbac::VerifyCode::UsageExceeded => VerifyCode::UsageExceeded,
        keygate_rbac::VerifyCode::RateLimited => VerifyCode::RateLimited,
        keygate_rbac::VerifyCode::Forbidden => VerifyCode::Forbidden,
        #[allow(unreachable_patterns)]
        _ => VerifyCode::Unknown,
    };
    let Some(k) = v.key().filter(|_| code != VerifyCode::NotFound) else {
        return VerifyKeyResult::not_found();
    };
    let object = |text: Option<&str>| text.and_then(|m| serde_json::from_str(m).ok());
    VerifyKeyResult {
        valid: code == VerifyCode::Valid,
        code,
        meta: object(k.meta()),
        key_id: Some(k.id().to_string()),
        enabled: Some(k.enabled()),
        name: k.name().map(str::to_string),
        expires: k.expires(),
        permissions: v.permissions().iter().map(|p| p.to_string()).collect(),
        roles: v.roles().iter().map(|r| r.to_string()).collect(),
        credits: v.credits,
        ratelimits: v
            .ratelimits
            .iter()
            .map(|o| VerifyRatelimitResult {
                id: o.id.to_string(),
                name: o.name.to_string(),
                limit: o.limit,
                duration: o.duration,
                reset: o.reset,
                remaining: o.remaining,
                exceeded: o.exceeded,
                auto_apply: o.auto_apply,
            })
            .collect(),
        identity: v.identity().map(|i| Identity {
            meta: object(i.identity.meta.as_deref()).unwrap_or_default(),
            id: i.identity.id.clone(),
            external_id: i.identity.external_id.clone(),
            ratelimits: i
                .ratelimits
                .iter()
                .map(|r| RatelimitResponse {
                    id: r.id.clone(),
                    name: r.name.clone(),
                    limit: r.limit,
                    duration: r.duration,
                    auto_apply: r.auto_apply,
                    algorithm: r.algorithm.as_str().into(),
                })
                .collect(),
        }),
    }
}
