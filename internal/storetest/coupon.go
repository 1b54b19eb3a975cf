package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/coupon"
)

// CouponFactory returns a fresh, empty coupon store whose clock is now (nil: the store's own
// clock). It registers its own cleanup with t.
type CouponFactory func(t *testing.T, now func() time.Time) coupon.Store

// newCampaign creates a campaign and raises its ceiling by one block (as the service does
// before the first entry), so that entries are numbered from 1.
func newCampaign(t *testing.T, s coupon.Store, stock int64, opens time.Time) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("cp-%d", eventSeq.Add(1))
	created, err := s.PutCampaign(ctx, coupon.Campaign{ID: id, Stock: stock, OpensAt: opens})
	require.NoError(t, err)
	require.True(t, created)
	raise(t, s, id, 0, coupon.BlockSize)
	return id
}

// raise raises the campaign's ceiling with the block (lo, hi] and requires it applied.
func raise(t *testing.T, s coupon.Store, id string, lo, hi int64) {
	t.Helper()
	c, err := s.CampaignCounters(context.Background(), id)
	require.NoError(t, err)
	ok, err := s.RaiseCeiling(context.Background(), id, coupon.Block{Incarnation: c.Incarnation, Lo: lo, Hi: hi})
	require.NoError(t, err)
	require.True(t, ok, "block (%d, %d] applied", lo, hi)
}

// enter enters user "u<i>" (key "k<i>") and returns the result.
func enter(t *testing.T, s coupon.Store, id string, i int) coupon.EnterResult {
	t.Helper()
	r, err := s.Enter(context.Background(), id, fmt.Sprint("k", i), fmt.Sprint("u", i))
	require.NoError(t, err)
	return r
}

// entryOf reads user "u<i>"'s entry.
func entryOf(s coupon.Store, id string, i int) (coupon.Entry, error) {
	return s.Entry(context.Background(), id, fmt.Sprint("k", i), fmt.Sprint("u", i))
}

// unknown is Task.Waited of an entry whose entry time the store does not know (restored).
const unknown = -time.Millisecond

// fact is the database's view of user "u<i>" at number n.
func fact(id string, i int, n int64, st coupon.Status, code string) coupon.Fact {
	return coupon.Fact{UserKey: fmt.Sprint("k", i), Entry: coupon.Entry{Campaign: id, UserID: fmt.Sprint("u", i), Number: n, Status: st, Code: code}}
}

// RunCoupon runs the coupon conformance suite against the stores newStore makes: each test
// below as a parallel subtest on a store of its own.
func RunCoupon(t *testing.T, newStore CouponFactory) {
	runSuite(t, newStore, []suiteTest[CouponFactory]{
		{"EntriesInOrderOncePerUser", testEntriesInOrderOncePerUser},
		{"TakeLeasesAndRecordsOnce", testTakeLeasesAndRecordsOnce},
		{"ConcurrentEntries", testConcurrentEntries},
		{"NumbersOnlyBelowTheCeiling", testNumbersOnlyBelowTheCeiling},
		{"SkippedNumbersCostNoStock", testSkippedNumbersCostNoStock},
		{"RestoreConfirms", testRestoreConfirms},
		{"ConfirmOnlyWhatTheStoreHolds", testConfirmOnlyWhatTheStoreHolds},
		{"RecoverAfterLoss", testRecoverAfterLoss},
		{"RestoreDropsEntriesTheDatabaseRefused", testRestoreDropsEntriesTheDatabaseRefused},
		{"RecordRefusesAnotherUsersEntry", testRecordRefusesAnotherUsersEntry},
	})
}

