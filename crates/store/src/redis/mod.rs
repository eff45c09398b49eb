//! The shared rate-limit store: window counters in Redis, so that any number of keygate
//! instances draw on one budget per `(namespace, identifier, duration)` (contract §5.7, §7).
//!
//! # The decision, in Redis
//! A Lua script ([`decide.lua`](self::DECIDE)) runs decisions inside Redis, atomically (Redis
//! runs one script at a time), so the number of tokens passed in a window never exceeds
//! `limit` whatever the number of instances and connections. It is
//! [`keygate_ratelimit::decide`] restated over one counter (a test checks the two agree on
//! random sequences), applied to each request of a batch in order:
//!
//! ```text
//! used = GET key or 0
//! cost = 0:                 answer (used < limit, used)
//! cost <= limit - used:     used = INCRBY key cost; PEXPIRE key ttl; answer (true, used)
//! otherwise:                answer (false, used)          (a denial deducts nothing)
//! ```
//!
//! Before that, when the caller names the overrides epoch it loaded the namespace's
//! overrides under, the script compares it with `<prefix>{cc}:ov:<namespace id>` (0 when absent;
//! INCR'd by every override change after its commit) and answers "stale" without deciding
//! when they differ: an override changed on one instance applies to the next request on
//! every instance. Likewise for a [`CounterGuard`] (the server's: the caller's root key's
//! change counter, see `counters.rs`): when the counter or the counters' epoch differs from
//! what the caller read, the script answers "stale counter" without deciding, so a root key
//! revoked through one instance is refused at the next request on every instance.
//!
//! Lua numbers are doubles, exact up to 2^53; every operand is at most 2^53 - 1 (the
//! contract's bounds) and the comparison subtracts rather than adds, so nothing rounds.
//!
//! # Two ways in
//! * [`RedisStore::limit_batched`] (the server's hot path, `batch.rs`): asynchronous, on the
//!   caller's runtime; decisions that arrive while earlier ones are in flight go to Redis
//!   together, in one script call, in arrival order.
//! * [`RateLimitStore`] (synchronous, `conn.rs`): an r2d2 pool of blocking connections, for
//!   callers without a runtime and for everything that is not a decision (the overrides
//!   epoch, liveness, the change counters of `counters.rs`).
//!
//! # Keys
//! `<prefix>{<namespace id>:<duration>:<identifier>}:<window start>`: the window is part of
//! the key, so a new window starts from zero without any reset. The braces are a Redis
//! Cluster hash tag: every window of one budget lives in one slot. Keys are unambiguous:
//! namespace ids have no `:`, and the key ends with `}:` and the window's digits, so the
//! identifier is what lies between (a `}` or `:` inside it included). A key lives until its
//! window has ended plus [`EXPIRY_SLACK_MS`]: memory in Redis is one small string key per
//! budget used in the current window.
//!
//! "now" is the caller's clock (each instance's): instances must keep their clocks in sync
//! (NTP), as with any fixed window; an instance whose clock is off by `s` counts a request
//! in the neighbouring window during `s` around each window edge.
//!
//! # Failures
//! A connection that fails or times out is dropped, never reused (its reply stream may be
//! out of step); the call answers [`StoreError::Unavailable`] and had no effect that the
//! caller is told of. Waits are bounded: a connection takes at most `connect_timeout`, a
//! command at most `io_timeout`. Connections are made lazily: keygate starts while Redis is
//! down and answers 503 until it is back. After a call could not get a connection, calls
//! fail at once for [`BACKOFF`] instead of each waiting `connect_timeout` (one call per
//! period waits and probes), so an outage costs fast 503s, or fast passes when failing
//! open, rather than a second of latency per request.

mod algorithms;
mod async_conn;
mod batch;
mod conn;
mod counters;
mod credits;
mod deferred;
mod denials;
mod finished;
mod multi;
mod pushed;
mod script;

