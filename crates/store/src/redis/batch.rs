//! Decisions in batches, on the caller's runtime, without a timer.
//!
//! Decisions go to lanes by their budget window's key: each lane has its own multiplexed
//! connection and a queue, and every call on one window goes through the same lane. A lane
//! has one script call in flight at a time, so its calls reach Redis in the order they were
//! queued, whichever thread queued them (each is numbered in that order; the async state of
//! `deferred.rs` relies on it); the server has one lane per worker. One call in flight
//! costs no throughput where Redis and the server share the CPUs (either is busy while the
//! other waits), and it makes batches as large as they can be, so the work per decision in
//! both is the least. A decision that finds its lane idle is sent at once, alone: at low load a
//! batch holds one request and latency does not grow. Decisions that arrive while calls are in flight wait in the queue; when a call's
//! answer comes back, everything queued by then (up to [`MAX_BATCH`]) goes in the next one.
//! The batch size follows the load: one round trip carries as many decisions as arrived
//! during the previous one.
//!
//! Every decision still runs atomically in Redis, in its lane's arrival order (one
//! connection, answered in order), before its answer is given: exact across any number of
//! instances. A queue longer than [`MAX_QUEUED`] (Redis far slower than the load) answers
//! unavailable at once rather than holding requests and memory without bound.
//!
//! A failed call (connect, timeout, an error reply) answers every decision of its batch
//! unavailable and drops the lane's connection; the next batch connects again (after the
//! shared [`Outage`] backoff when the connect failed).
//!
//! Verifications' confirmations of their change counters (`counters.rs`) go the same
//! way: queued on a lane (the caller's thread's), and sent with the lane's next round
//! trip as one `MGET` of every counter they name, each once, beside the decisions'
//! script call (both in flight together on the lane's connection). A confirmation is
//! queued before its read is sent, so the read sees every counter published before the
//! verification began. Credit spends of cached verifications (`credits.rs`) too: a round
//! trip's spends go in one script call per [`MAX_SPENDS`] (the change counters they check
//! read once per call), pipelined; on a cluster one call per shard of the credits (its
//! slot), the counters confirmed before by the shared `MGET`, the calls sent together.

use super::async_conn::{AsyncConn, send_all};
use super::conn::{Outage, Target};
use super::credits::{SpendArgs, spends_call};
use super::deferred::Deferred;
use super::{Answer, Call, Checks, RedisSettings, counters_epoch_key, decide_separately, run_script};
use keygate_ratelimit::StoreError;
use keygate_rbac::Confirm;
use parking_lot::Mutex;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;

/// Most decisions in one script call (bounds how long Redis runs one script: ~100 µs).
pub(super) const MAX_BATCH: usize = 256;
// `decide.lua` packs a decision's three check numbers in 10 bits each.
const _: () = assert!(3 * MAX_BATCH < 1024);
/// Most script calls in flight per lane: one, so that a lane's calls run in queue order.
pub(super) const MAX_IN_FLIGHT: usize = 1;
/// Most decisions waiting in one lane's queue (and, apart, most confirmations).
pub(super) const MAX_QUEUED: usize = 16 * 1024;
/// Most confirmations in one `MGET` (a few counters each).
pub(super) const MAX_CONFIRMATIONS: usize = 512;
/// Most credit spends in one script call (about eight Redis calls each: 1-2 ms of Redis
/// for a full call on a small VM, so other clients wait no longer than that).
pub(super) const MAX_SPENDS: usize = 64;

pub(super) struct Batcher {
    lanes: Box<[Arc<Lane>]>,
    hasher: foldhash::fast::RandomState,
    shared: Arc<Shared>,
}

struct Shared {
    target: Target,
    config: redis::AsyncConnectionConfig,
    connect_timeout: Duration,
    script: redis::Script,
    /// The credit spend's script (`credits.rs`), loaded when Redis lacks it.
    spend_script: redis::Script,
    prefix: String,
    outage: Arc<Outage>,
    deferred: Arc<Deferred>,
    stats: [AtomicU64; 4],
}

/// How many script calls the batched path made, and how many decisions they carried; how
/// many counter reads, and how many confirmations they carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchStats {
    pub script_calls: u64,
    pub decisions: u64,
    pub counter_reads: u64,
    pub confirmations: u64,
    /// Change announcements received (`pushed.rs`), and answers they showed stale without
    /// a round trip.
    pub pushed_changes: u64,
    pub pushed_stale: u64,
}

