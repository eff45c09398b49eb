ALTER TABLE ratelimits DROP COLUMN algorithm;
