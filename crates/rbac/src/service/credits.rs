//! Credits (API-v2.md §12.1, §12.4): a key's remaining uses and how they refill; the rules
//! of a credit setting, and `keys.updateCredits` on the key's counter.

use super::*;
use crate::{Credits, Refill, RefillInterval};

/// What `keys.updateCredits` does with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditOp {
    /// `remaining` becomes the value (`None`: unlimited, refill cleared).
    Set,
    Increment,
    /// Floors at 0.
    Decrement,
}

/// A refill as a request gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillSpec {
    pub interval: RefillInterval,
    pub amount: u64,
    pub day: Option<u64>,
}

/// The credit setting a request asks for (`path`: the field, `credits`): `remaining`
/// `None` is unlimited, which takes no refill; `refillDay` (1–31) is monthly only; an
/// amount is at least 1.
pub fn credit_setting(
    path: &str,
    remaining: Option<u64>,
    refill: Option<RefillSpec>,
) -> Result<Option<Credits>, ValidationError> {
    let Some(remaining) = remaining else {
        return match refill {
            Some(_) => {
                Err(ValidationError::new(format!("{path}.refill"), "needs remaining credits (not null)"))
            }
            None => Ok(None),
        };
    };
    let refill = refill.map(|r| check_refill(&format!("{path}.refill"), r)).transpose()?;
    Ok(Some(Credits { remaining, refill }))
}

/// A refill's own rules.
pub fn check_refill(path: &str, r: RefillSpec) -> Result<Refill, ValidationError> {
    if r.amount < 1 {
        return Err(ValidationError::new(format!("{path}.amount"), "must be >= 1"));
    }
    let day = match (r.interval, r.day) {
        (RefillInterval::Daily, Some(_)) => {
            return Err(ValidationError::new(format!("{path}.refillDay"), "is for monthly refills only"));
        }
        (_, Some(d)) if !(1..=31).contains(&d) => {
            return Err(ValidationError::new(format!("{path}.refillDay"), "must be 1 to 31"));
        }
        (RefillInterval::Monthly, day) => Some(day.unwrap_or(1) as u8),
        (RefillInterval::Daily, None) => None,
    };
    Ok(Refill { interval: r.interval, amount: r.amount, day, last_refill_at: None })
}

impl<S: RbacStore> RbacService<S> {
    /// `keys.updateCredits`: on the key's counter in one statement, so that concurrent
    /// changes never lose one. `Set` takes a value or `None` (unlimited); `Increment` and
    /// `Decrement` need a value and a key with credits (400 otherwise). Needs `update_key`
    /// for the key's API. Answers the key's credits after (`None`: unlimited).
    pub fn update_credits(
        &self,
        p: &Principal,
        key_id: &str,
        op: CreditOp,
        value: Option<u64>,
    ) -> Result<Option<Credits>, RbacError> {
        validate_key_id("keyId", key_id)?;
        if op != CreditOp::Set && value.is_none() {
            return Err(ValidationError::new("value", "is required to increment or decrement").into());
        }
        let access = ApiAccess::of(p, "update_key").ok_or_else(|| ApiAccess::denied("update_key", None))?;
        let ws = p.workspace_id.as_str();
        self.write(|tx, changes| {
            let missing = || RbacError::not_found(Resource::Key, key_id);
            if !has_prefix(key_id, IdPrefix::Key) || !tx.lock_key(ws, key_id)? {
                return Err(missing());
            }
            let key = tx.get_key(ws, key_id)?.ok_or_else(missing)?;
            if !access.admits(key.api_id.as_deref()) {
                return Err(ApiAccess::denied("update_key", key.api_id.as_deref()));
            }
            changes.touch(Scope::Key(key_id));
            let after = match (op, value, key.credits) {
                (CreditOp::Set, None, _) => None,
                (CreditOp::Set, Some(n), current) => {
                    Some(Credits { remaining: n, refill: current.and_then(|c| c.refill) })
                }
                (_, _, None) => {
                    let msg = "the key has unlimited credits: set a value first (operation set)";
                    return Err(ValidationError::new("operation", msg).into());
                }
                (op, Some(v), Some(current)) => {
                    let v = i64::try_from(v).unwrap_or(i64::MAX);
                    let delta = if op == CreditOp::Increment { v } else { -v };
                    let remaining = tx.add_key_credits(key_id, delta)?.unwrap_or(0);
                    Some(Credits { remaining, refill: current.refill })
                }
                (_, None, Some(_)) => return Err(ValidationError::new("value", "is required").into()),
            };
            if op == CreditOp::Set {
                tx.set_key_credits(key_id, after.as_ref())?;
            }
            tx.insert_audit_events(&[AuditEvent {
                workspace_id: ws.to_string(),
                actor_id: p.root_key_id.clone(),
                action: "key.update_credits",
                resource_type: "key",
                resource_id: key_id.to_string(),
                key_id: Some(key_id.to_string()),
                role_id: None,
                at: self.now(),
            }])?;
            Ok(after)
        })
    }
}

