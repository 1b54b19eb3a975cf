-- The opening's draw kept with the line's durable numbers (issue 9 with issue 12: a waiting
-- ticket keeps its place across a store loss, also when its place was drawn; docs/draw.md,
-- docs/durability.md). draw_n is N, the number of tickets the opening's draw permuted (tickets
-- 1..N stand at the draw's places), written once when the store settles the opening, before
-- anybody is told a drawn position or admitted; 0 = no draw recorded (none made, or not yet).
-- A line resumed after a loss takes its draw back from it (the seed is events.draw_seed).

-- +goose Up
ALTER TABLE line_numbers ADD COLUMN draw_n BIGINT NOT NULL DEFAULT 0 CHECK (draw_n >= 0);

-- +goose Down
ALTER TABLE line_numbers DROP COLUMN draw_n;