#[derive(Default)]
struct Lane {
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    queue: Vec<Job>,
    /// Confirmations of change counters, for the next round trip's `MGET`.
    reads: Vec<Read>,
    /// Credit spends, for the next round trip's pipeline.
    spends: Vec<Spend>,
    in_flight: usize,
    conn: Option<AsyncConn>,
    /// The number of the last call queued (calls are numbered from 1, in queue order).
    seq: u64,
}

struct Job {
    call: Call,
    seq: u64,
    /// `None`: nobody waits for the answer (a flush of async tokens: `deferred.rs` learns
    /// it through [`Deferred::observe`]).
    reply: Option<oneshot::Sender<Result<Answer, StoreError>>>,
}

/// An answer to come.
pub(super) type Pending = oneshot::Receiver<Result<Answer, StoreError>>;

/// A confirmation of change counters (`counters.rs`), and who waits for its answer.
pub(super) struct Read {
    pub(super) check: Box<dyn Confirm>,
    pub(super) reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// A credit spend (`credits.rs`), and who waits for its reply.
pub(super) struct Spend {
    args: SpendArgs,
    reply: oneshot::Sender<Result<redis::Value, StoreError>>,
}

/// A spend's reply to come.
pub(super) type SpendReply = oneshot::Receiver<Result<redis::Value, StoreError>>;

/// The work of one round trip: decisions, confirmations, spends.
#[derive(Default)]
struct Batch {
    jobs: Vec<Job>,
    reads: Vec<Read>,
    spends: Vec<Spend>,
}

impl Batcher {
    pub(super) fn new(
        target: Target,
        settings: &RedisSettings,
        outage: Arc<Outage>,
        script: redis::Script,
        spend_script: redis::Script,
        deferred: Arc<Deferred>,
    ) -> Self {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.io_timeout));
        let shared = Shared {
            target,
            config,
            connect_timeout: settings.connect_timeout,
            script,
            spend_script,
            prefix: settings.key_prefix.clone(),
            outage,
            deferred,
            stats: Default::default(),
        };
        let lanes = (0..settings.lanes.max(1)).map(|_| Arc::default()).collect();
        Self { lanes, hasher: Default::default(), shared: Arc::new(shared) }
    }

    pub(super) fn stats(&self) -> BatchStats {
        let [calls, decisions, reads, confirmations] = &self.shared.stats;
        BatchStats {
            script_calls: calls.load(Ordering::Relaxed),
            decisions: decisions.load(Ordering::Relaxed),
            counter_reads: reads.load(Ordering::Relaxed),
            confirmations: confirmations.load(Ordering::Relaxed),
            ..BatchStats::default()
        }
    }

    /// Queues a confirmation on the lane of the caller's thread (a server worker's reads
    /// share its round trips) and starts a round trip if none is in flight there. Needs a
    /// tokio runtime.
    pub(super) fn enqueue_read(&self, read: Read) -> Result<(), StoreError> {
        self.on_thread_lane(|st| {
            if st.reads.len() >= MAX_QUEUED {
                return Err(StoreError::Unavailable("Redis: too many confirmations waiting".into()));
            }
            st.reads.push(read);
            Ok(())
        })
    }

    /// Queues a credit spend as [`Self::enqueue_read`] does: its reply to come.
    pub(super) fn enqueue_spend(&self, args: SpendArgs) -> Result<SpendReply, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.on_thread_lane(|st| {
            if st.spends.len() >= MAX_QUEUED {
                return Err(StoreError::Unavailable("Redis: too many spends waiting".into()));
            }
            st.spends.push(Spend { args, reply });
            Ok(())
        })?;
        Ok(answer)
    }

    /// Runs `queue` on the lane of the caller's thread, then starts a round trip there if
    /// none is in flight.
    fn on_thread_lane(
        &self,
        queue: impl FnOnce(&mut LaneState) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let at = self.hasher.hash_one(std::thread::current().id()) as usize % self.lanes.len();
        let lane = &self.lanes[at];
        let start = {
            let mut st = lane.state.lock();
            queue(&mut st)?;
            st.start()
        };
        if let Some(batch) = start {
            tokio::spawn(drive(lane.clone(), self.shared.clone(), batch));
        }
        Ok(())
    }

    /// Queues `call` on its window's lane and starts a script call if fewer than
    /// [`MAX_IN_FLIGHT`] are running: its number on its lane, and its answer to come. Needs
    /// a tokio runtime.
    pub(super) fn enqueue(&self, call: Call) -> Result<(u64, Pending), StoreError> {
        let (reply, answer) = oneshot::channel();
        Ok((self.push(call, Some(reply))?, answer))
    }

    /// Queues `call` as [`Self::enqueue`] does, for nobody to wait on: its number.
    pub(super) fn enqueue_unanswered(&self, call: Call) -> Result<u64, StoreError> {
        self.push(call, None)
    }

    fn push(
        &self,
        call: Call,
        reply: Option<oneshot::Sender<Result<Answer, StoreError>>>,
    ) -> Result<u64, StoreError> {
        let lane = &self.lanes[self.hasher.hash_one(call.key.as_slice()) as usize % self.lanes.len()];
        let (seq, start) = {
            let mut st = lane.state.lock();
            if st.queue.len() >= MAX_QUEUED {
                return Err(StoreError::Unavailable("Redis: too many decisions waiting".into()));
            }
            st.seq += 1;
            let seq = st.seq;
            st.queue.push(Job { call, seq, reply });
            (seq, st.start())
        };
        if let Some(batch) = start {
            tokio::spawn(drive(lane.clone(), self.shared.clone(), batch));
        }
        Ok(seq)
    }
}

