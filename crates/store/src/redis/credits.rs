//! Credit counters in Redis (`keygate_usage::SharedCredits`, API-v2.md §13.5 scale-out):
//! each key's live counter, spent by one script call, written behind to the key's row by
//! the service (`keygate_usage::ledger::shared` says how the pieces fit together).
//!
//! Keys, in [`SHARDS`] shards (a key id's CRC16, as Redis Cluster hashes, modulo
//! [`SHARDS`]); the shard is the hash tag, so a counter, its lock and its shard's set of
//! changed counters are in one slot and one script reaches them together:
//! - `<prefix>{cr<shard>}:k:<key id>`: a hash: `r` remaining, `l` last refill (empty:
//!   never), `v` the row's credit version it was loaded from, `n` its change number; or
//!   `u` = 1 and `v` (the key has no credits since the update of that version). Two marks
//!   beside, so that a spend finds them in the fields it reads anyway: `x` = 1 while an
//!   update's lock may be held (set by the lock; the lock's own key says whether it still
//!   is), `d` = 1 while the counter is in its shard's dirty set.
//! - `<prefix>{cr<shard>}:lock:<key id>`: an update's lock (its token, with a lease).
//! - `<prefix>{cr<shard>}:dirty`: the ids of the shard's counters changed since written
//!   behind; `<prefix>{cr<shard>}:lease`: the write-behind lease of the shard.
//!
//! A changed counter has no expiry until it is written behind; then it expires after
//! [`IDLE_MS`] without change (an idle key's counter is loaded from the row again). Redis
//! must not evict keys without expiry (`noeviction` or a `volatile-*` policy), as for the
//! change counters. Numbers are at most 2^53 − 1 (the contract's bound): Lua's doubles
//! hold them exactly, and they are written back as integers (`%.0f`).

use super::{EXPIRY_SLACK_MS, RedisStore};
use keygate_ratelimit::{Decision, window_start};
use keygate_rbac::StorageError;
use keygate_usage::{
    Installed, LiveCredits, Queued, SharedCredits, SharedSpend, SharedSpendAsk, WrittenBehind,
};
use std::time::Duration;

/// How many shards the counters are split in.
pub const SHARDS: u16 = 64;

/// How long a counter written behind lives without change.
pub const IDLE_MS: u64 = 24 * 3_600_000;

/// Credit spends with their keys' own limits, one or many per call (the layout is at its top).
pub(crate) const SPEND: &str = include_str!("spend.lua");

/// An update's lock: `KEYS` counter, lock; `ARGV` token, lease (ms). Answers `{}` when
/// another holds it, else `{'1'}` and the counter's `r, l, v, n` when it has credits. A
/// counter Redis holds is marked `x` (spends then look at the lock).
pub(crate) const LOCK: &str = r"
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {} end
local c = redis.call('HMGET', KEYS[1], 'r', 'l', 'v', 'n', 'u')
if c[1] or c[5] then redis.call('HSET', KEYS[1], 'x', '1') end
if not c[1] then return {'1'} end
return {'1', c[1], c[2], c[3], c[4]}
";

/// The end of an update's lock: `KEYS` counter, lock, dirty set; `ARGV` token, what to
/// install (0 nothing, 1 credits, 2 unlimited), key id, remaining, last refill, version,
/// change number, idle expiry. Answers 1, or 0 when the lock was not held any more.
pub(crate) const UNLOCK: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '0' then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' then
    redis.call('HSET', KEYS[1], 'r', ARGV[4], 'l', ARGV[5], 'v', ARGV[6], 'n', ARGV[7])
  else
    redis.call('HSET', KEYS[1], 'u', '1', 'v', ARGV[6])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  redis.call('SREM', KEYS[3], ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'x')
end
redis.call('DEL', KEYS[2])
return 1
";

/// The counters of `KEYS`: `{r, l, v, n}` each (nil fields when it has no credits).
pub(crate) const READ: &str = r"
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('HMGET', KEYS[i], 'r', 'l', 'v', 'n')
end
return out
";

