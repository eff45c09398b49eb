-- The ids of the analytics flushes that landed (written in the flush's transaction): a
-- flush whose commit was not confirmed is written again under its id, and finding the id
-- here means it landed the first time (its counts are not added twice). Pruned after a day.
CREATE TABLE analytics_flushes (
    id TEXT PRIMARY KEY NOT NULL,
    written_at BIGINT NOT NULL
);
CREATE INDEX analytics_flushes_by_time ON analytics_flushes (written_at);
