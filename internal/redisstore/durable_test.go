package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
