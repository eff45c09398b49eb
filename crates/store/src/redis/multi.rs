//! All-or-nothing decisions over several budgets (v2's `ratelimit.multiLimit`): one
//! script call (`multi.lua`) that decides every entry and writes only if all fit, so the
//! call is atomic against every other decision on those budgets, on any instance.

use super::{EXPIRY_SLACK_MS, RedisStore, epoch_key};
use keygate_ratelimit::Algorithm;
use keygate_ratelimit::{AllOrNothing, Decision, Entry, StoreError, window_start};

/// The script (its layout is at its top).
pub(super) const MULTI: &str = include_str!("multi.lua");

/// Gives back the costs of a passed multi-limit: `KEYS[i]` loses `ARGV[i]` if it still
/// exists (its window has not ended), never going below 0.
pub(super) const GIVE_BACK: &str = r"
for i = 1, #KEYS do
  local used = tonumber(redis.call('GET', KEYS[i]) or '-1')
  if used > 0 then
    redis.call('DECRBY', KEYS[i], math.min(used, tonumber(ARGV[i])))
  end
end
return 0
";

impl RedisStore {
    /// [`keygate_ratelimit::RateLimitStore::limit_all`] on a blocking connection. On a
    /// Redis Cluster the budgets' keys must share one slot (a script runs on one node):
    /// otherwise nothing is decided ([`StoreError::CannotAtomically`]); the epochs are
    /// then read first, apart.
    pub(super) fn limit_all_blocking(
        &self,
        entries: &[Entry<'_>],
        epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<AllOrNothing>, StoreError> {
        if entries.iter().any(|(key, _)| key.algorithm != Algorithm::Fixed) {
            return self.limit_all_in_turn(entries, epochs, now_ms);
        }
        let windows: Vec<(Vec<u8>, u64)> = entries
            .iter()
            .map(|(key, req)| {
                let start = window_start(now_ms, req.duration.max(1));
                (self.key(key, start), start)
            })
            .collect();
        if self.cluster {
            let slot = |k: &[u8]| redis::cluster_routing::Slot::for_key(k);
            if windows.windows(2).any(|w| slot(&w[0].0) != slot(&w[1].0)) {
                return Err(StoreError::CannotAtomically(
                    "on a Redis Cluster, the budgets of one multiLimit call must share a slot; \
                     these do not (send them as separate calls)"
                        .into(),
                ));
            }
        }
        let epoch_keys: Vec<String> = epochs.iter().map(|(ns, _)| epoch_key(&self.prefix, ns)).collect();
        let reply: Vec<i64> = self.pool.with_conn(|c| {
            let mut call = self.multi_script.prepare_invoke();
            for (key, _) in &windows {
                call.key(key.as_slice());
            }
            if self.cluster {
                // The epochs live in another slot: read apart, just before.
                if !epoch_keys.is_empty() {
                    let values: Vec<Option<u64>> = redis::cmd("MGET").arg(&epoch_keys).query(c)?;
                    if values.iter().zip(epochs).any(|(v, (_, e))| v.unwrap_or(0) != *e) {
                        return Ok(vec![-1]);
                    }
                }
            } else {
                for key in &epoch_keys {
                    call.key(key);
                }
            }
            call.arg(entries.len());
            for ((_, req), (_, start)) in entries.iter().zip(&windows) {
                let reset = start.saturating_add(req.duration.max(1));
                call.arg(req.limit).arg(req.cost).arg(reset.saturating_sub(now_ms) + EXPIRY_SLACK_MS);
            }
            if !self.cluster {
                for (_, epoch) in epochs {
                    call.arg(*epoch);
                }
            }
            super::script::invoke_loaded(&call, c)
        })?;
        if reply.first() == Some(&-1) {
            return Ok(None);
        }
        if reply.len() != 2 * entries.len() {
            return Err(StoreError::Unavailable(format!("Redis: {} numbers answered", reply.len())));
        }
        let decisions: Vec<Decision> = entries
            .iter()
            .zip(&windows)
            .zip(reply.chunks(2))
            .map(|(((_, req), (_, start)), pair)| Decision {
                success: pair[0] == 1,
                limit: req.limit,
                remaining: req.limit.saturating_sub(u64::try_from(pair[1]).unwrap_or(0)),
                reset: start.saturating_add(req.duration.max(1)),
            })
            .collect();
        let passed = decisions.iter().all(|d| d.success);
        Ok(Some(AllOrNothing { passed, decisions }))
    }

    /// [`RateLimitStore::give_back`](keygate_ratelimit::RateLimitStore::give_back): the
    /// costs of `entries` off their windows' keys, in one script call (one slot on a
    /// cluster, as the multi-limit that took them).
    /// Sliding windows and buckets are given back one call each.
    pub(super) fn give_back_blocking(&self, entries: &[Entry<'_>], now_ms: u64) -> Result<(), StoreError> {
        for (key, req) in
            entries.iter().filter(|(key, req)| req.cost > 0 && key.algorithm != Algorithm::Fixed)
        {
            self.give_back_algorithm(key, req, now_ms)?;
        }
        let taken: Vec<(Vec<u8>, u64)> = entries
            .iter()
            .filter(|(key, req)| req.cost > 0 && key.algorithm == Algorithm::Fixed)
            .map(|(key, req)| (self.key(key, window_start(now_ms, req.duration.max(1))), req.cost))
            .collect();
        if taken.is_empty() {
            return Ok(());
        }
        self.pool.with_conn(|c| {
            let mut call = self.give_back_script.prepare_invoke();
            for (key, cost) in &taken {
                call.key(key.as_slice()).arg(*cost);
            }
            super::script::invoke_loaded::<i64>(&call, c).map(drop)
        })
    }
}