/// The changed counters of a shard, under its lease: `KEYS` dirty set, lease; `ARGV`
/// token, lease (ms), most. Answers up to that many ids (the lease taken, or renewed), or
/// none when another holds the lease (or there are none: then the caller's lease ends).
pub(crate) const DIRTY: &str = r"
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return {} end
local ids = redis.call('SRANDMEMBER', KEYS[1], tonumber(ARGV[3]))
if #ids > 0 then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
elseif holder then
  redis.call('DEL', KEYS[2])
end
return ids
";

/// After a write-behind: `KEYS` dirty set, then the counters; `ARGV` the idle expiry, then
/// per counter its id, change number, version and outcome (`w` written, `s` superseded,
/// `g` gone from Redis). A written counter is clean unless it changed since; a superseded
/// one is removed if still of that version.
pub(crate) const SETTLE: &str = r"
for i = 2, #KEYS do
  local j = 2 + (i - 2) * 4
  local id, n, v, o = ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]
  local c = redis.call('HMGET', KEYS[i], 'n', 'v')
  if not c[1] then
    redis.call('SREM', KEYS[1], id)
  elseif c[2] == v then
    if o == 's' then
      redis.call('DEL', KEYS[i])
      redis.call('SREM', KEYS[1], id)
    elseif c[1] == n then
      redis.call('SREM', KEYS[1], id)
      redis.call('HDEL', KEYS[i], 'd')
      redis.call('PEXPIRE', KEYS[i], ARGV[1])
    end
  end
end
return #KEYS - 1
";

/// The scripts, hashed once.
pub(super) struct CreditScripts {
    spend: redis::Script,
    lock: redis::Script,
    unlock: redis::Script,
    read: redis::Script,
    dirty: redis::Script,
    settle: redis::Script,
}

impl Default for CreditScripts {
    fn default() -> Self {
        Self {
            spend: redis::Script::new(SPEND),
            lock: redis::Script::new(LOCK),
            unlock: redis::Script::new(UNLOCK),
            read: redis::Script::new(READ),
            dirty: redis::Script::new(DIRTY),
            settle: redis::Script::new(SETTLE),
        }
    }
}

/// The shard of a key's counter.
pub fn shard_of(key_id: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(key_id.as_bytes()) % SHARDS
}

impl RedisStore {
    fn credit_key(&self, shard: u16, kind: &str, key_id: &str) -> String {
        format!("{}{{cr{shard}}}:{kind}{key_id}", self.prefix)
    }

    fn counter_key_of(&self, key_id: &str) -> String {
        self.credit_key(shard_of(key_id), "k:", key_id)
    }

    fn run<T: redis::FromRedisValue>(&self, call: &redis::ScriptInvocation<'_>) -> Result<T, StorageError> {
        self.pool
            .with_conn(|c| super::script::invoke_loaded(call, c))
            .map_err(|e| StorageError::Unavailable(e.to_string()))
    }

    /// The counters of `key_ids` (all in one slot on a cluster).
    fn read_counters(&self, key_ids: &[&str]) -> Result<Vec<Option<LiveCredits>>, StorageError> {
        let mut call = self.credit_scripts.read.prepare_invoke();
        for id in key_ids {
            call.key(self.counter_key_of(id));
        }
        let rows: Vec<Vec<Option<String>>> = self.run(&call)?;
        if rows.len() != key_ids.len() {
            return Err(bad_answer());
        }
        Ok(rows.iter().map(|r| live(r)).collect())
    }
}

/// One spend for `spend.lua` (its layout is at its top): a script call carries one spend
/// or many ([`spends_call`]).
pub(super) struct SpendArgs {
    /// The keys it names, in order: its counter, the counter's lock, the shard's dirty set,
    /// each limit's window, then the assumed values' (the epoch first).
    keys: Vec<Vec<u8>>,
    /// Its counter's shard: on a cluster, the slot of all its keys.
    pub(super) shard: u16,
    key_id: String,
    cost: u64,
    refill: Option<keygate_usage::SharedRefill>,
    load: Option<LiveCredits>,
    /// Per limit: limit, cost, the window key's TTL (ms).
    limits: Vec<[u64; 3]>,
    /// The values the assumed keys must hold.
    assumed: Vec<u64>,
}

