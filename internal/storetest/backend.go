package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/store"
)

// BackendFactory returns a fresh backend (its own key space) whose clock is now (nil: the
// backend's own). The test's cleanup releases it.
type BackendFactory func(t *testing.T, now func() time.Time) store.Backend

// RunBackend runs every conformance suite against the backends newBackend makes: the line
// (Run), the sale on the same data (RunSale), the coupon campaigns (RunCoupon), the notifier
// (RunNotifier), the leases and the history (RunHistory). Every backend runs exactly this.
func RunBackend(t *testing.T, newBackend BackendFactory) {
	t.Run("Line", func(t *testing.T) {
		Run(t, func(t *testing.T, now func() time.Time) queue.Store { return newBackend(t, now).Line })
	})
	t.Run("Sale", func(t *testing.T) {
		RunSale(t, func(t *testing.T, now func() time.Time) (queue.Store, sale.Store) {
			b := newBackend(t, now)
			return b.Line, b.Sale
		})
	})
	t.Run("Coupon", func(t *testing.T) {
		RunCoupon(t, func(t *testing.T, now func() time.Time) coupon.Store { return newBackend(t, now).Coupons })
	})
	t.Run("Notifier", func(t *testing.T) {
		RunNotifier(t, func(t *testing.T) store.Notifier { return newBackend(t, nil).Notifier })
	})
	t.Run("Leases", func(t *testing.T) {
		clock := NewClock()
		testLeases(t, newBackend(t, clock.Now).Leases, clock)
	})
	t.Run("History", func(t *testing.T) {
		RunHistory(t, func(t *testing.T, now func() time.Time) history.Store { return newBackend(t, now).History })
	})
	t.Run("Counters", func(t *testing.T) {
		clock := NewClock()
		testCounters(t, newBackend(t, clock.Now).Counters, clock)
	})
	t.Run("Auto", func(t *testing.T) { RunAuto(t, newBackend) })
	t.Run("Shares", func(t *testing.T) {
		clock := NewClock()
		testShares(t, newBackend(t, clock.Now).Shares, clock)
	})
}

// RunNotifier is the conformance suite of a store.Notifier: messages reach the subscribers
// of their topic (and only those), a batch is delivered whole, and a subscription ends with
// its context.
func RunNotifier(t *testing.T, newNotifier func(t *testing.T) store.Notifier) {
	t.Run("MessagesReachTheTopicsSubscribers", func(t *testing.T) {
		t.Parallel()
		n := newNotifier(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, b := store.EventTopic("nt-a"), store.EventTopic("nt-b")
		gotA, gotB, gotWake := make(chan string, 100), make(chan string, 100), make(chan string, 100)
		subscribed := make(chan struct{}, 100)
		ready := func(ok bool) {
			if ok {
				subscribed <- struct{}{}
			}
		}
		done := make(chan struct{}, 3)
		for _, s := range []struct {
			topic store.Topic
			ch    chan string
		}{{a, gotA}, {b, gotB}, {store.CouponWakeTopic(), gotWake}} {
			go func() {
				n.Subscribe(ctx, s.topic, func(m string) { s.ch <- m }, ready)
				done <- struct{}{}
			}()
		}
		for range 3 {
			select {
			case <-subscribed:
			case <-time.After(10 * time.Second):
				t.Fatal("subscriptions not confirmed within 10 s")
			}
		}
		errs := n.Publish(ctx, store.Message{Topic: a, Body: "1"}, store.Message{Topic: b, Body: "2"},
			store.Message{Topic: a, Body: "3"}, store.Message{Topic: store.CouponWakeTopic(), Body: "cp"})
		require.Nil(t, errs)
		require.Equal(t, "1", recv(t, gotA))
		require.Equal(t, "3", recv(t, gotA))
		require.Equal(t, "2", recv(t, gotB))
		require.Equal(t, "cp", recv(t, gotWake))
		select {
		case m := <-gotB:
			t.Fatalf("topic b received %q of another topic", m)
		default:
		}
		cancel()
		for range 3 {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Subscribe did not return when its context ended")
			}
		}
	})
}

func recv(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10 s")
		return ""
	}
}

// testLeases: one holder at a time; the holder renews; another takes it once the ttl ran out
// without a renewal.
func testLeases(t *testing.T, l store.Leases, clock *Clock) {
	ctx := context.Background()
	hold := func(holder string) bool {
		t.Helper()
		ok, err := l.Lease(ctx, "reporter", holder, 10*time.Second)
		require.NoError(t, err)
		return ok
	}
	require.True(t, hold("a"))
	require.False(t, hold("b"))
	require.True(t, hold("a"), "the holder renews")
	ok, err := l.Lease(ctx, "other", "b", 10*time.Second)
	require.NoError(t, err)
	require.True(t, ok, "leases of other names are apart")
	clock.Advance(9 * time.Second)
	require.False(t, hold("b"), "renewed 9 s ago for 10 s: still a's")
	clock.Advance(2 * time.Second)
	require.True(t, hold("b"), "taken once the ttl ran out")
	require.False(t, hold("a"))
}