use algorithms::checked;
pub use batch::BatchStats;
use batch::Batcher;
use conn::{Outage, Pool, Target};
pub use credits::{IDLE_MS as CREDIT_IDLE_MS, SHARDS as CREDIT_SHARDS, shard_of as credit_shard};
pub use deferred::async_overshoot_bound;
use deferred::{Deferred, Local};
use denials::Denials;
pub use denials::MAX_EPOCH_AGE;
pub use finished::SETTLED_MS as SLIDING_SETTLED_MS;
use keygate_domain::{redact_in, redact_url};
use keygate_ratelimit::{
    Algorithm, BudgetKey, Checked, Decision, LimitRequest, RateLimitStore, StoreError, window_start,
};
pub(crate) use script::{Checks, decide_separately, run_script};
use script::{DECIDE, run_script_blocking};
use std::sync::Arc;
use std::time::Duration;

/// How long a window's key outlives the window (clock skew between instances).
pub const EXPIRY_SLACK_MS: u64 = 60_000;

/// How long calls fail fast after one found Redis unreachable.
pub const BACKOFF: Duration = Duration::from_millis(500);

/// Settings of the Redis connections.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// Largest number of open blocking connections (the pool that serves everything but the
    /// decisions; each server worker has one asynchronous connection of its own besides).
    pub max_size: u32,
    /// Longest wait for a connection (pool checkout or connect).
    pub connect_timeout: Duration,
    /// Longest wait for one command's reply.
    pub io_timeout: Duration,
    /// Put before every key (budgets, `{cc}:ov:<namespace id>` for the overrides epochs and
    /// `{cc}:<counter>` for the change counters), so
    /// that several deployments can share one Redis.
    pub key_prefix: String,
    /// Deny without a round trip what Redis would deny (see `denials.rs`).
    pub local_denials: bool,
    /// Lanes of the batched path (one asynchronous connection, queue and script call in
    /// flight each; a budget window's calls all take one lane). The server uses one per
    /// worker.
    pub lanes: usize,
    /// How often the tokens that `async: true` requests passed locally are sent to Redis
    /// (`deferred.rs`: the bound on over-admission grows with it).
    pub async_sync_interval: Duration,
    /// The URL names the seed nodes of a Redis Cluster (one or more, separated by commas).
    pub cluster: bool,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            max_size: 32,
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            key_prefix: "keygate:rl:".into(),
            local_denials: true,
            lanes: std::thread::available_parallelism().map_or(1, |n| n.get()),
            async_sync_interval: Duration::from_millis(10),
            cluster: false,
        }
    }
}

/// The URL could not be used (bad syntax, unsupported scheme). Reachability is not checked
/// at open.
#[derive(Debug, thiserror::Error)]
#[error("invalid Redis URL {url}: {reason}")]
pub struct RedisOpenError {
    url: String,
    reason: String,
}

/// The Redis rate-limit store.
pub struct RedisStore {
    /// On a Redis Cluster (the checks are read before the decisions, see `batch.rs`).
    cluster: bool,
    pool: Pool,
    batcher: Arc<Batcher>,
    outage: Arc<Outage>,
    /// The windows `async: true` requests decide locally.
    deferred: Arc<Deferred>,
    async_sync_interval: Duration,
    /// `None` when local denials are off.
    denials: Option<Denials>,
    /// The counts of sliding windows that have ended (`finished.rs`).
    finished: finished::Finished,
    script: redis::Script,
    /// The sliding windows' and token buckets' give-back script (`algorithms.rs`).
    algorithm_script: redis::Script,
    /// The all-or-nothing script of `multi.rs` (hashed once).
    multi_script: redis::Script,
    give_back_script: redis::Script,
    /// The change counters' read and publish scripts (`counters.rs`).
    counter_scripts: (redis::Script, redis::Script),
    /// The credit counters' scripts (`credits.rs`).
    credit_scripts: credits::CreditScripts,
    /// Change counters announced by writers (`pushed.rs`).
    pushed: Arc<pushed::Pushed>,
    prefix: String,
    location: String,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("location", &self.location).finish_non_exhaustive()
    }
}

