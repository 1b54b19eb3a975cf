-- An event's challenge (issue 12): what a join must carry besides its body, a proof of work or
-- a captcha token, as JSON {"type", "difficulty", "siteverify_url", "secret"} (NULL = none).

-- +goose Up
ALTER TABLE events ADD COLUMN challenge TEXT;

-- +goose Down
ALTER TABLE events DROP COLUMN challenge;
