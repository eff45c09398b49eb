DROP TABLE verification_counts;
