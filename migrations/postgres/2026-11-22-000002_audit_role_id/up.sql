-- Audit events about a role's permissions name the role.
ALTER TABLE audit_events ADD COLUMN role_id TEXT;
