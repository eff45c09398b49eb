DROP TABLE leaked_keys;
