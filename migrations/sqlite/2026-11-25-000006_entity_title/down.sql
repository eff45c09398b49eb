ALTER TABLE roles DROP COLUMN title;
ALTER TABLE permissions DROP COLUMN title;
