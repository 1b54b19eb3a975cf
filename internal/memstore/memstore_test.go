package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.RunBackend(t, func(t *testing.T, now func() time.Time) store.Backend {
		b, _ := memstore.NewBackend(memstore.Config{Now: now})
		return b
	})
}

// TestVerifyDraw: 100,000 places told by the store, recomputed by waitroom verify-draw from
// the revealed seed, and the draw fair to early joiners (storetest.VerifyDraw).
func TestVerifyDraw(t *testing.T) {
	storetest.VerifyDraw(t, func(t *testing.T, now func() time.Time) queue.Store {
		return memstore.New(memstore.Config{Now: now})
	}, 100_000, 1)
}

func TestSnapshotKeepsTheLine(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	s := memstore.New(memstore.Config{Now: clock.Now})
	cfg := storetest.LineConfig("snap", 2)
	_, err := s.PutEvent(ctx, cfg, 5)
	require.NoError(t, err)
	var tks []queue.Ticket
	for i := 0; i < 6; i++ {
		tk, err := s.Join(ctx, queue.JoinParams{Event: "snap", UserKey: fmt.Sprint("user-", i)})
		require.NoError(t, err)
		tks = append(tks, tk)
	}
	require.NoError(t, s.Leave(ctx, tks[3].TicketRef))
	data, err := s.Snapshot()
	require.NoError(t, err)

	r := memstore.New(memstore.Config{Now: clock.Now})
	require.NoError(t, r.Restore(data))
	for _, i := range []int{0, 1, 2, 4, 5} {
		a, err := s.Status(ctx, tks[i].TicketRef)
		require.NoError(t, err)
		b, err := r.Status(ctx, tks[i].TicketRef)
		require.NoError(t, err)
		require.Equal(t, a, b)
	}
	_, err = r.Status(ctx, tks[3].TicketRef)
	require.ErrorIs(t, err, queue.ErrTicketNotFound)
	st, err := r.Stats(ctx, "snap")
	require.NoError(t, err)
	require.Equal(t, int64(1), st.LeftWaiting, "the running totals are kept")
	again, err := r.Join(ctx, queue.JoinParams{Event: "snap", UserKey: "user-5"})
	require.NoError(t, err)
	require.Equal(t, tks[5].Number, again.Number)
	// Sessions still expire after the restore.
	clock.Advance(cfg.SessionTTL)
	res, err := r.Admit(ctx, "snap", 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Expired)
	require.Equal(t, int64(2), res.Admitted)

	require.Error(t, r.Restore([]byte("garbage")))
}

// TestSnapshotKeepsTheTicketCounts: a restart does not give a client its tickets_per_client
// of the pre-queue again.
func TestSnapshotKeepsTheTicketCounts(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	s := memstore.New(memstore.Config{Now: clock.Now})
	cfg := storetest.LineConfig("pre", 2)
	cfg.OpensAt = clock.Now().Add(time.Hour)
	_, err := s.PutEvent(ctx, cfg, 1)
	require.NoError(t, err)
	capped := queue.JoinParams{Event: "pre", ClientKey: "203.0.113.1", TicketLimit: 2}
	for range 2 {
		_, err = s.Join(ctx, capped)
		require.NoError(t, err)
	}
	data, err := s.Snapshot()
	require.NoError(t, err)
	r := memstore.New(memstore.Config{Now: clock.Now})
	require.NoError(t, r.Restore(data))
	_, err = r.Join(ctx, capped)
	require.ErrorIs(t, err, queue.ErrRateLimited)
}

// TestDurableNumbers runs the durable-numbers conformance cases on the in-process store: a
// loss is a crash (a new Store on the same database, no snapshot).
func TestDurableNumbers(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, now func() time.Time, wrap func(queue.Numbers) queue.Numbers) (func() queue.Store, func(), queue.Numbers) {
		db, err := sqlstore.Open(context.Background(), sqltest.SQLite(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		var numbers queue.Numbers = db
		if wrap != nil {
			numbers = wrap(db)
		}
		return func() queue.Store { return memstore.New(memstore.Config{Numbers: numbers, Now: now}) }, func() {}, db
	})
}

// TestUsedChallengesAreForgottenAndSnapshotted: a used challenge is remembered until its
// expiry plus queue.ChallengeGrace (then forgotten, so the memory goes), across a restore.
func TestUsedChallengesAreForgottenAndSnapshotted(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock()
	s := memstore.New(memstore.Config{Now: clock.Now})
	_, err := s.PutEvent(ctx, storetest.LineConfig("pow", 2), 5)
	require.NoError(t, err)
	exp := clock.Now().Add(2 * time.Minute)
	p := queue.JoinParams{Event: "pow", ChallengeID: "c1", ChallengeExpires: exp}
	_, err = s.Join(ctx, p)
	require.NoError(t, err)
	data, err := s.Snapshot()
	require.NoError(t, err)
	r := memstore.New(memstore.Config{Now: clock.Now})
	require.NoError(t, r.Restore(data))

	clock.Advance(2*time.Minute + queue.ChallengeGrace - time.Millisecond)
	_, err = r.Join(ctx, p)
	require.ErrorIs(t, err, queue.ErrChallengeUsed, "kept across the restore")
	clock.Advance(time.Millisecond)
	_, err = r.Admit(ctx, "pow", 0) // forgets it
	require.NoError(t, err)
	_, err = r.Join(ctx, p)
	require.NoError(t, err, "forgotten at expiry + grace (the server refuses the expired challenge itself)")
}
