-- The owed queue of a line (docs/durability.md): holders of void numbers the serving counter
-- passed who showed up with the room full, waiting for a slot ahead of the line. The checkpoint
-- records their numbers ("61-64,70": ranges, ascending) so that a resume after a later loss
-- keeps them void, owed again when they show up, instead of taking them for sessions that ended
-- (helper-86: 95 of 95 read EXPIRED for good). '' = none.

-- +goose Up
ALTER TABLE line_numbers ADD COLUMN owed TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE line_numbers DROP COLUMN owed;
