-- An operator pauses admissions (joins still queue) and tells the waiting page why.

-- +goose Up
ALTER TABLE events ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN pause_message TEXT NULL;

-- +goose Down
ALTER TABLE events DROP COLUMN pause_message;
ALTER TABLE events DROP COLUMN paused;
