-- The durable record of each event's line numbers (issue 9: numbers never repeat, places
-- survive a store loss; docs/durability.md). The line store hands out ticket numbers only up to
-- seq_ceiling and moves its serving counter only up to serving_ceiling, both reserved here in
-- blocks before use (a hi-lo allocator); seq_mark and serving_mark are checkpoints of what the
-- store last reported, written about every second. generation is the line generation carried
-- by ticket ids: kept across a loss, so ids keep their meaning.

-- +goose Up
CREATE TABLE line_numbers (
	event_id        TEXT PRIMARY KEY,
	generation      BIGINT NOT NULL CHECK (generation > 0 AND generation < 4294967296),
	seq_ceiling     BIGINT NOT NULL DEFAULT 0 CHECK (seq_ceiling >= 0),
	serving_ceiling BIGINT NOT NULL DEFAULT 0 CHECK (serving_ceiling >= 0),
	seq_mark        BIGINT NOT NULL DEFAULT 0 CHECK (seq_mark >= 0),
	serving_mark    BIGINT NOT NULL DEFAULT 0 CHECK (serving_mark >= 0)
);

-- +goose Down
DROP TABLE line_numbers;
