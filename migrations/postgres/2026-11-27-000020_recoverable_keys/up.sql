-- Recoverable keys (API-v2.md §16): the plaintext sealed with AES-256-GCM under the
-- keyring's key `vault_key_id`, as base64 of nonce and ciphertext; NULL for other keys.
ALTER TABLE keys ADD COLUMN vault_key_id TEXT;
ALTER TABLE keys ADD COLUMN ciphertext TEXT;
CREATE INDEX keys_vault_key ON keys (vault_key_id) WHERE vault_key_id IS NOT NULL;
