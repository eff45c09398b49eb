//! The delivery worker: each round records the answers that came in since the last one,
//! then claims the due deliveries nobody holds (a lease of [`LEASE_MS`], so any number of
//! instances share the work and each delivery is sent by one; a dead instance's claims
//! are taken over when their lease ends) and starts sending them, signed. Sends run on
//! their own: a receiver that hangs holds its own request until [`DELIVERY_TIMEOUT`],
//! never another's; a workspace with [`MAX_IN_FLIGHT_PER_WORKSPACE`] requests open is
//! not claimed for until some end, so one tenant's slow receivers cannot take the
//! instance's [`MAX_IN_FLIGHT`] from the others. Each answer is recorded with where the
//! delivery goes next: done on a 2xx, retried after [`RETRY_DELAYS_MS`], failed when
//! those run out, and the endpoint disabled on a 410.
//!
//! A request never follows a redirect, never waits past [`DELIVERY_TIMEOUT`], reads at
//! most [`MAX_RESPONSE_BYTES`] of the answer, ignores proxy settings, and connects only to
//! addresses [`crate::address`] allows, resolved at the delivery.

use crate::Attempt;
use crate::address::{CheckedResolver, Names, forbidden, is_local_name};
use crate::sinks::{SINK_PREFIX, Sink};
use crate::{Delivery, DeliveryStatus, Endpoint, EndpointSecrets, WebhookService, WebhookStore, signing};
use keygate_rbac::{RbacError, StorageError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A 2xx within this is a success; anything later is a failed attempt.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a claim holds a delivery: past the timeout with room for the answer's record,
/// so a live instance's claim does not end under it; and short, since a claim of an
/// instance that died is taken over only when it ends.
pub const LEASE_MS: i64 = 15_000;
/// The most of an answer's body read.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// The most of an answer's body kept in the delivery log.
pub const KEPT_RESPONSE_BYTES: usize = 2 * 1024;
/// The waits before the retries of a failed delivery (API-v2.md §23): 5 s, 5 min, 30 min,
/// 2 h, 5 h, 10 h, 10 h; after the last retry fails, the delivery is failed.
pub const RETRY_DELAYS_MS: [i64; 7] =
    [5_000, 5 * 60_000, 30 * 60_000, 2 * 3_600_000, 5 * 3_600_000, 10 * 3_600_000, 10 * 3_600_000];
/// What an attempt came to, as `keygate_webhook_deliveries_total{outcome}` counts it.
pub const OUTCOMES: [&str; 4] = ["succeeded", "retry", "failed", "gone"];
/// The most deliveries one claim takes.
pub const CLAIM_BATCH: usize = 128;
/// The most requests an instance has open at once.
pub const MAX_IN_FLIGHT: usize = 1_024;
/// Past this many open requests of a workspace, the claims leave its deliveries for later
/// (one claim may take up to [`CLAIM_BATCH`] more before that).
pub const MAX_IN_FLIGHT_PER_WORKSPACE: usize = 128;

/// The requests on their way, and the answers not recorded yet.
#[derive(Debug, Default)]
struct Flights {
    open: usize,
    by_workspace: HashMap<String, usize>,
    answered: Vec<(Delivery, Answer)>,
}

impl Flights {
    fn started(&mut self, workspace: &str) {
        self.open += 1;
        *self.by_workspace.entry(workspace.to_string()).or_default() += 1;
    }

    fn ended(&mut self, d: Delivery, answer: Answer) {
        self.open = self.open.saturating_sub(1);
        if let Some(n) = self.by_workspace.get_mut(&d.workspace_id) {
            *n -= 1;
            if *n == 0 {
                self.by_workspace.remove(&d.workspace_id);
            }
        }
        self.answered.push((d, answer));
    }
}

/// The HTTP clients, the runtime their requests run on, and what is in flight.
#[derive(Debug)]
pub struct Sender {
    /// Always `Some` but while dropped.
    rt: Option<tokio::runtime::Runtime>,
    /// Endpoints': names looked up through [`CheckedResolver`].
    client: reqwest::Client,
    /// Sinks' ([`crate::sinks`]): the system's resolver, any address.
    sink_client: reqwest::Client,
    flights: Arc<Mutex<Flights>>,
}

impl Drop for Sender {
    /// Without waiting (the requests still open are dropped; their leases end and they
    /// are sent again): the service may be dropped on an async runtime's thread (a
    /// server's shutdown), where a runtime may not block to stop.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Sender {
    fn new(allow_private: bool, names: Names) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("keygate-webhook-send")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let builder = || {
            reqwest::Client::builder()
                .timeout(DELIVERY_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .user_agent(concat!("keygate-webhooks/", env!("CARGO_PKG_VERSION")))
        };
        let client = builder()
            .dns_resolver(Arc::new(CheckedResolver { allow_private, names }))
            .build()
            .map_err(|e| e.to_string())?;
        let sink_client = builder().build().map_err(|e| e.to_string())?;
        Ok(Self { rt: Some(rt), client, sink_client, flights: Arc::default() })
    }
}

/// What one attempt sends.
struct Job {
    delivery: Delivery,
    url: String,
    body: String,
    to: To,
}

/// Where a job goes: an endpoint (signed with these secrets) or a sink.
enum To {
    Endpoint { secrets: Vec<String> },
    Sink(Sink),
}

/// How an attempt went.
#[derive(Debug)]
struct Answer {
    status: Option<u16>,
    error: Option<String>,
    response: Option<String>,
    took: Duration,
    /// Whether a failure is retried (not when the endpoint went or is disabled).
    retry: bool,
}

impl Answer {
    fn error(why: impl Into<String>) -> Self {
        Self { status: None, error: Some(why.into()), response: None, took: Duration::ZERO, retry: true }
    }

    /// A delivery that cannot be sent at all: failed without a retry.
    fn unsendable(why: String) -> Self {
        Self { retry: false, ..Self::error(why) }
    }
}

impl<S: WebhookStore> WebhookService<S> {
    fn sender(&self) -> Result<&Sender, RbacError> {
        self.sender
            .get_or_init(|| Sender::new(self.allow_private, self.names))
            .as_ref()
            .map_err(|e| RbacError::Storage(StorageError::Internal(format!("the webhook client: {e}"))))
    }

    /// One round of the worker: records the answers that came in, then claims due
    /// deliveries (at most [`CLAIM_BATCH`], within [`MAX_IN_FLIGHT`]) and starts sending
    /// them; how many it claimed. A claim is a write: it is made only when a read finds
    /// something due.
    pub fn deliver_due(&self) -> Result<usize, RbacError> {
        // The client and its runtime are made for the first delivery claimed: an instance
        // whose workspaces have no endpoint never starts them.
        let (answered, room, skip) = match self.sender.get() {
            Some(Ok(sender)) => {
                let mut f = sender.flights.lock();
                let skip: Vec<String> = f
                    .by_workspace
                    .iter()
                    .filter(|(_, n)| **n >= MAX_IN_FLIGHT_PER_WORKSPACE)
                    .map(|(w, _)| w.clone())
                    .collect();
                (std::mem::take(&mut f.answered), MAX_IN_FLIGHT.saturating_sub(f.open), skip)
            }
            _ => (Vec::new(), MAX_IN_FLIGHT, Vec::new()),
        };
        if !answered.is_empty()
            && let Err(e) = self.record(answered)
        {
            log::warn!(
                "webhooks: recording answers failed (their leases end, then they are sent again): {e}"
            );
        }
        let now = self.now();
        let store = self.rbac.store();
        if room == 0 || !store.webhook_read(|tx| Ok(tx.webhook_due(now)?))? {
            return Ok(0);
        }
        let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
        let claimed = store.webhook_transaction(|tx| {
            Ok(tx.claim_webhook_deliveries(
                &self.instance,
                now,
                now + LEASE_MS,
                room.min(CLAIM_BATCH),
                &skip,
            )?)
        })?;
        let n = claimed.len();
        if n == 0 {
            return Ok(0);
        }
        let sender = self.sender()?;
        let (bodies, endpoints) = store.webhook_read(|tx| {
            let mut events: Vec<&str> = claimed.iter().map(|d| d.event_id.as_str()).collect();
            let mut ids: Vec<&str> = claimed.iter().map(|d| d.endpoint_id.as_str()).collect();
            for list in [&mut events, &mut ids] {
                list.sort_unstable();
                list.dedup();
            }
            Ok((tx.webhook_event_bodies(&events)?, tx.webhook_endpoints_by_ids(&ids)?))
        })?;
        let bodies: HashMap<String, String> = bodies.into_iter().collect();
        let endpoints: HashMap<String, (Endpoint, EndpointSecrets)> =
            endpoints.into_iter().map(|(e, s)| (e.id.clone(), (e, s))).collect();
        let rt = sender
            .rt
            .as_ref()
            .ok_or_else(|| RbacError::Storage(StorageError::Internal("no runtime".into())))?;
        let ts = now.div_euclid(1000);
        for d in claimed {
            let job = match self.job(d, &bodies, &endpoints, now) {
                Ok(job) => job,
                Err(not) => {
                    let (d, why) = *not;
                    sender.flights.lock().answered.push((d, Answer::unsendable(why)));
                    continue;
                }
            };
            let client = match job.to {
                To::Sink(_) => sender.sink_client.clone(),
                To::Endpoint { .. } => match self.refused_literal(&job.url) {
                    Some(why) => {
                        sender.flights.lock().answered.push((job.delivery, Answer::error(why)));
                        continue;
                    }
                    None => sender.client.clone(),
                },
            };
            sender.flights.lock().started(&job.delivery.workspace_id);
            let (flights, outbox) = (sender.flights.clone(), self.outbox.clone());
            rt.spawn(async move {
                let (d, answer) = send(&client, job, ts).await;
                flights.lock().ended(d, answer);
                outbox.wake();
            });
        }
        Ok(n)
    }

    /// At shutdown, after the worker stopped: waits up to `limit` for the requests still
    /// open, and records the answers in; how many requests were left open (their leases
    /// end, and another instance, or this one restarted, sends them again).
    pub fn finish_sending(&self, limit: Duration) -> Result<usize, RbacError> {
        let Some(Ok(sender)) = self.sender.get() else { return Ok(0) };
        let until = Instant::now() + limit;
        while sender.flights.lock().open > 0
            && let Some(left) = until.checked_duration_since(Instant::now())
        {
            self.outbox.wait(left.min(Duration::from_millis(50)));
        }
        let (answered, open) = {
            let mut f = sender.flights.lock();
            (std::mem::take(&mut f.answered), f.open)
        };
        if !answered.is_empty() {
            self.record(answered)?;
        }
        Ok(open)
    }

    /// What the delivery sends, or why it cannot be sent (its endpoint went or is
    /// disabled: the delivery fails without an attempt on the wire).
    fn job(
        &self,
        d: Delivery,
        bodies: &HashMap<String, String>,
        endpoints: &HashMap<String, (Endpoint, EndpointSecrets)>,
        now: i64,
    ) -> Result<Job, Box<(Delivery, String)>> {
        let Some(body) = bodies.get(&d.event_id).cloned() else {
            return Err(Box::new((d, "the event is gone".into())));
        };
        if d.endpoint_id.starts_with(SINK_PREFIX) {
            return match self.sinks.iter().find(|s| s.id == d.endpoint_id) {
                Some(sink) => {
                    Ok(Job { delivery: d, url: sink.url.clone(), body, to: To::Sink(sink.clone()) })
                }
                None => Err(Box::new((d, "the sink is no longer configured".into()))),
            };
        }
        let Some((endpoint, secrets)) = endpoints.get(&d.endpoint_id) else {
            return Err(Box::new((d, "the endpoint is gone".into())));
        };
        if !endpoint.enabled {
            return Err(Box::new((d, "the endpoint is disabled".into())));
        }
        match self.signing_secrets(endpoint, secrets, now) {
            Ok(secrets) => {
                Ok(Job { delivery: d, url: endpoint.url.clone(), body, to: To::Endpoint { secrets } })
            }
            Err(why) => Err(Box::new((d, why))),
        }
    }

    /// The secrets that sign now: the current one, and the one before a rotation while
    /// its overlap lasts.
    fn signing_secrets(&self, e: &Endpoint, s: &EndpointSecrets, now: i64) -> Result<Vec<String>, String> {
        let keyring = self.rbac.vault().map(|v| &**v);
        let mut out = vec![signing::open(keyring, &e.workspace_id, &e.id, &s.current)?];
        if let (Some(previous), Some(until)) = (&s.previous, s.previous_until)
            && until > now
        {
            out.push(signing::open(keyring, &e.workspace_id, &e.id, previous)?);
        }
        Ok(out)
    }

    /// Why a URL whose host is an address literal or a local name may not be called (the
    /// resolver sees names only).
    fn refused_literal(&self, url: &str) -> Option<String> {
        if self.allow_private {
            return None;
        }
        let parsed = url::Url::parse(url).ok()?;
        match parsed.host()? {
            url::Host::Ipv4(ip) => forbidden(ip.into()).map(|why| format!("{ip} is {why}")),
            url::Host::Ipv6(ip) => forbidden(ip.into()).map(|why| format!("{ip} is {why}")),
            url::Host::Domain(name) => is_local_name(name).then(|| format!("{name} is this machine")),
        }
    }

    /// Records attempts and where each delivery goes next, in one transaction.
    fn record(&self, round: Vec<(Delivery, Answer)>) -> Result<(), RbacError> {
        let now = self.now();
        let mut outcomes = Vec::with_capacity(round.len());
        let mut attempts = Vec::with_capacity(round.len());
        for (d, answer) in round {
            let (status, next, outcome) = match answer.status {
                Some(s) if (200..300).contains(&s) => (DeliveryStatus::Succeeded, None, "succeeded"),
                Some(410) => (DeliveryStatus::Failed, None, "gone"),
                _ => match usize::try_from(d.attempts).ok().and_then(|n| RETRY_DELAYS_MS.get(n)) {
                    Some(wait) if answer.retry => (DeliveryStatus::Pending, Some(now + wait), "retry"),
                    _ => (DeliveryStatus::Failed, None, "failed"),
                },
            };
            let attempt = Attempt {
                delivery_id: d.id,
                attempt: d.attempts + 1,
                at: now,
                status: answer.status.map(i64::from),
                error: answer.error,
                response: answer.response,
                duration_ms: i64::try_from(answer.took.as_millis()).unwrap_or(i64::MAX),
            };
            outcomes.push((outcome, d.endpoint_id));
            attempts.push((attempt, status, next));
        }
        let held = self.rbac.store().webhook_transaction(|tx| {
            let held = tx.finish_webhook_attempts(&self.instance, &attempts)?;
            // Not held any more: another instance took the delivery over; its answer stands.
            for ((outcome, endpoint_id), held) in outcomes.iter().zip(&held) {
                if *held && *outcome == "gone" {
                    tx.disable_webhook_endpoint(endpoint_id, now)?;
                }
            }
            Ok(held)
        })?;
        for ((outcome, _), held) in outcomes.iter().zip(held) {
            if held {
                metrics::counter!("keygate_webhook_deliveries_total", "outcome" => *outcome).increment(1);
            }
        }
        Ok(())
    }

    /// Sets the backlog gauges: pending deliveries, and the age of the oldest.
    pub fn observe_backlog(&self) -> Result<(), RbacError> {
        let (pending, oldest) = self.rbac.store().webhook_read(|tx| Ok(tx.webhook_backlog()?))?;
        metrics::gauge!("keygate_webhook_pending_deliveries").set(pending as f64);
        let age = oldest.map_or(0.0, |at| (self.now() - at).max(0) as f64 / 1000.0);
        metrics::gauge!("keygate_webhook_oldest_pending_seconds").set(age);
        Ok(())
    }
}

/// One attempt on the wire: to an endpoint signed at `ts` (unix seconds); to a sink with
/// its headers, and the event's id as `Idempotency-Key`.
async fn send(client: &reqwest::Client, job: Job, ts: i64) -> (Delivery, Answer) {
    let Job { delivery, url, body, to } = job;
    let started = Instant::now();
    let request = match to {
        To::Endpoint { secrets } => {
            let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
            let signature = signing::signature_header(&secrets, &delivery.event_id, ts, &body);
            client
                .post(&url)
                .header("content-type", "application/json")
                .header("webhook-id", &delivery.event_id)
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", signature)
        }
        To::Sink(sink) => {
            let mut request = client
                .post(&url)
                .header("content-type", sink.content_type)
                .header("idempotency-key", &delivery.event_id);
            for (name, value) in &sink.headers {
                request = request.header(*name, value.expose());
            }
            request
        }
    };
    let request = request.body(body);
    let mut answer = match request.send().await {
        Ok(response) => read_answer(response).await,
        Err(e) => Answer::error(describe(&e)),
    };
    answer.took = started.elapsed();
    (delivery, answer)
}

/// The status and the start of the body (at most [`MAX_RESPONSE_BYTES`] read).
async fn read_answer(mut response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let mut body = Vec::new();
    let mut error = None;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_RESPONSE_BYTES - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() >= MAX_RESPONSE_BYTES {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(describe(&e));
                break;
            }
        }
    }
    body.truncate(KEPT_RESPONSE_BYTES);
    let response = (!body.is_empty()).then(|| String::from_utf8_lossy(&body).into_owned());
    // A body cut short by the timeout is a failed attempt, whatever the status said.
    let status = if error.is_some() { None } else { Some(status) };
    Answer { status, error, response, took: Duration::ZERO, retry: true }
}

/// A transport error in a line: a timeout, a refused connection, a refused address.
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {} s", DELIVERY_TIMEOUT.as_secs());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
