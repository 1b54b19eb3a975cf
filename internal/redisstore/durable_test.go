package redisstore_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/storetest"
	"github.com/waitroom/waitroom/internal/syncbuf"
)

// durableStore returns a Store keeping its numbers in a fresh PostgreSQL database, the Redis
// client it uses and its key prefix.
func durableStore(t *testing.T) (*redisstore.Store, *sqlstore.DB, func() *redisstore.Store, string) {
	t.Helper()
	db, mk, prefix := durableStoreAt(t, nil, nil)
	return mk(), db, mk, prefix
}

// durableStoreAt is durableStore with the stores reading the time from now (nil: Redis TIME)
// and keeping their numbers in wrap(db) (nil: db).
func durableStoreAt(t *testing.T, now func() time.Time, wrap func(queue.Numbers) queue.Numbers) (*sqlstore.DB, func() *redisstore.Store, string) {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), sqltest.Postgres(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var numbers queue.Numbers = db
	if wrap != nil {
		numbers = wrap(db)
	}
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	mk := func() *redisstore.Store {
		s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix, Numbers: numbers, Now: now})
		require.NoError(t, err)
		return s
	}
	return db, mk, prefix
}

func durableEvent() queue.EventConfig {
	return queue.EventConfig{ID: "dur", MaxActive: 2, SessionTTL: time.Minute, ClaimTTL: 30 * time.Second, Version: 1}
}

// TestDurableNumbers runs the durable-numbers conformance cases on Redis: a loss is every key
// of the test's prefix deleted (a restart with no data).
func TestDurableNumbers(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, now func() time.Time, wrap func(queue.Numbers) queue.Numbers) (func() queue.Store, func(), queue.Numbers) {
		db, mk, prefix := durableStoreAt(t, now, wrap)
		c := redistest.Client(t)
		return func() queue.Store { return mk() },
			func() { require.NoError(t, redisstore.DeletePrefix(context.Background(), c, prefix)) }, db
	})
}

// TestDurableNumbersRollback: Redis comes back with an older copy of the line (a restore from
// an older snapshot, a failover to a lagging replica): seen as a line resumed on another
// server, it is resumed before any number is handed out, so none is handed out twice and the
// tickets the copy does not know keep their places.
func TestDurableNumbersRollback(t *testing.T) {
	ctx := context.Background()
	s, _, mk, prefix := durableStore(t)
	cfg := durableEvent()
	cfg.MaxActive = 1
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	var tickets []queue.Ticket
	for range 40 {
		tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	// The older copy knew 30 tickets and was resumed on another server.
	c := redistest.Client(t)
	ev := prefix + "{" + cfg.ID + "}"
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(ev).FieldValue().FieldValue("seq", "30").FieldValue("rid", "0000").Build()).Error())

	s2 := mk() // another instance, or this one after a reconnect
	for i, tk := range tickets {
		got, err := s2.Status(ctx, tk.TicketRef)
		require.NoError(t, err, "ticket %d", i+1)
		if i == 0 {
			require.Equal(t, queue.StatusAdmitted, got.Status)
			continue
		}
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", i+1)
		require.LessOrEqual(t, got.Position, tk.Position, "ticket %d moved back", i+1)
	}
	st, err := s2.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Active)
	require.Equal(t, int64(39), st.Waiting)
	next, err := s2.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.Greater(t, next.Number, int64(40))
	require.Equal(t, int64(40), next.Position, "behind the 39 waiting, no more")
}

// TestLineResumeIsTold: a line that Redis lost is resumed with a warning in the log and a
// call of Config.OnResume, whether it was gone (Redis restarted empty: the event is put again,
// as the event sync does) or an older copy (a rollback, found on first use); a new event, an
// update of a live line and a line found as it was are not.
func TestLineResumeIsTold(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqltest.Postgres(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	var logs syncbuf.Buffer
	var resumed []string
	var mu sync.Mutex
	mk := func() *redisstore.Store {
		s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix, Numbers: db,
			Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
			OnResume: func(event string) { mu.Lock(); resumed = append(resumed, event); mu.Unlock() }})
		require.NoError(t, err)
		return s
	}
	told := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(resumed) }
	s := mk()
	cfg := durableEvent()
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	var first queue.Ticket
	for i := range 3 {
		tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		if i == 0 {
			first = tk
		}
	}
	cfg.Version++
	_, err = s.PutEvent(ctx, cfg, 7) // an update
	require.NoError(t, err)
	_, err = mk().Status(ctx, first.TicketRef) // found as it was
	require.NoError(t, err)
	require.Empty(t, told(), "a new line, an update, a line found as it was")
	require.NotContains(t, logs.String(), "resumed")

	// Redis restarted empty: the event sync puts the event again.
	require.NoError(t, redisstore.DeletePrefix(ctx, c, prefix))
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	require.Equal(t, []string{cfg.ID}, told())
	require.Contains(t, logs.String(), "line resumed after a Redis loss")
	require.Contains(t, logs.String(), "event="+cfg.ID)
	_, err = s.PutEvent(ctx, cfg, 7) // the next sync finds it
	require.NoError(t, err)
	require.Len(t, told(), 1)

	// An older copy, found on first use by an instance after its dial.
	ev := prefix + "{" + cfg.ID + "}"
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(ev).FieldValue().FieldValue("rid", "0000").Build()).Error())
	_, err = mk().Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.Equal(t, []string{cfg.ID, cfg.ID}, told())
}