/// One decision as the script takes it.
#[derive(Debug)]
pub(crate) struct Call {
    key: Vec<u8>,
    namespace_id: Arc<String>,
    /// The overrides epoch the caller decided under; `None`: no check.
    epoch: Option<u64>,
    /// A change counter that must still hold the caller's value.
    guard: Option<Guard>,
    limit: u64,
    cost: u64,
    /// How long the key is kept (ms): until its window ends, plus [`EXPIRY_SLACK_MS`].
    ttl: u64,
    /// An unconditional add of `cost` tokens that async requests passed (`deferred.rs`).
    flush: bool,
    /// A sync decision counted as in flight on its window's async state.
    deferred: bool,
    /// A sliding window's or a bucket's decision (`None`: a fixed window's).
    algorithm: Option<algorithms::AlgorithmArgs>,
}

impl Call {
    /// Adds `tokens` to the window `key` (tokens async requests passed).
    fn flush(key: Vec<u8>, namespace_id: Arc<String>, tokens: u64, ttl: u64) -> Self {
        let (epoch, guard, limit, cost, flush, deferred) = (None, None, 0, tokens, true, false);
        Self { key, namespace_id, epoch, guard, limit, cost, ttl, flush, deferred, algorithm: None }
    }
}

/// A change counter a decision is made under: its key, and the counters' epoch and the
/// counter's value the caller read.
#[derive(Debug)]
pub(crate) struct Guard {
    key: String,
    epoch: u64,
    value: u64,
}

/// A change counter that must be unchanged for a decision to be made: the name
/// (`keygate_rbac::Scope::name`), and the counters' epoch and its value as the caller read
/// them (a `keygate_rbac::Tag`'s `source` and value). The server guards each decision with
/// the caller's root key, so that a revocation through any instance applies to the next
/// request.
#[derive(Debug, Clone, Copy)]
pub struct CounterGuard<'a> {
    pub name: &'a str,
    pub epoch: u64,
    pub value: u64,
}

/// What the script answered for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Decided: passed or not, and the window's count after the decision.
    Decided {
        success: bool,
        used: u64,
    },
    /// A sliding window's or a bucket's decision: passed or not, and the two numbers its
    /// state is read from (`decide.lua`).
    Weighed {
        success: bool,
        x: u64,
        y: u64,
    },
    Stale,
    StaleCounter,
}

fn invalid(url: &str, location: &str, e: &redis::RedisError) -> RedisOpenError {
    RedisOpenError { url: location.to_string(), reason: redact_in(&e.to_string(), url) }
}

impl RedisStore {
    /// A store for `url` (`redis://[user:password@]host[:port][/db]`, `rediss://`, or
    /// `redis+unix:///path`; with [`RedisSettings::cluster`], the seed nodes of a Redis
    /// Cluster separated by commas). Connects lazily.
    pub fn open(url: &str, settings: RedisSettings) -> Result<Self, RedisOpenError> {
        let location = redact_url(url);
        let target =
            Target::open(url, settings.cluster, &settings).map_err(|e| invalid(url, &location, &e))?;
        let outage = Arc::new(Outage::default());
        let script = redis::Script::new(DECIDE);
        let deferred = Arc::new(Deferred::default());
        // A cluster announces on every node: the first seed's is as good as any.
        let first = url.split(',').map(str::trim).find(|u| !u.is_empty()).unwrap_or(url);
        let subscriber = redis::Client::open(first).map_err(|e| invalid(url, &location, &e))?;
        Ok(Self {
            cluster: target.is_cluster(),
            pool: Pool::new(target.clone(), &settings, outage.clone()),
            batcher: Arc::new(Batcher::new(
                target,
                &settings,
                outage.clone(),
                script.clone(),
                redis::Script::new(credits::SPEND),
                deferred.clone(),
            )),
            outage,
            deferred,
            async_sync_interval: settings.async_sync_interval,
            denials: settings.local_denials.then(Denials::default),
            finished: finished::Finished::default(),
            script,
            algorithm_script: redis::Script::new(algorithms::GIVE_BACK),
            multi_script: redis::Script::new(multi::MULTI),
            give_back_script: redis::Script::new(multi::GIVE_BACK),
            counter_scripts: (redis::Script::new(counters::READ), redis::Script::new(counters::PUBLISH)),
            credit_scripts: Default::default(),
            pushed: pushed::Pushed::subscribe(subscriber, &settings.key_prefix),
            prefix: settings.key_prefix,
            location,
        })
    }

