-- The algorithm a key's or identity's rate limit decides by (API-v2.md §26): 'fixed'
-- (every limit before algorithms were), 'sliding' or 'token_bucket'.
ALTER TABLE ratelimits ADD COLUMN algorithm TEXT NOT NULL DEFAULT 'fixed';
