//! `webhooks.createEndpoint|getEndpoint|listEndpoints|updateEndpoint|deleteEndpoint|
//! rotateSecret|listDeliveries|replayDelivery` (API-v2.md §23).

use crate::model::{
    DEFAULT_CREDITS_LOW, DEFAULT_EXPIRING_DAYS, apply_thresholds, check_description, check_events, check_url,
};
use crate::{
    Attempt, Delivery, DeliveryStatus, Endpoint, EndpointChange, EndpointSecrets, NewEndpoint,
    WebhookService, WebhookStore, WebhookTx, address, signing,
};
use keygate_domain::{IdPrefix, ValidationError, has_prefix, new_id};
use keygate_rbac::{AuditEvent, Page, Principal, RbacError, Resource, StorageError};

/// How long the secret before a rotation keeps signing.
pub const ROTATION_OVERLAP_MS: i64 = 24 * 60 * 60 * 1000;
/// The most items one page holds (`limit`'s bound; 100 when not given).
pub const MAX_PAGE: usize = 100;

pub const PERM_CREATE: &str = "webhook.*.create_endpoint";
pub const PERM_READ: &str = "webhook.*.read_endpoint";
pub const PERM_UPDATE: &str = "webhook.*.update_endpoint";
pub const PERM_DELETE: &str = "webhook.*.delete_endpoint";

fn need(p: &Principal, perm: &'static str) -> Result<(), RbacError> {
    if p.holds(perm) { Ok(()) } else { Err(RbacError::missing(&[perm])) }
}

fn audit(p: &Principal, action: &'static str, endpoint_id: &str, at: i64) -> AuditEvent {
    AuditEvent::new(&p.workspace_id, &p.root_key_id, action, "webhook_endpoint", endpoint_id, at)
}

fn internal(e: String) -> RbacError {
    RbacError::Storage(StorageError::Internal(e))
}

impl<S: WebhookStore> WebhookService<S> {
    /// The URL's syntax and where it points: 400 for a loopback, private, link-local or
    /// unique-local address unless those are allowed. Blocking (it may resolve the name).
    fn check_target(&self, field: &str, url: &str) -> Result<(), RbacError> {
        let parsed = check_url(field, url)?;
        if !self.allow_private
            && let Some(why) = address::refusal(&parsed, self.names)
        {
            return Err(ValidationError::new(
                field,
                format!("must not point at this machine or a private network: {why} (KEYGATE_WEBHOOKS_ALLOW_PRIVATE allows it)"),
            )
            .into());
        }
        Ok(())
    }

    /// The workspace's endpoint `id` (404 when there is none).
    fn find(
        &self,
        tx: &mut dyn WebhookTx,
        p: &Principal,
        id: &str,
    ) -> Result<(Endpoint, EndpointSecrets), RbacError> {
        let found = if has_prefix(id, IdPrefix::WebhookEndpoint) {
            tx.webhook_endpoint(&p.workspace_id, id)?
        } else {
            None
        };
        found.ok_or_else(|| RbacError::not_found(Resource::WebhookEndpoint, id))
    }

    /// `webhooks.createEndpoint`: the endpoint and its secret, shown this once.
    pub fn create_endpoint(&self, p: &Principal, new: NewEndpoint) -> Result<(Endpoint, String), RbacError> {
        need(p, PERM_CREATE)?;
        check_events(&new.events)?;
        if let Some(d) = &new.description {
            check_description(d)?;
        }
        let (mut credits_low, mut expiring_days) =
            (DEFAULT_CREDITS_LOW.to_vec(), DEFAULT_EXPIRING_DAYS.to_vec());
        if let Some(t) = &new.thresholds {
            apply_thresholds(t, &mut credits_low, &mut expiring_days)?;
        }
        self.check_target("url", &new.url)?;
        let now = self.now();
        let endpoint = Endpoint {
            id: new_id(IdPrefix::WebhookEndpoint),
            workspace_id: p.workspace_id.clone(),
            url: new.url,
            events: new.events,
            description: new.description,
            enabled: new.enabled.unwrap_or(true),
            credits_low,
            expiring_days,
            created_at: now,
            updated_at: None,
        };
        let secret = signing::new_secret();
        let stored =
            signing::seal(self.rbac.vault().map(|v| &**v), &endpoint.workspace_id, &endpoint.id, &secret)
                .map_err(internal)?;
        let secrets = EndpointSecrets { current: stored, previous: None, previous_until: None };
        self.rbac.store().webhook_transaction(|tx| {
            tx.insert_webhook_endpoint(&endpoint, &secrets)?;
            tx.insert_audit_events(&[audit(p, "webhook.create_endpoint", &endpoint.id, now)])?;
            Ok(())
        })?;
        Ok((endpoint, secret))
    }

    /// `webhooks.getEndpoint`.
    pub fn get_endpoint(&self, p: &Principal, id: &str) -> Result<Endpoint, RbacError> {
        need(p, PERM_READ)?;
        self.rbac.store().webhook_read(|tx| Ok(self.find(tx, p, id)?.0))
    }

