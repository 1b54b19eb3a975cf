package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
)

// ReserveEntries reserves the next block of entry numbers for the coupon store in one atomic
// statement: the campaign's entry_ceiling becomes max(entry_ceiling, atLeast) + block, and the
// new ceiling hi is returned; the block is (hi-block, hi], numbers no other caller is given.
// atLeast is the store's own count (numbers it may have handed out without this database
// knowing, e.g. a store older than the ceiling). Errors: coupon.ErrCampaignNotFound, or a
// database error.
func (db *DB) ReserveEntries(ctx context.Context, campaign string, atLeast, block int64) (hi int64, err error) {
	q := `UPDATE campaigns SET entry_ceiling = ` + db.greatest("entry_ceiling", "?") + ` + ? WHERE id = ? RETURNING entry_ceiling`
	err = db.sql.QueryRowContext(ctx, db.rebind(q), atLeast, block, campaign).Scan(&hi)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: ReserveEntries %q: %w", campaign, interpretError(err, campaignRows))
	}
	return hi, nil
}

// ExtendEntries reserves the block (from, from+block] only if the campaign's entry_ceiling is
// still from (the block right after the store's): a store's prefetch, which several instances
// may start at once, so that only the first reserves and no block is skipped. ok is false when
// the ceiling moved (another caller reserved). Errors: a database error.
func (db *DB) ExtendEntries(ctx context.Context, campaign string, from, block int64) (hi int64, ok bool, err error) {
	err = interpretError(db.sql.QueryRowContext(ctx, db.rebind(`UPDATE campaigns SET entry_ceiling = entry_ceiling + ?
		WHERE id = ? AND entry_ceiling = ? RETURNING entry_ceiling`), block, campaign, from).Scan(&hi), campaignRows)
	if errors.Is(err, coupon.ErrCampaignNotFound) {
		return 0, false, nil // no campaign row at from: the ceiling moved (or the campaign is gone)
	}
	if err != nil {
		return 0, false, fmt.Errorf("sqlstore: ExtendEntries: %w", err)
	}
	return hi, true, nil
}

// MaxJournalBatch bounds the rows of one JournalEntries call (4 parameters a row, well within
// both dialects' limits).
const MaxJournalBatch = 1000

// JournalEntries writes entries (Campaign, UserID, Number, Rejected) in one transaction and
// returns, for each (same index), the entry the database holds for that user afterwards:
//   - the same number: written now, or earlier (a repeat);
//   - another number: the user had entered before (the store lost it), with Rejected and Code
//     as held;
//   - Number 0: the number is another user's (the store handed it out twice after a loss), and
//     the user holds none.
//
// The campaigns' entry counters (coupon_counts) count the rows written. At most
// MaxJournalBatch entries. Errors: a database error (nothing written).
func (db *DB) JournalEntries(ctx context.Context, entries []coupon.EntryRecord) ([]coupon.EntryRecord, error) {
	if len(entries) > MaxJournalBatch {
		return nil, fmt.Errorf("sqlstore: JournalEntries: %d entries, at most %d", len(entries), MaxJournalBatch)
	}
	for attempt := 0; ; attempt++ {
		out, err := db.journalEntries(ctx, entries)
		if err != nil && retryable(err) && attempt < 5 {
			continue
		}
		return out, err
	}
}

type entryKey struct{ campaign, user string }

