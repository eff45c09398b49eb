-- More about a change where its audit event needs it (a migrated key: its migration id).
ALTER TABLE audit_events ADD COLUMN detail TEXT;
