-- Webhooks (API-v2.md §23): a workspace's endpoints, the outbox of events written in the
-- transaction of the change that causes them, one delivery per (event, endpoint) claimed
-- by one instance at a time with a lease, and each delivery's attempts.
CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY NOT NULL,
    workspace_id TEXT NOT NULL,
    url TEXT NOT NULL,
    -- The event types, space-separated ("*": every type).
    events TEXT NOT NULL,
    description TEXT,
    enabled BOOLEAN NOT NULL DEFAULT 1,
    -- Thresholds, comma-separated: percent of credits spent; days before expiry.
    credits_low TEXT NOT NULL,
    expiring_days TEXT NOT NULL,
    -- "whsec_..." (sealed by the vault's keyring when one is configured).
    secret TEXT NOT NULL,
    -- The secret before the last rotation, which signs too until previous_secret_until.
    previous_secret TEXT,
    previous_secret_until BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX webhook_endpoints_by_workspace ON webhook_endpoints (workspace_id, id);
-- An event: its id is the deliveries' webhook-id, its body is what every attempt sends.
CREATE TABLE webhook_events (
    id TEXT PRIMARY KEY NOT NULL,
    workspace_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
-- A delivery of an event to an endpoint: pending (due at next_attempt_at; claimed by
-- lease_owner until lease_until), succeeded or failed.
CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY NOT NULL,
    workspace_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    lease_owner TEXT,
    lease_until BIGINT,
    last_status BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_id, created_at, id);
-- Each attempt of a delivery: the answer's status (none: no answer), what went wrong, the
-- start of the answer's body.
CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    at BIGINT NOT NULL,
    status BIGINT,
    error TEXT,
    response TEXT,
    duration_ms BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
