-- An operator pauses admissions (joins still queue) and tells the waiting page why.

-- +goose Up
ALTER TABLE events ADD COLUMN paused BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE events ADD COLUMN pause_message TEXT NULL;

-- +goose Down
ALTER TABLE events DROP COLUMN pause_message;
ALTER TABLE events DROP COLUMN paused;
