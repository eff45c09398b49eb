//! The background upkeep of an in-process keygate: each task on a thread of its own, at
//! its interval, stopped together.

use crate::Runtime;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often idle expired rate-limit windows are reclaimed.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// How often the database's change counters are polled for writes made by other processes
/// (local counters; the documented bound is twice this).
pub const COUNTER_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often recent counter changes are published to the shared store again, and how far
/// back (shared counters: closes the gap a writer leaves that committed but did not publish);
/// also how often root keys' uses are written (`lastUsedAt`).
pub const COUNTER_RECONCILE_INTERVAL: Duration = Duration::from_secs(1);
/// How often the live credit counters (in Redis) are written behind to the database: the
/// bound on what a loss of Redis re-grants (`docs/operations.md`).
pub const CREDIT_WRITE_BEHIND_INTERVAL: Duration = Duration::from_secs(1);
/// How often SQLite's WAL is checkpointed in the background
/// ([`keygate_store::WAL_AUTOCHECKPOINT_PAGES`] says why).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// How often the analytics flush runs: each time it writes the verification series that
/// are due (those that waited [`keygate_analytics::flush::WRITE_AFTER_FLUSHES`] flushes:
/// they reach the API within 3 s), and every
/// [`keygate_analytics::flush::LIMITS_EVERY_FLUSHES`]th flush the rate-limit counts.
pub const ANALYTICS_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// How often the webhook worker looks for due deliveries of every instance (a round that
/// finds a full batch looks again at once); this process's own events are sent as they are
/// written.
pub const WEBHOOK_DELIVERY_INTERVAL: Duration = Duration::from_millis(200);
/// How long a webhook round goes on, after its deliveries, sending this process's events as
/// they are written (most of the round: the thread sleeps for the rest).
const WEBHOOK_WAKE_WAIT: Duration = Duration::from_millis(195);
/// The pause between an event written and its delivery claimed (its commit).
const WEBHOOK_COMMIT_PAUSE: Duration = Duration::from_millis(2);
/// How often the webhook backlog's gauges are read.
const WEBHOOK_BACKLOG_INTERVAL: Duration = Duration::from_secs(10);
/// How often the usage export looks for closed periods (`keygate_metering`).
pub const USAGE_EXPORT_INTERVAL: Duration = Duration::from_secs(5);
/// How often the roll-up and retention of analytics run.
const ANALYTICS_ROLLUP_INTERVAL: Duration = Duration::from_secs(600);

