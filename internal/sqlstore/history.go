package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/internal/history"
)

var _ history.Archive = (*DB)(nil)

// PutBucket implements history.Archive in one statement (an upsert, atomic on both dialects):
// a bucket of another life replaces the one kept; within a life, the later sample wins and
// waiting_max keeps the larger. Errors: the database's.
func (db *DB) PutBucket(ctx context.Context, b history.Bucket) error {
	newer := `excluded.epoch <> event_history.epoch OR excluded.sample_at >= event_history.sample_at`
	q := `INSERT INTO event_history (event_id, span_s, start_at, epoch, sample_at, sample, waiting_max, waits)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (event_id, span_s, start_at) DO UPDATE SET
			sample = CASE WHEN ` + newer + ` THEN excluded.sample ELSE event_history.sample END,
			waits = CASE WHEN ` + newer + ` THEN excluded.waits ELSE event_history.waits END,
			waiting_max = CASE WHEN excluded.epoch <> event_history.epoch THEN excluded.waiting_max
				ELSE ` + db.greatest("excluded.waiting_max", "event_history.waiting_max") + ` END,
			sample_at = CASE WHEN ` + newer + ` THEN excluded.sample_at ELSE event_history.sample_at END,
			epoch = excluded.epoch`
	_, err := db.sql.ExecContext(ctx, db.rebind(q), b.Event, int64(b.Span/time.Second), db.timeArg(b.Start), b.Epoch,
		db.timeArg(b.Sample.At), b.Sample.Encode(), b.WaitingMax, b.Waits.Encode())
	if err != nil {
		return fmt.Errorf("sqlstore: PutBucket %q: %w", b.Event, err)
	}
	return nil
}

// Buckets implements history.Archive. A row whose sample cannot be read (another format) is
// skipped. Errors: the database's.
func (db *DB) Buckets(ctx context.Context, event, epoch string, span time.Duration, since time.Time) ([]history.Bucket, error) {
	if since.IsZero() {
		since = time.UnixMilli(0)
	}
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT start_at, sample_at, sample, waiting_max, waits FROM event_history
		WHERE event_id = ? AND span_s = ? AND epoch = ? AND sample_at > ? ORDER BY start_at`),
		event, int64(span/time.Second), epoch, db.timeArg(since))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: Buckets %q: %w", event, err)
	}
	defer rows.Close()
	out := []history.Bucket{}
	for rows.Next() {
		b := history.Bucket{Event: event, Epoch: epoch, Span: span}
		var at time.Time
		var sample, waits string
		if err := rows.Scan(timeCol{&b.Start}, timeCol{&at}, &sample, &b.WaitingMax, &waits); err != nil {
			return nil, fmt.Errorf("sqlstore: Buckets %q: %w", event, err)
		}
		s, ok := history.DecodeEventSample(history.Entry{At: at, Data: sample})
		if !ok {
			continue
		}
		b.Sample, b.Waits = s, history.DecodeWaits(waits)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: Buckets %q: %w", event, err)
	}
	return out, nil
}

// PruneBuckets implements history.Archive. Errors: the database's.
func (db *DB) PruneBuckets(ctx context.Context, span time.Duration, before time.Time) error {
	if _, err := db.sql.ExecContext(ctx, db.rebind(`DELETE FROM event_history WHERE span_s = ? AND start_at < ?`),
		int64(span/time.Second), db.timeArg(before)); err != nil {
		return fmt.Errorf("sqlstore: PruneBuckets: %w", err)
	}
	return nil
}
