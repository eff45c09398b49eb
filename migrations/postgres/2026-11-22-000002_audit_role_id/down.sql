ALTER TABLE audit_events DROP COLUMN role_id;
