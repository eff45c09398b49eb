//! Change counters in Redis (`keygate_rbac::SharedCounters`): the database's counter values,
//! published by each writer after its commit, read by every instance in one round trip.
//!
//! Keys: `<prefix>{cc}:<counter name>` and `<prefix>{cc}:epoch` (one hash slot, so one
//! script reads them all). The epoch is a random number the first reader sets when it finds
//! none: after Redis lost its data (a restart without persistence) it differs, so no answer
//! cached under the old values can match again. Within one epoch a counter only rises
//! (publishing never lowers one), so a changed counter never reads as the value an answer was
//! tagged with. Counters have no expiry: Redis must not evict them (`noeviction`, or a
//! `volatile-*` policy, which evicts only keys with an expiry).
//!
//! A verification whose answer is cached confirms its counters asynchronously
//! ([`SharedCounters::confirm`]): its confirmation joins its worker's lane (`batch.rs`),
//! and every confirmation queued while the lane's previous round trip was in flight is
//! answered by one `MGET` (a lone one is sent at once, alone). The `MGET` is sent after the
//! confirmation was queued, so it reads every counter published before the verification
//! began: the same freshness as a read of its own. One whose counters a pushed change
//! announcement shows moved is answered "moved" without a round trip (`pushed.rs`).

use super::RedisStore;
use super::batch::Read;
use keygate_rbac::{Confirm, Confirming, SharedCounters, StorageError};

/// Reads the epoch (setting `ARGV[1]` when there is none) and the counters of `KEYS[2..]`.
pub(crate) const READ: &str = r"
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  redis.call('SET', KEYS[1], ARGV[1])
  epoch = ARGV[1]
end
local out = {epoch}
for i = 2, #KEYS do
  out[i] = redis.call('GET', KEYS[i]) or '0'
end
return out
";

/// Raises each counter of `KEYS[2..]` to its value in `ARGV[2..]`, never lowering one, and
/// announces those raised on the channel `ARGV[1]` with the epoch `KEYS[1]` holds
/// (`pushed.rs`).
pub(crate) const PUBLISH: &str = r"
local raised = {redis.call('GET', KEYS[1]) or '0'}
for i = 2, #KEYS do
  local current = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tonumber(ARGV[i]) > current then
    redis.call('SET', KEYS[i], ARGV[i])
    raised[#raised + 1] = KEYS[i] .. '=' .. ARGV[i]
  end
end
-- pcall: a user whose ACL has no access to the channel still publishes the counters.
if #raised > 1 then redis.pcall('PUBLISH', ARGV[1], table.concat(raised, ' ')) end
return #KEYS - 1
";

impl RedisStore {
    pub(super) fn counter_key(&self, name: &str) -> String {
        format!("{}{{cc}}:{name}", self.prefix)
    }
}

fn unavailable(e: keygate_ratelimit::StoreError) -> StorageError {
    StorageError::Unavailable(e.to_string())
}

impl SharedCounters for RedisStore {
    fn read(&self, names: &[String]) -> Result<(u64, Vec<u64>), StorageError> {
        let script = &self.counter_scripts.0;
        // Never 0 or 1 (the tags of local and database counters).
        let fresh_epoch = rand::random::<u64>() | 2;
        let mut invocation = script.key(super::counters_epoch_key(&self.prefix));
        for n in names {
            invocation.key(self.counter_key(n));
        }
        invocation.arg(fresh_epoch);
        let out: Vec<u64> =
            self.pool.with_conn(|c| super::script::invoke_loaded(&invocation, c)).map_err(unavailable)?;
        match out.split_first() {
            Some((epoch, values)) if values.len() == names.len() => Ok((*epoch, values.to_vec())),
            _ => Err(StorageError::Unavailable("Redis: unexpected counters answer".into())),
        }
    }

    fn publish(&self, changes: &[(String, u64)]) -> Result<(), StorageError> {
        let script = &self.counter_scripts.1;
        let mut invocation = script.prepare_invoke();
        invocation.key(super::counters_epoch_key(&self.prefix)).arg(super::pushed::channel(&self.prefix));
        for (name, value) in changes {
            invocation.key(self.counter_key(name)).arg(*value);
        }
        self.pool
            .with_conn(|c| super::script::invoke_loaded::<u64>(&invocation, c))
            .map(drop)
            .map_err(unavailable)
    }

    fn confirm(&self, check: Box<dyn Confirm>) -> Option<Confirming> {
        tokio::runtime::Handle::try_current().ok()?;
        if self.pushed.moved(&*check) {
            // Known stale (`pushed.rs`): no round trip to learn it.
            return Some(Box::pin(std::future::ready(Ok(false))));
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let queued = self.batcher.enqueue_read(Read { check, reply });
        // The wait for the batch's read (queued behind the round trip in flight, then its
        // own), as a decision's (`RedisStore::limit_batched`).
        let span = keygate_domain::trace::child_span(|| {
            tracing::info_span!("redis batch", otel.kind = "client", db.system.name = "redis")
        });
        let waiting = async move {
            queued.map_err(unavailable)?;
            match answer.await {
                Ok(current) => current.map_err(unavailable),
                Err(_) => Err(StorageError::Unavailable("Redis: confirmation dropped".into())),
            }
        };
        Some(Box::pin(tracing::Instrument::instrument(waiting, span)))
    }
}
