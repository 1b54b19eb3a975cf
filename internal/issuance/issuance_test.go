package issuance_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/issuance"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/storetest"
	"github.com/waitroom/waitroom/internal/token"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"))
}

// newBackend returns a coupon store (Redis with a fresh prefix, or memory) whose clock is now,
// and a fresh database (PostgreSQL with Redis, SQLite with memory).
func newBackend(t *testing.T, backend string, now func() time.Time) (coupon.Store, *sqlstore.DB) {
	t.Helper()
	var (
		b   store.Backend
		url string
	)
	switch backend {
	case "redis":
		c := redistest.Client(t)
		var err error
		b, err = redisstore.NewBackend(redisstore.Config{Client: c, Prefix: redistest.Prefix(t, c), Now: now})
		require.NoError(t, err)
		url = sqltest.Postgres(t)
	default:
		b, _ = memstore.NewBackend(memstore.Config{Now: now})
		url = sqltest.SQLite(t)
	}
	db, err := sqlstore.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	notifiers.Store(b.Coupons, b.Notifier)
	return b.Coupons, db
}

// notifiers maps each test's coupon store to its backend's notifier.
var notifiers sync.Map

func notifierOf(s coupon.Store) store.Notifier {
	n, _ := notifiers.Load(s)
	return n.(store.Notifier)
}

func putCampaign(t *testing.T, s coupon.Store, db *sqlstore.DB, id string, stock int64) {
	t.Helper()
	ctx := context.Background()
	_, _, err := db.PutCampaign(ctx, sqlstore.Campaign{ID: id, Stock: stock})
	require.NoError(t, err)
	require.NoError(t, s.PutCampaign(ctx, coupon.Campaign{ID: id, Stock: stock}))
}

// enterAll enters users "user-0".."user-(n-1)" from a pool of goroutines and returns each
// user's entry number.
func enterAll(t *testing.T, s coupon.Store, id string, n int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	numbers := make([]int64, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				uid := fmt.Sprint("user-", i)
				e, created, err := s.Enter(ctx, id, token.UserKey(uid), uid)
				if err != nil || !created {
					t.Errorf("enter %s: %v (created %v)", uid, err, created)
					return
				}
				numbers[i] = e.Number
				if i%97 == 0 {
					_ = notifierOf(s).Publish(ctx, store.Message{Topic: store.CouponWakeTopic(), Body: id})
				}
			}
		})
	}
	wg.Wait()
	out := make(map[string]int64, n)
	for i, num := range numbers {
		out[fmt.Sprint("user-", i)] = num
	}
	return out
}

// waitDone polls the campaign until no entry is pending, calling tick (when set) between
// checks, or fails at the deadline d; it returns the last stats.
func waitDone(t *testing.T, s coupon.Store, id string, d time.Duration, tick func()) coupon.Stats {
	t.Helper()
	var st coupon.Stats
	eventually.NoError(t, d, "no entry pending", func() error {
		var err error
		st, err = s.CampaignStats(context.Background(), id)
		require.NoError(t, err)
		if st.Pending() == 0 {
			return nil
		}
		if tick != nil {
			tick()
		}
		return fmt.Errorf("still %d entries pending: %+v", st.Pending(), st)
	})
	return st
}

// checkIssued verifies the outcome: exactly stock coupons, to the first stock entrants, one
// per user, the database's rows equal to the store's count.
func checkIssued(t *testing.T, s coupon.Store, db *sqlstore.DB, id string, numbers map[string]int64, stock int64, st coupon.Stats) {
	t.Helper()
	ctx := context.Background()
	coupons, err := db.Coupons(ctx, id)
	require.NoError(t, err)
	require.Len(t, coupons, int(stock), "database rows")
	require.Equal(t, stock, st.Issued, "the store's count equals the database's rows")
	require.Equal(t, int64(len(numbers))-stock, st.Rejected)
	users := map[string]bool{}
	codes := map[string]bool{}
	for i, c := range coupons {
		require.False(t, users[c.UserID], "user %s issued twice", c.UserID)
		require.False(t, codes[c.Code], "code %s issued twice", c.Code)
		users[c.UserID], codes[c.Code] = true, true
		require.Equal(t, int64(i+1), c.Entry, "coupons go to the first entrants in entry order")
		require.Equal(t, numbers[c.UserID], c.Entry)
		e, err := s.Entry(ctx, id, token.UserKey(c.UserID))
		require.NoError(t, err)
		require.Equal(t, coupon.StatusIssued, e.Status)
		require.Equal(t, c.Code, e.Code)
	}
	campaign, err := db.GetCampaign(ctx, id)
	require.NoError(t, err)
	require.Equal(t, stock, campaign.Issued)
}

