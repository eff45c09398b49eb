//! The storage webhooks are defined over: endpoints, deliveries and attempts, read and
//! written in the same transactions as the keys ([`WebhookTx`] extends `RbacTx`, whose
//! `OutboxTx` writes events with the changes that cause them).

use crate::{Attempt, Delivery, DeliveryStatus, Endpoint, EndpointSecrets};
use keygate_rbac::{RbacError, RbacStore, RbacTx, StorageError};

type R<T> = Result<T, StorageError>;

/// Endpoints and their deliveries.
pub trait WebhookTx: RbacTx {
    fn insert_webhook_endpoint(&mut self, endpoint: &Endpoint, secrets: &EndpointSecrets) -> R<()>;
    /// The workspace's endpoint `id`, with its secrets.
    fn webhook_endpoint(&mut self, workspace_id: &str, id: &str) -> R<Option<(Endpoint, EndpointSecrets)>>;
    /// The workspace's endpoints after `after` (by id, ascending), at most `limit`.
    fn webhook_endpoints(
        &mut self,
        workspace_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Endpoint>>;
    /// Writes its URL, events, description, enabled flag, thresholds and `updated_at`.
    fn update_webhook_endpoint(&mut self, endpoint: &Endpoint) -> R<()>;
    fn set_webhook_secrets(&mut self, endpoint_id: &str, secrets: &EndpointSecrets) -> R<()>;
    /// Deletes the endpoint with its deliveries and their attempts; whether it existed.
    fn delete_webhook_endpoint(&mut self, workspace_id: &str, id: &str) -> R<bool>;

    /// The endpoint's deliveries (of `status` when given), newest first, those before the
    /// delivery id `before`, at most `limit`.
    fn webhook_deliveries(
        &mut self,
        endpoint_id: &str,
        status: Option<DeliveryStatus>,
        before: Option<&str>,
        limit: usize,
    ) -> R<Vec<Delivery>>;
    /// The workspace's delivery `id`.
    fn webhook_delivery(&mut self, workspace_id: &str, id: &str) -> R<Option<Delivery>>;
    /// A delivery's attempts, first first.
    fn webhook_attempts(&mut self, delivery_id: &str) -> R<Vec<Attempt>>;
    /// Makes the delivery pending again, due at `now`, unclaimed (its attempts go on
    /// counting).
    fn replay_webhook_delivery(&mut self, id: &str, now: i64) -> R<()>;

    /// Whether a pending delivery is due at `now` that nobody holds (a read, before a
    /// claim's write).
    fn webhook_due(&mut self, now: i64) -> R<bool>;
    /// Claims up to `limit` pending deliveries due at `now` that nobody holds (or whose
    /// holder's lease ended), none of the workspaces `skip`, for `owner` until
    /// `lease_until`, oldest due first. Of concurrent claims each delivery goes to one.
    fn claim_webhook_deliveries(
        &mut self,
        owner: &str,
        now: i64,
        lease_until: i64,
        limit: usize,
        skip: &[&str],
    ) -> R<Vec<Delivery>>;
    /// What the events' deliveries send: (event id, body), those that exist.
    fn webhook_event_bodies(&mut self, event_ids: &[&str]) -> R<Vec<(String, String)>>;
    /// Endpoints by id alone (the worker), with their secrets: those that exist.
    fn webhook_endpoints_by_ids(&mut self, ids: &[&str]) -> R<Vec<(Endpoint, EndpointSecrets)>>;
    /// Records attempts of deliveries `owner` holds, each with where its delivery goes next
    /// (`status`, due at `next_attempt_at` when pending), releasing them: for each, whether
    /// `owner` still held it (else its lease ended and another instance took it over, and
    /// nothing of it is written).
    fn finish_webhook_attempts(
        &mut self,
        owner: &str,
        attempts: &[(Attempt, DeliveryStatus, Option<i64>)],
    ) -> R<Vec<bool>>;
    /// Disables an endpoint (its receiver answered 410 Gone).
    fn disable_webhook_endpoint(&mut self, id: &str, now: i64) -> R<()>;
    /// Deletes at most `max` deliveries sent or failed before `before` (with their
    /// attempts), then at most `max` events older than `before` left without deliveries;
    /// how many rows of each.
    fn prune_webhook_history(&mut self, before: i64, max: usize) -> R<(usize, usize)>;
    /// Pending deliveries, and the creation time of the oldest (metrics).
    fn webhook_backlog(&mut self) -> R<(i64, Option<i64>)>;

    /// Every enabled endpoint (of every workspace), by id.
    fn enabled_webhook_endpoints(&mut self) -> R<Vec<Endpoint>>;
    /// Keys of the workspace expiring in `(from, to]` without a notice for
    /// (`endpoint_id`, `days`, their expiry), soonest first, at most `limit`: (key id,
    /// expires).
    fn keys_expiring_unnoticed(
        &mut self,
        workspace_id: &str,
        endpoint_id: &str,
        days: i64,
        from: i64,
        to: i64,
        limit: usize,
    ) -> R<Vec<(String, i64)>>;
    /// Notes that (key, endpoint, days, expires) was announced: whether it was not yet (of
    /// concurrent inserts, one gets `true`).
    fn insert_expiry_notice(&mut self, key_id: &str, endpoint_id: &str, days: i64, expires: i64) -> R<bool>;
    /// Forgets the notices of expiries before `before`: how many.
    fn prune_expiry_notices(&mut self, before: i64) -> R<usize>;
}

/// A store that hands out webhook transactions besides the others. A closure returning
/// `Err` rolls its transaction back.
pub trait WebhookStore: RbacStore {
    fn webhook_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn WebhookTx) -> Result<T, RbacError>;

    /// Reads outside a transaction.
    fn webhook_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn WebhookTx) -> Result<T, RbacError>,
    {
        self.webhook_transaction(f)
    }
}
