-- Named admin keys (stored as SHA-256 hashes: a database dump reveals no key) and the audit
-- trail of every admin action: who (the key's name), when, from which address, and the change.

-- +goose Up
CREATE TABLE admin_keys (
    name       TEXT NOT NULL PRIMARY KEY,
    key_hash   TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NULL
) STRICT;

CREATE TABLE audit (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    admin    TEXT NOT NULL,
    address  TEXT NOT NULL,
    action   TEXT NOT NULL,
    event_id TEXT NULL,
    before   TEXT NULL,
    after    TEXT NULL
) STRICT;
CREATE INDEX audit_event ON audit (event_id, id);

-- +goose Down
DROP TABLE audit;
DROP TABLE admin_keys;
