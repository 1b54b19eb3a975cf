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

// TestDurableNumbersEmptyLoss: Redis loses every key of the line (a restart with no data).
// The line comes back under its generation; no ticket handed out is told 404 or moves back;
// a new join gets a number never handed out.
func TestDurableNumbersEmptyLoss(t *testing.T) {
	ctx := context.Background()
	s0, db, mk, prefix := durableStore(t)
	cfg := durableEvent()
	gen, err := s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	rec, err := db.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, rec.Generation, gen, "the generation comes from SQL")

	var tickets []queue.Ticket
	for range 10 {
		tk, err := s0.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	require.Equal(t, queue.StatusAdmitted, tickets[1].Status)
	require.Equal(t, int64(8), tickets[9].Position)
	// The checkpoint (registry.mark, every second) saw 6 numbers and serving at 2.
	require.NoError(t, db.Mark(ctx, cfg.ID, 6, 2))

	require.NoError(t, redisstore.DeletePrefix(ctx, redistest.Client(t), prefix))
	s := mk() // an instance that has not seen the line yet checks it first (and finds none)
	_, err = s.Status(ctx, tickets[2].TicketRef)
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	again, err := s.PutEvent(ctx, cfg, 99) // as registry.Restore does
	require.NoError(t, err)
	require.Equal(t, gen, again, "the line keeps its generation")

	seen := map[int64]bool{}
	for i, tk := range tickets {
		seen[tk.Number] = true
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err, "ticket %d", i+1)
		switch {
		case i < 2: // admitted before the checkpoint: the session is lost with Redis
			require.Equal(t, queue.StatusExpired, got.Status, "ticket %d", i+1)
		case i < 4: // the first of the pending range, in the free slots at once
			require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d", i+1)
		default: // still waiting, never moved back, never 404
			require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", i+1)
			require.LessOrEqual(t, got.Position, tk.Position, "ticket %d moved back", i+1)
		}
	}
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Active, cfg.MaxActive, "a loss grants no more than max_active")
	next, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.False(t, seen[next.Number])
	require.Greater(t, next.Number, rec.SeqCeiling, "numbers resume above the ceiling")
	require.Equal(t, int64(7), next.Position, "behind the six still waiting: the numbers never handed out cost no wait")

	// Admissions go on in order as slots free up: 5 and 6 next.
	for _, tk := range tickets[2:4] {
		require.NoError(t, s.Complete(ctx, tk.TicketRef))
	}
	_, err = s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	for i, tk := range tickets[4:6] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d", i+5)
	}
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

// TestDurableNumbersCeiling: joins and admissions never pass the ceilings reserved in SQL, and
// reserve more as they go.
func TestDurableNumbersCeiling(t *testing.T) {
	ctx := context.Background()
	s, db, _, _ := durableStore(t)
	cfg := durableEvent()
	cfg.MaxActive = 1000
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	for range queue.SeqBlock + 100 {
		_, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
	}
	for range 20 {
		_, err := s.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
	}
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	rec, err := db.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st.LastNumber, rec.SeqCeiling)
	require.LessOrEqual(t, st.Serving, rec.ServingCeiling)
	require.Equal(t, int64(queue.SeqBlock+100), st.LastNumber)
	require.Greater(t, st.Serving, int64(queue.ServingBlock), "admissions reserved more")
}
