//! The decision script (`decide.lua`) and how a batch is put to it: the checks a batch
//! names (each once), the command's layout, the reply back in the batch's order, and on a
//! Redis Cluster the checks made apart and the calls grouped by slot.

use super::{Answer, Call, counters_epoch_key, epoch_key};
use keygate_ratelimit::StoreError;

/// The decision script: flushes of async tokens, then decisions with their checks (the
/// layout is at the top of `decide.lua`). Answers `{answer, used}` per call.
pub(super) const DECIDE: &str = include_str!("decide.lua");

/// A key that must still hold a value for a decision to be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum CheckKey<'a> {
    /// A namespace's overrides epoch (by namespace id).
    Overrides(&'a str),
    /// A change counter (its whole key).
    Counter(&'a str),
    /// The change counters' epoch.
    CounterEpoch,
}

/// The checks a batch names (key and value, each once, numbered from 1 in order of
/// appearance) and each call's references to them: overrides, counter, counters' epoch (0:
/// none). A map keeps a batch spanning many namespaces linear.
pub(crate) struct Checks<'a> {
    list: Vec<(CheckKey<'a>, u64)>,
    refs: Vec<[usize; 3]>,
}

impl<'a> Checks<'a> {
    pub(crate) fn of(calls: &[&'a Call]) -> Self {
        let mut list: Vec<(CheckKey<'a>, u64)> = Vec::new();
        let mut numbered: foldhash::HashMap<(CheckKey<'a>, u64), usize> = foldhash::HashMap::default();
        let mut refs = Vec::with_capacity(calls.len());
        for c in calls {
            let mut number = |check: Option<(CheckKey<'a>, u64)>| {
                check.map_or(0, |check| {
                    *numbered.entry(check).or_insert_with(|| {
                        list.push(check);
                        list.len()
                    })
                })
            };
            let overrides = number(c.epoch.map(|e| (CheckKey::Overrides(c.namespace_id.as_str()), e)));
            let counter = number(c.guard.as_ref().map(|g| (CheckKey::Counter(g.key.as_str()), g.value)));
            let epoch = number(c.guard.as_ref().map(|g| (CheckKey::CounterEpoch, g.epoch)));
            refs.push([overrides, counter, epoch]);
        }
        Self { list, refs }
    }

    /// The checks' keys, in their order (all in the `{cc}` slot).
    pub(crate) fn keys(&self, prefix: &str) -> Vec<String> {
        self.list
            .iter()
            .map(|(key, _)| match key {
                CheckKey::Overrides(namespace_id) => epoch_key(prefix, namespace_id),
                CheckKey::Counter(key) => (*key).to_string(),
                CheckKey::CounterEpoch => counters_epoch_key(prefix),
            })
            .collect()
    }
}

/// The checks of `calls` made outside the script (a Redis Cluster), from `values` (what
/// the checks' keys hold, in [`Checks::keys`] order): the flat reply with the answers of
/// the calls whose checks failed (3 stale counter first, then 2 stale overrides, as the
/// script), and the calls left to decide grouped by their key's cluster slot.
pub(crate) fn decide_separately(
    calls: &[&Call],
    checks: &Checks<'_>,
    values: &[Option<u64>],
) -> (Vec<u64>, Vec<Vec<usize>>) {
    let current =
        |r: usize| r == 0 || values.get(r - 1).is_some_and(|v| v.unwrap_or(0) == checks.list[r - 1].1);
    let mut reply = vec![0; 2 * calls.len()];
    let mut groups: foldhash::HashMap<redis::cluster_routing::Slot, Vec<usize>> =
        foldhash::HashMap::default();
    for (i, [overrides, counter, epoch]) in checks.refs.iter().copied().enumerate() {
        if !(current(counter) && current(epoch)) {
            reply[2 * i] = 3;
        } else if !current(overrides) {
            reply[2 * i] = 2;
        } else {
            groups.entry(redis::cluster_routing::Slot::for_key(&calls[i].key)).or_default().push(i);
        }
    }
    (reply, groups.into_values().collect())
}

/// The script call running a batch (see `decide.lua` for the layout): `flushes` (calls
/// with [`Call::flush`]), then `decisions` in order, with the decisions' checks when
/// `with_checks` (else none: the caller made them): `EVALSHA`, or `EVAL` with the source
/// after Redis answered that it does not have the script (a restart, `SCRIPT FLUSH`).
pub(super) fn script_command(
    script: &redis::Script,
    eval: bool,
    prefix: &str,
    (flushes, decisions): (&[&Call], &[&Call]),
    with_checks: bool,
) -> redis::Cmd {
    let checks = match with_checks {
        true => Checks::of(decisions),
        false => Checks { list: Vec::new(), refs: vec![[0; 3]; decisions.len()] },
    };
    let calls = flushes.iter().chain(decisions);
    let mut cmd = redis::Cmd::with_capacity(
        4 + 3 * flushes.len() + 5 * decisions.len() + 2 * checks.list.len(),
        calls.clone().map(|c| c.key.len() + 48).sum::<usize>() + checks.list.len() * (prefix.len() + 64),
    );
    cmd.arg(if eval { "EVAL" } else { "EVALSHA" });
    if eval {
        cmd.arg(DECIDE);
    } else {
        cmd.arg(script.get_hash());
    }
    cmd.arg(flushes.len() + decisions.len() + checks.list.len());
    for c in calls {
        cmd.arg(c.key.as_slice());
    }
    for key in checks.keys(prefix) {
        cmd.arg(key);
    }
    cmd.arg(flushes.len()).arg(decisions.len());
    for c in flushes {
        cmd.arg(c.cost).arg(c.ttl);
    }
    for (c, [overrides, counter, epoch]) in decisions.iter().zip(&checks.refs) {
        cmd.arg(overrides + (counter << 10) + (epoch << 20)).arg(c.limit).arg(c.cost).arg(c.ttl);
    }
    for (_, value) in &checks.list {
        cmd.arg(*value);
    }
    cmd
}

/// Runs a batch of `calls` (in queue order) on `conn` in one script call (see
/// [`script_command`]); the reply in `calls`' order, two numbers per call. The flushes go
/// first: a batch never holds a flush queued after a decision on the same window
/// (`deferred.rs`), so each window keeps its order.
pub(crate) async fn run_script(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &redis::Script,
    prefix: &str,
    calls: &[&Call],
    with_checks: bool,
) -> redis::RedisResult<Vec<u64>> {
    let (flushes, decisions): (Vec<&Call>, Vec<&Call>) = match calls.iter().any(|c| c.flush) {
        true => calls.iter().partition(|c| c.flush),
        false => (Vec::new(), calls.to_vec()),
    };
    let parts = (flushes.as_slice(), decisions.as_slice());
    let reply: Vec<u64> =
        match script_command(script, false, prefix, parts, with_checks).query_async(conn).await {
            Err(e) if is_no_script(&e) => {
                script_command(script, true, prefix, parts, with_checks).query_async(conn).await?
            }
            other => other?,
        };
    Ok(in_call_order(calls, reply))
}

/// The reply of a batch split into flushes then decisions, put back in `calls`' order.
fn in_call_order(calls: &[&Call], reply: Vec<u64>) -> Vec<u64> {
    let flushes = calls.iter().filter(|c| c.flush).count();
    if flushes == 0 || reply.len() != 2 * calls.len() {
        return reply;
    }
    let (mut f, mut d) = (0, flushes);
    let mut ordered = Vec::with_capacity(reply.len());
    for c in calls {
        let at = if c.flush { &mut f } else { &mut d };
        ordered.extend_from_slice(&reply[2 * *at..2 * *at + 2]);
        *at += 1;
    }
    ordered
}

/// The script's flat reply, two numbers per call.
pub(super) fn answers(reply: &[u64], calls: usize) -> Result<impl Iterator<Item = Answer> + '_, StoreError> {
    if reply.len() != 2 * calls {
        return Err(StoreError::Unavailable("Redis: unexpected script answer".into()));
    }
    Ok(reply.chunks_exact(2).map(|pair| match pair[0] {
        2 => Answer::Stale,
        3 => Answer::StaleCounter,
        a => Answer::Decided { success: a == 1, used: pair[1] },
    }))
}

/// `ScriptInvocation::invoke` (`EVALSHA`; on NOSCRIPT, `SCRIPT LOAD` then `EVALSHA`), again
/// when a `SCRIPT FLUSH` or a restart landed between that load and its call: a few times,
/// each loading anew.
pub(super) fn invoke_loaded<T: redis::FromRedisValue>(
    call: &redis::ScriptInvocation<'_>,
    c: &mut dyn redis::ConnectionLike,
) -> redis::RedisResult<T> {
    let mut tries = 0;
    loop {
        match call.invoke(c) {
            Err(e) if is_no_script(&e) && tries < 3 => tries += 1,
            other => return other,
        }
    }
}

pub(super) fn is_no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}