impl LaneState {
    /// The batch to send now, when fewer than [`MAX_IN_FLIGHT`] calls are running (it is
    /// then counted as running).
    fn start(&mut self) -> Option<Batch> {
        (self.in_flight < MAX_IN_FLIGHT).then(|| {
            self.in_flight += 1;
            let mut batch = Batch::default();
            self.take(&mut batch);
            batch
        })
    }

    /// Moves the next batch into `batch` (empty): the queue's first [`MAX_BATCH`] jobs and
    /// first [`MAX_CONFIRMATIONS`] reads. A queue taken whole swaps buffers with the
    /// batch's, so both keep their capacity.
    fn take(&mut self, batch: &mut Batch) {
        take_front(&mut self.queue, &mut batch.jobs, MAX_BATCH);
        take_front(&mut self.reads, &mut batch.reads, MAX_CONFIRMATIONS);
        take_front(&mut self.spends, &mut batch.spends, MAX_BATCH);
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.reads.is_empty() && self.spends.is_empty()
    }
}

/// Moves `queue`'s first `most` items into `into` (empty).
fn take_front<T>(queue: &mut Vec<T>, into: &mut Vec<T>, most: usize) {
    if queue.len() <= most {
        std::mem::swap(queue, into);
    } else {
        into.extend(queue.drain(..most));
    }
}

/// Sends `batch`, then whatever queued meanwhile, until the queue is empty.
async fn drive(lane: Arc<Lane>, shared: Arc<Shared>, mut batch: Batch) {
    loop {
        shared.send(&lane, &mut batch).await;
        let mut st = lane.state.lock();
        if st.is_idle() {
            st.in_flight -= 1;
            return;
        }
        st.take(&mut batch);
    }
}

impl Shared {
    /// Decides `batch`'s jobs in one script call and reads its confirmations' counters in
    /// one `MGET`, both in flight together, and answers each; leaves `batch` empty.
    async fn send(&self, lane: &Lane, batch: &mut Batch) {
        let conn = match self.conn(lane).await {
            Ok(c) => c,
            Err(e) => return self.fail(batch, &e),
        };
        let (decided, confirmed, spent) = futures_util::future::join3(
            async {
                match batch.jobs.is_empty() {
                    true => Ok(Vec::new()),
                    false => self.call(lane, conn.clone(), &batch.jobs).await,
                }
            },
            async {
                match batch.reads.is_empty() {
                    true => Ok(Vec::new()),
                    false => self.confirm(lane, conn.clone(), &batch.reads).await,
                }
            },
            async {
                match batch.spends.is_empty() {
                    true => Ok(Vec::new()),
                    false => self.spend(lane, conn.clone(), &batch.spends).await,
                }
            },
        )
        .await;
        match decided {
            Ok(answers) => {
                for (job, answer) in batch.jobs.drain(..).zip(answers) {
                    self.deferred.observe(&job.call, job.seq, Some(answer));
                    if let Some(reply) = job.reply {
                        let _ = reply.send(Ok(answer));
                    }
                }
            }
            Err(e) => self.fail_jobs(&mut batch.jobs, &e),
        }
        match confirmed {
            Ok(current) => {
                for (read, current) in batch.reads.drain(..).zip(current) {
                    let _ = read.reply.send(Ok(current));
                }
            }
            Err(e) => fail_reads(&mut batch.reads, &e),
        }
        match spent {
            Ok(replies) => {
                for (spend, reply) in batch.spends.drain(..).zip(replies) {
                    let _ = spend.reply.send(reply);
                }
            }
            Err(e) => fail_spends(&mut batch.spends, &e),
        }
    }

