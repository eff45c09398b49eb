//! The decision script (`decide.lua`) and how a batch is put to it: the checks a batch
//! names (each once), the command's layout, the reply back in the batch's order, and on a
//! Redis Cluster the checks made apart and the calls grouped by slot.

use super::{Answer, Call, EXPIRY_SLACK_MS, counters_epoch_key, epoch_key};
use keygate_ratelimit::Algorithm;

/// The decision script: flushes of async tokens, then decisions with their checks (the
/// layout is at the top of `decide.lua`), after the algorithms' functions.
pub(super) const DECIDE: &str = concat!(include_str!("algorithms.lua"), include_str!("decide.lua"));

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
/// the checks' keys hold, in [`Checks::keys`] order): the answers of the calls whose checks
/// failed (stale counter first, then stale overrides, as the script; `None` for the
/// others), and the calls left to decide grouped by their key's cluster slot.
pub(crate) fn decide_separately(
    calls: &[&Call],
    checks: &Checks<'_>,
    values: &[Option<u64>],
) -> (Vec<Option<Answer>>, Vec<Vec<usize>>) {
    let current =
        |r: usize| r == 0 || values.get(r - 1).is_some_and(|v| v.unwrap_or(0) == checks.list[r - 1].1);
    let mut answers = vec![None; calls.len()];
    let mut groups: foldhash::HashMap<redis::cluster_routing::Slot, Vec<usize>> =
        foldhash::HashMap::default();
    for (i, [overrides, counter, epoch]) in checks.refs.iter().copied().enumerate() {
        if !(current(counter) && current(epoch)) {
            answers[i] = Some(Answer::StaleCounter);
        } else if !current(overrides) {
            answers[i] = Some(Answer::Stale);
        } else {
            groups.entry(redis::cluster_routing::Slot::for_key(&calls[i].key)).or_default().push(i);
        }
    }
    (answers, groups.into_values().collect())
}

/// A batch's calls by the script's sections (`decide.lua`): flushes, fixed-window
/// decisions, decisions of other algorithms; each call's place in the reply.
pub(crate) struct Sections<'a> {
    flushes: Vec<&'a Call>,
    fixed: Vec<&'a Call>,
    algorithms: Vec<&'a Call>,
    /// Per call, in the batch's order: where its answer starts in the reply.
    at: Vec<usize>,
}

impl<'a> Sections<'a> {
    pub(crate) fn of(calls: &[&'a Call]) -> Self {
        let mut sections =
            Self { flushes: Vec::new(), fixed: Vec::new(), algorithms: Vec::new(), at: Vec::new() };
        let mut order = Vec::with_capacity(calls.len());
        for c in calls {
            let list = match (c.flush, &c.algorithm) {
                (true, _) => &mut sections.flushes,
                (false, None) => &mut sections.fixed,
                (false, Some(_)) => &mut sections.algorithms,
            };
            order.push(list.len());
            list.push(c);
        }
        let (f, n) = (sections.flushes.len(), sections.fixed.len());
        sections.at = calls
            .iter()
            .zip(order)
            .map(|(c, k)| match (c.flush, &c.algorithm) {
                (true, _) => 2 * k,
                (false, None) => 2 * (f + k),
                (false, Some(_)) => 2 * (f + n) + 3 * k,
            })
            .collect();
        sections
    }

    /// The decisions, in the script's order (fixed windows, then the others).
    fn decisions(&self) -> Vec<&'a Call> {
        self.fixed.iter().chain(&self.algorithms).copied().collect()
    }

    fn reply_len(&self) -> usize {
        2 * (self.flushes.len() + self.fixed.len()) + 3 * self.algorithms.len()
    }

    /// The script's flat reply as each call's answer, in the batch's order.
    fn answers(&self, calls: &[&Call], reply: &[u64]) -> redis::RedisResult<Vec<Answer>> {
        if reply.len() != self.reply_len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected decision script answer",
            )));
        }
        Ok(calls
            .iter()
            .zip(&self.at)
            .map(|(c, &at)| match (reply[at], &c.algorithm) {
                (2, _) => Answer::Stale,
                (3, _) => Answer::StaleCounter,
                (a, None) => Answer::Decided { success: a == 1, used: reply[at + 1] },
                (a, Some(_)) => Answer::Weighed { success: a == 1, x: reply[at + 1], y: reply[at + 2] },
            })
            .collect())
    }
}

