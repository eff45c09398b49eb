ALTER TABLE api_verification_counts DROP COLUMN spent_credits;
ALTER TABLE verification_counts DROP COLUMN spent_credits;
