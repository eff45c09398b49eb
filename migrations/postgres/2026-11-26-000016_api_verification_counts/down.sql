DROP TABLE api_verification_counts;
