-- The void numbers of a drawn pre-queue (docs/durability.md, "A second loss"): a line the store
-- lost before its opening resumes with its numbers past the checkpoint void (tickets nobody may
-- hold, skipped until their holder shows up); its opening then draws them with the rest, at
-- places nobody holds. draw_void_from..draw_void_to is that range, written once with draw_n, so
-- that a later loss keeps them void instead of taking them for tickets (helper-83: real tickets
-- moved back by hundreds of places). 0, 0 = none.

-- +goose Up
ALTER TABLE line_numbers ADD COLUMN draw_void_from BIGINT NOT NULL DEFAULT 0 CHECK (draw_void_from >= 0);
ALTER TABLE line_numbers ADD COLUMN draw_void_to BIGINT NOT NULL DEFAULT 0 CHECK (draw_void_to >= draw_void_from);

-- +goose Down
ALTER TABLE line_numbers DROP COLUMN draw_void_to;
ALTER TABLE line_numbers DROP COLUMN draw_void_from;