// testEntriesInOrderOncePerUser: entries open at opens_at and take increasing numbers, once per
// user, unconfirmed; entries beyond the stock are rejected at once.
func testEntriesInOrderOncePerUser(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	_, err := s.Enter(ctx, "nope", "k", "u")
	require.ErrorIs(t, err, coupon.ErrCampaignNotFound)
	id := newCampaign(t, s, 2, clock.Now().Add(time.Minute))
	_, err = s.Enter(ctx, id, "k1", "u1")
	var noe *coupon.NotOpenError
	require.ErrorAs(t, err, &noe)
	require.Equal(t, clock.Now().Add(time.Minute), noe.OpensAt)
	clock.Advance(time.Minute)
	for i := 1; i <= 3; i++ {
		r := enter(t, s, id, i)
		require.True(t, r.Created)
		require.Equal(t, int64(i), r.Entry.Number)
		require.True(t, r.Entry.Unconfirmed)
		want := coupon.StatusPending
		if i == 3 {
			want = coupon.StatusRejected // beyond the stock: decided at once
		}
		require.Equal(t, want, r.Entry.Status)
	}
	r := enter(t, s, id, 2)
	require.False(t, r.Created)
	require.Equal(t, int64(2), r.Entry.Number)
	e, err := entryOf(s, id, 1)
	require.NoError(t, err)
	require.Equal(t, coupon.Entry{Campaign: id, UserID: "u1", Number: 1, Status: coupon.StatusPending, Unconfirmed: true}, e)
	_, err = entryOf(s, id, 9)
	require.ErrorIs(t, err, coupon.ErrEntryNotFound)
	_, err = s.Entry(ctx, id, "k1", "someone else")
	require.ErrorIs(t, err, coupon.ErrEntryNotFound, "a key and another user id")
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, coupon.Counters{Stock: 2, Seq: 3, Ceiling: coupon.BlockSize, Admitted: 2, Queued: 2, Incarnation: c.Incarnation,
		Now: clock.Now()}, c)
	require.NotEmpty(t, c.Incarnation)
	created, err := s.PutCampaign(ctx, coupon.Campaign{ID: id, Stock: 3})
	require.NoError(t, err)
	require.False(t, created)
	c2, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, c.Incarnation, c2.Incarnation, "an update keeps the incarnation")
	require.Equal(t, int64(3), c2.Stock)
}

// testTakeLeasesAndRecordsOnce: Take leases pending entries in order, each with the time it
// has waited since its entry; entries whose lease ran out come back first; a late record
// changes nothing.
func testTakeLeasesAndRecordsOnce(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	id := newCampaign(t, s, 10, time.Time{})
	for i := 1; i <= 5; i++ {
		if i == 4 {
			clock.Advance(2 * time.Second)
		}
		enter(t, s, id, i)
	}
	clock.Advance(time.Second)
	a, err := s.Take(ctx, id, 2, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u1", Waited: 3 * time.Second}, {Number: 2, UserID: "u2", Waited: 3 * time.Second}}, a)
	b, err := s.Take(ctx, id, 2, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 3, UserID: "u3", Waited: 3 * time.Second}, {Number: 4, UserID: "u4", Waited: time.Second}}, b)
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Taken)
	require.Equal(t, int64(1), c.Queued)
	refused, err := s.Record(ctx, id, []coupon.Outcome{{Number: 3, UserID: "u3", Code: "C3"}, {Number: 4, UserID: "u4"}})
	require.NoError(t, err)
	require.Empty(t, refused)
	e, err := entryOf(s, id, 3)
	require.NoError(t, err)
	require.Equal(t, coupon.StatusIssued, e.Status)
	require.Equal(t, "C3", e.Code)
	e, err = entryOf(s, id, 4)
	require.NoError(t, err)
	require.Equal(t, coupon.StatusRejected, e.Status)

	// The first worker died: its entries come back when the lease runs out, before new ones.
	clock.Advance(10 * time.Second)
	d, err := s.Take(ctx, id, 10, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u1", Waited: 13 * time.Second}, {Number: 2, UserID: "u2", Waited: 13 * time.Second},
		{Number: 5, UserID: "u5", Waited: 11 * time.Second}}, d, "waited counts from the entry, not from the first take")
	_, err = s.Record(ctx, id, []coupon.Outcome{{Number: 1, UserID: "u1", Code: "C1"}, {Number: 2, UserID: "u2", Code: "C2"}, {Number: 5, UserID: "u5", Code: "C5"}})
	require.NoError(t, err)
	// A late record of the dead worker changes nothing.
	_, err = s.Record(ctx, id, []coupon.Outcome{{Number: 1, UserID: "u1", Code: "OTHER"}, {Number: 3, UserID: "u3"}})
	require.NoError(t, err)
	e, err = entryOf(s, id, 1)
	require.NoError(t, err)
	require.Equal(t, "C1", e.Code)
	c, err = s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Zero(t, c.Taken)
	require.Zero(t, c.Queued)
	require.Equal(t, clock.Now(), c.Now, "the store's clock")
	clock.Advance(time.Minute)
	f, err := s.Take(ctx, id, 10, time.Second)
	require.NoError(t, err)
	require.Empty(t, f)
}

