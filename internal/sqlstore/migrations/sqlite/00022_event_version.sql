-- An event's configuration version is a counter kept by the database (1 on insert, one more
-- per update, in the writing transaction), not a writer's clock: instances whose clocks
-- differ still agree on which configuration is newer. The line generation chosen at creation
-- was never read: the line store picks a new one whenever it re-creates a line.

-- +goose Up
ALTER TABLE events ADD COLUMN version INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1);
ALTER TABLE events DROP COLUMN generation;

-- +goose Down
ALTER TABLE events ADD COLUMN generation INTEGER NOT NULL DEFAULT 0 CHECK (generation BETWEEN 0 AND 4294967295);
ALTER TABLE events DROP COLUMN version;
