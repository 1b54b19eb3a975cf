package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestCouponEntries runs the coupon entry records on both databases.
func TestCouponEntries(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, db *sqlstore.DB)
	}{
		{"blocks of numbers never overlap", testReserveEntries},
		{"the journal holds one number per user and one user per number", testJournalEntries},
		{"a coupon is issued only for the user's own number", testIssueForOwnEntry},
		{"admitted entries in entry order", testAdmittedEntries},
		{"a stock cut keeps entry order", testStockCutKeepsEntryOrder},
		{"a stock cut below the entries up to the last issued is refused", testStockCutBelowIssuedOutOfOrder},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					db, err := sqlstore.Open(context.Background(), b.url(t))
					require.NoError(t, err)
					t.Cleanup(func() { _ = db.Close() })
					_, _, err = db.PutCampaign(context.Background(), coupon.Campaign{ID: "cp", Stock: 2})
					require.NoError(t, err)
					tc.run(t, db)
				})
			}
		})
	}
}

func testReserveEntries(t *testing.T, db *sqlstore.DB) {
	ctx := context.Background()
	hi, err := db.ReserveEntries(ctx, "cp", 0, 100)
	require.NoError(t, err)
	require.Equal(t, int64(100), hi)
	hi, err = db.ReserveEntries(ctx, "cp", 500, 100)
	require.NoError(t, err)
	require.Equal(t, int64(600), hi, "above the store's own count")
	_, ok, err := db.ExtendEntries(ctx, "cp", 100, 100)
	require.NoError(t, err)
	require.False(t, ok, "the ceiling moved past 100")
	hi, ok, err = db.ExtendEntries(ctx, "cp", 600, 100)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(700), hi)
	_, err = db.ReserveEntries(ctx, "nope", 0, 100)
	require.ErrorIs(t, err, coupon.ErrCampaignNotFound)

	// Concurrent reservations get disjoint blocks.
	var mu sync.Mutex
	his := map[int64]bool{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			hi, err := db.ReserveEntries(ctx, "cp", 0, 10)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			his[hi] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, his, 20)
	c, err := db.GetCampaign(ctx, "cp")
	require.NoError(t, err)
	require.Equal(t, int64(900), c.EntryCeiling)
}

func testJournalEntries(t *testing.T, db *sqlstore.DB) {
	ctx := context.Background()
	e := func(user string, n int64, rejected bool) coupon.EntryRecord {
		return coupon.EntryRecord{Campaign: "cp", UserID: user, Number: n, Rejected: rejected}
	}
	held, err := db.JournalEntries(ctx, []coupon.EntryRecord{e("b", 2, false), e("a", 1, false), e("c", 3, true)})
	require.NoError(t, err)
	require.Equal(t, []coupon.EntryRecord{e("b", 2, false), e("a", 1, false), e("c", 3, true)}, held, "in the order given")
	held, err = db.JournalEntries(ctx, []coupon.EntryRecord{
		e("a", 1, false), // a repeat
		e("b", 7, false), // b entered before, at 2: the store lost it
		e("d", 3, false), // 3 is c's: the store handed it out twice
		e("e", 4, false), // new
	})
	require.NoError(t, err)
	require.Equal(t, []coupon.EntryRecord{e("a", 1, false), e("b", 2, false), {Campaign: "cp", UserID: "d"}, e("e", 4, false)}, held)
	c, err := db.GetCampaign(ctx, "cp")
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Entries)
	require.Equal(t, int64(1), c.Rejected)
	require.Equal(t, int64(4), c.LastEntry)
	got, err := db.CouponEntryAt(ctx, "cp", 3)
	require.NoError(t, err)
	require.Equal(t, e("c", 3, true), got)
	got, err = db.CouponEntryOf(ctx, "cp", "b")
	require.NoError(t, err)
	require.Equal(t, e("b", 2, false), got)
	_, err = db.CouponEntryOf(ctx, "cp", "d")
	require.ErrorIs(t, err, coupon.ErrEntryNotFound)
	_, err = db.JournalEntries(ctx, make([]coupon.EntryRecord, sqlstore.MaxJournalBatch+1))
	require.Error(t, err)
}

