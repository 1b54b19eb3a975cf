-- Coupon entries kept in the database (issue 9: whatever the coupon store loses, no entry
-- number is handed out twice and an accepted entry is not lost; docs/durability.md).
--
-- campaigns.entry_ceiling: the store hands out entry numbers only up to it, reserved here in
-- blocks before use (a hi-lo allocator), so that after a loss numbering resumes above it.
-- coupon_entries: every entry answered 2xx, written before the answer (the store's number, and
-- whether it was rejected); unique per user and per number. coupon_counts counts its rows and
-- its rejected rows (the figures GET /v1/campaigns/{id} shows, their sum over the slots): each
-- writer adds to one of a few slots, so that concurrent writers do not queue on one row.

-- +goose Up
ALTER TABLE campaigns ADD COLUMN entry_ceiling INTEGER NOT NULL DEFAULT 0 CHECK (entry_ceiling >= 0);

CREATE TABLE coupon_entries (
    campaign_id TEXT NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL,
    entry       INTEGER NOT NULL CHECK (entry > 0),
    rejected    INTEGER NOT NULL DEFAULT 0 CHECK (rejected IN (0, 1)),
    PRIMARY KEY (campaign_id, user_id),
    UNIQUE (campaign_id, entry)
) STRICT;

CREATE TABLE coupon_counts (
    campaign_id TEXT NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    slot        INTEGER NOT NULL,
    entries     INTEGER NOT NULL DEFAULT 0,
    rejected    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign_id, slot)
) STRICT;

-- Entries of coupons issued before this migration (entries still pending then are written by
-- the worker that issues them). A number two coupons share (the old loss) keeps its first
-- (WHERE true: SQLite reads ON CONFLICT after a SELECT only behind a WHERE).
INSERT INTO coupon_entries (campaign_id, user_id, entry)
    SELECT campaign_id, user_id, entry FROM coupons WHERE true ORDER BY issued_at ON CONFLICT DO NOTHING;
INSERT INTO coupon_counts (campaign_id, slot, entries)
    SELECT campaign_id, 0, count(*) FROM coupon_entries GROUP BY campaign_id;
UPDATE campaigns SET
    entry_ceiling = (SELECT COALESCE(max(entry), 0) FROM coupons c WHERE c.campaign_id = campaigns.id);

-- +goose Down
DROP TABLE coupon_counts;
DROP TABLE coupon_entries;
ALTER TABLE campaigns DROP COLUMN entry_ceiling;
