package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/storetest"
)

// durableStore returns a Store keeping its numbers in a fresh PostgreSQL database, the Redis
// client it uses and its key prefix.
func durableStore(t *testing.T) (*redisstore.Store, *sqlstore.DB, func() *redisstore.Store, string) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqltest.Postgres(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	mk := func() *redisstore.Store {
		s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix, Numbers: db})
		require.NoError(t, err)
		return s
	}
	return mk(), db, mk, prefix
}

func durableEvent() queue.EventConfig {
	return queue.EventConfig{ID: "dur", MaxActive: 2, SessionTTL: time.Minute, ClaimTTL: 30 * time.Second, Version: 1}
}

// TestDurableNumbers runs the durable-numbers conformance cases on Redis: a loss is every key
// of the test's prefix deleted (a restart with no data).
func TestDurableNumbers(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T) (func() queue.Store, func(), queue.Numbers) {
		_, db, mk, prefix := durableStore(t)
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
