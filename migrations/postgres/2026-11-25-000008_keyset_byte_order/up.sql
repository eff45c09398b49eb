-- v2's list operations page by keyset (name > cursor ORDER BY name LIMIT n + 1) in byte
-- order, which is COLLATE "C" whatever the database's own collation: indexes in that order,
-- so each page is one range scan.
CREATE INDEX permissions_workspace_name_bytes ON permissions (workspace_id, name COLLATE "C");
CREATE INDEX roles_workspace_name_bytes ON roles (workspace_id, name COLLATE "C");
CREATE INDEX ratelimit_overrides_namespace_identifier_bytes
    ON ratelimit_overrides (namespace_id, identifier COLLATE "C");
