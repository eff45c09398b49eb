-- A key's apiId label (Unkey's API): verifications that name an apiId only find keys
-- that carry it.
ALTER TABLE keys ADD COLUMN api_id TEXT;
