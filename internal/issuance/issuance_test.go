package issuance_test

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
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

// env is one deployment's coupon side: a store, its notifier, a database, and (for Redis) the
// client and prefix, so that a test can make the store lose data.
type env struct {
	backend  string
	now      func() time.Time
	store    coupon.Store
	notifier store.Notifier
	db       *sqlstore.DB
	client   rueidis.Client
	prefix   string
	// dials is the Redis store's dial count (redisstore.Config.Dials): a test adds one to play
	// a reconnection.
	dials *atomic.Uint64
	// syncInterval is the services' (50 ms when 0).
	syncInterval time.Duration
	// dbURL is the database's.
	dbURL string
}

// newEnv returns a coupon store (Redis with a fresh prefix, or memory) whose clock is now, and
// a fresh database (PostgreSQL with Redis, SQLite with memory).
func newEnv(t testing.TB, backend string, now func() time.Time) *env {
	t.Helper()
	e := &env{backend: backend, now: now}
	var url string
	switch backend {
	case "redis":
		e.client = redistest.Client(t)
		e.prefix = redistest.Prefix(t, e.client)
		e.dials = new(atomic.Uint64)
		b, err := redisstore.NewBackend(redisstore.Config{Client: e.client, Prefix: e.prefix, Now: now, Dials: e.dials})
		require.NoError(t, err)
		e.store, e.notifier = b.Coupons, b.Notifier
		url = sqltest.Postgres(t)
	default:
		e.newMemory()
		url = sqltest.SQLite(t)
	}
	db, err := sqlstore.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	e.db, e.dbURL = db, url
	return e
}

func (e *env) newMemory() {
	b, _ := memstore.NewBackend(memstore.Config{Now: e.now})
	e.store, e.notifier = b.Coupons, b.Notifier
}

// lose makes the store lose everything: Redis restarted empty, or the embedded deployment's
// process restarted (a new in-memory store: services must be made anew on it).
func (e *env) lose(t *testing.T) {
	t.Helper()
	if e.backend == "redis" {
		require.NoError(t, redisstore.DeletePrefix(context.Background(), e.client, e.prefix))
		return
	}
	e.newMemory()
}

// snapshot saves the store's keys (Redis only); the function returned puts them back, as a
// Redis restarted from an older snapshot, or a failover to a replica behind, would. With
// newServer, the copy is on another server than the one the campaigns were made on (their rid
// changed) and the instance reconnected (dials), as after a real restart or failover; without,
// the server looks the same and only the database can tell.
func (e *env) snapshot(t *testing.T, newServer bool) (rollback func()) {
	t.Helper()
	ctx := context.Background()
	keys, err := e.client.Do(ctx, e.client.B().Keys().Pattern(e.prefix+"*").Build()).AsStrSlice()
	require.NoError(t, err)
	dumps := map[string]string{}
	for _, k := range keys {
		d, err := e.client.Do(ctx, e.client.B().Dump().Key(k).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			continue // emptied (so deleted) since KEYS
		}
		require.NoError(t, err)
		dumps[k] = d
	}
	return func() {
		now, err := e.client.Do(ctx, e.client.B().Keys().Pattern(e.prefix+"*").Build()).AsStrSlice()
		require.NoError(t, err)
		for _, k := range now {
			if _, old := dumps[k]; !old {
				require.NoError(t, e.client.Do(ctx, e.client.B().Del().Key(k).Build()).Error())
			}
		}
		for k, d := range dumps {
			require.NoError(t, e.client.Do(ctx, e.client.B().Restore().Key(k).Ttl(0).SerializedValue(d).Replace().Build()).Error())
		}
		if newServer {
			for k := range dumps {
				if strings.HasSuffix(k, "}") { // a campaign's hash
					require.NoError(t, e.client.Do(ctx, e.client.B().Hset().Key(k).FieldValue().FieldValue("rid", "0000").Build()).Error())
				}
			}
			e.dials.Add(1)
		}
	}
}

