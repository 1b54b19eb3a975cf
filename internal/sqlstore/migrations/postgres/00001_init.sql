-- Initial schema of the durable records (PostgreSQL).
-- Times are timestamptz (UTC on write, millisecond precision chosen by the application).
-- Text keys use the "C" collation so ORDER BY id is byte order, the same as on SQLite.

-- +goose Up
CREATE TABLE events (
    id            TEXT COLLATE "C" PRIMARY KEY,
    name          TEXT NOT NULL,
    max_active    BIGINT NOT NULL,
    admit_rate    DOUBLE PRECISION NOT NULL,
    session_ttl_s BIGINT NOT NULL,
    claim_ttl_s   BIGINT NOT NULL,
    opens_at      TIMESTAMPTZ NULL,
    closes_at     TIMESTAMPTZ NULL,
    redirect_url  TEXT NULL,
    generation    BIGINT NOT NULL CHECK (generation BETWEEN 0 AND 4294967295),
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);

CREATE TABLE settings (
    name       TEXT COLLATE "C" PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE snapshots (
    name     TEXT COLLATE "C" PRIMARY KEY,
    data     BYTEA NOT NULL,
    saved_at TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE snapshots;
DROP TABLE settings;
DROP TABLE events;