// testConcurrentEntries: 300 concurrent entries of 250 users get 250 distinct numbers, a repeat the
// same one.
func testConcurrentEntries(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, nil)
	id := newCampaign(t, s, 100, time.Time{})
	var wg sync.WaitGroup
	numbers := make([]int64, 300)
	for i := range numbers {
		wg.Go(func() {
			r, err := s.Enter(ctx, id, fmt.Sprint("k", i%250), fmt.Sprint("u", i%250))
			if err != nil {
				t.Error(err)
				return
			}
			numbers[i] = r.Entry.Number
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, n := range numbers[:250] {
		seen[n] = true
	}
	for i := 250; i < 300; i++ {
		require.Equal(t, numbers[i-250], numbers[i], "a repeat entry returns the same number")
	}
	require.Len(t, seen, 250)
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(250), c.Seq)
	require.Equal(t, int64(100), c.Admitted)
	require.Equal(t, int64(100), c.Queued)
}

// testNumbersOnlyBelowTheCeiling: a created campaign hands out nothing before a block is raised
// for its incarnation; a block right above the ceiling extends it, one further up skips to it,
// one below it or for another incarnation changes nothing; fewer than half a block left asks for
// a refill.
func testNumbersOnlyBelowTheCeiling(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, nil)
	id := fmt.Sprintf("cp-%d", eventSeq.Add(1))
	_, err := s.RaiseCeiling(ctx, id, coupon.Block{Incarnation: "x", Lo: 0, Hi: 4})
	require.ErrorIs(t, err, coupon.ErrCampaignNotFound)
	_, err = s.PutCampaign(ctx, coupon.Campaign{ID: id, Stock: 100})
	require.NoError(t, err)
	_, err = s.Enter(ctx, id, "k1", "u1")
	var ce *coupon.CeilingError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, coupon.ErrCeiling)
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, coupon.CeilingError{Seq: 0, Ceiling: 0, Incarnation: c.Incarnation}, *ce)

	ok, err := s.RaiseCeiling(ctx, id, coupon.Block{Incarnation: "another copy", Lo: 0, Hi: 4})
	require.NoError(t, err)
	require.False(t, ok, "a block reserved for another incarnation")
	raise(t, s, id, 0, 4)
	for i := 1; i <= 4; i++ {
		r := enter(t, s, id, i)
		require.Equal(t, int64(i), r.Entry.Number)
		require.Equal(t, int64(4), r.Refill, "fewer than half a block left")
		require.Equal(t, c.Incarnation, r.Incarnation)
	}
	_, err = s.Enter(ctx, id, "k5", "u5")
	require.ErrorAs(t, err, &ce)
	require.Equal(t, coupon.CeilingError{Seq: 4, Ceiling: 4, Incarnation: c.Incarnation}, *ce)
	raise(t, s, id, 4, 8)
	require.Equal(t, int64(5), enter(t, s, id, 5).Entry.Number, "a contiguous block extends the ceiling")
	raise(t, s, id, 20, 20+coupon.BlockSize)
	r := enter(t, s, id, 6)
	require.Equal(t, int64(21), r.Entry.Number, "a block further up skips the numbers between")
	require.Zero(t, r.Refill, "a whole block left")
	ok, err = s.RaiseCeiling(ctx, id, coupon.Block{Incarnation: c.Incarnation, Lo: 8, Hi: 12})
	require.NoError(t, err)
	require.False(t, ok, "a block below the ceiling")
	require.Equal(t, int64(22), enter(t, s, id, 7).Entry.Number)
	r = enter(t, s, id, 1)
	require.False(t, r.Created)
	require.Equal(t, int64(1), r.Entry.Number, "a repeat needs no number")
}

// testSkippedNumbersCostNoStock: an entry is rejected at once when stock entries are admitted,
// not when its number passes the stock.
func testSkippedNumbersCostNoStock(t *testing.T, newStore CouponFactory) {
	s := newStore(t, nil)
	id := newCampaign(t, s, 2, time.Time{})
	raise(t, s, id, 5000, 6000)
	require.Equal(t, coupon.StatusPending, enter(t, s, id, 1).Entry.Status)
	require.Equal(t, coupon.StatusPending, enter(t, s, id, 2).Entry.Status)
	r := enter(t, s, id, 3)
	require.Equal(t, int64(5003), r.Entry.Number)
	require.Equal(t, coupon.StatusRejected, r.Entry.Status)
}