// service starts a coupon service on the env (workers sweep every 20 ms) and stops it at the
// end of the test (or when the returned function is called).
func (e *env) service(t testing.TB, ic issuance.IssuerConfig) (*issuance.Service, func()) {
	t.Helper()
	if ic.SweepInterval == 0 {
		ic.SweepInterval = 20 * time.Millisecond
	}
	if ic.Batch == 0 {
		ic.Batch = 50
	}
	s, err := issuance.New(issuance.Config{DB: e.db, Store: e.store, Notifier: e.notifier,
		SyncInterval: cmp.Or(e.syncInterval, 50*time.Millisecond), Issuer: ic})
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	var once sync.Once
	stop := func() { once.Do(func() { _ = s.Stop(context.Background()) }) }
	t.Cleanup(stop)
	return s, stop
}

// put creates a campaign through the service.
func put(t *testing.T, s *issuance.Service, id string, stock int64) {
	t.Helper()
	_, _, err := s.Put(context.Background(), coupon.Campaign{ID: id, Stock: stock})
	require.NoError(t, err)
}

// enterAll enters users "user-<from>".."user-<to-1>" from a pool of goroutines and returns the
// number each was answered.
func enterAll(t *testing.T, s *issuance.Service, id string, from, to int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	var (
		mu      sync.Mutex
		numbers = map[string]int64{}
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	next.Store(int64(from))
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
				uid := fmt.Sprint("user-", i)
				e, created, err := s.Enter(ctx, id, uid)
				if err != nil || !created {
					t.Errorf("enter %s: %v (created %v)", uid, err, created)
					return
				}
				mu.Lock()
				numbers[uid] = e.Number
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return numbers
}

// waitDone polls the campaign until no entry is pending in SQL nor waiting or taken in the
// store (an entry a rollback put back in the queue is taken again and recorded), or fails at
// the deadline d; it returns the last figures.
func waitDone(t *testing.T, s *issuance.Service, store coupon.Store, id string, d time.Duration) coupon.Stats {
	t.Helper()
	var st coupon.Stats
	eventually.NoError(t, d, "no entry pending", func() error {
		var err error
		st, err = s.Stats(context.Background(), id)
		require.NoError(t, err)
		cnt, err := store.CampaignCounters(context.Background(), id)
		require.NoError(t, err)
		if st.Pending() == 0 && cnt.Taken == 0 && cnt.Queued == 0 {
			return nil
		}
		return fmt.Errorf("still %d entries pending: %+v, %+v", st.Pending(), st, cnt)
	})
	return st
}

// checkIssued verifies the outcome: every user answered a number reads that entry back; stock
// coupons, one per user, each at the number its user was answered, each shown to its user
// only; the figures (from SQL) add up. firstCome additionally requires the coupons to go to the
// first stock entrants in entry order (no loss in between).
func checkIssued(t *testing.T, s *issuance.Service, e *env, id string, numbers map[string]int64, stock int64, firstCome bool) {
	t.Helper()
	ctx := context.Background()
	db := e.db
	st := waitDone(t, s, e.store, id, 2*time.Minute)
	coupons, err := db.Coupons(ctx, id)
	require.NoError(t, err)
	require.Len(t, coupons, int(stock), "database rows")
	require.Equal(t, stock, st.Issued)
	require.Equal(t, int64(len(numbers)), st.Entries)
	require.Equal(t, int64(len(numbers))-stock, st.Rejected)
	users := map[string]bool{}
	codes := map[string]bool{}
	for i, c := range coupons {
		require.False(t, users[c.UserID], "user %s issued twice", c.UserID)
		require.False(t, codes[c.Code], "code %s issued twice", c.Code)
		users[c.UserID], codes[c.Code] = true, true
		if firstCome {
			require.Equal(t, int64(i+1), c.Entry, "coupons go to the first entrants in entry order")
		}
		require.Equal(t, numbers[c.UserID], c.Entry, "the coupon is at the number %s was answered", c.UserID)
	}
	seen := map[int64]string{}
	for uid, n := range numbers {
		require.Empty(t, seen[n], "number %d answered to %s and %s", n, seen[n], uid)
		seen[n] = uid
		e, err := s.Entry(ctx, id, uid)
		require.NoError(t, err, "the entry of %s", uid)
		require.Equal(t, n, e.Number, "the entry of %s keeps its number", uid)
		if users[uid] {
			c, err := db.GetCoupon(ctx, id, uid)
			require.NoError(t, err)
			require.Equal(t, coupon.StatusIssued, e.Status)
			require.Equal(t, c.Code, e.Code, "%s is shown its own code", uid)
		} else {
			require.Equal(t, coupon.StatusRejected, e.Status, "the entry of %s", uid)
			require.Empty(t, e.Code)
		}
	}
}

// Test10000EntriesThreeWorkers: 10,000 users enter a 1,000-coupon campaign on three instances
// (each with its worker). Exactly 1,000 coupons are issued, to the first 1,000 entrants in
// entry order, each user at most one; numbers run 1..10,000 without a gap (the next block is
// reserved ahead of need, and by one instance only).
func Test10000EntriesThreeWorkers(t *testing.T) {
	const users, stock = 10_000, 1_000
	e := newEnv(t, "redis", nil)
	var svcs []*issuance.Service
	for range 3 {
		s, _ := e.service(t, issuance.IssuerConfig{})
		svcs = append(svcs, s)
	}
	put(t, svcs[0], "drop", stock)
	numbers := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Go(func() {
			got := enterAll(t, s, "drop", i*users/3, (i+1)*users/3)
			mu.Lock()
			defer mu.Unlock()
			for u, n := range got {
				numbers[u] = n
			}
		})
	}
	wg.Wait()
	require.Len(t, numbers, users)
	for _, n := range numbers {
		require.LessOrEqual(t, n, int64(users), "no number skipped")
	}
	checkIssued(t, svcs[0], e, "drop", numbers, stock, true)
	c, err := e.db.GetCampaign(context.Background(), "drop")
	require.NoError(t, err)
	require.LessOrEqual(t, c.EntryCeiling, int64(users+2*coupon.BlockSize), "blocks reserved")
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
			e := newEnv(t, backend, clock.Now)
			// A service whose own worker never runs (an hour's sweep, no wake-ups reach a
			// stopped worker): entries only.
			svc, _ := e.service(t, issuance.IssuerConfig{SweepInterval: time.Hour})
			svc.Issuer.Stop()
			put(t, svc, "kill", stock)
			numbers := enterAll(t, svc, "kill", 0, users)

			victimCtx, kill := context.WithCancel(context.Background())
			defer kill()
			var issuedByVictim []coupon.Task
			killed := make(chan struct{})
			victim, err := issuance.NewIssuer(issuance.IssuerConfig{Store: e.store, Notifier: e.notifier, DB: e.db, Campaigns: func() []string { return []string{"kill"} },
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
			cnt, err := e.store.CampaignCounters(context.Background(), "kill")
			require.NoError(t, err)
			require.Equal(t, int64(50), cnt.Taken, "the dead worker's entries stay taken")

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var others []*issuance.Issuer
			for range 2 {
				w, err := issuance.NewIssuer(issuance.IssuerConfig{Store: e.store, Notifier: e.notifier, DB: e.db, Campaigns: func() []string { return []string{"kill"} },
					Batch: 50, Lease: lease, SweepInterval: 20 * time.Millisecond})
				require.NoError(t, err)
				w.Start(ctx)
				others = append(others, w)
			}
			// The others issue everything else; the dead worker's entries wait for their lease.
			eventually.NoError(t, time.Minute, "the others to issue everything else", func() error {
				cnt, err = e.store.CampaignCounters(context.Background(), "kill")
				require.NoError(t, err)
				if cnt.Queued == 0 && cnt.Taken == 50 {
					return nil
				}
				return fmt.Errorf("others did not finish: %+v", cnt)
			})
			clock.Advance(lease)
			others[0].Kick()
			checkIssued(t, svc, e, "kill", numbers, stock, true)
			for _, w := range others {
				w.Stop()
			}
			for _, tk := range issuedByVictim {
				c, err := e.db.GetCoupon(context.Background(), "kill", tk.UserID)
				require.NoError(t, err)
				en, err := svc.Entry(context.Background(), "kill", tk.UserID)
				require.NoError(t, err)
				require.Equal(t, c.Code, en.Code, "the code the dead worker wrote is the one recorded")
			}
		})
	}
}

