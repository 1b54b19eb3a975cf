package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Campaign is an FCFS coupon campaign: Stock coupons for the first entrants from OpensAt on.
type Campaign struct {
	ID    string
	Stock int64
	// Issued counts the coupons issued (the counter whose CHECK keeps it within Stock).
	Issued int64
	// OpensAt is zero when not set (entries accepted at once).
	OpensAt              time.Time
	CreatedAt, UpdatedAt time.Time
	// Entries and Rejected count the campaign's coupon_entries rows and those rejected (read
	// only: JournalEntries and IssueCoupon keep them in coupon_counts).
	Entries, Rejected int64
	// EntryCeiling is the highest entry number reserved for the store (ReserveEntries): every
	// number it ever handed out is at most this (read only).
	EntryCeiling int64
	// LastEntry is the highest entry number in coupon_entries, 0 for none (read only).
	LastEntry int64
}

// Coupon is one issued coupon: at most one per user and campaign.
type Coupon struct {
	Campaign string
	UserID   string
	Code     string
	// Entry is the user's entry number (1-based, entry order).
	Entry    int64
	IssuedAt time.Time
}

// Errors of the coupon records.
var (
	// ErrStockBelowIssued: PutCampaign with a stock below the coupons issued.
	ErrStockBelowIssued = errors.New("stock below the coupons issued")
	// ErrStockGone: IssueCoupon found every coupon of the stock issued.
	ErrStockGone = errors.New("no coupon left")
)

// campaignColumns are the columns PutCampaign writes; campaignSelect reads a Campaign.
const (
	campaignColumns = `id, stock, issued, opens_at, created_at, updated_at`
	campaignSelect  = `SELECT id, stock, issued, opens_at, created_at, updated_at,
		(SELECT COALESCE(sum(k.entries), 0) FROM coupon_counts k WHERE k.campaign_id = campaigns.id),
		(SELECT COALESCE(sum(k.rejected), 0) FROM coupon_counts k WHERE k.campaign_id = campaigns.id),
		entry_ceiling, (SELECT COALESCE(max(e.entry), 0) FROM coupon_entries e WHERE e.campaign_id = campaigns.id)
		FROM campaigns`
)

func scanCampaign(row rowScanner) (Campaign, error) {
	var c Campaign
	err := row.Scan(&c.ID, &c.Stock, &c.Issued, timeCol{&c.OpensAt}, timeCol{&c.CreatedAt}, timeCol{&c.UpdatedAt},
		&c.Entries, &c.Rejected, &c.EntryCeiling, &c.LastEntry)
	return c, err
}

// PutCampaign creates the campaign or updates its stock and opening time; created reports an
// insert. Errors: ErrStockBelowIssued, or a database error.
func (db *DB) PutCampaign(ctx context.Context, c Campaign) (stored Campaign, created bool, err error) {
	if c.ID == "" {
		return Campaign{}, false, errors.New("sqlstore: PutCampaign: empty id")
	}
	now := normTime(time.Now())
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return Campaign{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO campaigns (`+campaignColumns+`) VALUES (?, ?, 0, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`), c.ID, c.Stock, db.timeArg(c.OpensAt), db.timeArg(now), db.timeArg(now))
	if err != nil {
		return Campaign{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		created = true
	} else {
		var issued int64
		if err = tx.QueryRowContext(ctx, db.rebind(`SELECT issued FROM campaigns WHERE id = ?`+db.forUpdate()), c.ID).Scan(&issued); err != nil {
			return Campaign{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
		}
		if c.Stock < issued {
			err = fmt.Errorf("%w (%d issued)", ErrStockBelowIssued, issued)
			return Campaign{}, false, err
		}
		if _, err = tx.ExecContext(ctx, db.rebind(`UPDATE campaigns SET stock = ?, opens_at = ?, updated_at = ? WHERE id = ?`),
			c.Stock, db.timeArg(c.OpensAt), db.timeArg(now), c.ID); err != nil {
			return Campaign{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
		}
	}
	stored, err = scanCampaign(tx.QueryRowContext(ctx, db.rebind(campaignSelect+` WHERE id = ?`), c.ID))
	if err != nil {
		return Campaign{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return Campaign{}, false, fmt.Errorf("sqlstore: PutCampaign: commit: %w", err)
	}
	return stored, created, nil
}

// GetCampaign returns a campaign, or ErrNotFound.
func (db *DB) GetCampaign(ctx context.Context, id string) (Campaign, error) {
	c, err := scanCampaign(db.sql.QueryRowContext(ctx, db.rebind(campaignSelect+` WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Campaign{}, ErrNotFound
	}
	if err != nil {
		return Campaign{}, fmt.Errorf("sqlstore: GetCampaign: %w", err)
	}
	return c, nil
}

// ListCampaigns returns every campaign ordered by id.
func (db *DB) ListCampaigns(ctx context.Context) ([]Campaign, error) {
	rows, err := db.sql.QueryContext(ctx, campaignSelect+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: ListCampaigns: %w", err)
	}
	defer rows.Close()
	out := []Campaign{}
	for rows.Next() {
		c, err := scanCampaign(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: ListCampaigns: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// GetCoupon returns the user's coupon of a campaign, or ErrNotFound.
func (db *DB) GetCoupon(ctx context.Context, campaign, userID string) (Coupon, error) {
	c := Coupon{Campaign: campaign, UserID: userID}
	err := db.sql.QueryRowContext(ctx, db.rebind(`SELECT code, entry, issued_at FROM coupons WHERE campaign_id = ? AND user_id = ?`),
		campaign, userID).Scan(&c.Code, &c.Entry, timeCol{&c.IssuedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return Coupon{}, ErrNotFound
	}
	if err != nil {
		return Coupon{}, fmt.Errorf("sqlstore: GetCoupon: %w", err)
	}
	return c, nil
}

// Coupons returns a campaign's coupons in entry order.
func (db *DB) Coupons(ctx context.Context, campaign string) ([]Coupon, error) {
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT user_id, code, entry, issued_at FROM coupons
		WHERE campaign_id = ? ORDER BY entry`), campaign)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: Coupons: %w", err)
	}
	defer rows.Close()
	out := []Coupon{}
	for rows.Next() {
		c := Coupon{Campaign: campaign}
		if err := rows.Scan(&c.UserID, &c.Code, &c.Entry, timeCol{&c.IssuedAt}); err != nil {
			return nil, fmt.Errorf("sqlstore: Coupons: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
