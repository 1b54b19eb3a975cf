-- FCFS coupon campaigns (PostgreSQL). A coupon is issued at most once per user and campaign
-- (primary key), and never beyond the stock (the issued counter's CHECK).

-- +goose Up
CREATE TABLE campaigns (
    id         TEXT COLLATE "C" PRIMARY KEY,
    stock      BIGINT NOT NULL CHECK (stock >= 0),
    issued     BIGINT NOT NULL DEFAULT 0,
    opens_at   TIMESTAMPTZ NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    CHECK (issued >= 0 AND issued <= stock)
);

CREATE TABLE coupons (
    campaign_id TEXT COLLATE "C" NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL,
    code        TEXT NOT NULL UNIQUE,
    entry       BIGINT NOT NULL,
    issued_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (campaign_id, user_id)
);

-- +goose Down
DROP TABLE coupons;
DROP TABLE campaigns;
