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

const campaignColumns = `id, stock, issued, opens_at, created_at, updated_at`

func scanCampaign(row rowScanner) (Campaign, error) {
	var c Campaign
	err := row.Scan(&c.ID, &c.Stock, &c.Issued, timeCol{&c.OpensAt}, timeCol{&c.CreatedAt}, timeCol{&c.UpdatedAt})
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
	stored, err = scanCampaign(tx.QueryRowContext(ctx, db.rebind(`SELECT `+campaignColumns+` FROM campaigns WHERE id = ?`), c.ID))
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
	c, err := scanCampaign(db.sql.QueryRowContext(ctx, db.rebind(`SELECT `+campaignColumns+` FROM campaigns WHERE id = ?`), id))
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
	rows, err := db.sql.QueryContext(ctx, `SELECT `+campaignColumns+` FROM campaigns ORDER BY id`)
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

// IssueCoupon issues c (Campaign, UserID, Code, Entry) in one transaction, at most once per
// user: if the user holds a coupon of the campaign already, that one is returned and nothing
// changes (a worker that died after issuing and before recording is harmless). Errors:
// ErrStockGone when every coupon of the stock is issued, ErrNotFound for an unknown campaign,
// or a database error.
func (db *DB) IssueCoupon(ctx context.Context, c Coupon) (Coupon, error) {
	for attempt := 0; ; attempt++ {
		got, err := db.issueCoupon(ctx, c)
		if err != nil && retryable(err) && attempt < 5 {
			continue
		}
		return got, err
	}
}

func (db *DB) issueCoupon(ctx context.Context, c Coupon) (_ Coupon, err error) {
	if prev, err := db.GetCoupon(ctx, c.Campaign, c.UserID); err == nil {
		return prev, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Coupon{}, err
	}
	c.IssuedAt = normTime(time.Now())
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO coupons (campaign_id, user_id, code, entry, issued_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (campaign_id, user_id) DO NOTHING`),
		c.Campaign, c.UserID, c.Code, c.Entry, db.timeArg(c.IssuedAt))
	if err != nil {
		return Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 { // issued meanwhile by another worker
		_ = tx.Rollback()
		done = true
		return db.GetCoupon(ctx, c.Campaign, c.UserID)
	}
	res, err = tx.ExecContext(ctx, db.rebind(`UPDATE campaigns SET issued = issued + 1 WHERE id = ? AND issued < stock`), c.Campaign)
	if err != nil {
		return Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: counter: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := db.getCampaignTx(ctx, tx, c.Campaign); errors.Is(err, ErrNotFound) {
			return Coupon{}, ErrNotFound
		}
		return Coupon{}, ErrStockGone
	}
	if err := tx.Commit(); err != nil {
		return Coupon{}, fmt.Errorf("sqlstore: IssueCoupon: commit: %w", err)
	}
	done = true
	return c, nil
}

func (db *DB) getCampaignTx(ctx context.Context, tx *sql.Tx, id string) (Campaign, error) {
	c, err := scanCampaign(tx.QueryRowContext(ctx, db.rebind(`SELECT `+campaignColumns+` FROM campaigns WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Campaign{}, ErrNotFound
	}
	return c, err
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
