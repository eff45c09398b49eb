DROP TABLE change_counters;
