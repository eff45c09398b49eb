DROP TABLE webhook_expiry_notices;
DROP INDEX keys_by_workspace_expires;
