DROP INDEX keys_workspace_api;
DROP TABLE apis;
