-- Verification counts on their way to `verification_counts` (API-v2.md §14;
-- docs/performance/analytics.md, *The journal*): each flush appends its counts as one
-- entry (`merged` false: the series' counts of a few seconds, encoded by keygate-analytics),
-- and a fold takes the entries, adds up each series' counts over all of them and writes the
-- sums as entries of at most 200 series (`merged` true), each then added to
-- `verification_counts` in the transaction that deletes it. Every read of the counts folds
-- first. Appending costs a write at the table's end where an upsert dirtied a page per
-- count; a fold writes each series once per minute or per read. `id`: keygate's ids, which
-- sort by time (the flush's own for its entry).
CREATE TABLE verification_journal (
    id TEXT PRIMARY KEY NOT NULL,
    merged BOOLEAN NOT NULL,
    written_at BIGINT NOT NULL,
    body BLOB NOT NULL
);
