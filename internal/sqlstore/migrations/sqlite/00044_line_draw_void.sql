-- The void numbers of a drawn pre-queue (docs/durability.md, "A second loss"): a line the store
-- lost before its opening resumes with its numbers past the checkpoint void (tickets nobody may
-- hold, skipped until their holder shows up); its opening then draws those still void with the
-- rest, at places nobody holds. draw_void lists them ("6-120,122,124-3392": ranges of numbers,
-- ascending), written once with draw_n, so that a later loss keeps them void instead of taking
-- them for tickets (helper-83: real tickets moved back by hundreds of places), and keeps those
-- whose holders showed up before the draw for tickets (helper-84). '' = none.

-- +goose Up
ALTER TABLE line_numbers ADD COLUMN draw_void TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE line_numbers DROP COLUMN draw_void;