// Test10000EntriesThreeWorkers: 10,000 users enter a 1,000-coupon campaign while three
// workers issue. Exactly 1,000 coupons are issued, to the first 1,000 entrants in entry
// order, each user at most one, and the database's rows equal the store's count.
func Test10000EntriesThreeWorkers(t *testing.T) {
	const users, stock = 10_000, 1_000
	s, db := newBackend(t, "redis", nil)
	putCampaign(t, s, db, "drop", stock)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var workers []*issuance.Issuer
	for range 3 {
		w, err := issuance.NewIssuer(issuance.IssuerConfig{Store: s, Notifier: notifierOf(s), DB: db, Campaigns: func() []string { return []string{"drop"} },
			Batch: 50, SweepInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		w.Start(ctx)
		workers = append(workers, w)
	}
	numbers := enterAll(t, s, "drop", users)
	st := waitDone(t, s, "drop", 2*time.Minute, nil)
	for _, w := range workers {
		w.Stop()
	}
	checkIssued(t, s, db, "drop", numbers, stock, st)
}

// TestKilledWorkerLosesAndDuplicatesNothing: a worker is killed (its context cancelled) after
// writing some coupons to the database and before recording them; the other workers take its
// entries again once the lease runs out. Nothing is lost, nothing issued twice.
func TestKilledWorkerLosesAndDuplicatesNothing(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const users, stock, lease = 500, 200, time.Minute
			clock := storetest.NewClock()
			s, db := newBackend(t, backend, clock.Now)
			putCampaign(t, s, db, "kill", stock)
			numbers := enterAll(t, s, "kill", users)

			victimCtx, kill := context.WithCancel(context.Background())
			defer kill()
			var issuedByVictim []coupon.Task
			killed := make(chan struct{})
			victim, err := issuance.NewIssuer(issuance.IssuerConfig{Store: s, Notifier: notifierOf(s), DB: db, Campaigns: func() []string { return []string{"kill"} },
				Batch: 50, Lease: lease, SweepInterval: time.Hour,
				OnIssued: func(_ string, tk coupon.Task) {
					issuedByVictim = append(issuedByVictim, tk)
					if len(issuedByVictim) == 10 {
						kill() // dies with 50 entries taken, 10 of them in the database, none recorded
						close(killed)
					}
				}})
			require.NoError(t, err)
			victim.Start(victimCtx)
			<-killed
			victim.Stop()
			st, err := s.CampaignStats(context.Background(), "kill")
			require.NoError(t, err)
			require.Equal(t, int64(50), st.Taken, "the dead worker's entries stay taken")
			require.Zero(t, st.Issued)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var others []*issuance.Issuer
			for range 2 {
				w, err := issuance.NewIssuer(issuance.IssuerConfig{Store: s, Notifier: notifierOf(s), DB: db, Campaigns: func() []string { return []string{"kill"} },
					Batch: 50, Lease: lease, SweepInterval: 20 * time.Millisecond})
				require.NoError(t, err)
				w.Start(ctx)
				others = append(others, w)
			}
			// The others issue everything else; the dead worker's entries wait for their lease.
			eventually.NoError(t, time.Minute, "the others to issue everything else", func() error {
				st, err = s.CampaignStats(context.Background(), "kill")
				require.NoError(t, err)
				if st.Pending() == 50 && st.Taken == 50 {
					return nil
				}
				return fmt.Errorf("others did not finish: %+v", st)
			})
			clock.Advance(lease)
			st = waitDone(t, s, "kill", time.Minute, func() { others[0].Kick() })
			for _, w := range others {
				w.Stop()
			}
			checkIssued(t, s, db, "kill", numbers, stock, st)
			for _, tk := range issuedByVictim {
				c, err := db.GetCoupon(context.Background(), "kill", tk.UserID)
				require.NoError(t, err)
				e, err := s.Entry(context.Background(), "kill", token.UserKey(tk.UserID))
				require.NoError(t, err)
				require.Equal(t, c.Code, e.Code, "the code the dead worker wrote is the one recorded")
			}
		})
	}
}

// TestIssuanceLag: every coupon written is reported with its lag from the entry (the store's
// clock up to the take), rejected entries are not.
func TestIssuanceLag(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			clock := storetest.NewClock()
			s, db := newBackend(t, backend, clock.Now)
			putCampaign(t, s, db, "lag", 3)
			enterAll(t, s, "lag", 5) // 3 queued, 2 rejected at once
			clock.Advance(7 * time.Second)
			var mu sync.Mutex
			var lags []time.Duration
			w, err := issuance.NewIssuer(issuance.IssuerConfig{Store: s, Notifier: notifierOf(s), DB: db, Campaigns: func() []string { return []string{"lag"} },
				OnLag: func(id string, lag time.Duration) {
					require.Equal(t, "lag", id)
					mu.Lock()
					lags = append(lags, lag)
					mu.Unlock()
				}})
			require.NoError(t, err)
			require.NoError(t, w.Drain(context.Background()))
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, lags, 3, "one lag per coupon issued, none for the rejected entries")
			for _, l := range lags {
				require.GreaterOrEqual(t, l, 7*time.Second, "the wait in the store counts")
				require.Less(t, l, 7*time.Second+30*time.Second)
			}
		})
	}
}
