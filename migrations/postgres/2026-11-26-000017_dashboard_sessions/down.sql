DROP TABLE dashboard_sessions;
