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

func newCampaign(t *testing.T, s coupon.Store, stock int64, opens time.Time) string {
	t.Helper()
	id := fmt.Sprintf("cp-%d", eventSeq.Add(1))
	require.NoError(t, s.PutCampaign(context.Background(), coupon.Campaign{ID: id, Stock: stock, OpensAt: opens}))
	return id
}

// RunCoupon runs the coupon conformance suite against the stores newStore makes: each test
// below as a parallel subtest on a store of its own.
func RunCoupon(t *testing.T, newStore CouponFactory) {
	runSuite(t, newStore, []suiteTest[CouponFactory]{
		{"EntriesInOrderOncePerUser", testEntriesInOrderOncePerUser},
		{"TakeLeasesAndRecordsOnce", testTakeLeasesAndRecordsOnce},
		{"ConcurrentEntries", testConcurrentEntries},
	})
}

// testEntriesInOrderOncePerUser: entries open at opens_at and take increasing numbers, once per
// user; entries beyond the stock are rejected at once.
func testEntriesInOrderOncePerUser(t *testing.T, newStore CouponFactory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	_, _, err := s.Enter(ctx, "nope", "k", "u")
	require.ErrorIs(t, err, coupon.ErrCampaignNotFound)
	id := newCampaign(t, s, 2, clock.Now().Add(time.Minute))
	_, _, err = s.Enter(ctx, id, "k1", "u1")
	var noe *coupon.NotOpenError
	require.ErrorAs(t, err, &noe)
	require.Equal(t, clock.Now().Add(time.Minute), noe.OpensAt)
	clock.Advance(time.Minute)
	for i := 1; i <= 3; i++ {
		e, created, err := s.Enter(ctx, id, fmt.Sprint("k", i), fmt.Sprint("u", i))
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, int64(i), e.Number)
		want := coupon.StatusPending
		if i == 3 {
			want = coupon.StatusRejected // beyond the stock: decided at once
		}
		require.Equal(t, want, e.Status)
	}
	e, created, err := s.Enter(ctx, id, "k2", "u2")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, int64(2), e.Number)
	e, err = s.Entry(ctx, id, "k1")
	require.NoError(t, err)
	require.Equal(t, coupon.Entry{Campaign: id, UserID: "u1", Number: 1, Status: coupon.StatusPending}, e)
	_, err = s.Entry(ctx, id, "k9")
	require.ErrorIs(t, err, coupon.ErrEntryNotFound)
	st, err := s.CampaignStats(ctx, id)
	require.NoError(t, err)
	require.Equal(t, coupon.Stats{Stock: 2, Entries: 3, Rejected: 1, Now: clock.Now()}, st)
	require.Equal(t, int64(2), st.Pending())
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
		_, _, err := s.Enter(ctx, id, fmt.Sprint("k", i), fmt.Sprint("u", i))
		require.NoError(t, err)
	}
	clock.Advance(time.Second)
	a, err := s.Take(ctx, id, 2, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u1", Waited: 3 * time.Second}, {Number: 2, UserID: "u2", Waited: 3 * time.Second}}, a)
	b, err := s.Take(ctx, id, 2, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 3, UserID: "u3", Waited: 3 * time.Second}, {Number: 4, UserID: "u4", Waited: time.Second}}, b)
	st, err := s.CampaignStats(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Taken)
	require.NoError(t, s.Record(ctx, id, []coupon.Outcome{{Number: 3, Code: "C3"}, {Number: 4}}))
	e, err := s.Entry(ctx, id, "k3")
	require.NoError(t, err)
	require.Equal(t, coupon.StatusIssued, e.Status)
	require.Equal(t, "C3", e.Code)
	e, err = s.Entry(ctx, id, "k4")
	require.NoError(t, err)
	require.Equal(t, coupon.StatusRejected, e.Status)

	// The first worker died: its entries come back when the lease runs out, before new ones.
	clock.Advance(10 * time.Second)
	c, err := s.Take(ctx, id, 10, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []coupon.Task{{Number: 1, UserID: "u1", Waited: 13 * time.Second}, {Number: 2, UserID: "u2", Waited: 13 * time.Second},
		{Number: 5, UserID: "u5", Waited: 11 * time.Second}}, c, "waited counts from the entry, not from the first take")
	require.NoError(t, s.Record(ctx, id, []coupon.Outcome{{Number: 1, Code: "C1"}, {Number: 2, Code: "C2"}, {Number: 5, Code: "C5"}}))
	// A late record of the dead worker changes nothing.
	require.NoError(t, s.Record(ctx, id, []coupon.Outcome{{Number: 1, Code: "OTHER"}, {Number: 3}}))
	e, err = s.Entry(ctx, id, "k1")
	require.NoError(t, err)
	require.Equal(t, "C1", e.Code)
	st, err = s.CampaignStats(ctx, id)
	require.NoError(t, err)
	require.Equal(t, coupon.Stats{Stock: 10, Entries: 5, Issued: 4, Rejected: 1, Now: clock.Now()}, st)
	clock.Advance(time.Minute)
	d, err := s.Take(ctx, id, 10, time.Second)
	require.NoError(t, err)
	require.Empty(t, d)
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
			e, _, err := s.Enter(ctx, id, fmt.Sprint("k", i%250), fmt.Sprint("u", i%250))
			if err != nil {
				t.Error(err)
				return
			}
			numbers[i] = e.Number
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
	st, err := s.CampaignStats(ctx, id)
	require.NoError(t, err)
	require.False(t, st.Now.IsZero(), "stats carry the store's clock")
	require.Equal(t, coupon.Stats{Stock: 100, Entries: 250, Rejected: 150, Now: st.Now}, st)
}
