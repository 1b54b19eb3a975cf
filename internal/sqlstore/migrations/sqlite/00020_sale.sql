-- The sale (SQLite): inventory on the event, the sold counter, bookings and their seats.
-- The constraints are what makes a double sale impossible whatever the store says: a seat is
-- sold at most once per event (booking_seats primary key), units sold never exceed capacity
-- (inventory CHECK), and a ticket books at most once (bookings unique (event_id, ticket_id)).

-- +goose Up
ALTER TABLE events ADD COLUMN capacity INTEGER NULL CHECK (capacity IS NULL OR capacity >= 1);
ALTER TABLE events ADD COLUMN seats TEXT NULL;
ALTER TABLE events ADD COLUMN seat_map TEXT NULL;
ALTER TABLE events ADD COLUMN max_per_booking INTEGER NOT NULL DEFAULT 4;
ALTER TABLE events ADD COLUMN hold_ttl_s INTEGER NOT NULL DEFAULT 300;

CREATE TABLE inventory (
    event_id TEXT NOT NULL PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    capacity INTEGER NOT NULL,
    sold     INTEGER NOT NULL DEFAULT 0,
    CHECK (sold >= 0 AND sold <= capacity)
) STRICT;

CREATE TABLE bookings (
    id              TEXT NOT NULL PRIMARY KEY,
    event_id        TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    ticket_id       TEXT NOT NULL,
    hold_id         TEXT NOT NULL,
    idempotency_key TEXT NULL,
    token_hash      TEXT NOT NULL,
    quantity        INTEGER NOT NULL CHECK (quantity >= 1),
    seats           TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('CONFIRMED', 'CANCELLED')),
    created_at      INTEGER NOT NULL,
    cancelled_at    INTEGER NULL,
    UNIQUE (event_id, ticket_id)
) STRICT;

CREATE TABLE booking_seats (
    event_id   TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    seat       TEXT NOT NULL,
    booking_id TEXT NOT NULL REFERENCES bookings (id) ON DELETE CASCADE,
    PRIMARY KEY (event_id, seat)
) STRICT;
CREATE INDEX booking_seats_booking ON booking_seats (booking_id);

-- +goose Down
DROP TABLE booking_seats;
DROP TABLE bookings;
DROP TABLE inventory;
ALTER TABLE events DROP COLUMN hold_ttl_s;
ALTER TABLE events DROP COLUMN max_per_booking;
ALTER TABLE events DROP COLUMN seat_map;
ALTER TABLE events DROP COLUMN seats;
ALTER TABLE events DROP COLUMN capacity;
