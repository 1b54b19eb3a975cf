-- Named admin keys (stored as SHA-256 hashes: a database dump reveals no key) and the audit
-- trail of every admin action: who (the key's name), when, from which address, and the change.

-- +goose Up
CREATE TABLE admin_keys (
    name       TEXT COLLATE "C" PRIMARY KEY,
    key_hash   TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ NULL
);

CREATE TABLE audit (
    id       BIGSERIAL PRIMARY KEY,
    at       TIMESTAMPTZ NOT NULL,
    admin    TEXT NOT NULL,
    address  TEXT NOT NULL,
    action   TEXT NOT NULL,
    event_id TEXT COLLATE "C" NULL,
    before   TEXT NULL,
    after    TEXT NULL
);
CREATE INDEX audit_event ON audit (event_id, id);

-- +goose Down
DROP TABLE audit;
DROP TABLE admin_keys;
