//! Envoy's global rate-limit service (`envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit`), with envoyproxy/ratelimit's configuration ([`config`]) and its
//! matching rules, deciding through keygate's rate limits (docs/gateways.md, *Envoy's
//! global rate limit*):
//!
//! - A call authenticates with a root key in its metadata (`x-keygate-root-key`, Envoy's
//!   `grpc_service.initial_metadata`), which needs `ratelimit.*.limit` (or the domain's).
//! - Each domain is the keygate namespace of the same name in that root key's workspace;
//!   a descriptor's budget is the identifier of its entries in order, `key=value` joined
//!   by `|` (`generic_key=docs|user=42`). So its counters are exact across instances like
//!   every other limit, and a `ratelimit.setOverride` on that namespace and identifier
//!   (or a pattern over it) changes its limit on the next request, on every instance.
//! - The descriptors' limits are taken all or nothing: an OVER_LIMIT answer consumes no
//!   budget (envoyproxy/ratelimit counts the others' hits anyway). On a Redis Cluster,
//!   where budgets in different slots cannot be taken at once, they are taken one by one
//!   (envoyproxy/ratelimit's way). A `shadow_mode` rule is decided on its own and never
//!   makes the answer OVER_LIMIT.
//! - Each decision counts in `keygate_envoy_ratelimit_decisions_total{domain, descriptor,
//!   result}`: `descriptor` is the rule's name for it (`key_value` where the rule names the
//!   value, `key` where it does not, the request's value only where `detailed_metric` or
//!   `value_to_metric` asks), so the series are bounded by the configuration.
//! - A descriptor's `limit` (the request's override) replaces its rule's numbers;
//!   `hits_addend` (the descriptor's, else the request's, 0 meaning 1) is the cost. An
//!   `unlimited` rule answers OK with `limit_remaining` at its maximum, without a budget;
//!   `requests_per_unit: 0` answers OVER_LIMIT (then nothing is taken from the others).
//!   `is_negative_hits` (a refund) is refused with INVALID_ARGUMENT.

pub mod config;

use actix_web::web;
use config::{Allowance, RlsConfig, Rule, Unit};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use keygate_domain::{ErrorCode, MAX_IDENTIFIER_CHARS};
use keygate_http::AppState;
use keygate_ratelimit::{LimitRequest, StoreError};
use keygate_runtime::{CallError, LimitAsk};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The most descriptors one call may carry.
pub const MAX_DESCRIPTORS: usize = 100;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 32;

/// The `RateLimitService`.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    state: web::Data<AppState>,
    config: Arc<parking_lot::RwLock<Arc<RlsConfig>>>,
}

impl RateLimiter {
    pub fn new(state: web::Data<AppState>, config: Arc<parking_lot::RwLock<Arc<RlsConfig>>>) -> Self {
        Self { state, config }
    }
}

/// What one descriptor asks, once matched.
struct Asked {
    identifier: String,
    rule: Option<Rule>,
    hits: u64,
    /// The metric's name for it (a matched rule's; a request's own limit: its keys).
    metric: String,
}

fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message.into())
}

