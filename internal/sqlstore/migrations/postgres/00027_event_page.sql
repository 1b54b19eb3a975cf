-- The waiting page of an event (issue 10): its title, message, logo, colours and default
-- language, as JSON (NULL = the plain page).

-- +goose Up
ALTER TABLE events ADD COLUMN page TEXT;

-- +goose Down
ALTER TABLE events DROP COLUMN page;
