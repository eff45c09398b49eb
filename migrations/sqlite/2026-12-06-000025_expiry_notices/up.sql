-- key.expiring and key.expired (API-v2.md §23): the keys about to expire are found through
-- this index (never a scan of every key), and each (key, endpoint, threshold in days, 0 for
-- expired, the expiry it was for) is announced once: the first instance to insert its
-- notice writes the event, in the same transaction. A changed expiry is a new one.
CREATE INDEX keys_by_workspace_expires ON keys (workspace_id, expires) WHERE expires IS NOT NULL;
CREATE TABLE webhook_expiry_notices (
    key_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    days BIGINT NOT NULL,
    expires BIGINT NOT NULL,
    PRIMARY KEY (key_id, endpoint_id, days, expires)
);
CREATE INDEX webhook_expiry_notices_by_expires ON webhook_expiry_notices (expires);
