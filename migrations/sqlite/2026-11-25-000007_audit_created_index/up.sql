-- Retention deletes the oldest events of every workspace: by time alone.
CREATE INDEX audit_events_created ON audit_events (created_at);
