-- Admin keys scoped to events (admin.Scope): events is a JSON array of the event ids a key may
-- act on, NULL for every event (every key minted before). A key of some events is refused any
-- call that names another event or none, so the key an origin or a tenant's gate middleware
-- holds moves its own events' admission and no other's.

-- +goose Up
ALTER TABLE admin_keys ADD COLUMN events TEXT;

-- +goose Down
DELETE FROM admin_keys WHERE events IS NOT NULL;
ALTER TABLE admin_keys DROP COLUMN events;
