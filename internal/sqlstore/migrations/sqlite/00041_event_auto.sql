-- An event's admission mode auto (issue 23): the objective and bounds of its controller as
-- JSON {"target_p95_ms", "error_budget", "min_max_active", "max_max_active", "min_admit_rate",
-- "max_admit_rate", "pin_max_active", "hold", "origin", "health_url"} (NULL = mode fixed).

-- +goose Up
ALTER TABLE events ADD COLUMN auto TEXT;

-- +goose Down
ALTER TABLE events DROP COLUMN auto;
