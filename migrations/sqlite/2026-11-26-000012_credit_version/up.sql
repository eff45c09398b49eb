-- The live credit counter of scale-out (API-v2.md §13.5; Redis holds it, written behind to
-- this row): `credit_version` rises with every change of a key's credits made by an update
-- (updateCredits, updateKey), and `credit_seq` is the number of the counter's last change
-- written here. A write-behind lands only on the version it was loaded from and only when
-- newer than what the row holds, so it never undoes an update nor an earlier write-behind.
ALTER TABLE keys ADD COLUMN credit_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE keys ADD COLUMN credit_seq BIGINT NOT NULL DEFAULT 0;
