-- v2's keyset pages compare names by bytes: SQLite's default collation (BINARY) already
-- does, and the UNIQUE (workspace_id, name) and (namespace_id, identifier) indexes are in
-- that order. Nothing to change; this version keeps both backends' migrations in step.
SELECT 1;