// TestCouponCampaignOnAnotherServer: a campaign found on a Redis server it was not created or
// recovered on (its copy may have lost writes) answers coupon.ErrNeedsRecovery to Enter and
// Take after the next dial, until it is recovered; checked once per dial.
func TestCouponCampaignOnAnotherServer(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	dials := new(atomic.Uint64)
	s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix, Dials: dials})
	require.NoError(t, err)
	_, err = s.PutCampaign(ctx, coupon.Campaign{ID: "cp", Stock: 10})
	require.NoError(t, err)
	cnt, err := s.CampaignCounters(ctx, "cp")
	require.NoError(t, err)
	_, err = s.RaiseCeiling(ctx, "cp", coupon.Block{Incarnation: cnt.Incarnation, Lo: 0, Hi: 100})
	require.NoError(t, err)
	_, err = s.Enter(ctx, "cp", "k1", "u1")
	require.NoError(t, err, "created on this server")

	// The copy now says another server (a restart from a snapshot, a promoted replica).
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(prefix+"cp:{cp}").FieldValue().FieldValue("rid", "0000").Build()).Error())
	_, err = s.Enter(ctx, "cp", "k2", "u2")
	require.NoError(t, err, "no new connection since the check: not checked again")
	dials.Add(1)
	_, err = s.Enter(ctx, "cp", "k3", "u3")
	require.ErrorIs(t, err, coupon.ErrNeedsRecovery)
	_, err = s.Take(ctx, "cp", 10, time.Minute)
	require.ErrorIs(t, err, coupon.ErrNeedsRecovery)
	require.NoError(t, s.RecoverCampaign(ctx, "cp", coupon.Recovery{Floor: 100, Admitted: 2}))
	_, err = s.Take(ctx, "cp", 10, time.Minute)
	require.NoError(t, err)
	dials.Add(1)
	_, err = s.Enter(ctx, "cp", "k3", "u3")
	require.ErrorIs(t, err, coupon.ErrCeiling, "recovered on this server: numbers above the floor need a block")
}

// TestDurableNumbersRollbackDrawn: Redis comes back with a copy of a drawn line from before its
// opening (its draw pending, two tickets that left scored by number), after the opening drew
// the pre-queue and admitted some of it. The line is resumed with the draw recorded in SQL: the
// leavers are scored by place first, every ticket keeps its drawn place, none moves back, and
// admission goes on in place order, the leavers skipped.
func TestDurableNumbersRollbackDrawn(t *testing.T) {
	ctx := context.Background()
	s, db, mk, prefix := durableStore(t)
	c := redistest.Client(t)
	cfg := durableEvent()
	cfg.MaxActive = 3
	cfg.OpensAt = time.Now().Add(time.Hour)
	cfg.DrawSeed = storetest.TestSeed
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	const n = 40
	tks := make([]queue.Ticket, n+1)
	for i := 1; i <= n; i++ {
		tks[i], err = s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
	}
	gone := map[int64]bool{5: true, 17: true}
	for num := range gone {
		require.NoError(t, s.Leave(ctx, tks[num].TicketRef))
	}
	// The copy Redis will come back with.
	base := prefix + "{" + cfg.ID + "}"
	keys := []string{base, base + ":left", base + ":marks", base + ":act", base + ":bat", base + ":batx", base + ":users", base + ":sold"}
	dumps := map[string]string{}
	for _, k := range keys {
		v, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
		if err == nil {
			dumps[k] = v
		}
	}
	require.Contains(t, dumps, base+":left")

	cfg.OpensAt, cfg.Version = time.Now().Add(-time.Second), 2
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	d, err := draw.New(storetest.TestSeed, n)
	require.NoError(t, err)
	shown := make([]int64, n+1)
	for i := int64(1); i <= n; i++ {
		if gone[i] {
			continue
		}
		got, err := s.Status(ctx, tks[i].TicketRef)
		require.NoError(t, err)
		require.Equal(t, d.Place(i), got.Place)
		shown[i] = got.Position
	}
	_, err = s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	rec, err := db.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(n), rec.DrawN)

	// The rollback.
	require.NoError(t, c.Do(ctx, c.B().Del().Key(keys...).Build()).Error())
	for k, v := range dumps {
		require.NoError(t, c.Do(ctx, c.B().Restore().Key(k).Ttl(0).SerializedValue(v).Build()).Error())
	}
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(base).FieldValue().FieldValue("rid", "0000").Build()).Error())

	s2 := mk()                   // another instance, or this one after a reconnect
	waiting := map[int64]int64{} // place -> number
	for i := int64(1); i <= n; i++ {
		got, err := s2.Status(ctx, tks[i].TicketRef)
		if gone[i] {
			require.ErrorIs(t, err, queue.ErrTicketNotFound, "ticket %d left", i)
			continue
		}
		require.NoError(t, err, "ticket %d", i)
		require.Equal(t, d.Place(i), got.Place, "ticket %d keeps its drawn place", i)
		switch got.Status {
		case queue.StatusAdmitted:
		case queue.StatusQueued:
			require.LessOrEqual(t, got.Position, shown[i], "ticket %d moved back", i)
			waiting[got.Place] = i
		default:
			require.Failf(t, "lost", "ticket %d reads %v", i, got.Status)
		}
	}
	require.Len(t, waiting, n-len(gone)-3, "the first three of the draw, admitted again")
	// The configuration comes back too (the copy's opens_at is the old one), as the registry's
	// sync puts it.
	_, err = s2.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	for step := 0; len(waiting) > 0; step++ {
		require.Less(t, step, 100, "admission stalled with %d waiting", len(waiting))
		st, err := s2.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Active, cfg.MaxActive)
		for i := int64(1); i <= n; i++ {
			if !gone[i] {
				_ = s2.Complete(ctx, tks[i].TicketRef) // the admitted ones; the others refuse
			}
		}
		_, err = s2.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
		var now []int64
		for p, num := range waiting {
			got, err := s2.Status(ctx, tks[num].TicketRef)
			require.NoError(t, err)
			switch got.Status {
			case queue.StatusAdmitted:
				now = append(now, p)
			case queue.StatusQueued:
			default:
				require.Failf(t, "not admitted", "place %d (ticket %d) reads %v", p, num, got.Status)
			}
		}
		slices.Sort(now)
		lo := int64(0)
		for p := range waiting {
			if lo == 0 || p < lo {
				lo = p
			}
		}
		for _, p := range now {
			require.Equal(t, lo, p, "the lowest place waiting is admitted first")
			delete(waiting, p)
			lo = 0
			for q := range waiting {
				if lo == 0 || q < lo {
					lo = q
				}
			}
		}
	}
}

