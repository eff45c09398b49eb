-- The delivery log's retention (KEYGATE_WEBHOOKS_RETENTION_DAYS): finished deliveries are
-- found by when they finished, and events left without deliveries by their age and the
-- deliveries of each, through these indexes (never a scan of the log).
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at) WHERE status <> 'pending';
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_events_by_created ON webhook_events (created_at);