fn status_of(e: &CallError) -> Status {
    let message = e.to_string();
    match e.code() {
        ErrorCode::Unauthorized => Status::unauthenticated(message),
        ErrorCode::Forbidden | ErrorCode::InsufficientPermissions => Status::permission_denied(message),
        ErrorCode::BadRequest => Status::invalid_argument(message),
        ErrorCode::NotFound => Status::not_found(message),
        ErrorCode::ServiceUnavailable => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

/// The descriptors of `req` matched against `domain`'s rules (none when the domain is not
/// configured), checked.
fn asked(config: &RlsConfig, req: &RateLimitRequest) -> Result<Vec<Asked>, Status> {
    if req.domain.is_empty() {
        return Err(invalid("domain: must not be empty"));
    }
    if req.descriptors.is_empty() || req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(invalid(format!("descriptors: 1 to {MAX_DESCRIPTORS} are allowed")));
    }
    let domain = config.domains.get(&req.domain);
    let default_hits = if req.hits_addend == 0 { 1 } else { u64::from(req.hits_addend) };
    req.descriptors.iter().enumerate().map(|(i, d)| asked_one(i, d, domain, default_hits)).collect()
}

fn asked_one(
    i: usize,
    d: &RateLimitDescriptor,
    domain: Option<&config::Domain>,
    default_hits: u64,
) -> Result<Asked, Status> {
    if d.entries.is_empty() || d.entries.len() > MAX_ENTRIES {
        return Err(invalid(format!("descriptors[{i}].entries: 1 to {MAX_ENTRIES} are allowed")));
    }
    if d.entries.iter().any(|e| e.key.is_empty()) {
        return Err(invalid(format!("descriptors[{i}].entries: a key must not be empty")));
    }
    if d.is_negative_hits {
        // A refund would put back what another call may have been refused for; keygate's
        // budgets take nothing from a refused call instead. Refused, never charged.
        return Err(invalid(format!(
            "descriptors[{i}].is_negative_hits: refunds are not supported (a call answered OVER_LIMIT takes nothing)"
        )));
    }
    let entries: Vec<(&str, &str)> = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect();
    let matched = domain.and_then(|dm| dm.rule(&entries));
    let values: Vec<&str> = match &matched {
        Some(m) => m.values.clone(),
        None => entries.iter().map(|e| e.1).collect(),
    };
    let identifier =
        entries.iter().zip(values).map(|((k, _), v)| format!("{k}={v}")).collect::<Vec<_>>().join("|");
    if identifier.chars().count() > MAX_IDENTIFIER_CHARS {
        return Err(invalid(format!(
            "descriptors[{i}]: its entries make an identifier longer than {MAX_IDENTIFIER_CHARS} characters"
        )));
    }
    let metric = match &matched {
        Some(m) => m.metric.clone(),
        None => entries.iter().map(|e| e.0).collect::<Vec<_>>().join("."),
    };
    let mut rule = matched.map(|m| m.rule.clone());
    if let Some(o) = &d.limit {
        let unit = Unit::from_proto(o.unit)
            .ok_or_else(|| invalid(format!("descriptors[{i}].limit.unit: unknown")))?;
        if o.requests_per_unit == 0 {
            return Err(invalid(format!("descriptors[{i}].limit.requests_per_unit: must be at least 1")));
        }
        let allowance = Allowance::Per { requests: u64::from(o.requests_per_unit), unit };
        rule = Some(match rule {
            Some(r) => Rule { allowance, ..r },
            None => {
                Rule { allowance, name: None, replaces: Vec::new(), shadow: false, detailed_metric: false }
            }
        });
    }
    let hits = match &d.hits_addend {
        Some(h) if h.value > 0 => h.value,
        _ => default_hits,
    };
    if hits > keygate_domain::MAX_SAFE_INTEGER {
        return Err(invalid(format!("descriptors[{i}].hits_addend: at most 2^53-1")));
    }
    Ok(Asked { identifier, rule, hits, metric })
}

/// A descriptor's status without a limit.
fn no_limit() -> DescriptorStatus {
    DescriptorStatus { code: Code::Ok as i32, ..Default::default() }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let (metadata, _, req) = request.into_parts();
        let root = match metadata.get_all("x-keygate-root-key").iter().collect::<Vec<_>>()[..] {
            [one] => {
                one.to_str().map_err(|_| Status::unauthenticated("x-keygate-root-key: not valid text"))?
            }
            [] => {
                return Err(Status::unauthenticated("the call must carry a root key in x-keygate-root-key"));
            }
            _ => return Err(invalid("x-keygate-root-key: sent more than once")),
        };
        let config = self.config.read().clone();
        let mut asked = asked(&config, &req)?;
        // A rule another matched rule replaces does not apply.
        let replaced: Vec<String> =
            asked.iter().filter_map(|a| a.rule.as_ref()).flat_map(|r| r.replaces.iter().cloned()).collect();
        for a in &mut asked {
            if a.rule.as_ref().is_some_and(|r| r.name.as_ref().is_some_and(|n| replaced.contains(n))) {
                a.rule = None;
            }
        }
        let state = &self.state;
        let principal =
            state.runtime.authenticate(state.get_ref(), root.trim()).await.map_err(|e| status_of(&e))?;

        let mut statuses: Vec<DescriptorStatus> = asked.iter().map(|_| no_limit()).collect();
        // The shadow rules that were over (answered OK).
        let mut shadowed = vec![false; asked.len()];
        // A rule allowing nothing refuses the call: the others are read, not taken.
        let blocked = asked.iter().any(|a| {
            matches!(&a.rule, Some(Rule { allowance: Allowance::Per { requests: 0, .. }, shadow: false, .. }))
        });
        // The enforced rules all or nothing; each shadow rule on its own.
        let (mut enforced, mut asks) = (Vec::new(), Vec::new());
        for (i, a) in asked.iter().enumerate() {
            let (requests, unit, shadow) = match &a.rule {
                None => continue,
                Some(Rule { allowance: Allowance::Unlimited, .. }) => {
                    statuses[i].limit_remaining = u32::MAX;
                    continue;
                }
                Some(Rule { allowance: Allowance::Per { requests, unit }, shadow, .. }) => {
                    (*requests, *unit, *shadow)
                }
            };
            if requests == 0 {
                statuses[i] = zero(a, unit, shadow);
                shadowed[i] = shadow;
                continue;
            }
            let mut ask = ask_of(&req.domain, a, requests, unit);
            if blocked && !shadow {
                ask.request.cost = 0;
            }
            match shadow {
                false => {
                    enforced.push((i, unit));
                    asks.push(ask);
                }
                true => {
                    let limited = state
                        .runtime
                        .limit(state.get_ref(), &principal, ask)
                        .await
                        .map_err(|e| status_of(&e))?;
                    statuses[i] = status(a, &limited.decision, unit, state.clock.now_ms(), true);
                    shadowed[i] = !limited.decision.success;
                }
            }
        }
        if let [one] = asks[..] {
            // One budget: the single decision's path (inline on the in-process store,
            // batched on Redis), as v1's `ratelimits.limit` takes.
            let limited =
                state.runtime.limit(state.get_ref(), &principal, one).await.map_err(|e| status_of(&e))?;
            statuses[enforced[0].0] =
                status(&asked[enforced[0].0], &limited.decision, enforced[0].1, state.clock.now_ms(), false);
        } else if !asks.is_empty() {
            let decisions = match state.runtime.limit_all(state.get_ref(), &principal, &asks).await {
                Ok(all) => all.entries.into_iter().map(|l| l.decision).collect::<Vec<_>>(),
                // A Redis Cluster, budgets in different slots: one by one.
                Err(CallError::Limiter(StoreError::CannotAtomically(_))) => {
                    let mut one_by_one = Vec::with_capacity(asks.len());
                    for ask in &asks {
                        let limited = state
                            .runtime
                            .limit(state.get_ref(), &principal, *ask)
                            .await
                            .map_err(|e| status_of(&e))?;
                        one_by_one.push(limited.decision);
                    }
                    one_by_one
                }
                Err(e) => return Err(status_of(&e)),
            };
            let now = state.clock.now_ms();
            // Each descriptor answers its own decision; when one is over, none was taken
            // (an entry that fit says OK, its budget as it was).
            for ((i, unit), d) in enforced.into_iter().zip(&decisions) {
                statuses[i] = status(&asked[i], d, unit, now, false);
            }
        }
        for ((a, s), shadowed) in asked.iter().zip(&statuses).zip(shadowed) {
            if a.rule.is_none() {
                continue;
            }
            let result = match (s.code == Code::OverLimit as i32, shadowed) {
                (true, _) => "over_limit",
                (false, true) => "shadow_mode",
                (false, false) => "within_limit",
            };
            metrics::counter!(
                "keygate_envoy_ratelimit_decisions_total",
                "domain" => req.domain.clone(),
                "descriptor" => a.metric.clone(),
                "result" => result,
            )
            .increment(1);
        }
        let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
        Ok(Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..Default::default()
        }))
    }
}