    /// `webhooks.listEndpoints`: by id, a page at a time (`cursor`: the last id seen).
    pub fn list_endpoints(
        &self,
        p: &Principal,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Endpoint>, RbacError> {
        need(p, PERM_READ)?;
        check_limit(limit)?;
        let rows = self
            .rbac
            .store()
            .webhook_read(|tx| Ok(tx.webhook_endpoints(&p.workspace_id, cursor, limit + 1)?))?;
        Ok(Page::keyset(rows, limit, |e| &e.id))
    }

    /// `webhooks.updateEndpoint`: the fields given change, the rest stay.
    pub fn update_endpoint(
        &self,
        p: &Principal,
        id: &str,
        change: EndpointChange,
    ) -> Result<Endpoint, RbacError> {
        need(p, PERM_UPDATE)?;
        if let Some(e) = &change.events {
            check_events(e)?;
        }
        if let Some(d) = change.description.as_set() {
            check_description(d)?;
        }
        if let Some(url) = &change.url {
            self.check_target("url", url)?;
        }
        let now = self.now();
        self.rbac.store().webhook_transaction(|tx| {
            let (mut e, _) = self.find(tx, p, id)?;
            if let Some(t) = &change.thresholds {
                apply_thresholds(t, &mut e.credits_low, &mut e.expiring_days)?;
            }
            if let Some(url) = change.url {
                e.url = url;
            }
            if let Some(events) = change.events {
                e.events = events;
            }
            e.description = change.description.apply(e.description.take());
            if let Some(enabled) = change.enabled {
                e.enabled = enabled;
            }
            e.updated_at = Some(now);
            tx.update_webhook_endpoint(&e)?;
            tx.insert_audit_events(&[audit(p, "webhook.update_endpoint", &e.id, now)])?;
            Ok(e)
        })
    }

    /// `webhooks.deleteEndpoint`: its deliveries go with it, sent or not.
    pub fn delete_endpoint(&self, p: &Principal, id: &str) -> Result<(), RbacError> {
        need(p, PERM_DELETE)?;
        let now = self.now();
        self.rbac.store().webhook_transaction(|tx| {
            let (e, _) = self.find(tx, p, id)?;
            tx.delete_webhook_endpoint(&p.workspace_id, &e.id)?;
            tx.insert_audit_events(&[audit(p, "webhook.delete_endpoint", &e.id, now)])?;
            Ok(())
        })
    }

    /// `webhooks.rotateSecret`: a new secret, shown this once; the one before keeps
    /// signing (beside it) for [`ROTATION_OVERLAP_MS`].
    pub fn rotate_secret(&self, p: &Principal, id: &str) -> Result<String, RbacError> {
        need(p, PERM_UPDATE)?;
        let now = self.now();
        let secret = signing::new_secret();
        let keyring = self.rbac.vault().map(|v| &**v);
        self.rbac.store().webhook_transaction(|tx| {
            let (e, old) = self.find(tx, p, id)?;
            let current = signing::seal(keyring, &e.workspace_id, &e.id, &secret).map_err(internal)?;
            let secrets = EndpointSecrets {
                current,
                previous: Some(old.current),
                previous_until: Some(now.saturating_add(ROTATION_OVERLAP_MS)),
            };
            tx.set_webhook_secrets(&e.id, &secrets)?;
            tx.insert_audit_events(&[audit(p, "webhook.rotate_secret", &e.id, now)])?;
            Ok(())
        })?;
        Ok(secret)
    }

    /// `webhooks.listDeliveries`: the endpoint's deliveries, newest first, a page at a time
    /// (`cursor`: the last delivery id seen).
    pub fn list_deliveries(
        &self,
        p: &Principal,
        endpoint_id: &str,
        status: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<Delivery>, RbacError> {
        need(p, PERM_READ)?;
        check_limit(limit)?;
        let status = status
            .map(|s| {
                DeliveryStatus::parse(s)
                    .ok_or_else(|| ValidationError::new("status", "must be pending, succeeded or failed"))
            })
            .transpose()?;
        let rows = self.rbac.store().webhook_read(|tx| {
            let (e, _) = self.find(tx, p, endpoint_id)?;
            Ok(tx.webhook_deliveries(&e.id, status, cursor, limit + 1)?)
        })?;
        Ok(Page::keyset(rows, limit, |d| &d.id))
    }

    /// A delivery with its attempts (the dashboard's log).
    pub fn delivery_attempts(
        &self,
        p: &Principal,
        delivery_id: &str,
    ) -> Result<(Delivery, Vec<Attempt>), RbacError> {
        need(p, PERM_READ)?;
        self.rbac.store().webhook_read(|tx| {
            let d = self.find_delivery(tx, p, delivery_id)?;
            let attempts = tx.webhook_attempts(&d.id)?;
            Ok((d, attempts))
        })
    }

    fn find_delivery(&self, tx: &mut dyn WebhookTx, p: &Principal, id: &str) -> Result<Delivery, RbacError> {
        let found = if has_prefix(id, IdPrefix::WebhookDelivery) {
            tx.webhook_delivery(&p.workspace_id, id)?
        } else {
            None
        };
        found.ok_or_else(|| RbacError::not_found(Resource::WebhookDelivery, id))
    }

    /// `webhooks.replayDelivery`: the delivery is sent again at once, with the same event
    /// id and body, whatever it came to before.
    pub fn replay_delivery(&self, p: &Principal, delivery_id: &str) -> Result<Delivery, RbacError> {
        need(p, PERM_UPDATE)?;
        let now = self.now();
        self.rbac.store().webhook_transaction(|tx| {
            let d = self.find_delivery(tx, p, delivery_id)?;
            tx.replay_webhook_delivery(&d.id, now)?;
            tx.insert_audit_events(&[audit(p, "webhook.replay_delivery", &d.endpoint_id, now)])?;
            Ok(Delivery { status: DeliveryStatus::Pending, next_attempt_at: Some(now), ..d })
        })
    }
}

fn check_limit(limit: usize) -> Result<(), ValidationError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(ValidationError::new("limit", format!("must be 1 to {MAX_PAGE}")));
    }
    Ok(())
}