// testRestoreConfirms: restoring an entry as the database holds it confirms it and queues it
// no second time; a decided one gets its outcome.
func testRestoreConfirms(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, NewClock().Now)
	id := newCampaign(t, s, 10, time.Time{})
	enter(t, s, id, 1)
	enter(t, s, id, 2)
	require.NoError(t, s.RestoreEntries(ctx, id, []coupon.Fact{fact(id, 1, 1, coupon.StatusPending, ""), fact(id, 2, 2, coupon.StatusPending, "")}))
	for i := 1; i <= 2; i++ {
		e, err := entryOf(s, id, i)
		require.NoError(t, err)
		require.False(t, e.Unconfirmed)
		require.Equal(t, int64(i), e.Number)
	}
	r := enter(t, s, id, 1)
	require.False(t, r.Entry.Unconfirmed)
	tasks, err := s.Take(ctx, id, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u1"}, {Number: 2, UserID: "u2"}}, tasks, "queued once")
	// Confirmed while taken: still taken, not queued again.
	require.NoError(t, s.RestoreEntries(ctx, id, []coupon.Fact{fact(id, 1, 1, coupon.StatusPending, "")}))
	tasks, err = s.Take(ctx, id, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, tasks)
	// Issued in the database: the store has the code.
	require.NoError(t, s.RestoreEntries(ctx, id, []coupon.Fact{fact(id, 2, 2, coupon.StatusIssued, "C2")}))
	e, err := entryOf(s, id, 2)
	require.NoError(t, err)
	require.Equal(t, coupon.StatusIssued, e.Status)
	require.Equal(t, "C2", e.Code)
	require.ErrorIs(t, s.RestoreEntries(ctx, "nope", []coupon.Fact{fact("nope", 1, 1, coupon.StatusPending, "")}), coupon.ErrCampaignNotFound)
}

// testConfirmOnlyWhatTheStoreHolds: ConfirmEntries confirms an unconfirmed entry at its number
// and changes nothing else.
func testConfirmOnlyWhatTheStoreHolds(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, nil)
	id := newCampaign(t, s, 10, time.Time{})
	enter(t, s, id, 1)
	enter(t, s, id, 2)
	require.NoError(t, s.ConfirmEntries(ctx, id, []coupon.Fact{fact(id, 1, 1, coupon.StatusPending, ""), fact(id, 2, 5, coupon.StatusPending, "")}))
	e, err := entryOf(s, id, 1)
	require.NoError(t, err)
	require.False(t, e.Unconfirmed)
	e, err = entryOf(s, id, 2)
	require.NoError(t, err)
	require.True(t, e.Unconfirmed, "the store holds u2 at 2, not 5")
	require.Equal(t, int64(2), e.Number)
	require.NoError(t, s.ConfirmEntries(ctx, "nope", []coupon.Fact{fact("nope", 1, 1, coupon.StatusPending, "")}))
}

// testRecoverAfterLoss: a campaign the store lost is created anew (another incarnation: a block
// reserved before is refused); recovery moves numbering above the floor and the entries the
// database holds come back at their numbers, the pending ones queued.
func testRecoverAfterLoss(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, NewClock().Now)
	id := newCampaign(t, s, 10, time.Time{})
	before, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		enter(t, s, id, i)
	}
	// The loss.
	require.NoError(t, s.DeleteCampaign(ctx, id))
	created, err := s.PutCampaign(ctx, coupon.Campaign{ID: id, Stock: 10})
	require.NoError(t, err)
	require.True(t, created)
	ok, err := s.RaiseCeiling(ctx, id, coupon.Block{Incarnation: before.Incarnation, Lo: coupon.BlockSize, Hi: 2 * coupon.BlockSize})
	require.NoError(t, err)
	require.False(t, ok, "a block reserved for the lost copy")

	require.NoError(t, s.RecoverCampaign(ctx, id, coupon.Recovery{Floor: coupon.BlockSize, Admitted: 2}))
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(coupon.BlockSize), c.Seq)
	require.Equal(t, int64(coupon.BlockSize), c.Ceiling, "the next number needs a fresh block")
	require.Equal(t, int64(2), c.Admitted)
	require.NoError(t, s.RestoreEntries(ctx, id, []coupon.Fact{
		fact(id, 1, 1, coupon.StatusIssued, "C1"), fact(id, 2, 2, coupon.StatusPending, ""), fact(id, 3, 3, coupon.StatusRejected, ""),
	}))
	e, err := entryOf(s, id, 2)
	require.NoError(t, err)
	require.Equal(t, coupon.Entry{Campaign: id, UserID: "u2", Number: 2, Status: coupon.StatusPending}, e)
	e, err = entryOf(s, id, 1)
	require.NoError(t, err)
	require.Equal(t, "C1", e.Code)
	e, err = entryOf(s, id, 3)
	require.NoError(t, err)
	require.Equal(t, coupon.StatusRejected, e.Status)
	tasks, err := s.Take(ctx, id, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 2, UserID: "u2", Waited: unknown}}, tasks, "restored: its entry time is unknown")

	_, err = s.Enter(ctx, id, "k4", "u4")
	var ce *coupon.CeilingError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, int64(coupon.BlockSize), ce.Seq)
	raise(t, s, id, 2*coupon.BlockSize, 3*coupon.BlockSize)
	require.Equal(t, int64(2*coupon.BlockSize+1), enter(t, s, id, 4).Entry.Number)
	// Recovery again (another instance, the same figures) keeps the block raised since: it is
	// above the floor, so the lost copy never handed out its numbers.
	require.NoError(t, s.RecoverCampaign(ctx, id, coupon.Recovery{Floor: coupon.BlockSize, Admitted: 3}))
	c, err = s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(2*coupon.BlockSize+1), c.Seq)
	require.Equal(t, int64(3*coupon.BlockSize), c.Ceiling)
	require.Equal(t, int64(2*coupon.BlockSize+2), enter(t, s, id, 5).Entry.Number)
	// A floor above the ceiling (blocks reserved that this copy never saw) moves past them.
	require.NoError(t, s.RecoverCampaign(ctx, id, coupon.Recovery{Floor: 5 * coupon.BlockSize, Admitted: 3}))
	c, err = s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(5*coupon.BlockSize), c.Seq)
	require.Equal(t, int64(5*coupon.BlockSize), c.Ceiling)
	require.ErrorIs(t, s.RecoverCampaign(ctx, "nope", coupon.Recovery{}), coupon.ErrCampaignNotFound)
}