/// The ask of `a` in `domain`'s namespace.
fn ask_of<'a>(domain: &'a str, a: &'a Asked, requests: u64, unit: Unit) -> LimitAsk<'a> {
    LimitAsk {
        namespace: domain,
        identifier: &a.identifier,
        request: LimitRequest { limit: requests, duration: unit.millis(), cost: a.hits },
        is_async: false,
    }
}

/// The status of a rule allowing nothing: OVER_LIMIT (OK in shadow mode), no budget read.
fn zero(a: &Asked, unit: Unit, shadow: bool) -> DescriptorStatus {
    DescriptorStatus {
        code: if shadow { Code::Ok } else { Code::OverLimit } as i32,
        current_limit: Some(RateLimit {
            name: a.rule.as_ref().and_then(|r| r.name.clone()).unwrap_or_default(),
            requests_per_unit: 0,
            unit: unit.proto(),
        }),
        ..Default::default()
    }
}

/// A decided descriptor's status (a shadow rule's never OVER_LIMIT).
fn status(
    a: &Asked,
    d: &keygate_ratelimit::Decision,
    unit: Unit,
    now: u64,
    shadow: bool,
) -> DescriptorStatus {
    let over = !d.success && !shadow;
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(RateLimit {
            name: a.rule.as_ref().and_then(|r| r.name.clone()).unwrap_or_default(),
            requests_per_unit: u32::try_from(d.limit).unwrap_or(u32::MAX),
            unit: unit.proto(),
        }),
        limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: i64::try_from(d.reset.saturating_sub(now) / 1000).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.reset.saturating_sub(now) % 1000 * 1_000_000).unwrap_or(0),
        }),
        ..Default::default()
    }
}
