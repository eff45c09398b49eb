-- Customer portals (API-v2.md §17): one per API, found by a slug unique across the
-- server (the pages live at /portal/<slug>).
CREATE TABLE portals (
    id TEXT PRIMARY KEY NOT NULL,
    workspace_id TEXT NOT NULL,
    slug TEXT NOT NULL UNIQUE,
    display_name TEXT NOT NULL,
    api_id TEXT NOT NULL,
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    logo_url TEXT,
    primary_color TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    UNIQUE (workspace_id, api_id)
);
-- Portal sessions: minted for one identity (externalId) with scopes; the single-use code
-- and the access token are stored only as their SHA-256. A session is pending until its
-- code is exchanged (code_hash then cleared), active until token_expires_at, and ends
-- earlier when revoked, when its portal goes, or with the root key that minted it.
CREATE TABLE portal_sessions (
    id TEXT PRIMARY KEY NOT NULL,
    workspace_id TEXT NOT NULL,
    portal_id TEXT NOT NULL,
    external_id TEXT NOT NULL,
    scopes TEXT NOT NULL,
    preview BOOLEAN NOT NULL,
    return_url TEXT,
    root_key_id TEXT NOT NULL,
    code_hash TEXT UNIQUE,
    code_expires_at BIGINT NOT NULL,
    token_hash TEXT UNIQUE,
    token_expires_at BIGINT,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX portal_sessions_by_identity ON portal_sessions (portal_id, external_id);
