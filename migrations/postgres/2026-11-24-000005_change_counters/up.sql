-- Change counters (issue 18): every write that can change what keys.verifyKey answers
-- bumps one in its transaction; cached verifications are used only while the counters
-- they were loaded under are unchanged. `seq` orders the writes where writers serialize
-- (SQLite), so a process notices counters other processes bumped; `changed_at` (Unix ms)
-- lets a shared store (Redis) be brought up to date with recent changes.
CREATE TABLE change_counters (
    scope TEXT PRIMARY KEY NOT NULL,
    value BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    changed_at BIGINT NOT NULL
);
CREATE INDEX change_counters_seq ON change_counters (seq);
CREATE INDEX change_counters_changed_at ON change_counters (changed_at);