func (db *DB) journalEntries(ctx context.Context, entries []coupon.EntryRecord) (_ []coupon.EntryRecord, err error) {
	if len(entries) == 0 {
		return nil, nil
	}
	// One lock order for every writer: rows sorted by (campaign, user).
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b coupon.EntryRecord) int {
		return cmp.Or(strings.Compare(a.Campaign, b.Campaign), strings.Compare(a.UserID, b.UserID))
	})
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: JournalEntries: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var q strings.Builder
	q.WriteString(`INSERT INTO coupon_entries (campaign_id, user_id, entry, rejected) VALUES `)
	args := make([]any, 0, 4*len(sorted))
	for i, e := range sorted {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?)")
		args = append(args, e.Campaign, e.UserID, e.Number, e.Rejected)
	}
	q.WriteString(` ON CONFLICT DO NOTHING RETURNING campaign_id, user_id, rejected`)
	rows, err := tx.QueryContext(ctx, db.rebind(q.String()), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: JournalEntries: %w", err)
	}
	written := map[entryKey]bool{}
	type counts struct{ entries, rejected int64 }
	added := map[string]*counts{}
	for rows.Next() {
		var k entryKey
		var rejected bool
		if err = rows.Scan(&k.campaign, &k.user, &rejected); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlstore: JournalEntries: %w", err)
		}
		written[k] = true
		if added[k.campaign] == nil {
			added[k.campaign] = &counts{}
		}
		added[k.campaign].entries++
		if rejected {
			added[k.campaign].rejected++
		}
	}
	rows.Close()
	if err = rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: JournalEntries: %w", err)
	}
	slot := rand.IntN(countSlots)
	for _, id := range slices.Sorted(maps.Keys(added)) {
		c := added[id]
		if err = db.count(ctx, tx, id, slot, c.entries, c.rejected); err != nil {
			return nil, fmt.Errorf("sqlstore: JournalEntries: %w", err)
		}
	}
	// What the database holds for the users whose row was not written.
	held := map[entryKey]coupon.EntryRecord{}
	for _, e := range sorted {
		k := entryKey{e.Campaign, e.UserID}
		if written[k] {
			continue
		}
		if _, done := held[k]; done {
			continue
		}
		h, err := db.couponEntryQ(ctx, tx, `e.user_id = ?`, e.Campaign, e.UserID)
		switch {
		case errors.Is(err, coupon.ErrEntryNotFound):
			h = coupon.EntryRecord{Campaign: e.Campaign, UserID: e.UserID}
		case err != nil:
			return nil, fmt.Errorf("sqlstore: JournalEntries: %w", err)
		}
		held[k] = h
	}
	if err = tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlstore: JournalEntries: commit: %w", err)
	}
	out := make([]coupon.EntryRecord, len(entries))
	for i, e := range entries {
		if h, ok := held[entryKey{e.Campaign, e.UserID}]; ok {
			out[i] = h
		} else {
			out[i] = e
			out[i].Code = ""
		}
	}
	return out, nil
}

// countSlots is how many rows count a campaign's entries (coupon_counts): a writer adds to one
// picked at random, so that concurrent writers (4 per instance) seldom wait for each other's
// commit on one row; readers sum them.
const countSlots = 16