    /// The URL without credentials, for logs.
    pub fn display_location(&self) -> &str {
        &self.location
    }

    fn key(&self, key: &BudgetKey<'_>, start: u64) -> Vec<u8> {
        let mut k =
            Vec::with_capacity(self.prefix.len() + key.namespace_id.len() + key.identifier.len() + 48);
        k.extend_from_slice(self.prefix.as_bytes());
        k.push(b'{');
        k.extend_from_slice(key.namespace_id.as_bytes());
        k.push(b':');
        k.extend_from_slice(itoa::Buffer::new().format(key.duration).as_bytes());
        k.push(b':');
        k.extend_from_slice(key.identifier.as_bytes());
        k.extend_from_slice(b"}:");
        k.extend_from_slice(itoa::Buffer::new().format(start).as_bytes());
        k
    }
}

/// `<prefix>{cc}:ov:<namespace id>`: the namespace's overrides epoch, in the change
/// counters' slot (a Redis Cluster reads a batch's checks from one slot, see `batch.rs`).
fn epoch_key(prefix: &str, namespace_id: &str) -> String {
    format!("{prefix}{{cc}}:ov:{namespace_id}")
}

/// `<prefix>{cc}:epoch`: the change counters' epoch (`counters.rs`), in their slot.
fn counters_epoch_key(prefix: &str) -> String {
    format!("{prefix}{{cc}}:epoch")
}

impl RedisStore {
    /// The script call for one decision, and the start of its window.
    fn call(
        &self,
        key: &BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        epoch: Option<u64>,
        guard: Option<CounterGuard<'_>>,
    ) -> (Call, u64) {
        let duration = req.duration.max(1);
        let start = window_start(now_ms, duration);
        let reset = start.saturating_add(duration);
        let call = Call {
            key: self.key(key, start),
            namespace_id: key.namespace_id.clone(),
            epoch,
            guard: guard.map(|g| Guard { key: self.counter_key(g.name), epoch: g.epoch, value: g.value }),
            limit: req.limit,
            cost: req.cost,
            ttl: reset - now_ms + EXPIRY_SLACK_MS,
            flush: false,
            deferred: false,
            algorithm: None,
        };
        (call, start)
    }

