-- Spent credits in analytics (API-v2.md §22): the credits a series' verifications were
-- charged in the bucket (a call's cost once, however many budgets it was taken from),
-- added up, rolled up and pruned with the counts.
ALTER TABLE verification_counts ADD COLUMN spent_credits BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_verification_counts ADD COLUMN spent_credits BIGINT NOT NULL DEFAULT 0;
