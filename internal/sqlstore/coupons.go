package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
)

// campaignColumns are the columns PutCampaign writes; campaignSelect reads a
// coupon.CampaignRecord (Entries and Rejected from coupon_counts, LastEntry from
// coupon_entries).
const (
	campaignColumns = `id, stock, issued, opens_at, created_at, updated_at`
	campaignSelect  = `SELECT id, stock, issued, opens_at, created_at, updated_at,
		(SELECT COALESCE(sum(k.entries), 0) FROM coupon_counts k WHERE k.campaign_id = campaigns.id),
		(SELECT COALESCE(sum(k.rejected), 0) FROM coupon_counts k WHERE k.campaign_id = campaigns.id),
		entry_ceiling, (SELECT COALESCE(max(e.entry), 0) FROM coupon_entries e WHERE e.campaign_id = campaigns.id)
		FROM campaigns`
)

func scanCampaign(row rowScanner) (coupon.CampaignRecord, error) {
	var c coupon.CampaignRecord
	err := row.Scan(&c.ID, &c.Stock, &c.Issued, timeCol{&c.OpensAt}, timeCol{&c.CreatedAt}, timeCol{&c.UpdatedAt},
		&c.Entries, &c.Rejected, &c.EntryCeiling, &c.LastEntry)
	return c, err
}

// PutCampaign creates the campaign or updates its stock and opening time; created reports an
// insert. Errors: coupon.ErrStockBelowIssued (a stock below the coupons issued, or below the
// entries standing up to the last one issued: keepsEntryOrder), or a database error.
func (db *DB) PutCampaign(ctx context.Context, c coupon.Campaign) (stored coupon.CampaignRecord, created bool, err error) {
	if c.ID == "" {
		return coupon.CampaignRecord{}, false, errors.New("sqlstore: PutCampaign: empty id")
	}
	now := normTime(time.Now())
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return coupon.CampaignRecord{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO campaigns (`+campaignColumns+`) VALUES (?, ?, 0, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`), c.ID, c.Stock, db.timeArg(c.OpensAt), db.timeArg(now), db.timeArg(now))
	if err != nil {
		return coupon.CampaignRecord{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		created = true
	} else {
		var issued, stock int64
		if err = tx.QueryRowContext(ctx, db.rebind(`SELECT issued, stock FROM campaigns WHERE id = ?`+db.forUpdate()), c.ID).Scan(&issued, &stock); err != nil {
			return coupon.CampaignRecord{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
		}
		if c.Stock < issued {
			err = fmt.Errorf("%w (%d issued)", coupon.ErrStockBelowIssued, issued)
			return coupon.CampaignRecord{}, false, err
		}
		if c.Stock < stock {
			if err = db.keepsEntryOrder(ctx, tx, c); err != nil {
				return coupon.CampaignRecord{}, false, err
			}
		}
		if _, err = tx.ExecContext(ctx, db.rebind(`UPDATE campaigns SET stock = ?, opens_at = ?, updated_at = ? WHERE id = ?`),
			c.Stock, db.timeArg(c.OpensAt), db.timeArg(now), c.ID); err != nil {
			return coupon.CampaignRecord{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
		}
	}
	stored, err = scanCampaign(tx.QueryRowContext(ctx, db.rebind(campaignSelect+` WHERE id = ?`), c.ID))
	if err != nil {
		return coupon.CampaignRecord{}, false, fmt.Errorf("sqlstore: PutCampaign: %w", err)
	}
	if err = tx.Commit(); err != nil {
		return coupon.CampaignRecord{}, false, fmt.Errorf("sqlstore: PutCampaign: commit: %w", err)
	}
	return stored, created, nil
}

// keepsEntryOrder refuses (coupon.ErrStockBelowIssued) a stock c.Stock lowered below the entries
// that stand (issued or waiting) up to the last entry issued a coupon. The workers of several
// instances issue out of entry order, so a coupon may be out to entry 201 while entries 140 to
// 166 wait: a stock of 179 then leaves nothing for those (the issued count reaches it) though
// fewer than 179 stand ahead of them, and entry order, which a lowered stock keeps for the
// entries still waiting (behindTheStock), could no longer hold (found by a helper attacking the
// service). The lowest stock that keeps it is the count of those entries.
func (db *DB) keepsEntryOrder(ctx context.Context, tx *sql.Tx, c coupon.Campaign) error {
	var floor int64
	if err := tx.QueryRowContext(ctx, db.rebind(`SELECT COUNT(*) FROM coupon_entries
		WHERE campaign_id = ? AND NOT rejected AND entry <= (SELECT COALESCE(MAX(entry), 0) FROM coupons WHERE campaign_id = ?)`),
		c.ID, c.ID).Scan(&floor); err != nil {
		return fmt.Errorf("sqlstore: PutCampaign: the entries issued: %w", err)
	}
	if c.Stock < floor {
		return fmt.Errorf("%w: coupons went out of entry order, %d entries stand up to the last one issued, and a stock below %d would reject entries ahead of it",
			coupon.ErrStockBelowIssued, floor, floor)
	}
	return nil
}

// GetCampaign returns a campaign. Errors: coupon.ErrCampaignNotFound, or the database's.
func (db *DB) GetCampaign(ctx context.Context, id string) (coupon.CampaignRecord, error) {
	c, err := scanCampaign(db.sql.QueryRowContext(ctx, db.rebind(campaignSelect+` WHERE id = ?`), id))
	if err != nil {
		return coupon.CampaignRecord{}, fmt.Errorf("sqlstore: GetCampaign %q: %w", id, interpretError(err, campaignRows))
	}
	return c, nil
}

// ListCampaigns returns every campaign ordered by id.
func (db *DB) ListCampaigns(ctx context.Context) ([]coupon.CampaignRecord, error) {
	rows, err := db.sql.QueryContext(ctx, campaignSelect+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: ListCampaigns: %w", err)
	}
	defer rows.Close()
	out := []coupon.CampaignRecord{}
	for rows.Next() {
		c, err := scanCampaign(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: ListCampaigns: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// GetCoupon returns the user's coupon of a campaign. Errors: coupon.ErrCouponNotFound, or the
// database's.
func (db *DB) GetCoupon(ctx context.Context, campaign, userID string) (coupon.Coupon, error) {
	c := coupon.Coupon{Campaign: campaign, UserID: userID}
	err := db.sql.QueryRowContext(ctx, db.rebind(`SELECT code, entry, issued_at FROM coupons WHERE campaign_id = ? AND user_id = ?`),
		campaign, userID).Scan(&c.Code, &c.Entry, timeCol{&c.IssuedAt})
	if err != nil {
		return coupon.Coupon{}, fmt.Errorf("sqlstore: GetCoupon: %w", interpretError(err, couponRows))
	}
	return c, nil
}

// Coupons returns a campaign's coupons in entry order.
func (db *DB) Coupons(ctx context.Context, campaign string) ([]coupon.Coupon, error) {
	rows, err := db.sql.QueryContext(ctx, db.rebind(`SELECT user_id, code, entry, issued_at FROM coupons
		WHERE campaign_id = ? ORDER BY entry`), campaign)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: Coupons: %w", err)
	}
	defer rows.Close()
	out := []coupon.Coupon{}
	for rows.Next() {
		c := coupon.Coupon{Campaign: campaign}
		if err := rows.Scan(&c.UserID, &c.Code, &c.Entry, timeCol{&c.IssuedAt}); err != nil {
			return nil, fmt.Errorf("sqlstore: Coupons: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