/// A key's credits after an update's `credits` (`current`: before): cleared or `remaining`
/// cleared is unlimited; `remaining` set sets the counter (keeping the refill unless the
/// update names one); `refill` alone changes the refill and keeps the counter, which
/// needs credits (400 on an unlimited key).
pub(super) fn updated_credits(
    current: Option<Credits>,
    update: Patch<crate::CreditsUpdate>,
) -> Result<Option<Credits>, ValidationError> {
    let u = match update {
        Patch::Absent => return Ok(current),
        Patch::Clear => return Ok(None),
        Patch::Set(u) => u,
    };
    let remaining = match u.remaining {
        Patch::Clear => None,
        Patch::Set(n) => Some(n),
        Patch::Absent => current.as_ref().map(|c| c.remaining),
    };
    let refill = match u.refill {
        Patch::Clear => None,
        Patch::Set(r) => Some(check_refill("credits.refill", r)?),
        Patch::Absent => current.and_then(|c| c.refill),
    };
    match (remaining, refill) {
        (None, Some(_)) => Err(ValidationError::new("credits.refill", "needs remaining credits (not null)")),
        (None, None) => Ok(None),
        (Some(remaining), refill) => Ok(Some(Credits { remaining, refill })),
    }
}

/// The group commit of credit spends (API-v2.md §13.5): verifications queue their spends,
/// and one writer thread takes every spend waiting at that moment, runs them in one
/// transaction (each one statement on its key's row, [`CreditTx::spend_key_credits`]),
/// commits, then answers each. No verification answers before its spend is committed, and
/// none pays a transaction of its own: the batch grows with the load.
///
/// The counter is the key's row, so spends on every instance, `updateCredits` and
/// `updateKey` serialize on it (none is lost), a restart finds every committed spend, and
/// nothing needs reloading after a change. Within a batch, spends run in key-id order
/// (PostgreSQL writers of several instances then lock rows in one order: no deadlock).
#[derive(Debug, Default)]
pub(crate) struct CreditQueue {
    waiting: parking_lot::Mutex<Vec<QueuedSpend>>,
    wake: parking_lot::Condvar,
    writer: std::sync::OnceLock<()>,
}

#[derive(Debug)]
struct QueuedSpend {
    key_id: String,
    cost: u64,
    refill_at: Option<i64>,
    queued: std::time::Instant,
    reply: tokio::sync::oneshot::Sender<Result<crate::store::CreditSpend, StorageError>>,
}

impl CreditQueue {
    /// Queues a spend; the answer comes once it is committed.
    pub(crate) fn spend<S: RbacStore + 'static>(
        self: &Arc<Self>,
        store: &Arc<S>,
        key_id: &str,
        cost: u64,
        refill_at: Option<i64>,
    ) -> tokio::sync::oneshot::Receiver<Result<crate::store::CreditSpend, StorageError>> {
        self.writer.get_or_init(|| {
            let (queue, store) = (Arc::downgrade(self), store.clone());
            std::thread::Builder::new()
                .name("keygate-credits".into())
                .spawn(move || write_spends(&queue, &*store))
                .map(drop)
                .unwrap_or_else(|e| log::error!("the credit writer thread did not start: {e}"));
        });
        let (reply, answer) = tokio::sync::oneshot::channel();
        let spend = QueuedSpend {
            key_id: key_id.to_string(),
            cost,
            refill_at,
            queued: std::time::Instant::now(),
            reply,
        };
        self.waiting.lock().push(spend);
        self.wake.notify_one();
        answer
    }
}

/// The writer: while the service lives, commits whatever waits, one transaction at a time.
fn write_spends<S: RbacStore>(queue: &std::sync::Weak<CreditQueue>, store: &S) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let mut batch = {
            let mut waiting = q.waiting.lock();
            if waiting.is_empty() {
                q.wake.wait_for(&mut waiting, std::time::Duration::from_millis(500));
            }
            std::mem::take(&mut *waiting)
        };
        drop(q);
        if batch.is_empty() {
            continue;
        }
        batch.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        let done = store.transaction(|tx| {
            batch
                .iter()
                .map(|s| Ok(tx.spend_key_credits(&s.key_id, s.cost, s.refill_at)?))
                .collect::<Result<Vec<_>, RbacError>>()
        });
        metrics::counter!("keygate_credit_commits_total").increment(1);
        metrics::histogram!("keygate_credit_commit_batch_size").record(batch.len() as f64);
        match done {
            Ok(results) => {
                for (s, r) in batch.into_iter().zip(results) {
                    metrics::histogram!("keygate_credit_wait_seconds")
                        .record(s.queued.elapsed().as_secs_f64());
                    let _ = s.reply.send(Ok(r));
                }
            }
            Err(e) => {
                log::warn!("credit spends not committed ({} answered 503): {e}", batch.len());
                let e = match e {
                    RbacError::Storage(e) => e,
                    other => StorageError::Internal(other.to_string()),
                };
                for s in batch {
                    let _ = s.reply.send(Err(e.clone()));
                }
            }
        }
    }
}
