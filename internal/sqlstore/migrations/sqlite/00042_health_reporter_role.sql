-- The role health_reporter (issue 23): a key that may only report an origin's health for
-- admission mode auto (POST /v1/events/{event_id}/health), for an origin or its gate
-- middleware to hold instead of an operator's key, which could run the sale (package admin).
-- SQLite cannot change a column's CHECK: the column is made again with the wider one.

-- +goose Up
ALTER TABLE admin_keys ADD COLUMN role_new TEXT NOT NULL DEFAULT 'operator'
    CHECK (role_new IN ('health_reporter', 'read_only', 'operator', 'key_admin'));
UPDATE admin_keys SET role_new = role;
ALTER TABLE admin_keys DROP COLUMN role;
ALTER TABLE admin_keys RENAME COLUMN role_new TO role;

-- +goose Down
DELETE FROM admin_keys WHERE role = 'health_reporter';
ALTER TABLE admin_keys ADD COLUMN role_old TEXT NOT NULL DEFAULT 'operator'
    CHECK (role_old IN ('read_only', 'operator', 'key_admin'));
UPDATE admin_keys SET role_old = role;
ALTER TABLE admin_keys DROP COLUMN role;
ALTER TABLE admin_keys RENAME COLUMN role_old TO role;
