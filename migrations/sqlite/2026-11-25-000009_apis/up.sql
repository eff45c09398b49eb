-- API objects (API-v2.md §10): an API groups keys; a key's `api_id` names one of its
-- workspace. Every `apiId` label already on keys becomes an API named after it, so no key
-- changes its `apiId`; keys are paged by id within an API (keyset order: bytes).
CREATE TABLE apis (
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    id            TEXT NOT NULL,
    name          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, id)
);
INSERT INTO apis (workspace_id, id, name, created_at)
    SELECT workspace_id, api_id, api_id, MIN(created_at) FROM keys
    WHERE api_id IS NOT NULL GROUP BY workspace_id, api_id;
CREATE INDEX keys_workspace_api ON keys (workspace_id, api_id, id);