/// The script call running a batch (see `decide.lua` for the layout), with the decisions'
/// checks when `with_checks` (else none: the caller made them): `EVALSHA`, or `EVAL` with
/// the source after Redis answered that it does not have the script (a restart, `SCRIPT
/// FLUSH`).
pub(super) fn script_command(
    script: &redis::Script,
    eval: bool,
    prefix: &str,
    sections: &Sections<'_>,
    with_checks: bool,
) -> redis::Cmd {
    let decisions = sections.decisions();
    let checks = match with_checks {
        true => Checks::of(&decisions),
        false => Checks { list: Vec::new(), refs: vec![[0; 3]; decisions.len()] },
    };
    let (flushes, fixed, algorithms) = (&sections.flushes, &sections.fixed, &sections.algorithms);
    let calls = flushes.iter().chain(&decisions);
    let mut cmd = redis::Cmd::with_capacity(
        5 + 3 * flushes.len() + 5 * fixed.len() + 13 * algorithms.len() + 2 * checks.list.len(),
        calls.clone().map(|c| 2 * c.key.len() + 96).sum::<usize>() + checks.list.len() * (prefix.len() + 64),
    );
    cmd.arg(if eval { "EVAL" } else { "EVALSHA" });
    if eval {
        cmd.arg(DECIDE);
    } else {
        cmd.arg(script.get_hash());
    }
    let seconds = algorithms.iter().filter_map(|c| c.algorithm.as_ref()?.second.as_ref());
    cmd.arg(flushes.len() + fixed.len() + algorithms.len() + seconds.count() + checks.list.len());
    for c in flushes.iter().chain(fixed.iter()) {
        cmd.arg(c.key.as_slice());
    }
    for c in algorithms {
        cmd.arg(c.key.as_slice());
        if let Some(second) = c.algorithm.as_ref().and_then(|a| a.second.as_ref()) {
            cmd.arg(second.as_slice());
        }
    }
    for key in checks.keys(prefix) {
        cmd.arg(key);
    }
    cmd.arg(flushes.len()).arg(fixed.len()).arg(algorithms.len());
    for c in flushes {
        cmd.arg(c.cost).arg(c.ttl);
    }
    let numbered = |[overrides, counter, epoch]: [usize; 3]| overrides + (counter << 10) + (epoch << 20);
    for (c, refs) in fixed.iter().zip(&checks.refs) {
        cmd.arg(numbered(*refs)).arg(c.limit).arg(c.cost).arg(c.ttl);
    }
    for (c, refs) in algorithms.iter().zip(&checks.refs[fixed.len()..]) {
        let Some(a) = &c.algorithm else { continue };
        cmd.arg(numbered(*refs)).arg(a.kind()).arg(c.limit).arg(c.cost).arg(a.shape.duration);
        match a.shape.algorithm {
            Algorithm::Sliding => cmd.arg(a.x).arg(c.ttl).arg(a.known.map_or(-1, |p| p as i64)),
            _ => cmd.arg(a.shape.now).arg(a.x).arg(a.r).arg(a.one.0).arg(a.one.1).arg(EXPIRY_SLACK_MS),
        };
    }
    for (_, value) in &checks.list {
        cmd.arg(*value);
    }
    cmd
}

/// Runs a batch of `calls` (in queue order) on `conn` in one script call (see
/// [`script_command`]): each call's answer, in `calls`' order. The flushes go first: a
/// batch never holds a flush queued after a decision on the same window (`deferred.rs`),
/// so each window keeps its order.
pub(crate) async fn run_script(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &redis::Script,
    prefix: &str,
    calls: &[&Call],
    with_checks: bool,
) -> redis::RedisResult<Vec<Answer>> {
    let sections = Sections::of(calls);
    let command = |eval| script_command(script, eval, prefix, &sections, with_checks);
    let reply: Vec<u64> = match command(false).query_async(conn).await {
        Err(e) if is_no_script(&e) => command(true).query_async(conn).await?,
        other => other?,
    };
    sections.answers(calls, &reply)
}

/// [`run_script`] on a blocking connection.
pub(crate) fn run_script_blocking(
    conn: &mut dyn redis::ConnectionLike,
    script: &redis::Script,
    prefix: &str,
    calls: &[&Call],
    with_checks: bool,
) -> redis::RedisResult<Vec<Answer>> {
    let sections = Sections::of(calls);
    let command = |eval| script_command(script, eval, prefix, &sections, with_checks);
    let reply: Vec<u64> = match command(false).query(conn) {
        Err(e) if is_no_script(&e) => command(true).query(conn)?,
        other => other?,
    };
    sections.answers(calls, &reply)
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
