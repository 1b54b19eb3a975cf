-- The role health_reporter (issue 23): a key that may only report an origin's health for
-- admission mode auto (POST /v1/events/{event_id}/health), for an origin or its gate
-- middleware to hold instead of an operator's key, which could run the sale (package admin).

-- +goose Up
ALTER TABLE admin_keys DROP CONSTRAINT admin_keys_role_check;
ALTER TABLE admin_keys ADD CONSTRAINT admin_keys_role_check
    CHECK (role IN ('health_reporter', 'read_only', 'operator', 'key_admin'));

-- +goose Down
DELETE FROM admin_keys WHERE role = 'health_reporter';
ALTER TABLE admin_keys DROP CONSTRAINT admin_keys_role_check;
ALTER TABLE admin_keys ADD CONSTRAINT admin_keys_role_check
    CHECK (role IN ('read_only', 'operator', 'key_admin'));
