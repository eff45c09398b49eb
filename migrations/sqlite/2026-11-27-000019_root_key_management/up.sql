-- Root keys managed over the API (API-v2.md §19): a display name, an enabled flag, the
-- secret's last 4 characters (shown by rootKeys.listKeys; '' for keys made before this),
-- and when the key was last used (written behind, within a minute of the truth).
ALTER TABLE root_keys ADD COLUMN name TEXT;
ALTER TABLE root_keys ADD COLUMN enabled BOOLEAN NOT NULL DEFAULT 1;
ALTER TABLE root_keys ADD COLUMN end_chars TEXT NOT NULL DEFAULT '';
ALTER TABLE root_keys ADD COLUMN last_used_at BIGINT;