/// Writes to a `Vec`, which cannot fail (`rmp`'s writers return `Result` for any writer).
fn put<E>(written: Result<impl Sized, E>) {
    let _ = written.map(drop).map_err(drop);
}

/// The script call (`EVALSHA` of `hash`, `spend.lua`; the caller loads the script on
/// NOSCRIPT) of `spends`, in order: its answer holds one per spend ([`spent`]). Each key
/// is named once (a workspace's change counter and a shard's dirty set serve every spend
/// of the call that names them), the assumed ones first; the spends' fields go as one
/// flat MessagePack array.
pub(super) fn spends_call<'a>(
    hash: &str,
    spends: impl ExactSizeIterator<Item = &'a SpendArgs> + Clone,
) -> redis::Cmd {
    use rmp::encode::{write_array_len, write_sint, write_str, write_uint};
    /// The call's keys, each once, and their indexes (from 1, as `KEYS` counts).
    #[derive(Default)]
    struct Named<'a> {
        keys: Vec<&'a [u8]>,
        index: foldhash::HashMap<&'a [u8], u64>,
    }
    impl<'a> Named<'a> {
        fn at(&mut self, k: &'a [u8]) -> u64 {
            *self.index.entry(k).or_insert_with(|| {
                self.keys.push(k);
                self.keys.len() as u64
            })
        }
    }
    let mut named = Named::default();
    for s in spends.clone() {
        for k in &s.keys[s.keys.len() - s.assumed.len()..] {
            named.at(k);
        }
    }
    let assumed_keys = named.keys.len() as u64;
    let fields: usize = spends.clone().map(|s| 16 + 4 * s.limits.len() + 2 * s.assumed.len()).sum();
    let mut out = Vec::with_capacity(fields * 4);
    put(write_array_len(&mut out, (2 + fields) as u32));
    put(write_uint(&mut out, assumed_keys));
    put(write_uint(&mut out, spends.len() as u64));
    let mut digits = itoa::Buffer::new();
    for s in spends {
        let (mut own, assumed) = {
            let (own, assumed) = s.keys.split_at(s.keys.len() - s.assumed.len());
            (own.iter(), assumed)
        };
        let mut key = |out: &mut Vec<u8>, named: &mut Named<'a>| {
            put(write_uint(out, own.next().map_or(0, |k| named.at(k))))
        };
        put(write_str(&mut out, &s.key_id));
        for _ in 0..3 {
            key(&mut out, &mut named); // counter, lock, dirty set
        }
        put(write_uint(&mut out, s.cost));
        match s.refill {
            Some(r) => {
                put(write_sint(&mut out, r.at));
                put(write_uint(&mut out, r.amount));
                put(write_sint(&mut out, r.since));
            }
            None => {
                put(write_sint(&mut out, -1));
                put(write_uint(&mut out, 0));
                put(write_uint(&mut out, 0));
            }
        }
        match s.load {
            Some(l) => {
                put(write_uint(&mut out, 1));
                put(write_str(&mut out, digits.format(l.remaining)));
                put(write_str(&mut out, &last_refill(l.last_refill_at)));
                put(write_str(&mut out, digits.format(l.version)));
                put(write_sint(&mut out, l.seq));
            }
            None => {
                put(write_uint(&mut out, 0));
                for _ in 0..2 {
                    put(write_str(&mut out, ""));
                }
                put(write_str(&mut out, "0"));
                put(write_uint(&mut out, 0));
            }
        }
        put(write_uint(&mut out, IDLE_MS));
        put(write_uint(&mut out, s.limits.len() as u64));
        for [limit, cost, ttl] in &s.limits {
            key(&mut out, &mut named);
            for v in [limit, cost, ttl] {
                put(write_uint(&mut out, *v));
            }
        }
        put(write_uint(&mut out, s.assumed.len() as u64));
        for (k, value) in assumed.iter().zip(&s.assumed) {
            put(write_uint(&mut out, named.at(k)));
            put(write_str(&mut out, digits.format(*value)));
        }
    }
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(hash).arg(named.keys.len());
    for k in named.keys {
        cmd.arg(k);
    }
    cmd.arg(out);
    cmd
}

