-- Roles of the named admin keys, and which key minted each (issue 20, item 8: any named key
-- minted keys and revoked other admins', and the keys it minted outlived its revocation).
-- role is read_only, operator or key_admin (package admin); the keys minted before roles get
-- operator: what they were used for — running events and the sale — without minting or
-- revoking keys, which now needs a key admin. created_by names the key that minted it ('root'
-- or a named key; names are never reused): revoking a key revokes the keys it minted. For the
-- keys minted before, it is read from the audit trail's admin_key.create entry (its after is
-- {"key_hash": …, "name": …}; names need no JSON escaping); NULL when the trail does not name
-- the minter (the entry is missing, or was recorded without its actor).

-- +goose Up
ALTER TABLE admin_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'operator'
    CHECK (role IN ('read_only', 'operator', 'key_admin'));
ALTER TABLE admin_keys ADD COLUMN created_by TEXT COLLATE "C" NULL;
UPDATE admin_keys k SET created_by = (
    SELECT a.admin FROM audit a
    WHERE a.action = 'admin_key.create' AND a.admin <> '' AND a.after IS NOT NULL
      AND strpos(a.after, '"name":"' || k.name || '"') > 0
    ORDER BY a.id LIMIT 1);

-- +goose Down
ALTER TABLE admin_keys DROP COLUMN created_by;
ALTER TABLE admin_keys DROP COLUMN role;
