-- Protection against bots (issue 12): an event's limits per client (JSON, NULL = the
-- defaults), identity_required, max_per_user (units per user per event, 0 = no cap) and
-- session_max_s (an admitted session's absolute lifetime); a booking records its user (the
-- 16-byte user key of token.UserKey, hex; NULL for an anonymous ticket) so that max_per_user
-- can sum a user's units inside the booking transaction.

-- +goose Up
ALTER TABLE events ADD COLUMN limits TEXT;
ALTER TABLE events ADD COLUMN identity_required BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE events ADD COLUMN max_per_user BIGINT NOT NULL DEFAULT 0 CHECK (max_per_user >= 0);
ALTER TABLE events ADD COLUMN session_max_s BIGINT NOT NULL DEFAULT 1800 CHECK (session_max_s >= 1);
ALTER TABLE bookings ADD COLUMN user_key TEXT;
CREATE INDEX bookings_user ON bookings (event_id, user_key) WHERE user_key IS NOT NULL;

-- +goose Down
DROP INDEX bookings_user;
ALTER TABLE bookings DROP COLUMN user_key;
ALTER TABLE events DROP COLUMN session_max_s;
ALTER TABLE events DROP COLUMN max_per_user;
ALTER TABLE events DROP COLUMN identity_required;
ALTER TABLE events DROP COLUMN limits;
