DROP TABLE ratelimit_identifiers;
DROP TABLE ratelimit_counts;
