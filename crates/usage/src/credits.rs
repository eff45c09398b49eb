//! `keys.updateCredits` (API-v2.md §12.4) on a key's counter, and the scale-out ledger's
//! write-behind. A key's credit setting itself (remaining, refill) is the key's, in
//! `keygate-rbac`.

use crate::store::UsageStore;
use crate::{UsageService, ledger::Kind};
use keygate_domain::{IdPrefix, ValidationError, has_prefix, validate_key_id};
use keygate_rbac::{ApiAccess, AuditEvent, Credits, KeyChange, Principal, RbacError, Resource, Scope};

/// What `keys.updateCredits` does with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditOp {
    /// `remaining` becomes the value (`None`: unlimited, refill cleared).
    Set,
    Increment,
    /// Floors at 0.
    Decrement,
}

impl<S: UsageStore + 'static> UsageService<S> {
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
        let now = self.rbac.clock().now_ms() as i64;
        let write = || {
            self.rbac.write_through(|changes| {
                self.rbac.store().usage_transaction(|tx| {
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
                    let event = AuditEvent::on_key(ws, &p.root_key_id, "key.update_credits", key_id, now);
                    tx.insert_audit_events(&[event])?;
                    self.rbac.key_event(&mut *tx, ws, key_id, KeyChange::Updated, now)?;
                    changes.bump(tx, now)?;
                    Ok(after)
                })
            })
        };
        self.ledger.hold(key_id, write)
    }
}

impl<S: UsageStore + 'static> UsageService<S> {
    /// Writes the live credit counters changed since the last pass to their rows (the
    /// scale-out ledger, [`crate::ledger::shared`]; run about once a second by every
    /// instance, and at shutdown): how many it wrote. Nothing to do for the other ledgers,
    /// which write every spend before answering it.
    pub fn write_behind_credits(&self) -> Result<usize, RbacError> {
        match &self.ledger.kind {
            Kind::Shared(ledger) => ledger.write_behind(&*self.ledger.store),
            _ => Ok(0),
        }
    }
}