    /// The decision, sent to Redis together with the other decisions this thread asks for
    /// while earlier ones are in flight (see `batch.rs`). Runs on the caller's tokio
    /// runtime. `overrides_epoch`: as in [`RateLimitStore::limit_if_current`]; `None`
    /// decides without that check. `guard`: a change counter that must still hold the
    /// caller's value, checked in the same atomic step ([`Checked::StaleCounter`] when it
    /// does not); a local denial (see `denials.rs`) does not check it, as it grants nothing.
    pub async fn limit_batched(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: Option<u64>,
        guard: Option<CounterGuard<'_>>,
    ) -> Result<Checked, StoreError> {
        // The request's wait for its batch's script call (queued behind the calls in
        // flight, then the round trip): one call serves many requests, so each has a span
        // for its own wait rather than the call's.
        let span = keygate_domain::trace::child_span(|| {
            tracing::info_span!("redis batch", otel.kind = "client", db.system.name = "redis")
        });
        if key.algorithm != Algorithm::Fixed {
            // Neither local denials nor async state: those follow fixed windows' counts.
            let call = self.algorithm_call(&key, req, now_ms, overrides_epoch, guard);
            let (shape, lesson) = (call.algorithm.as_ref().map(|a| a.shape), Self::lesson(&call));
            let (_, answer) = self.batcher.enqueue(call)?;
            let answer = tracing::Instrument::instrument(answer, span)
                .await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("Redis: decision dropped".into())))?;
            self.learn(lesson, shape, &answer);
            return Ok(checked(req, window_start(now_ms, req.duration.max(1)), shape, answer));
        }
        if let Some(d) = self.denials.as_ref().and_then(|c| c.deny(key, req, now_ms, overrides_epoch)) {
            return Ok(Checked::Decided(d));
        }
        let (call, start) = self.call(&key, req, now_ms, overrides_epoch, guard);
        let answer = self.queue_sync(call)?;
        let answer = tracing::Instrument::instrument(answer, span)
            .await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("Redis: decision dropped".into())))?;
        if let Some(denials) = &self.denials {
            denials.record(key, start, req, overrides_epoch, answer);
        }
        Ok(checked(req, start, None, answer))
    }

    /// Queues a sync decision, under its window's lock in the async state (`deferred.rs`)
    /// whether or not that state knows the window: an async request that starts tracking
    /// the window meanwhile takes the lock after this call is queued, so the first answer
    /// it learns the window from comes after this decision. When the state knows the
    /// window, its pending tokens are queued first (so Redis decides with them counted) and
    /// the decision is counted as in flight there.
    fn queue_sync(&self, mut call: Call) -> Result<batch::Pending, StoreError> {
        let mut shard = self.deferred.shard_of(&call.key);
        if !shard.contains_key(call.key.as_slice()) {
            return Ok(self.batcher.enqueue(call)?.1);
        }
        if let Some((tokens, ttl)) = Deferred::take_pending(&mut shard, &call.key) {
            let flush = Call::flush(call.key.clone(), call.namespace_id.clone(), tokens, ttl);
            match self.batcher.enqueue_unanswered(flush) {
                Ok(seq) => self.deferred.flush_queued(&mut shard, &call.key, seq, tokens),
                Err(_) => self.deferred.flush_refused(&mut shard, &call.key, tokens),
            }
        }
        call.deferred = true;
        let key = call.key.clone();
        let (_, answer) = self.batcher.enqueue(call)?;
        Deferred::sync_queued(&mut shard, &key);
        Ok(answer)
    }

    /// An `async: true` decision (contract §5.8) from this instance's state, at once, when
    /// it knows the window (see `deferred.rs`); the tokens it passes are sent to Redis in
    /// the background, every `async_sync_interval`. `None`: ask Redis as for a sync
    /// decision ([`Self::limit_batched`]; the answer then teaches this state the window),
    /// as when Redis is unreachable. Needs a tokio runtime.
    pub fn limit_async(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Option<Decision> {
        if self.outage.is_down() {
            return None;
        }
        let start = window_start(now_ms, req.duration.max(1));
        match self.deferred.decide(&self.key(&key, start), start, req, now_ms) {
            Local::AskRedis => None,
            Local::Decided { decision, flush } => {
                if flush && !self.deferred.flushing.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    let (batcher, deferred) = (self.batcher.clone(), self.deferred.clone());
                    tokio::spawn(flush_loop(batcher, deferred, self.async_sync_interval));
                }
                Some(decision)
            }
        }
    }

    /// The batched path's script calls and decisions so far.
    pub fn batch_stats(&self) -> BatchStats {
        let [announced, stale] = &self.pushed.stats;
        BatchStats {
            pushed_changes: announced.load(std::sync::atomic::Ordering::Relaxed),
            pushed_stale: stale.load(std::sync::atomic::Ordering::Relaxed),
            ..self.batcher.stats()
        }
    }

    /// The decision on a blocking connection of the pool.
    fn limit_blocking(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: Option<u64>,
    ) -> Result<Checked, StoreError> {
        let (call, start) = match key.algorithm {
            Algorithm::Fixed => self.call(&key, req, now_ms, overrides_epoch, None),
            _ => (
                self.algorithm_call(&key, req, now_ms, overrides_epoch, None),
                window_start(now_ms, req.duration.max(1)),
            ),
        };
        let (shape, lesson) = (call.algorithm.as_ref().map(|a| a.shape), Self::lesson(&call));
        let calls = [&call];
        let answers = self.pool.with_conn(|c| {
            if !self.cluster {
                return run_script_blocking(c, &self.script, &self.prefix, &calls, true);
            }
            // A cluster: the check first, then the decision in the budget's slot.
            let checks = Checks::of(&calls);
            let keys = checks.keys(&self.prefix);
            let values: Vec<Option<u64>> =
                if keys.is_empty() { Vec::new() } else { redis::cmd("MGET").arg(keys).query(c)? };
            match decide_separately(&calls, &checks, &values) {
                (answers, groups) if groups.is_empty() => Ok(answers.into_iter().flatten().collect()),
                _ => run_script_blocking(c, &self.script, &self.prefix, &calls, false),
            }
        })?;
        let answer = answers.into_iter().next().unwrap_or(Answer::Stale);
        self.learn(lesson, shape, &answer);
        Ok(checked(req, start, shape, answer))
    }
}

