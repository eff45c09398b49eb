DROP TABLE legacy_keys;
