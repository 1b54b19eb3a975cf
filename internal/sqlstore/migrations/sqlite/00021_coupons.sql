-- FCFS coupon campaigns (SQLite). A coupon is issued at most once per user and campaign
-- (primary key), and never beyond the stock (the issued counter's CHECK).

-- +goose Up
CREATE TABLE campaigns (
    id         TEXT NOT NULL PRIMARY KEY,
    stock      INTEGER NOT NULL CHECK (stock >= 0),
    issued     INTEGER NOT NULL DEFAULT 0,
    opens_at   INTEGER NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK (issued >= 0 AND issued <= stock)
) STRICT;

CREATE TABLE coupons (
    campaign_id TEXT NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL,
    code        TEXT NOT NULL UNIQUE,
    entry       INTEGER NOT NULL,
    issued_at   INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, user_id)
) STRICT;

-- +goose Down
DROP TABLE coupons;
DROP TABLE campaigns;
