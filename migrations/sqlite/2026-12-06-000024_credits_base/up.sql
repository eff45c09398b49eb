-- The credits a key's low-credit webhook events are a share of when it has no refill
-- (API-v2.md §23: "of its credits when set"): written whenever its credits are set by a
-- write (createKey, updateKey, updateCredits, an import), never by a spend.
ALTER TABLE keys ADD COLUMN credits_base BIGINT;
UPDATE keys SET credits_base = credits_remaining WHERE credits_remaining IS NOT NULL;