// TestEntriesSurviveAStoreLoss: the store loses everything in the middle of a campaign (Redis
// restarted empty; the embedded deployment's process restarted). Every entry answered before
// keeps its number and its outcome, numbering resumes above every number handed out, the
// entries pending at the loss are issued, and every code is shown to its owner only.
func TestEntriesSurviveAStoreLoss(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const stock = 150
			e := newEnv(t, backend, nil)
			svc, stop := e.service(t, issuance.IssuerConfig{})
			put(t, svc, "loss", stock)
			before := enterAll(t, svc, "loss", 0, 200)
			var last int64
			for _, n := range before {
				last = max(last, n)
			}
			e.lose(t)
			if backend == "memory" {
				stop() // the process restarts on the same database
				svc, _ = e.service(t, issuance.IssuerConfig{})
			}
			after := enterAll(t, svc, "loss", 200, 300)
			for u, n := range after {
				require.Greater(t, n, last, "%s numbered above every number handed out before the loss", u)
				before[u] = n
			}
			checkIssued(t, svc, e, "loss", before, stock, false)
		})
	}
}

// TestRollbackToAnOlderSnapshot: Redis comes back from a snapshot older than its last writes
// (a failover to a replica behind, an older RDB): the campaign is there with an older
// sequence. No number answered after the snapshot is handed out again, those entries keep
// their numbers and are issued, and every code is shown to its owner only — whether the
// instance sees the new server (run_id, after its reconnection) or only the database's
// refusal of a number it holds for another user tells.
func TestRollbackToAnOlderSnapshot(t *testing.T) {
	for _, newServer := range []bool{true, false} {
		t.Run(fmt.Sprint("new server ", newServer), func(t *testing.T) {
			t.Parallel()
			const stock = 250
			e := newEnv(t, "redis", nil)
			svc, _ := e.service(t, issuance.IssuerConfig{})
			put(t, svc, "roll", stock)
			numbers := enterAll(t, svc, "roll", 0, 100)
			rollback := e.snapshot(t, newServer)
			for u, n := range enterAll(t, svc, "roll", 100, 200) {
				numbers[u] = n
			}
			rollback()
			for u, n := range enterAll(t, svc, "roll", 200, 300) {
				numbers[u] = n
			}
			checkIssued(t, svc, e, "roll", numbers, stock, false)
			require.Positive(t, svc.Recoveries.Load(), "the rollback was noticed")
		})
	}
}