impl RedisStore {
    /// A spend's keys and arguments, and the limits' (limit, window end) its answer is
    /// read with ([`spent`]).
    fn spend_args(&self, ask: &SharedSpendAsk<'_>) -> Result<(SpendArgs, Vec<(u64, u64)>), StorageError> {
        let shard = shard_of(ask.key_id);
        let counter = self.credit_key(shard, "k:", ask.key_id);
        let mut keys =
            Vec::with_capacity(3 + ask.limits.len() + ask.assumed.map_or(0, |a| 1 + a.counters.len()));
        keys.push(counter.into_bytes());
        keys.push(self.credit_key(shard, "lock:", ask.key_id).into_bytes());
        keys.push(self.credit_key(shard, "dirty", "").into_bytes());
        let (mut limits, mut windows) = (Vec::with_capacity(ask.limits.len()), Vec::new());
        for (key, req) in ask.limits {
            let start = window_start(ask.now_ms, req.duration.max(1));
            let reset = start.saturating_add(req.duration.max(1));
            keys.push(self.key(key, start));
            windows.push([req.limit, req.cost, reset.saturating_sub(ask.now_ms) + EXPIRY_SLACK_MS]);
            limits.push((req.limit, reset));
        }
        if self.cluster {
            if ask.assumed.is_some() {
                return Err(StorageError::Internal(
                    "a cluster cannot check change counters with a spend".into(),
                ));
            }
            let slot = redis::cluster_routing::Slot::for_key(&keys[0]);
            if keys[3..].iter().any(|k| redis::cluster_routing::Slot::for_key(k) != slot) {
                return Err(StorageError::Internal(
                    "a key's own limits must be in its credit counter's slot (limits_namespace)".into(),
                ));
            }
        }
        let mut assumed = Vec::new();
        if let Some(a) = ask.assumed {
            keys.push(super::counters_epoch_key(&self.prefix).into_bytes());
            assumed.push(a.epoch);
            for (name, value) in &a.counters {
                keys.push(self.counter_key(name).into_bytes());
                assumed.push(*value);
            }
        }
        let args = SpendArgs {
            keys,
            shard,
            key_id: ask.key_id.to_owned(),
            cost: ask.cost,
            refill: ask.refill,
            load: ask.load,
            limits: windows,
            assumed,
        };
        Ok((args, limits))
    }
}

/// The one answer of a script call that carried one spend.
fn one(replies: Vec<redis::Value>) -> Result<redis::Value, StorageError> {
    let [reply] = <[redis::Value; 1]>::try_from(replies).map_err(|_| bad_answer())?;
    Ok(reply)
}

/// A spend's answer (`spend.lua`), its limits' decisions read with `limits`' (limit,
/// window end).
fn spent(reply: redis::Value, limits: &[(u64, u64)]) -> Result<SharedSpend, StorageError> {
    let reply: Vec<i64> = redis::FromRedisValue::from_redis_value(reply).map_err(|_| bad_answer())?;
    let (code, remaining) = match reply[..] {
        [code, remaining, ..] => (code, u64::try_from(remaining).map_err(|_| bad_answer())?),
        _ => return Err(bad_answer()),
    };
    let decisions = || -> Result<Vec<Decision>, StorageError> {
        if reply.len() != 2 + 2 * limits.len() {
            return Err(bad_answer());
        }
        Ok(limits
            .iter()
            .zip(reply[2..].chunks(2))
            .map(|(&(limit, reset), pair)| Decision {
                success: pair[0] == 1,
                limit,
                remaining: limit.saturating_sub(u64::try_from(pair[1]).unwrap_or(0)),
                reset,
            })
            .collect())
    };
    Ok(match code {
        0 | 1 => SharedSpend::Decided { paid: code == 1, remaining, limits: decisions()? },
        2 => SharedSpend::Missing,
        3 => SharedSpend::Locked,
        4 => SharedSpend::Unlimited { limits: decisions()? },
        5 => SharedSpend::RateLimited { limits: decisions()? },
        6 => SharedSpend::Stale,
        _ => return Err(bad_answer()),
    })
}

