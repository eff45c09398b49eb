-- A permission's display name (Unkey v2's `name`; its slug is the unique `name` column).
-- Roles carry the column too (one shape for both kinds) and leave it empty.
ALTER TABLE permissions ADD COLUMN title TEXT;
ALTER TABLE roles ADD COLUMN title TEXT;