func testIssueForOwnEntry(t *testing.T, db *sqlstore.DB) {
	ctx := context.Background()
	_, err := db.JournalEntries(ctx, []coupon.EntryRecord{{Campaign: "cp", UserID: "a", Number: 1}, {Campaign: "cp", UserID: "b", Number: 2}})
	require.NoError(t, err)
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "a", Code: "CA", Entry: 5})
	var stale *coupon.StaleEntryError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, int64(1), stale.Held, "a's number is 1")
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "x", Code: "CX", Entry: 2})
	require.ErrorAs(t, err, &stale)
	require.Zero(t, stale.Held, "2 is b's and x holds none")
	require.ErrorIs(t, err, coupon.ErrStaleEntry)

	c, err := db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "a", Code: "CA", Entry: 1})
	require.NoError(t, err)
	require.Equal(t, "CA", c.Code)
	// An entry whose own write failed is written by its issue; entry 3 is behind the stock (2)
	// in entry order, with a and b standing ahead of it: rejected, for good.
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "y", Code: "CY", Entry: 3})
	require.ErrorIs(t, err, coupon.ErrStockGone)
	got, err := db.CouponEntryOf(ctx, "cp", "y")
	require.NoError(t, err)
	require.Equal(t, coupon.EntryRecord{Campaign: "cp", UserID: "y", Number: 3, Rejected: true}, got)
	c, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "b", Code: "CB", Entry: 2})
	require.NoError(t, err)
	require.Equal(t, "CB", c.Code)
	_, _, err = db.PutCampaign(ctx, coupon.Campaign{ID: "cp", Stock: 5})
	require.NoError(t, err)
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "y", Code: "CY", Entry: 3})
	require.ErrorIs(t, err, coupon.ErrStockGone, "a rejected entry stays rejected")
	camp, err := db.GetCampaign(ctx, "cp")
	require.NoError(t, err)
	require.Equal(t, coupon.CampaignRecord{Campaign: coupon.Campaign{ID: "cp", Stock: 5}, Issued: 2, Entries: 3, Rejected: 1, LastEntry: 3},
		coupon.CampaignRecord{Campaign: coupon.Campaign{ID: camp.ID, Stock: camp.Stock}, Issued: camp.Issued, Entries: camp.Entries,
			Rejected: camp.Rejected, LastEntry: camp.LastEntry})
	// A repeat returns the coupon issued.
	c, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "a", Code: "OTHER", Entry: 1})
	require.NoError(t, err)
	require.Equal(t, "CA", c.Code)
}

func testAdmittedEntries(t *testing.T, db *sqlstore.DB) {
	ctx := context.Background()
	var entries []coupon.EntryRecord
	for i, u := range []string{"a", "b", "c", "d", "e"} {
		entries = append(entries, coupon.EntryRecord{Campaign: "cp", UserID: u, Number: int64(10 * (i + 1)), Rejected: u == "d"})
	}
	_, err := db.JournalEntries(ctx, entries)
	require.NoError(t, err)
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cp", UserID: "b", Code: "CB", Entry: 20})
	require.NoError(t, err)
	page, err := db.AdmittedEntries(ctx, "cp", 0, 2)
	require.NoError(t, err)
	require.Equal(t, []coupon.EntryRecord{{Campaign: "cp", UserID: "a", Number: 10}, {Campaign: "cp", UserID: "b", Number: 20, Code: "CB"}}, page)
	page, err = db.AdmittedEntries(ctx, "cp", 20, 5)
	require.NoError(t, err)
	require.Equal(t, []coupon.EntryRecord{{Campaign: "cp", UserID: "c", Number: 30}, {Campaign: "cp", UserID: "e", Number: 50}}, page, "d is rejected")
}

// tenEntries creates campaign id with a stock of 10 and journals entries 1 to 10 (users u1 to
// u10); issue issues entry n's coupon (code C<n>).
func tenEntries(t *testing.T, db *sqlstore.DB, id string) (issue func(n int64) error) {
	t.Helper()
	ctx := context.Background()
	_, _, err := db.PutCampaign(ctx, coupon.Campaign{ID: id, Stock: 10})
	require.NoError(t, err)
	var entries []coupon.EntryRecord
	for n := int64(1); n <= 10; n++ {
		entries = append(entries, coupon.EntryRecord{Campaign: id, UserID: fmt.Sprintf("u%d", n), Number: n})
	}
	_, err = db.JournalEntries(ctx, entries)
	require.NoError(t, err)
	return func(n int64) error {
		_, err := db.IssueCoupon(ctx, coupon.Coupon{Campaign: id, UserID: fmt.Sprintf("u%d", n), Code: fmt.Sprintf("C%d", n), Entry: n})
		return err
	}
}

