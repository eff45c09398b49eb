-- A rate-limit namespace's algorithm (API-v2.md §26): 'fixed' (every namespace before
-- algorithms were), 'sliding' or 'token_bucket'.
ALTER TABLE ratelimit_namespaces ADD COLUMN algorithm TEXT NOT NULL DEFAULT 'fixed';
