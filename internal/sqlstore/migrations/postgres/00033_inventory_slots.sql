-- The event's inventory in slot rows (PostgreSQL): inventory_slots replaces inventory's one row
-- per event, whose sold counter every booking of the event updated, so that its bookings
-- queued on that row's lock, each held until its commit was flushed (issue 9's crowd --book:
-- about 110 bookings a second, and 503s past the 2 s deadline). The units for sale are shared
-- out between 16 slots (sqlstore.inventorySlots); a booking adds to one slot with room; the
-- event's capacity and units sold are the sums. Each slot's CHECK keeps its units sold within
-- its capacity, and the capacities add up to the event's (sqlstore keeps them so), so the
-- units sold never exceed the event's capacity. Existing inventories: slot 0 keeps what was
-- sold, and the units left are shared out evenly.

-- +goose Up
CREATE TABLE inventory_slots (
    event_id TEXT COLLATE "C" NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    slot     BIGINT NOT NULL CHECK (slot >= 0),
    capacity BIGINT NOT NULL,
    sold     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (event_id, slot),
    CHECK (sold >= 0 AND sold <= capacity)
);

WITH RECURSIVE s (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 15)
INSERT INTO inventory_slots (event_id, slot, capacity, sold)
    SELECT i.event_id, s.n,
        (i.capacity - i.sold) / 16 + CASE WHEN s.n < (i.capacity - i.sold) % 16 THEN 1 ELSE 0 END
            + CASE WHEN s.n = 0 THEN i.sold ELSE 0 END,
        CASE WHEN s.n = 0 THEN i.sold ELSE 0 END
    FROM inventory i CROSS JOIN s;

DROP TABLE inventory;

-- +goose Down
CREATE TABLE inventory (
    event_id TEXT COLLATE "C" PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    capacity BIGINT NOT NULL,
    sold     BIGINT NOT NULL DEFAULT 0,
    CHECK (sold >= 0 AND sold <= capacity)
);
INSERT INTO inventory (event_id, capacity, sold)
    SELECT event_id, sum(capacity), sum(sold) FROM inventory_slots GROUP BY event_id;
DROP TABLE inventory_slots;
