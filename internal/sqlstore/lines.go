package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/waitroom/waitroom/internal/queue"
)

var _ queue.Numbers = (*DB)(nil)

// greatest is the dialect's two-argument maximum.
func (db *DB) greatest(a, b string) string {
	if db.dialect == "sqlite" {
		return "max(" + a + ", " + b + ")"
	}
	return "GREATEST(" + a + ", " + b + ")"
}

// Line implements queue.Numbers: the event's line record, created with a random non-zero
// generation when absent (concurrent creators agree: the first insert wins).
// Errors: the database's.
func (db *DB) Line(ctx context.Context, event string) (queue.LineRecord, error) {
	_, err := db.lines.ExecContext(ctx, db.rebind(`INSERT INTO line_numbers (event_id, generation) VALUES (?, ?) ON CONFLICT (event_id) DO NOTHING`),
		event, int64(newGeneration()))
	if err != nil {
		return queue.LineRecord{}, fmt.Errorf("sqlstore: Line %q: %w", event, err)
	}
	r, err := db.scanLine(db.lines.QueryRowContext(ctx, db.rebind(`SELECT generation, seq_ceiling, serving_ceiling, seq_mark, serving_mark, draw_n, draw_void_from, draw_void_to FROM line_numbers WHERE event_id = ?`), event))
	if err != nil {
		return queue.LineRecord{}, fmt.Errorf("sqlstore: Line %q: %w", event, err)
	}
	return r, nil
}

// Reserve implements queue.Numbers in one statement (atomic on both dialects); a missing
// record is created as by Line. Errors: the database's.
func (db *DB) Reserve(ctx context.Context, event string, seq, serving int64) (queue.LineRecord, error) {
	q := `INSERT INTO line_numbers (event_id, generation, seq_ceiling, serving_ceiling) VALUES (?, ?, ?, ?)
		ON CONFLICT (event_id) DO UPDATE SET seq_ceiling = ` + db.greatest("line_numbers.seq_ceiling", "excluded.seq_ceiling") +
		`, serving_ceiling = ` + db.greatest("line_numbers.serving_ceiling", "excluded.serving_ceiling") +
		` RETURNING generation, seq_ceiling, serving_ceiling, seq_mark, serving_mark, draw_n, draw_void_from, draw_void_to`
	seq = (seq + queue.SeqAlign - 1) / queue.SeqAlign * queue.SeqAlign
	r, err := db.scanLine(db.lines.QueryRowContext(ctx, db.rebind(q), event, int64(newGeneration()), seq, serving))
	if err != nil {
		return queue.LineRecord{}, fmt.Errorf("sqlstore: Reserve %q: %w", event, err)
	}
	return r, nil
}

// Mark implements queue.Numbers. A missing record is not an error (the event was deleted).
// Errors: the database's.
func (db *DB) Mark(ctx context.Context, event string, seq, serving int64) error {
	q := `UPDATE line_numbers SET seq_mark = ` + db.greatest("seq_mark", "?") +
		`, serving_mark = ` + db.greatest("serving_mark", "?") + ` WHERE event_id = ?`
	if _, err := db.lines.ExecContext(ctx, db.rebind(q), seq, serving, event); err != nil {
		return fmt.Errorf("sqlstore: Mark %q: %w", event, err)
	}
	return nil
}

// Draw implements queue.Numbers: the first N recorded for the line is kept, with its void
// range (a later call, or a racing instance, changes nothing). A missing record is not an
// error (the event was deleted). Errors: n < 1 or a void range not within 1..n, the
// database's.
func (db *DB) Draw(ctx context.Context, event string, n, voidFrom, voidTo int64) error {
	if n < 1 {
		return fmt.Errorf("sqlstore: Draw %q: N = %d, want >= 1", event, n)
	}
	if (voidFrom != 0 || voidTo != 0) && (voidFrom < 1 || voidTo < voidFrom || voidTo > n) {
		return fmt.Errorf("sqlstore: Draw %q: void numbers %d..%d, want within 1..%d", event, voidFrom, voidTo, n)
	}
	q := `UPDATE line_numbers SET draw_n = ?, draw_void_from = ?, draw_void_to = ? WHERE event_id = ? AND draw_n = 0`
	if _, err := db.lines.ExecContext(ctx, db.rebind(q), n, voidFrom, voidTo, event); err != nil {
		return fmt.Errorf("sqlstore: Draw %q: %w", event, err)
	}
	return nil
}

func (db *DB) scanLine(row rowScanner) (queue.LineRecord, error) {
	var r queue.LineRecord
	var gen int64
	err := row.Scan(&gen, &r.SeqCeiling, &r.ServingCeiling, &r.SeqMark, &r.ServingMark, &r.DrawN, &r.DrawVoidFrom, &r.DrawVoidTo)
	r.Generation = uint32(gen)
	return r, interpretError(err, recordRows)
}

// newGeneration returns a random non-zero line generation.
func newGeneration() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if g := binary.BigEndian.Uint32(b[:]); g != 0 {
			return g
		}
	}
}
