-- keygate schema, version 1. Column types are the ones SQLite and PostgreSQL share
-- (TEXT ids, BIGINT Unix milliseconds, BOOLEAN); migrations/postgres has the same version.
CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);

CREATE TABLE root_keys (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    hash          TEXT NOT NULL UNIQUE,
    prefix        TEXT NOT NULL,
    permissions   TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT,
    revoked_at    BIGINT
);
CREATE INDEX root_keys_workspace ON root_keys (workspace_id);

CREATE TABLE keys (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    hash          TEXT NOT NULL UNIQUE,
    prefix        TEXT NOT NULL,
    name          TEXT,
    meta          TEXT,
    enabled       BOOLEAN NOT NULL,
    expires       BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX keys_workspace ON keys (workspace_id);

CREATE TABLE permissions (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    name          TEXT NOT NULL,
    description   TEXT,
    created_at    BIGINT NOT NULL,
    UNIQUE (workspace_id, name)
);

CREATE TABLE roles (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    name          TEXT NOT NULL,
    description   TEXT,
    created_at    BIGINT NOT NULL,
    UNIQUE (workspace_id, name)
);

CREATE TABLE keys_permissions (
    key_id         TEXT NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
    permission_id  TEXT NOT NULL REFERENCES permissions (id) ON DELETE CASCADE,
    workspace_id   TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (key_id, permission_id)
);
CREATE INDEX keys_permissions_permission ON keys_permissions (permission_id);

CREATE TABLE keys_roles (
    key_id        TEXT NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
    role_id       TEXT NOT NULL REFERENCES roles (id) ON DELETE CASCADE,
    workspace_id  TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (key_id, role_id)
);
CREATE INDEX keys_roles_role ON keys_roles (role_id);

CREATE TABLE roles_permissions (
    role_id        TEXT NOT NULL REFERENCES roles (id) ON DELETE CASCADE,
    permission_id  TEXT NOT NULL REFERENCES permissions (id) ON DELETE CASCADE,
    workspace_id   TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (role_id, permission_id)
);
CREATE INDEX roles_permissions_permission ON roles_permissions (permission_id);

CREATE TABLE ratelimit_namespaces (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    name          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    UNIQUE (workspace_id, name)
);

CREATE TABLE audit_events (
    id             TEXT PRIMARY KEY NOT NULL,
    workspace_id   TEXT NOT NULL,
    actor_id       TEXT NOT NULL,
    action         TEXT NOT NULL,
    resource_type  TEXT NOT NULL,
    resource_id    TEXT NOT NULL,
    key_id         TEXT,
    created_at     BIGINT NOT NULL
);
CREATE INDEX audit_events_workspace ON audit_events (workspace_id, created_at);
