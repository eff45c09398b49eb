DROP TABLE verification_journal;
