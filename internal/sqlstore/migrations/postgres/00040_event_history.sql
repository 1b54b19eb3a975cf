-- The long history of the events (issue 21, item 9): beyond the hour the line store keeps, each
-- event's samples downsampled, a row per minute for a day and per ten minutes for a month
-- (history.Bucket; the sampler writes them, package recorder). sample is the last sample of
-- the span (history.EventSample's encoding), waits the measured waits of the event's life at
-- its end (history.Waits' encoding); epoch names the life (event.Event.Epoch), so that rows of
-- an event deleted and created again are not the new one's. Rows are pruned by span and age
-- (event_history_age).

-- +goose Up
CREATE TABLE event_history (
    event_id    TEXT COLLATE "C" NOT NULL,
    span_s      BIGINT NOT NULL CHECK (span_s > 0),
    start_at    TIMESTAMPTZ NOT NULL,
    epoch       TEXT NOT NULL,
    sample_at   TIMESTAMPTZ NOT NULL,
    sample      TEXT NOT NULL,
    waiting_max BIGINT NOT NULL,
    waits       TEXT NOT NULL,
    PRIMARY KEY (event_id, span_s, start_at)
);
CREATE INDEX event_history_age ON event_history (span_s, start_at);

-- +goose Down
DROP TABLE event_history;