// count adds to a campaign's entry counters in slot, inside tx.
func (db *DB) count(ctx context.Context, tx *sql.Tx, campaign string, slot int, entries, rejected int64) error {
	_, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO coupon_counts (campaign_id, slot, entries, rejected) VALUES (?, ?, ?, ?)
		ON CONFLICT (campaign_id, slot) DO UPDATE SET entries = coupon_counts.entries + excluded.entries,
		rejected = coupon_counts.rejected + excluded.rejected`), campaign, slot, entries, rejected)
	if err != nil {
		return fmt.Errorf("counters: %w", err)
	}
	return nil
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// couponEntryQ reads one entry of campaign by cond (on alias e) with its coupon.
// Errors: coupon.ErrEntryNotFound, or a database error.
func (db *DB) couponEntryQ(ctx context.Context, q queryRower, cond string, campaign string, arg any) (coupon.EntryRecord, error) {
	e := coupon.EntryRecord{Campaign: campaign}
	err := q.QueryRowContext(ctx, db.rebind(`SELECT e.user_id, e.entry, e.rejected, COALESCE(c.code, '')
		FROM coupon_entries e LEFT JOIN coupons c ON c.campaign_id = e.campaign_id AND c.user_id = e.user_id
		WHERE e.campaign_id = ? AND `+cond), campaign, arg).Scan(&e.UserID, &e.Number, &e.Rejected, &e.Code)
	if err != nil {
		return coupon.EntryRecord{}, interpretError(err, entryRows)
	}
	return e, nil
}

// CouponEntryOf returns the user's entry of the campaign (with its coupon code if issued).
// Errors: coupon.ErrEntryNotFound, or a database error.
func (db *DB) CouponEntryOf(ctx context.Context, campaign, userID string) (coupon.EntryRecord, error) {
	e, err := db.couponEntryQ(ctx, db.sql, `e.user_id = ?`, campaign, userID)
	if err != nil {
		return e, fmt.Errorf("sqlstore: CouponEntryOf: %w", err)
	}
	return e, nil
}

// CouponEntryAt returns the campaign's entry numbered number (with its coupon code if issued).
// Errors: coupon.ErrEntryNotFound, or a database error.
func (db *DB) CouponEntryAt(ctx context.Context, campaign string, number int64) (coupon.EntryRecord, error) {
	e, err := db.couponEntryQ(ctx, db.sql, `e.entry = ?`, campaign, number)
	if err != nil {
		return e, fmt.Errorf("sqlstore: CouponEntryAt: %w", err)
	}
	return e, nil
}

// AdmittedEntries returns up to limit of the campaign's entries numbered above after that are
// not rejected — pending, or issued (with their code) — in entry order: a page of what a store
// that lost data must hold again (issued entries at most the stock). Errors: a database error.
func (db *DB) AdmittedEntries(ctx context.Context, campaign string, after int64, limit int) ([]coupon.EntryRecord, error) {
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT e.user_id, e.entry, COALESCE(c.code, '')
		FROM coupon_entries e LEFT JOIN coupons c ON c.campaign_id = e.campaign_id AND c.user_id = e.user_id
		WHERE e.campaign_id = ? AND e.entry > ? AND NOT e.rejected ORDER BY e.entry LIMIT ?`), campaign, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: AdmittedEntries: %w", err)
	}
	defer rows.Close()
	var out []coupon.EntryRecord
	for rows.Next() {
		e := coupon.EntryRecord{Campaign: campaign}
		if err := rows.Scan(&e.UserID, &e.Number, &e.Code); err != nil {
			return nil, fmt.Errorf("sqlstore: AdmittedEntries: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// behindTheStock reports whether entry c.Entry is behind the stock in entry order: when the
// campaign's entries that stand (not rejected: issued or waiting) outnumber its stock (the stock
// was lowered below the entries admitted already), an entry is issued only while fewer than the
// stock stand ahead of it. Otherwise the workers' transactions took the stock in whatever order
// they committed: with workers on several instances, entry 10 was issued and entries 3 to 9
// rejected after a cut to 4 (found by a helper attacking the service). When every entry that
// stands fits the stock, each one gets a coupon and nothing is counted (one read of the
// campaign's row and its counters, no scan of its entries).
func (db *DB) behindTheStock(ctx context.Context, tx *sql.Tx, c coupon.Coupon) (behind bool, stock int64, err error) {
	var standing int64
	if err := tx.QueryRowContext(ctx, db.rebind(`SELECT c.stock,
		(SELECT COALESCE(SUM(n.entries - n.rejected), 0) FROM coupon_counts n WHERE n.campaign_id = c.id)
		FROM campaigns c WHERE c.id = ?`), c.Campaign).Scan(&stock, &standing); err != nil {
		return false, 0, fmt.Errorf("stock: %w", interpretError(err, campaignRows))
	}
	if db.afterStockRead != nil {
		db.afterStockRead(c)
	}
	if standing <= stock {
		return false, stock, nil
	}
	var ahead int64
	if err := tx.QueryRowContext(ctx, db.rebind(`SELECT COUNT(*) FROM coupon_entries WHERE campaign_id = ? AND entry < ? AND NOT rejected`),
		c.Campaign, c.Entry).Scan(&ahead); err != nil {
		return false, 0, fmt.Errorf("entries ahead: %w", err)
	}
	return ahead >= stock, stock, nil
}

// errStockMoved: the campaign's stock changed between an issuing transaction's read of it
// (behindTheStock) and its update of the issued count, which waited for the change's commit
// (the read takes no lock). Whether the entry is behind the new stock is decided again: the
// transaction is run again (errRetry).
var errStockMoved = fmt.Errorf("%w: the stock changed while the coupon was issued", errRetry)

// IssueCoupon issues c (Campaign, UserID, Code, Entry) in one transaction, at most once per
// user: if the user holds a coupon of the campaign already, that one is returned and nothing
// changes (a worker that died after issuing and before recording is harmless). The entry must
// be the user's in coupon_entries (it is written here if the user has none and the number is
// free: an entry whose own write failed). When the stock is gone, or the entry is behind it in
// entry order (behindTheStock), the entry is marked rejected (kept so: a later attempt is
// rejected too). A transaction that lost a race (retryable) is run
// again, up to 5 times. Errors: coupon.ErrStockGone, *coupon.StaleEntryError (the number is not
// the user's), coupon.ErrCampaignNotFound, or a database error.
func (db *DB) IssueCoupon(ctx context.Context, c coupon.Coupon) (coupon.Coupon, error) {
	for attempt := 0; ; attempt++ {
		got, err := db.issueCoupon(ctx, c)
		if err != nil && retryable(err) && attempt < 5 {
			continue
		}
		return got, err
	}
}

func (db *DB) issueCoupon(ctx context.Context, c coupon.Coupon) (_ coupon.Coupon, err error) {
	if prev, err := db.GetCoupon(ctx, c.Campaign, c.UserID); err == nil {
		return prev, nil
	} else if !errors.Is(err, coupon.ErrCouponNotFound) {
		return coupon.Coupon{}, err
	}
	c.IssuedAt = normTime(time.Now())
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	var one int
	if err := tx.QueryRowContext(ctx, db.rebind(`SELECT 1 FROM campaigns WHERE id = ?`), c.Campaign).Scan(&one); err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon %q: %w", c.Campaign, interpretError(err, campaignRows))
	}
	// Lock order as JournalEntries: the entry row, a counters' slot (one a transaction), then the
	// campaign's row.
	slot := rand.IntN(countSlots)
	res, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO coupon_entries (campaign_id, user_id, entry) VALUES (?, ?, ?)
		ON CONFLICT DO NOTHING`), c.Campaign, c.UserID, c.Entry)
	if err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: entry: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		if err := db.count(ctx, tx, c.Campaign, slot, 1, 0); err != nil {
			return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", err)
		}
	}
	var held int64
	var rejected bool
	err = interpretError(tx.QueryRowContext(ctx, db.rebind(`SELECT entry, rejected FROM coupon_entries WHERE campaign_id = ? AND user_id = ?`),
		c.Campaign, c.UserID).Scan(&held, &rejected), entryRows)
	switch {
	case errors.Is(err, coupon.ErrEntryNotFound):
		return coupon.Coupon{}, &coupon.StaleEntryError{}
	case err != nil:
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: entry: %w", err)
	case held != c.Entry:
		return coupon.Coupon{}, &coupon.StaleEntryError{Held: held}
	case rejected:
		return coupon.Coupon{}, coupon.ErrStockGone
	}
	behind, stock, err := db.behindTheStock(ctx, tx, c)
	if err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", err)
	}
	var issued int64
	if !behind {
		var now int64
		err = tx.QueryRowContext(ctx, db.rebind(`UPDATE campaigns SET issued = issued + 1 WHERE id = ? AND issued < stock RETURNING stock`),
			c.Campaign).Scan(&now)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: counter: %w", err)
		case now != stock:
			// A stock cut between the read and the update would let an entry behind it take a
			// coupon from one ahead of it (entry order, behindTheStock): decide again.
			return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", errStockMoved)
		default:
			issued = 1
		}
	}
	if issued == 0 {
		// The stock is gone: the entry is rejected for good (a stock raised later issues to
		// new entries, not to this one).
		if _, err = tx.ExecContext(ctx, db.rebind(`UPDATE coupon_entries SET rejected = ? WHERE campaign_id = ? AND user_id = ?`),
			true, c.Campaign, c.UserID); err != nil {
			return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: reject: %w", err)
		}
		if err = db.count(ctx, tx, c.Campaign, slot, 0, 1); err != nil {
			return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: reject: %w", err)
		}
		if err = tx.Commit(); err != nil {
			return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: commit: %w", err)
		}
		done = true
		return coupon.Coupon{}, coupon.ErrStockGone
	}
	res, err = tx.ExecContext(ctx, db.rebind(`INSERT INTO coupons (campaign_id, user_id, code, entry, issued_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (campaign_id, user_id) DO NOTHING`),
		c.Campaign, c.UserID, c.Code, c.Entry, db.timeArg(c.IssuedAt))
	if err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 { // issued meanwhile by another worker
		_ = tx.Rollback()
		done = true
		return db.GetCoupon(ctx, c.Campaign, c.UserID)
	}
	if err := tx.Commit(); err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: commit: %w", err)
	}
	done = true
	return c, nil
}
