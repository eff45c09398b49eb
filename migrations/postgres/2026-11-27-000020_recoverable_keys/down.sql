DROP INDEX keys_vault_key;
ALTER TABLE keys DROP COLUMN ciphertext;
ALTER TABLE keys DROP COLUMN vault_key_id;