fn bad_answer() -> StorageError {
    StorageError::Unavailable("Redis: unexpected credits answer".into())
}

/// A counter from its `r, l, v, n` fields (`None` when it has no credits).
fn live(fields: &[Option<String>]) -> Option<LiveCredits> {
    let [Some(r), l, Some(v), Some(n)] = fields else { return None };
    Some(LiveCredits {
        remaining: r.parse().ok()?,
        last_refill_at: l.as_deref().filter(|l| !l.is_empty()).and_then(|l| l.parse().ok()),
        version: v.parse().ok()?,
        seq: n.parse().ok()?,
    })
}

fn last_refill(l: Option<i64>) -> String {
    l.map(|l| l.to_string()).unwrap_or_default()
}

impl SharedCredits for RedisStore {
    fn spend(&self, ask: &SharedSpendAsk<'_>) -> Result<SharedSpend, StorageError> {
        let (args, limits) = self.spend_args(ask)?;
        let script = &self.credit_scripts.spend;
        let cmd = spends_call(script.get_hash(), std::iter::once(&args));
        let reply: Vec<redis::Value> = self
            .pool
            .with_conn(|c| match cmd.query(c) {
                Err(e) if super::script::is_no_script(&e) => {
                    script.load(c)?;
                    cmd.query(c)
                }
                other => other,
            })
            .map_err(|e| StorageError::Unavailable(e.to_string()))?;
        spent(one(reply)?, &limits)
    }

    fn spend_queued(&self, ask: &SharedSpendAsk<'_>) -> Option<Queued<SharedSpend>> {
        tokio::runtime::Handle::try_current().ok()?;
        if ask.assumed.is_some_and(|a| self.pushed.moved_from(a.epoch, &a.counters)) {
            // Known stale (`pushed.rs`): nothing to spend on that answer.
            return Some(Box::pin(std::future::ready(Ok(SharedSpend::Stale))));
        }
        let queued = self.spend_args(ask).and_then(|(args, limits)| {
            let answer =
                self.batcher.enqueue_spend(args).map_err(|e| StorageError::Unavailable(e.to_string()))?;
            Ok((answer, limits))
        });
        Some(Box::pin(async move {
            let (answer, limits) = queued?;
            let reply = match answer.await {
                Ok(reply) => reply.map_err(|e| StorageError::Unavailable(e.to_string()))?,
                Err(_) => return Err(StorageError::Unavailable("Redis: spend dropped".into())),
            };
            spent(reply, &limits)
        }))
    }

    fn checks_counters(&self) -> bool {
        !self.cluster
    }

    fn limits_namespace(&self, key_id: &str) -> String {
        // The closing brace ends the budget keys' hash tag there: `{cr<shard>}`, the
        // counter's (see `RedisStore::key`).
        format!("cr{}}}", shard_of(key_id))
    }

    fn lock(
        &self,
        key_id: &str,
        token: u64,
        lease: Duration,
    ) -> Result<Option<Option<LiveCredits>>, StorageError> {
        let shard = shard_of(key_id);
        let mut call = self.credit_scripts.lock.prepare_invoke();
        call.key(self.credit_key(shard, "k:", key_id))
            .key(self.credit_key(shard, "lock:", key_id))
            .arg(token)
            .arg(lease.as_millis() as u64);
        let out: Vec<Option<String>> = self.run(&call)?;
        Ok(match out.split_first() {
            None => None,
            Some((_, [])) => Some(None),
            Some((_, fields)) => Some(Some(live(fields).ok_or_else(bad_answer)?)),
        })
    }

