DROP TABLE ratelimit_overrides;