/// Starts the background upkeep of the runtime `host` holds, each task on a thread of its
/// own: the sweep of ended rate-limit windows, the change counters (polled, or
/// republished to Redis; with Redis, the overrides epochs that local denials rely on), the
/// credit write-behind (with Redis) and the analytics flush and roll-up (when analytics
/// are on). The threads stop when `host` is dropped, or when the returned [`Upkeep`] is
/// stopped or dropped (which waits for a task under way to finish: a process that ends
/// right after has no thread left in the database's client library).
pub fn spawn_upkeep<T: AsRef<Runtime> + Send + Sync + 'static>(host: Weak<T>) -> Upkeep {
    let mut upkeep = Upkeep::default();
    let Some(strong) = host.upgrade() else { return upkeep };
    let (redis, analytics) =
        (strong.as_ref().as_ref().redis.is_some(), strong.as_ref().as_ref().analytics_settings);
    let sqlite = strong.as_ref().as_ref().rbac.store().backend().kind() == "sqlite";
    // When the live credit counters were last written behind (the lag an alert watches:
    // deploy/prometheus/keygate-rules.yml), counted from the start.
    let written = |h: &T| {
        let now = h.as_ref().rbac.clock().now_ms() as f64 / 1000.0;
        metrics::gauge!("keygate_credit_writebehind_last_success_timestamp_seconds").set(now);
    };
    if redis {
        written(&strong);
    }
    drop(strong);
    if sqlite {
        upkeep.spawn("keygate-checkpoint", CHECKPOINT_INTERVAL, host.clone(), |h: &T, _| {
            if let Err(e) = h.as_ref().rbac.store().checkpoint() {
                log::debug!("SQLite: a background checkpoint failed (the next one tries again): {e}");
            }
        });
    }
    upkeep.spawn("keygate-sweeper", SWEEP_INTERVAL, host.clone(), |h: &T, _| {
        let rt = h.as_ref();
        rt.limiter.sweep(rt.rbac.clock().now_ms());
    });
    upkeep.spawn("keygate-counters", COUNTER_POLL_INTERVAL, host.clone(), |h: &T, round| {
        let rt = h.as_ref();
        if let Err(e) = rt.rbac.poll_changes() {
            log::warn!("change counters: polling the database failed: {e}");
        }
        if let Some(redis) = &rt.redis
            && let Err(e) = redis.poll_overrides_epochs()
        {
            log::debug!("local denials: reading the overrides epochs failed (they pause): {e}");
        }
        let every = (COUNTER_RECONCILE_INTERVAL.as_millis() / COUNTER_POLL_INTERVAL.as_millis()) as u64;
        if round % every == every - 1 {
            if let Err(e) = rt.rbac.reconcile_shared_counters() {
                log::warn!("change counters: publishing recent changes failed: {e}");
            }
            rt.rbac.flush_root_key_uses();
        }
    });
    if redis {
        upkeep.spawn(
            "keygate-credits-behind",
            CREDIT_WRITE_BEHIND_INTERVAL,
            host.clone(),
            move |h: &T, _| match h.as_ref().usage.write_behind_credits() {
                Ok(_) => written(h),
                Err(e) => log::warn!("credits: writing the live counters behind to the database failed: {e}"),
            },
        );
    }
    let every = (WEBHOOK_BACKLOG_INTERVAL.as_millis() / WEBHOOK_DELIVERY_INTERVAL.as_millis()) as u64;
    let scan_every = (keygate_webhooks::expiry::EXPIRY_SCAN_INTERVAL.as_millis()
        / WEBHOOK_DELIVERY_INTERVAL.as_millis()) as u64;
    let prune_every = (keygate_webhooks::retention::PRUNE_INTERVAL.as_millis()
        / WEBHOOK_DELIVERY_INTERVAL.as_millis()) as u64;
    upkeep.spawn(
        "keygate-webhooks",
        WEBHOOK_DELIVERY_INTERVAL - WEBHOOK_WAKE_WAIT,
        host.clone(),
        move |h: &T, round| {
            let webhooks = &h.as_ref().webhooks;
            // Full batches in a row while a backlog lasts.
            let deliver = || loop {
                match webhooks.deliver_due() {
                    Ok(n) if n >= keygate_webhooks::deliver::CLAIM_BATCH => continue,
                    Ok(_) => break,
                    Err(e) => {
                        log::warn!("webhooks: claiming due deliveries failed (tried again shortly): {e}");
                        break;
                    }
                }
            };
            deliver();
            // Until the next round, this process's own events are sent as they are written
            // (a moment later, for their transaction to commit); other instances' at the round.
            let until = std::time::Instant::now() + WEBHOOK_WAKE_WAIT;
            while let Some(left) = until.checked_duration_since(std::time::Instant::now())
                && webhooks.outbox().wait(left)
            {
                std::thread::sleep(WEBHOOK_COMMIT_PAUSE);
                deliver();
            }
            if round % every == 0
                && let Err(e) = webhooks.observe_backlog()
            {
                log::debug!("webhooks: reading the backlog failed: {e}");
            }
            if round % scan_every == 0
                && let Err(e) = webhooks.scan_expiry()
            {
                log::warn!("webhooks: the scan for expiring keys failed (tried again later): {e}");
            }
            if round % prune_every == 1 {
                match webhooks.prune_history() {
                    Ok((0, 0)) => {}
                    Ok((d, e)) => {
                        log::info!("webhooks: retention deleted {d} finished deliveries and {e} events")
                    }
                    Err(e) => log::warn!("webhooks: retention failed (tried again later): {e}"),
                }
            }
        },
    );
    if strong_has_metering(&host) {
        upkeep.spawn("keygate-usage-export", USAGE_EXPORT_INTERVAL, host.clone(), |h: &T, _| {
            if let Some(m) = &h.as_ref().metering
                && let Err(e) = m.export_due()
            {
                log::warn!("usage export: writing the closed periods failed (tried again shortly): {e}");
            }
        });
    }
    if let Some(a) = analytics {
        let every = (ANALYTICS_ROLLUP_INTERVAL.as_millis() / ANALYTICS_FLUSH_INTERVAL.as_millis()) as u64;
        upkeep.spawn("keygate-analytics", ANALYTICS_FLUSH_INTERVAL, host, move |h: &T, round| {
            let rt = h.as_ref();
            if let Err(e) = rt.analytics.flush_analytics_due() {
                log::warn!("analytics: writing the counts failed (kept for the next try): {e}");
            }
            // The first roll-up at the first flush, then every ANALYTICS_ROLLUP_INTERVAL.
            if round % every == 0
                && let Err(e) = rt.analytics.roll_up_analytics(a.retention_days)
            {
                log::warn!("analytics: the roll-up failed (tried again later): {e}");
            }
        });
    }
    upkeep
}

/// Whether the runtime `host` holds exports usage.
fn strong_has_metering<T: AsRef<Runtime>>(host: &Weak<T>) -> bool {
    host.upgrade().is_some_and(|h| h.as_ref().as_ref().metering.is_some())
}

/// Background threads that each run a task at an interval, and stop together: when
/// [`Upkeep::stop`] is called or the `Upkeep` is dropped (each woken at once, a task under
/// way finished first), or when the host they serve is dropped.
#[derive(Debug, Default)]
pub struct Upkeep {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Upkeep {
    /// Runs `task` every `interval`, first after one interval (with the round's number), on
    /// a thread named `name`, while `host` lives and until stopped.
    pub fn spawn<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        interval: Duration,
        host: Weak<T>,
        task: impl Fn(&T, u64) + Send + 'static,
    ) {
        self.spawn_from(name, interval, interval, host, task);
    }

    /// As [`Self::spawn`], the first run at once.
    pub fn spawn_now<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        interval: Duration,
        host: Weak<T>,
        task: impl Fn(&T, u64) + Send + 'static,
    ) {
        self.spawn_from(name, Duration::ZERO, interval, host, task);
    }

    fn spawn_from<T: Send + Sync + 'static>(
        &mut self,
        name: &str,
        first: Duration,
        interval: Duration,
        host: Weak<T>,
        task: impl Fn(&T, u64) + Send + 'static,
    ) {
        let stop = self.stop.clone();
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            let mut wait = first;
            for round in 0u64.. {
                let deadline = std::time::Instant::now() + wait;
                wait = interval;
                loop {
                    if stop.load(std::sync::atomic::Ordering::Acquire) {
                        return;
                    }
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        break;
                    }
                    std::thread::park_timeout(deadline - now);
                }
                let Some(host) = host.upgrade() else { return };
                task(&host, round);
            }
        });
        match spawned {
            Ok(handle) => self.threads.push(handle),
            Err(e) => log::warn!("could not start {name}: {e}"),
        }
    }

    /// Stops every thread and waits for them (a task under way finishes first).
    pub fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        for t in &self.threads {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.stop();
    }
}
