//! keygate metering: the usage export (issue 77). What each identity's keys spent (credits,
//! API-v2.md §22) and how many verifications they made, per period (a minute by default),
//! sent once each to the billing system:
//!
//! - [`settings`]: the sinks an operator configures (CloudEvents 1.0 batches as OpenMeter
//!   ingests them; Stripe meter events) and the period.
//! - [`render`]: what each sink is sent, with ids that stay the same however often a period
//!   is sent again (the billing system deduplicates by them).
//! - [`export`]: the exporter's round. A sink's mark (how far its periods went out) is read
//!   and moved on in the transaction that writes the periods' events into the webhook
//!   outbox, so each period is written once, whichever instance exports it; the webhook
//!   worker delivers them with its leases and retries ([`keygate_webhooks::sinks`]).
//! - [`store`]: the rows it reads and writes.
//!
//! The counts are analytics' (`verification_counts`' minute rows): a period is exported
//! once [`export::EXPORT_DELAY_MS`] has passed since its end, when every live instance has
//! flushed its counts of it. What an instance had counted but not flushed when it was
//! killed (at most the last seconds) is in no period, as it is in no analytics query.

pub mod export;
pub mod render;
pub mod settings;
pub mod store;

pub use export::MeteringService;
pub use settings::{CloudEventsSink, ExportSettings, SettingsError, StripeSink};
pub use store::{IdentityUsage, MeteringRows, MeteringStore, MeteringTx};
