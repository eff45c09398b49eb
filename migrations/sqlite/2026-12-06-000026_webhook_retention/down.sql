DROP INDEX webhook_events_by_created;
DROP INDEX webhook_deliveries_by_event;
DROP INDEX webhook_deliveries_finished;
