-- Initial schema of the durable records (SQLite).
-- Times are INTEGER unix milliseconds in UTC; NULL means "not set".
-- Tables are STRICT so a wrongly typed value is an error instead of being stored as-is.

-- +goose Up
CREATE TABLE events (
    id            TEXT NOT NULL PRIMARY KEY,
    name          TEXT NOT NULL,
    max_active    INTEGER NOT NULL,
    admit_rate    REAL NOT NULL,
    session_ttl_s INTEGER NOT NULL,
    claim_ttl_s   INTEGER NOT NULL,
    opens_at      INTEGER NULL,
    closes_at     INTEGER NULL,
    redirect_url  TEXT NULL,
    generation    INTEGER NOT NULL CHECK (generation BETWEEN 0 AND 4294967295),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

CREATE TABLE settings (
    name       TEXT NOT NULL PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE snapshots (
    name     TEXT NOT NULL PRIMARY KEY,
    data     BLOB NOT NULL,
    saved_at INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE snapshots;
DROP TABLE settings;
DROP TABLE events;