// testStockCutKeepsEntryOrder: ten entries stand (admitted while the stock was 10), one is
// issued, then the stock is cut to 4; the workers come to the rest in reverse entry order (as
// workers on several instances may commit). Entries 1 to 4 get the coupons and 5 to 10 are
// rejected, whichever transaction comes first: before, 10, 9 and 8 took the stock and 2 to 4
// were rejected.
func testStockCutKeepsEntryOrder(t *testing.T, db *sqlstore.DB) {
	ctx := context.Background()
	issue := tenEntries(t, db, "cut")
	require.NoError(t, issue(1))
	_, _, err := db.PutCampaign(ctx, coupon.Campaign{ID: "cut", Stock: 4})
	require.NoError(t, err)
	for n := int64(10); n >= 2; n-- {
		err := issue(n)
		if n <= 4 {
			require.NoError(t, err, "entry %d is within the stock in entry order", n)
		} else {
			require.ErrorIs(t, err, coupon.ErrStockGone, "entry %d is behind the stock", n)
		}
	}
	for n := int64(1); n <= 10; n++ {
		e, err := db.CouponEntryAt(ctx, "cut", n)
		require.NoError(t, err)
		require.Equal(t, n > 4, e.Rejected, "entry %d", n)
		require.Equal(t, n <= 4, e.Code != "", "entry %d", n)
	}
	c, err := db.GetCampaign(ctx, "cut")
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Issued)
	// Raised again, the stock goes to new entries: the rejected ones stay rejected.
	_, _, err = db.PutCampaign(ctx, coupon.Campaign{ID: "cut", Stock: 6})
	require.NoError(t, err)
	require.ErrorIs(t, issue(5), coupon.ErrStockGone)
	_, err = db.JournalEntries(ctx, []coupon.EntryRecord{{Campaign: "cut", UserID: "u11", Number: 11}})
	require.NoError(t, err)
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "cut", UserID: "u11", Code: "C11", Entry: 11})
	require.NoError(t, err, "a new entry after the raise: 4 stand ahead of it (5 to 10 rejected), under the stock of 6")
}

// testStockCutBelowIssuedOutOfOrder: the workers issued entries 6 to 8 before 1 to 5 (out of
// entry order, as workers on several instances do). A stock cut below 8 would give the issued
// count's last units to those and reject entries ahead of them, so it is refused; a cut to 8
// issues 1 to 5 and rejects 9 and 10. (A helper found a cut to 5 accepted: entries 1 to 5 were
// rejected, 6 to 8 kept theirs.)
func testStockCutBelowIssuedOutOfOrder(t *testing.T, db *sqlstore.DB) {
	ctx := context.Background()
	issue := tenEntries(t, db, "ooo")
	for n := int64(6); n <= 8; n++ {
		require.NoError(t, issue(n))
	}
	for _, stock := range []int64{2, 5, 7} {
		_, _, err := db.PutCampaign(ctx, coupon.Campaign{ID: "ooo", Stock: stock})
		require.ErrorIs(t, err, coupon.ErrStockBelowIssued, "stock %d with entries 6 to 8 issued", stock)
	}
	c, err := db.GetCampaign(ctx, "ooo")
	require.NoError(t, err)
	require.Equal(t, int64(10), c.Stock, "a refused cut changes nothing")
	_, _, err = db.PutCampaign(ctx, coupon.Campaign{ID: "ooo", Stock: 8})
	require.NoError(t, err)
	for n := int64(10); n >= 1; n-- {
		if n >= 6 && n <= 8 {
			continue
		}
		err := issue(n)
		if n <= 8 {
			require.NoError(t, err, "entry %d is within the stock in entry order", n)
		} else {
			require.ErrorIs(t, err, coupon.ErrStockGone, "entry %d is behind the stock", n)
		}
	}
	c, err = db.GetCampaign(ctx, "ooo")
	require.NoError(t, err)
	require.Equal(t, int64(8), c.Issued)
}

// TestStockCutWhileIssuing: a stock cut that commits between an issuing transaction's read of
// the stock and its update of the issued count (which waits for the cut) does not let an entry
// behind the new stock take a coupon from one ahead of it: the transaction decides again.
// PostgreSQL only: on SQLite the issuing transaction holds the database, so the cut waits.
func TestStockCutWhileIssuing(t *testing.T) {
	ctx := t.Context()
	db := open(t, sqltest.Postgres(t))
	issue := tenEntries(t, db, "race")
	var once sync.Once
	sqlstore.SetAfterStockRead(db, func(c coupon.Coupon) {
		if c.Entry == 10 {
			once.Do(func() {
				_, _, err := db.PutCampaign(ctx, coupon.Campaign{ID: "race", Stock: 4})
				require.NoError(t, err)
			})
		}
	})
	require.ErrorIs(t, issue(10), coupon.ErrStockGone, "entry 10 is behind the stock of 4 that the cut made")
	for n := int64(1); n <= 4; n++ {
		require.NoError(t, issue(n), "entry %d", n)
	}
}
