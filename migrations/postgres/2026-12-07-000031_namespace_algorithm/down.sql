ALTER TABLE ratelimit_namespaces DROP COLUMN algorithm;