// testRestoreDropsEntriesTheDatabaseRefused: after a rollback the store made entries the
// database refused: a user it numbered anew whom the database holds at another number, and a
// number it gave a second user. Restoring the database's view puts each back.
func testRestoreDropsEntriesTheDatabaseRefused(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, NewClock().Now)
	id := newCampaign(t, s, 10, time.Time{})
	enter(t, s, id, 1) // number 1: the database holds u1 at 7
	enter(t, s, id, 2) // number 2: the database gives it to u3
	require.NoError(t, s.RestoreEntries(ctx, id, []coupon.Fact{fact(id, 1, 7, coupon.StatusPending, ""), fact(id, 3, 2, coupon.StatusPending, "")}))
	e, err := entryOf(s, id, 1)
	require.NoError(t, err)
	require.Equal(t, int64(7), e.Number)
	_, err = entryOf(s, id, 2)
	require.ErrorIs(t, err, coupon.ErrEntryNotFound, "its number is u3's")
	e, err = entryOf(s, id, 3)
	require.NoError(t, err)
	require.Equal(t, int64(2), e.Number)
	tasks, err := s.Take(ctx, id, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 2, UserID: "u3", Waited: unknown}, {Number: 7, UserID: "u1", Waited: unknown}}, tasks, "number 1 is gone")
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Admitted, "the dropped entry no longer counts")
	r := enter(t, s, id, 2)
	require.True(t, r.Created, "u2 enters anew")
	require.Equal(t, int64(3), r.Entry.Number)
}

// testRecordRefusesAnotherUsersEntry: a number restored to another user while a worker holds it
// is queued again for its owner at once; the worker's outcome for it is refused.
func testRecordRefusesAnotherUsersEntry(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	s := newStore(t, NewClock().Now)
	id := newCampaign(t, s, 10, time.Time{})
	enter(t, s, id, 1)
	tasks, err := s.Take(ctx, id, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u1"}}, tasks)
	require.NoError(t, s.RestoreEntries(ctx, id, []coupon.Fact{fact(id, 9, 1, coupon.StatusPending, "")}))
	tasks, err = s.Take(ctx, id, 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u9", Waited: unknown}}, tasks, "queued again for its owner")
	refused, err := s.Record(ctx, id, []coupon.Outcome{{Number: 1, UserID: "u1", Code: "C1"}, {Number: 404, UserID: "u4", Code: "C4"}})
	require.NoError(t, err)
	require.Equal(t, []coupon.Outcome{{Number: 1, UserID: "u1", Code: "C1"}, {Number: 404, UserID: "u4", Code: "C4"}}, refused)
	e, err := entryOf(s, id, 9)
	require.NoError(t, err)
	require.Equal(t, coupon.StatusPending, e.Status, "u1's code is not shown to u9")
	c, err := s.CampaignCounters(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Taken, "u9's lease is not ended by u1's refused outcome")
	_, err = s.Record(ctx, id, []coupon.Outcome{{Number: 1, UserID: "u9", Code: "C9"}})
	require.NoError(t, err)
	e, err = entryOf(s, id, 9)
	require.NoError(t, err)
	require.Equal(t, "C9", e.Code)
}