/// Most flush calls unanswered at once: a share of the lanes' queues (16k each), so that a
/// burst of async windows (one tenant's, say) or a slow Redis never fills the queues that
/// sync decisions wait in; the rest wait for a later flush.
const MAX_FLUSH: usize = 4 * 1024;

/// Sends the tokens async requests passed (`deferred.rs`) every `interval` until none are
/// left; [`Deferred::flushing`] is set by whoever spawned it. Nobody waits for these
/// answers: the batcher applies each (`Deferred::observe`), and puts the tokens of a failed
/// call back into `pending`.
async fn flush_loop(batcher: Arc<Batcher>, deferred: Arc<Deferred>, interval: Duration) {
    let empty = Arc::new(String::new());
    loop {
        tokio::time::sleep(interval).await;
        let keys = deferred.take_dirty(MAX_FLUSH);
        if keys.is_empty() {
            match deferred.flush_goes_on() {
                true => continue,
                false => return,
            }
        }
        for key in keys {
            let mut shard = deferred.shard_of(&key);
            let Some((tokens, ttl)) = Deferred::take_pending(&mut shard, &key) else { continue };
            let call = Call::flush(key.to_vec(), empty.clone(), tokens, ttl);
            match batcher.enqueue_unanswered(call) {
                Ok(seq) => deferred.flush_queued(&mut shard, &key, seq, tokens),
                Err(_) => deferred.flush_refused(&mut shard, &key, tokens),
            }
        }
    }
}

impl RateLimitStore for RedisStore {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError> {
        match self.limit_blocking(key, req, now_ms, None)? {
            Checked::Decided(d) => Ok(d),
            Checked::StaleOverrides | Checked::StaleCounter => {
                Err(StoreError::Unavailable("Redis: unexpected script answer".into()))
            }
        }
    }

    fn limit_if_current(
        &self,
        key: BudgetKey<'_>,
        req: LimitRequest,
        now_ms: u64,
        overrides_epoch: u64,
    ) -> Result<Checked, StoreError> {
        self.limit_blocking(key, req, now_ms, Some(overrides_epoch))
    }

    fn limit_all(
        &self,
        entries: &[keygate_ratelimit::Entry<'_>],
        epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<keygate_ratelimit::AllOrNothing>, StoreError> {
        self.limit_all_blocking(entries, epochs, now_ms)
    }

    fn give_back(&self, entries: &[keygate_ratelimit::Entry<'_>], now_ms: u64) -> Result<(), StoreError> {
        self.give_back_blocking(entries, now_ms)
    }

    fn overrides_epoch(&self, namespace_id: &str) -> Result<u64, StoreError> {
        let k = epoch_key(&self.prefix, namespace_id);
        let epoch: Option<u64> = self.pool.with_conn(|c| redis::cmd("GET").arg(k).query(c))?;
        Ok(epoch.unwrap_or(0))
    }

    fn bump_overrides_epoch(&self, namespace_id: &str) -> Result<(), StoreError> {
        let k = epoch_key(&self.prefix, namespace_id);
        self.pool.with_conn(|c| redis::cmd("INCR").arg(k).query::<u64>(c)).map(drop)
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.pool.with_conn(|c| redis::cmd("PING").query::<()>(c))
    }

    /// Drops the local denials of ended windows (Redis expires its keys itself).
    fn sweep(&self, now_ms: u64) {
        if let Some(denials) = &self.denials {
            denials.sweep(now_ms);
        }
        self.deferred.sweep(now_ms);
    }
}
