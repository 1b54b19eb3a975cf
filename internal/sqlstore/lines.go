package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	r, err := db.scanLine(db.lines.QueryRowContext(ctx, db.rebind(`SELECT generation, seq_ceiling, serving_ceiling, seq_mark, serving_mark, draw_n, draw_void, owed FROM line_numbers WHERE event_id = ?`), event))
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
		` RETURNING generation, seq_ceiling, serving_ceiling, seq_mark, serving_mark, draw_n, draw_void, owed`
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
// numbers (a later call, or a racing instance, changes nothing). A missing record is not an
// error (the event was deleted). Errors: n < 1 or void numbers not ascending within 1..n, the
// database's.
func (db *DB) Draw(ctx context.Context, event string, n int64, void []int64) error {
	if n < 1 {
		return fmt.Errorf("sqlstore: Draw %q: N = %d, want >= 1", event, n)
	}
	for i, v := range void {
		if v < 1 || v > n || (i > 0 && v <= void[i-1]) {
			return fmt.Errorf("sqlstore: Draw %q: void numbers must ascend within 1..%d (%d at %d)", event, n, v, i)
		}
	}
	q := `UPDATE line_numbers SET draw_n = ?, draw_void = ? WHERE event_id = ? AND draw_n = 0`
	if _, err := db.lines.ExecContext(ctx, db.rebind(q), n, encodeRanges(void), event); err != nil {
		return fmt.Errorf("sqlstore: Draw %q: %w", event, err)
	}
	return nil
}

// MarkOwed records the line's owed queue at a checkpoint (queue.LineRecord.Owed): owed,
// distinct numbers in any order (nil: none). A missing record is not an error (the event was
// deleted). Errors: a number below 1, the database's.
func (db *DB) MarkOwed(ctx context.Context, event string, owed []int64) error {
	sorted := slices.Clone(owed)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if len(sorted) > 0 && sorted[0] < 1 {
		return fmt.Errorf("sqlstore: MarkOwed %q: number %d, want >= 1", event, sorted[0])
	}
	if _, err := db.lines.ExecContext(ctx, db.rebind(`UPDATE line_numbers SET owed = ? WHERE event_id = ?`), encodeRanges(sorted), event); err != nil {
		return fmt.Errorf("sqlstore: MarkOwed %q: %w", event, err)
	}
	return nil
}

// encodeRanges writes ascending numbers as ranges: "6-120,122,124-3392" (empty for none).
func encodeRanges(v []int64) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(v[i], 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatInt(v[j], 10))
		}
		i = j + 1
	}
	return b.String()
}

// decodeRanges reads encodeRanges' form. Errors: anything else (ranges not ascending
// included).
func decodeRanges(s string) ([]int64, error) {
	if s == "" {
		return nil, nil
	}
	var out []int64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", part, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil {
				return nil, fmt.Errorf("range %q: %w", part, err)
			}
		}
		if a < 1 || b < a || (len(out) > 0 && a <= out[len(out)-1]) {
			return nil, fmt.Errorf("range %q: not ascending", part)
		}
		for n := a; n <= b; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}

func (db *DB) scanLine(row rowScanner) (queue.LineRecord, error) {
	var r queue.LineRecord
	var gen int64
	var void, owed string
	err := row.Scan(&gen, &r.SeqCeiling, &r.ServingCeiling, &r.SeqMark, &r.ServingMark, &r.DrawN, &void, &owed)
	r.Generation = uint32(gen)
	if err == nil {
		if r.DrawVoid, err = decodeRanges(void); err != nil {
			return r, fmt.Errorf("line_numbers.draw_void: %w", err)
		}
		if r.Owed, err = decodeRanges(owed); err != nil {
			return r, fmt.Errorf("line_numbers.owed: %w", err)
		}
	}
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
