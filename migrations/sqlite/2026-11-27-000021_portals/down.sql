DROP TABLE portal_sessions;
DROP TABLE portals;
