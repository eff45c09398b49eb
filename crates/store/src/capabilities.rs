//! The capabilities' stores over the one pool: each kind of transaction a capability crate
//! defines (usage, analytics, portal, webhooks, scanning, metering) is the same `DieselTx` on the same
//! connection, so one transaction serves every capability.

use crate::SqlStore;
use keygate_analytics::{AnalyticsStore, AnalyticsTx};
use keygate_metering::{MeteringStore, MeteringTx};
use keygate_portal::{PortalStore, PortalTx};
use keygate_rbac::RbacError;
use keygate_scanning::{LeakStore, LeakTx};
use keygate_usage::{UsageStore, UsageTx};
use keygate_webhooks::{WebhookStore, WebhookTx};

impl UsageStore for SqlStore {
    fn usage_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn UsageTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }

    /// `<database file>-credits`.
    fn credit_journal(&self) -> Option<std::path::PathBuf> {
        self.beside_database("-credits")
    }

    fn usage_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn UsageTx) -> Result<T, RbacError>,
    {
        self.read_tx(|tx| f(tx))
    }
}

impl AnalyticsStore for SqlStore {
    fn analytics_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }

    fn analytics_snapshot<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>,
    {
        self.snapshot_tx(|tx| f(tx))
    }

    fn analytics_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>,
    {
        self.read_tx(|tx| f(tx))
    }
}

impl PortalStore for SqlStore {
    fn portal_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn PortalTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }

    fn portal_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn PortalTx) -> Result<T, RbacError>,
    {
        self.read_tx(|tx| f(tx))
    }
}

impl WebhookStore for SqlStore {
    fn webhook_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn WebhookTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }

    fn webhook_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn WebhookTx) -> Result<T, RbacError>,
    {
        self.read_tx(|tx| f(tx))
    }
}

impl LeakStore for SqlStore {
    fn leak_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn LeakTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }
}

impl MeteringStore for SqlStore {
    fn metering_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn MeteringTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }

    fn metering_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn MeteringTx) -> Result<T, RbacError>,
    {
        self.snapshot_tx(|tx| f(tx))
    }
}