    fn unlock(&self, key_id: &str, token: u64, install: Option<Installed>) -> Result<bool, StorageError> {
        let shard = shard_of(key_id);
        let mut call = self.credit_scripts.unlock.prepare_invoke();
        call.key(self.credit_key(shard, "k:", key_id))
            .key(self.credit_key(shard, "lock:", key_id))
            .key(self.credit_key(shard, "dirty", ""))
            .arg(token);
        match install {
            None => call.arg(0).arg(key_id).arg(0).arg("").arg(0).arg(0),
            Some(Installed::Credits(l)) => call
                .arg(1)
                .arg(key_id)
                .arg(l.remaining)
                .arg(last_refill(l.last_refill_at))
                .arg(l.version)
                .arg(l.seq),
            Some(Installed::Unlimited { version }) => {
                call.arg(2).arg(key_id).arg(0).arg("").arg(version).arg(0)
            }
        };
        call.arg(IDLE_MS);
        let held: u8 = self.run(&call)?;
        Ok(held == 1)
    }

    fn read(&self, key_ids: &[&str]) -> Result<Vec<Option<LiveCredits>>, StorageError> {
        if !self.cluster {
            return self.read_counters(key_ids);
        }
        // A cluster: one call per shard (its slot).
        let mut out = vec![None; key_ids.len()];
        let mut by_shard: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
        for (i, id) in key_ids.iter().enumerate() {
            by_shard.entry(shard_of(id)).or_default().push(i);
        }
        for positions in by_shard.values() {
            let ids: Vec<&str> = positions.iter().map(|&i| key_ids[i]).collect();
            for (&i, l) in positions.iter().zip(self.read_counters(&ids)?) {
                out[i] = l;
            }
        }
        Ok(out)
    }

    fn shards(&self) -> u16 {
        SHARDS
    }

    fn dirty(
        &self,
        shard: u16,
        token: u64,
        lease: Duration,
        max: usize,
    ) -> Result<Vec<(String, LiveCredits)>, StorageError> {
        let mut call = self.credit_scripts.dirty.prepare_invoke();
        call.key(self.credit_key(shard, "dirty", ""))
            .key(self.credit_key(shard, "lease", ""))
            .arg(token)
            .arg(lease.as_millis() as u64)
            .arg(max);
        let ids: Vec<String> = self.run(&call)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let counters = self.read_counters(&refs)?;
        let (mut out, mut gone) = (Vec::with_capacity(ids.len()), Vec::new());
        for (id, c) in ids.into_iter().zip(counters) {
            match c {
                Some(l) => out.push((id, l)),
                None => gone.push(id),
            }
        }
        if !gone.is_empty() {
            let none = LiveCredits { remaining: 0, last_refill_at: None, version: -1, seq: -1 };
            let gone: Vec<(String, LiveCredits, WrittenBehind)> =
                gone.into_iter().map(|id| (id, none, WrittenBehind::Superseded)).collect();
            self.settle(shard, &gone)?;
        }
        Ok(out)
    }

    fn settle(
        &self,
        shard: u16,
        outcomes: &[(String, LiveCredits, WrittenBehind)],
    ) -> Result<(), StorageError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let mut call = self.credit_scripts.settle.prepare_invoke();
        call.key(self.credit_key(shard, "dirty", "")).arg(IDLE_MS);
        for (id, l, outcome) in outcomes {
            call.key(self.credit_key(shard, "k:", id)).arg(id.as_str()).arg(l.seq).arg(l.version).arg(
                match outcome {
                    WrittenBehind::Written => "w",
                    WrittenBehind::Superseded => "s",
                },
            );
        }
        self.run::<u64>(&call).map(drop)
    }
}