// TestDurableNumbersRollbackGhosts: Redis comes back from a snapshot taken before two sessions
// ended and two more tickets were admitted — one of them told, the other not yet. The copy's
// sessions that ended since (ghosts: the store cannot tell them from live ones) must not keep
// the tickets admitted after the snapshot waiting: both read ADMITTED at once (before, the one
// not yet told read QUEUED for the claim TTL while the later one had been told), the line
// counts no more than max_active, and the ghosts' slots come back when their claims lapse.
func TestDurableNumbersRollbackGhosts(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	_, mk, prefix := durableStoreAt(t, clock.Now, nil)
	c := redistest.Client(t)
	s := mk()
	cfg := durableEvent() // max_active 2
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	var tickets []queue.Ticket
	for range 8 {
		tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	require.Equal(t, queue.StatusAdmitted, tickets[1].Status)
	snap := dumpKeys(t, c, prefix)

	for _, tk := range tickets[:2] {
		require.NoError(t, s.Complete(ctx, tk.TicketRef))
	}
	r, err := s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Admitted)
	got, err := s.Status(ctx, tickets[3].TicketRef)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, got.Status, "4 is told")

	// The snapshot comes back, on "another server".
	restoreKeys(t, c, prefix, snap)
	ev := prefix + "{" + cfg.ID + "}"
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(ev).FieldValue().FieldValue("rid", "0000").Build()).Error())

	s2 := mk()
	for _, tk := range tickets[2:4] {
		got, err := s2.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d was admitted before the loss", tk.Number)
	}
	for i, tk := range tickets[4:] {
		got, err := s2.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", tk.Number)
		require.Equal(t, int64(i+1), got.Position, "ticket %d", tk.Number)
	}
	st, err := s2.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, cfg.MaxActive, st.Active, "3 and 4 hold the slots; the copy's 1 and 2 count within max_active")
	r, err = s2.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	require.Zero(t, r.Admitted)

	// 3 and 4 end, and the ghosts' claims lapse: 5 and 6 are next.
	for _, tk := range tickets[2:4] {
		require.NoError(t, s2.Complete(ctx, tk.TicketRef))
	}
	clock.Advance(cfg.ClaimTTL)
	r, err = s2.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Admitted)
	st, err = s2.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, cfg.MaxActive, st.Active)
}

// dumpKeys returns every key under prefix with its DUMP (a snapshot of the test's data).
func dumpKeys(t *testing.T, c rueidis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Do(ctx, c.B().Keys().Pattern(prefix+"*").Build()).AsStrSlice()
	require.NoError(t, err)
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		v, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
		require.NoError(t, err)
		out[k] = v
	}
	return out
}

// restoreKeys puts the keys under prefix back to snap: those made since are deleted.
func restoreKeys(t *testing.T, c rueidis.Client, prefix string, snap map[string]string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, redisstore.DeletePrefix(ctx, c, prefix))
	for k, v := range snap {
		require.NoError(t, c.Do(ctx, c.B().Restore().Key(k).Ttl(0).SerializedValue(v).Replace().Build()).Error())
	}
}
