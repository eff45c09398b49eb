DROP TABLE analytics_flushes;