// testCounters: counts add up per key in fixed windows; 0 reads; the next window starts at 0.
func testCounters(t *testing.T, c store.Counters, clock *Clock) {
	ctx := context.Background()
	a, b := store.CountKey{Scope: "admin-auth", Name: "198.51.100.1"}, store.CountKey{Scope: "admin-auth", Name: "2001:db8::/64"}
	count := func(k store.CountKey, n int64) (int64, time.Duration) {
		t.Helper()
		got, left, err := c.Count(ctx, k, n, time.Minute)
		require.NoError(t, err)
		return got, left
	}
	n, left := count(a, 0)
	require.Zero(t, n)
	require.Equal(t, time.Minute, left, "the clock is on a whole minute")
	count(a, 1)
	clock.Advance(15 * time.Second)
	n, left = count(a, 2)
	require.Equal(t, int64(3), n)
	require.Equal(t, 45*time.Second, left)
	n, _ = count(a, 0)
	require.Equal(t, int64(3), n, "0 only reads")
	n, _ = count(b, 1)
	require.Equal(t, int64(1), n, "keys are counted apart")
	n, _ = count(store.CountKey{Scope: "other", Name: "198.51.100.1"}, 0)
	require.Zero(t, n, "so are scopes")
	clock.Advance(45 * time.Second)
	n, _ = count(a, 0)
	require.Zero(t, n, "the next window")
}

// testShares: two holders share a limit; giving back frees a place; a holder's share lapses
// when it is not renewed within its ttl, and its renewal restores it.
func testShares(t *testing.T, s store.Shares, clock *Clock) {
	ctx := context.Background()
	key := store.CountKey{Scope: "ev", Name: "198.51.100.1"}
	const ttl = 30 * time.Second
	held := map[string]int64{}
	take := func(holder string) bool {
		t.Helper()
		ok, err := s.TakeShare(ctx, store.TakeParams{Key: key, Holder: holder, Held: held[holder], Limit: 3, TTL: ttl})
		require.NoError(t, err)
		if ok {
			held[holder]++
		}
		return ok
	}
	give := func(holder string) {
		t.Helper()
		require.NoError(t, s.GiveShare(ctx, key, holder))
		held[holder]--
	}
	require.True(t, take("a"))
	require.True(t, take("b"))
	require.True(t, take("a"))
	require.False(t, take("b"), "3 of 3 taken, by two holders")
	require.False(t, take("a"))
	ok, err := s.TakeShare(ctx, store.TakeParams{Key: store.CountKey{Scope: "ev", Name: "198.51.100.2"}, Holder: "b", Limit: 3, TTL: ttl})
	require.NoError(t, err)
	require.True(t, ok, "other keys are apart")
	give("a")
	require.True(t, take("b"), "a place given back")

	// b renews its share; a does not: after the ttl, only b's 2 count.
	clock.Advance(20 * time.Second)
	require.NoError(t, s.RenewShares(ctx, "b", []store.Share{{Key: key, N: held["b"]}}, ttl))
	clock.Advance(15 * time.Second)
	require.True(t, take("b"), "a's share lapsed: 2 of 3")
	require.False(t, take("b"))
	// a renews with its count: its share counts again (a lapsed share is restored).
	require.NoError(t, s.RenewShares(ctx, "a", []store.Share{{Key: key, N: 1}}, ttl))
	give("b")
	give("b")
	require.True(t, take("a"), "a 1 + b 1: 2 of 3")
	require.False(t, take("b"), "a 2 + b 1")
	// A renewal with no count drops the share.
	require.NoError(t, s.RenewShares(ctx, "a", []store.Share{{Key: key, N: 0}}, ttl))
	require.True(t, take("b"))

	// Once: distinct holders (the addresses using one admission): a holder in is let through
	// however often it comes, and keeps its share alive; a third is refused while two live.
	once := func(holder string) bool {
		t.Helper()
		ok, err := s.TakeShare(ctx, store.TakeParams{Key: store.CountKey{Scope: "ev", Name: "ticket-1"}, Holder: holder,
			Held: 7, Limit: 2, TTL: ttl, Once: true})
		require.NoError(t, err)
		return ok
	}
	require.True(t, once("198.51.100.1"))
	for range 5 {
		require.True(t, once("198.51.100.1"), "the same holder again: not counted again")
	}
	require.True(t, once("198.51.100.2"))
	require.False(t, once("198.51.100.3"), "a third holder while two are live")
	clock.Advance(20 * time.Second)
	require.True(t, once("198.51.100.1"), "a use renews the share")
	clock.Advance(15 * time.Second)
	require.True(t, once("198.51.100.3"), ".2 lapsed: its place is free")
	require.False(t, once("198.51.100.2"), ".1 and .3 are live")
}
