-- The opening's draw (issue 12): prequeue_order ('random' or 'arrival'; events stored before
-- it keep arrival order, the only one they had) and draw_seed, the secret seed of the draw
-- (64 hex characters, made when the event is written first after this; docs/draw.md).

-- +goose Up
ALTER TABLE events ADD COLUMN prequeue_order TEXT NOT NULL DEFAULT 'arrival' CHECK (prequeue_order IN ('random', 'arrival'));
ALTER TABLE events ADD COLUMN draw_seed TEXT;

-- +goose Down
ALTER TABLE events DROP COLUMN draw_seed;
ALTER TABLE events DROP COLUMN prequeue_order;
