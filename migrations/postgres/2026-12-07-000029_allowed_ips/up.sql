-- Where keys may be used from (API-v2.md §25): each list of addresses and CIDR ranges,
-- comma-separated; NULL: anywhere. A verification passes every list that is set.
ALTER TABLE apis ADD COLUMN allowed_ips TEXT;
ALTER TABLE identities ADD COLUMN allowed_ips TEXT;
ALTER TABLE keys ADD COLUMN allowed_ips TEXT;