// TestRecoveryRestoresTheSettings: a store rolled back to before a change of stock or opens_at
// (a restart from an older snapshot, on another server) is recovered with the settings SQL
// holds: entries after it are not rejected under the old stock, nor admitted before the new
// opening (helper-70: 6 of 12 rejected, 9 of 9 issued before opening, until the next sync).
func TestRecoveryRestoresTheSettings(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "redis", nil)
	e.syncInterval = time.Hour // only the recovery can put the settings right
	svc, _ := e.service(t, issuance.IssuerConfig{})
	put(t, svc, "raised", 3)
	put(t, svc, "moved", 100)
	enterAll(t, svc, "raised", 0, 3)
	enterAll(t, svc, "moved", 0, 3)
	rollback := e.snapshot(t, true)
	put(t, svc, "raised", 1000)
	_, _, err := svc.Put(ctx, coupon.Campaign{ID: "moved", Stock: 100, OpensAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	rollback()

	for u := range 12 {
		en, created, err := svc.Enter(ctx, "raised", fmt.Sprint("after-", u))
		require.NoError(t, err)
		require.True(t, created)
		// Pending, or issued already when the worker wrote it before the entry's own write
		// returned (it may: it issues what the database holds, and writes the entry itself).
		require.NotEqual(t, coupon.StatusRejected, en.Status, "after-%d is not rejected under the old stock", u)
	}
	_, _, err = svc.Enter(ctx, "moved", "early")
	var notOpen *coupon.NotOpenError
	require.ErrorAs(t, err, &notOpen, "the campaign opens in an hour, as SQL says")
}

// TestDatabaseStallKeepsTheBatch: a worker whose coupon write fails while the database stalls
// (a lock held longer than the worker's call timeout) keeps its batch and issues it once the
// database answers, in entry order, instead of leaving it leased until the lease runs out
// (an hour here; 30 s by default, while other workers issued later entries first).
func TestDatabaseStallKeepsTheBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "redis", nil)
	svc, _ := e.service(t, issuance.IssuerConfig{CallTimeout: 300 * time.Millisecond, Lease: time.Hour})
	put(t, svc, "stall", 100)
	raw, err := sql.Open("pgx", e.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	lock, err := raw.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = lock.ExecContext(ctx, "LOCK TABLE coupons IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	numbers := enterAll(t, svc, "stall", 0, 10)
	// The worker's write waits for the lock, then its call times out: its query leaves.
	var first time.Time
	eventually.True(t, 20*time.Second, "a coupon write waits for the lock", func() bool {
		var at sql.NullTime
		require.NoError(t, raw.QueryRowContext(ctx, `SELECT min(a.query_start) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
			WHERE NOT l.granted AND l.relation = 'coupons'::regclass`).Scan(&at))
		first = at.Time
		return at.Valid
	})
	eventually.True(t, 20*time.Second, "that write failed (timed out)", func() bool {
		var n int
		require.NoError(t, raw.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
			WHERE NOT l.granted AND l.relation = 'coupons'::regclass AND a.query_start = $1`, first).Scan(&n))
		return n == 0
	})
	require.NoError(t, lock.Rollback())

	eventually.True(t, 20*time.Second, "every entry issued once the database answers", func() bool {
		c, err := e.db.Coupons(ctx, "stall")
		require.NoError(t, err)
		return len(c) == len(numbers)
	})
	coupons, err := e.db.Coupons(ctx, "stall")
	require.NoError(t, err)
	for i := 1; i < len(coupons); i++ {
		require.False(t, coupons[i].IssuedAt.Before(coupons[i-1].IssuedAt), "issued in entry order: %d before %d", coupons[i].Entry, coupons[i-1].Entry)
	}
}

// TestNumberFromBeforeARecovery: an entrant whose number the store handed out after a rollback
// but before the recovery sees the conflict in SQL after the recovery. It is numbered again
// above the floor, and the campaign is not recovered again: another recovery would move the
// numbering past the block reserved since and send every entry under way back to reserve one
// (with 64 entrants, some ran out of repairs).
func TestNumberFromBeforeARecovery(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "redis", nil)
	e.syncInterval = time.Hour // recoveries come from the entries alone
	paused, resume := make(chan struct{}), make(chan struct{})
	e.store = pausing{Store: e.store, user: "late", paused: paused, resume: resume}
	svc, _ := e.service(t, issuance.IssuerConfig{})
	put(t, svc, "stale-number", 10)
	enterAll(t, svc, "stale-number", 0, 10)
	rollback := e.snapshot(t, false)
	enterAll(t, svc, "stale-number", 10, 20)
	rollback()

	type answer struct {
		entry coupon.Entry
		err   error
	}
	late := make(chan answer, 1)
	go func() {
		en, _, err := svc.Enter(ctx, "stale-number", "late")
		late <- answer{en, err}
	}()
	<-paused // late holds number 11, which the database holds for user-10
	early, created, err := svc.Enter(ctx, "stale-number", "early")
	require.NoError(t, err)
	require.True(t, created)
	require.Greater(t, early.Number, int64(coupon.BlockSize), "early was numbered above the floor")
	require.Equal(t, int64(1), svc.Recoveries.Load(), "early's conflict recovered the campaign")
	close(resume)
	a := <-late
	require.NoError(t, a.err)
	require.Greater(t, a.entry.Number, early.Number)
	require.LessOrEqual(t, a.entry.Number, int64(2*coupon.BlockSize), "late was numbered in the block reserved after the recovery")
	require.Equal(t, int64(1), svc.Recoveries.Load(), "late's number was from before the recovery: no other recovery")
}

// pausing is a coupon store whose first Enter of user pauses after the store answered it:
// paused is closed, then the call waits for resume.
type pausing struct {
	coupon.Store
	user           string
	paused, resume chan struct{}
}

func (p pausing) Enter(ctx context.Context, campaign, userKey, userID string) (coupon.EnterResult, error) {
	r, err := p.Store.Enter(ctx, campaign, userKey, userID)
	if userID == p.user {
		select {
		case <-p.paused:
		default:
			close(p.paused)
			<-p.resume
		}
	}
	return r, err
}

// TestStaleBatchAfterALoss: a worker leased a batch before the store lost everything and
// records it after, while new users enter the campaign the store made anew. Nothing it
// records lands on another user's entry: each user is shown its own code.
func TestStaleBatchAfterALoss(t *testing.T) {
	const stock = 80
	e := newEnv(t, "redis", nil)
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	svc, _ := e.service(t, issuance.IssuerConfig{OnIssued: func(string, coupon.Task) {
		once.Do(func() {
			close(paused)
			<-resume
		})
	}})
	put(t, svc, "stale", stock)
	numbers := enterAll(t, svc, "stale", 0, 50)
	<-paused // the worker holds a batch, one coupon of it in the database
	e.lose(t)
	for u, n := range enterAll(t, svc, "stale", 50, 100) {
		numbers[u] = n
	}
	close(resume)
	checkIssued(t, svc, e, "stale", numbers, stock, false)
}

// TestUnconfirmedEntryIsWrittenBeforeItIsShown: an entry the store made whose database write
// never happened (the instance died in between) is written when it is next read.
func TestUnconfirmedEntryIsWrittenBeforeItIsShown(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t, backend, nil)
			svc, _ := e.service(t, issuance.IssuerConfig{SweepInterval: time.Hour})
			svc.Issuer.Stop()
			put(t, svc, "half", 10)
			_, _, err := svc.Enter(ctx, "half", "first") // raises the ceiling
			require.NoError(t, err)
			r, err := e.store.Enter(ctx, "half", token.UserKey("u"), "u")
			require.NoError(t, err)
			require.True(t, r.Entry.Unconfirmed)
			_, err = e.db.CouponEntryOf(ctx, "half", "u")
			require.ErrorIs(t, err, coupon.ErrEntryNotFound)
			got, err := svc.Entry(ctx, "half", "u")
			require.NoError(t, err)
			require.Equal(t, r.Entry.Number, got.Number)
			held, err := e.db.CouponEntryOf(ctx, "half", "u")
			require.NoError(t, err)
			require.Equal(t, r.Entry.Number, held.Number)
			eventually.True(t, 10*time.Second, "the entry confirmed in the store (after the answer)", func() bool {
				se, err := e.store.Entry(ctx, "half", token.UserKey("u"), "u")
				require.NoError(t, err)
				return !se.Unconfirmed
			})
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
			e := newEnv(t, backend, clock.Now)
			svc, _ := e.service(t, issuance.IssuerConfig{SweepInterval: time.Hour})
			svc.Issuer.Stop() // entries only: the worker below issues
			put(t, svc, "lag", 3)
			enterAll(t, svc, "lag", 0, 5) // 3 queued, 2 rejected at once
			clock.Advance(7 * time.Second)
			var mu sync.Mutex
			var lags []time.Duration
			w, err := issuance.NewIssuer(issuance.IssuerConfig{Store: e.store, Notifier: e.notifier, DB: e.db, Campaigns: func() []string { return []string{"lag"} },
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
