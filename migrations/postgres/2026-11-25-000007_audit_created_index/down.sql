DROP INDEX audit_events_created;