    /// Answers every job, read and spend of `batch` with `e`.
    fn fail(&self, batch: &mut Batch, e: &StoreError) {
        self.fail_jobs(&mut batch.jobs, e);
        fail_reads(&mut batch.reads, e);
        fail_spends(&mut batch.spends, e);
    }

    /// The replies of `spends`, in script calls of [`MAX_SPENDS`] sent together (one
    /// pipeline; on a cluster one call per shard of the credits, each in its slot, sent
    /// together). A call Redis answers NOSCRIPT for (a restart, `SCRIPT FLUSH`, a node
    /// without it) is sent again once the script is loaded.
    async fn spend(
        &self,
        lane: &Lane,
        mut conn: AsyncConn,
        spends: &[Spend],
    ) -> Result<Vec<Result<redis::Value, StoreError>>, StoreError> {
        let failed = |e: redis::RedisError| self.failed(lane, &e);
        let hash = self.spend_script.get_hash();
        // Calls of at most MAX_SPENDS spends, each of one shard on a cluster.
        let cluster = matches!(conn, AsyncConn::Cluster(_));
        let mut order: Vec<usize> = (0..spends.len()).collect();
        if cluster {
            order.sort_by_key(|&i| spends[i].args.shard);
        }
        let same = |a: &usize, b: &usize| !cluster || spends[*a].args.shard == spends[*b].args.shard;
        let groups: Vec<&[usize]> = order.chunk_by(same).flat_map(|run| run.chunks(MAX_SPENDS)).collect();
        let calls: Vec<redis::Cmd> =
            groups.iter().map(|g| spends_call(hash, g.iter().map(|&i| &spends[i].args))).collect();
        let mut replies = send_all(&mut conn, calls.iter()).await.map_err(failed)?;
        let again: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Err(e) if super::script::is_no_script(e)))
            .collect();
        if !again.is_empty() {
            self.spend_script.load_async(&mut conn).await.map_err(failed)?;
            let resent = send_all(&mut conn, again.iter().map(|&i| &calls[i])).await.map_err(failed)?;
            for (i, reply) in again.into_iter().zip(resent) {
                replies[i] = reply;
            }
        }
        let mut out: Vec<Option<Result<redis::Value, StoreError>>> =
            (0..spends.len()).map(|_| None).collect();
        for (reply, group) in replies.into_iter().zip(groups) {
            match reply {
                Ok(redis::Value::Array(answers)) if answers.len() == group.len() => {
                    for (&i, answer) in group.iter().zip(answers) {
                        out[i] = Some(Ok(answer));
                    }
                }
                other => {
                    let e = match other {
                        Err(e) => format!("Redis: {e}"),
                        Ok(_) => "Redis: unexpected spends answer".to_string(),
                    };
                    for &i in group {
                        out[i] = Some(Err(StoreError::Unavailable(e.clone())));
                    }
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Unavailable("Redis: no spends answer".into()))))
            .collect())
    }

    fn fail_jobs(&self, jobs: &mut Vec<Job>, e: &StoreError) {
        for job in jobs.drain(..) {
            self.deferred.observe(&job.call, job.seq, None);
            if let Some(reply) = job.reply {
                let _ = reply.send(Err(unavailable(e)));
            }
        }
    }

    /// The lane's connection, connected when it has none.
    async fn conn(&self, lane: &Lane) -> Result<AsyncConn, StoreError> {
        self.outage.check()?;
        let existing = lane.state.lock().conn.clone();
        match existing {
            Some(c) => Ok(c),
            None => {
                let c = self.connect().await.inspect_err(|_| self.outage.down())?;
                self.outage.up();
                lane.state.lock().conn = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// Whether each of `reads` still holds: one `MGET` of the counters' epoch and of every
    /// counter they name (each once; all in the `{cc}` slot, so one node of a cluster).
    async fn confirm(
        &self,
        lane: &Lane,
        mut conn: AsyncConn,
        reads: &[Read],
    ) -> Result<Vec<bool>, StoreError> {
        // Every key written into one buffer, then each distinct one numbered.
        let mut keys = String::new();
        let mut spans = Vec::new();
        for read in reads {
            for i in 0..read.check.counters() {
                let from = keys.len();
                keys.push_str(&self.prefix);
                keys.push_str("{cc}:");
                let value = read.check.counter(i, &mut keys);
                spans.push((from..keys.len(), value));
            }
        }
        let mut numbered: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
        let mut cmd = redis::cmd("MGET");
        cmd.arg(counters_epoch_key(&self.prefix));
        let at: Vec<usize> = spans
            .iter()
            .map(|(span, _)| {
                let key = &keys[span.clone()];
                let next = numbered.len() + 1;
                *numbered.entry(key).or_insert_with(|| {
                    cmd.arg(key);
                    next
                })
            })
            .collect();
        self.stats[2].fetch_add(1, Ordering::Relaxed);
        self.stats[3].fetch_add(reads.len() as u64, Ordering::Relaxed);
        let values: Vec<Option<u64>> = cmd.query_async(&mut conn).await.map_err(|e| self.failed(lane, &e))?;
        if values.len() != numbered.len() + 1 {
            return Err(StoreError::Unavailable("Redis: unexpected counters answer".into()));
        }
        let mut next = 0;
        Ok(reads
            .iter()
            .map(|read| {
                let mut holds = values[0].is_some_and(|epoch| epoch == read.check.epoch());
                for _ in 0..read.check.counters() {
                    holds &= values[at[next]].unwrap_or(0) == spans[next].1;
                    next += 1;
                }
                holds
            })
            .collect())
    }

    /// A failed command: counted, the lane's connection dropped (its reply stream may be
    /// out of step), and the error to answer.
    fn failed(&self, lane: &Lane, e: &redis::RedisError) -> StoreError {
        metrics::counter!("keygate_store_errors_total", "store" => "redis").increment(1);
        lane.state.lock().conn = None;
        StoreError::Unavailable(format!("Redis: {e}"))
    }

    async fn call(&self, lane: &Lane, mut conn: AsyncConn, batch: &[Job]) -> Result<Vec<Answer>, StoreError> {
        self.stats[0].fetch_add(1, Ordering::Relaxed);
        self.stats[1].fetch_add(batch.len() as u64, Ordering::Relaxed);
        metrics::histogram!("keygate_redis_batch_size").record(batch.len() as f64);
        let calls: Vec<&Call> = batch.iter().map(|j| &j.call).collect();
        let reply = match &conn {
            AsyncConn::Single(_) => run_script(&mut conn, &self.script, &self.prefix, &calls, true).await,
            AsyncConn::Cluster(_) => self.decide_on_cluster(&mut conn, &calls).await,
        };
        reply.map_err(|e| self.failed(lane, &e))
    }

    /// On a Redis Cluster a script's keys must share a slot: the batch's checks (overrides
    /// epochs and change counters, all in the `{cc}` slot) are read first, in one `MGET`;
    /// then the calls whose checks hold are decided with one script call per slot, sent
    /// together. A change answered before this batch was queued is in what the `MGET` reads.
    async fn decide_on_cluster(
        &self,
        conn: &mut AsyncConn,
        calls: &[&Call],
    ) -> redis::RedisResult<Vec<Answer>> {
        let checks = Checks::of(calls);
        let values: Vec<Option<u64>> = match checks.keys(&self.prefix) {
            keys if keys.is_empty() => Vec::new(),
            keys => redis::cmd("MGET").arg(keys).query_async(conn).await?,
        };
        let (mut out, groups) = decide_separately(calls, &checks, &values);
        let runs = groups.iter().map(|group| {
            let mut conn = conn.clone();
            let group: Vec<&Call> = group.iter().map(|&i| calls[i]).collect();
            async move { run_script(&mut conn, &self.script, &self.prefix, &group, false).await }
        });
        for (group, answers) in groups.iter().zip(futures_util::future::join_all(runs).await) {
            for (&i, answer) in group.iter().zip(answers?) {
                out[i] = Some(answer);
            }
        }
        Ok(out.into_iter().map(|a| a.unwrap_or(Answer::Stale)).collect())
    }

    async fn connect(&self) -> Result<AsyncConn, StoreError> {
        let connecting = async {
            match &self.target {
                Target::Single(client) => client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await
                    .map(AsyncConn::Single),
                Target::Cluster(client) => client.get_async_connection().await.map(AsyncConn::Cluster),
            }
        };
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("Redis: {e}"))),
            Err(_) => Err(StoreError::Unavailable("Redis: connect timed out".into())),
        }
    }
}

fn unavailable(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(why) => StoreError::Unavailable(why.clone()),
        other => StoreError::Unavailable(other.to_string()),
    }
}

fn fail_spends(spends: &mut Vec<Spend>, e: &StoreError) {
    for spend in spends.drain(..) {
        let _ = spend.reply.send(Err(unavailable(e)));
    }
}

fn fail_reads(reads: &mut Vec<Read>, e: &StoreError) {
    for read in reads.drain(..) {
        let _ = read.reply.send(Err(unavailable(e)));
    }
}
