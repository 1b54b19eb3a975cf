package registry

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// heldStore holds the write of one configuration version to the line store until released,
// so that a later write finishes first.
type heldStore struct {
	queue.Store
	version int64
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) PutEvent(ctx context.Context, cfg queue.EventConfig, gen uint32) (uint32, error) {
	if cfg.Version == s.version {
		close(s.entered)
		<-s.release
	}
	return s.Store.PutEvent(ctx, cfg, gen)
}

// TestRacingWritesKeepTheNewest: two writes of one event, the older finishing last (its write
// to the line store held), leave the newer in the cache that GET reads. Before, the cache took
// whichever finished last: TestConcurrentPatchesAllApply read admit_rate 0 after a PATCH of 3
// had answered 200, under load.
func TestRacingWritesKeepTheNewest(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqltest.SQLite(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store := &heldStore{Store: memstore.New(memstore.Config{}), version: 2, entered: make(chan struct{}), release: make(chan struct{})}
	r, err := New(Config{DB: db, Store: store})
	require.NoError(t, err)

	first, _, err := r.Put(ctx, event.Event{ID: "ev", MaxActive: 1}, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), first.Version)
	var wg sync.WaitGroup
	wg.Go(func() {
		e := first
		e.Name = "second"
		_, _, err := r.Put(ctx, e, 1)
		require.NoError(t, err)
	})
	<-store.entered // version 2 is in SQL, its write to the line store held
	e := first
	e.Name, e.Version = "third", 2
	third, _, err := r.Put(ctx, e, 2)
	require.NoError(t, err)
	require.Equal(t, int64(3), third.Version)
	close(store.release)
	wg.Wait()

	got, err := r.Get(ctx, "ev")
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Version, "the cache keeps the newest version")
	require.Equal(t, "third", got.Name)
	require.NoError(t, r.Sync(ctx))
	got, err = r.Get(ctx, "ev")
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Version)
}

// owedStore reports an owed queue (queue.Stats.Owed) for every line.
type owedStore struct {
	queue.Store
	owed []int64
}

func (s *owedStore) Stats(ctx context.Context, event string) (queue.Stats, error) {
	st, err := s.Store.Stats(ctx, event)
	st.Owed = s.owed
	return st, err
}

// TestCheckpointRecordsTheOwedQueue: the sync's checkpoint writes a line's owed queue to SQL
// when it changed (queue.LineRecord.Owed), so that a resume keeps those in it owed.
func TestCheckpointRecordsTheOwedQueue(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqltest.SQLite(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store := &owedStore{Store: memstore.New(memstore.Config{Numbers: db})}
	r, err := New(Config{DB: db, Store: store})
	require.NoError(t, err)
	_, _, err = r.Put(ctx, event.Event{ID: "ev", MaxActive: 1}, 0)
	require.NoError(t, err)

	store.owed = []int64{9, 5}
	require.NoError(t, r.Sync(ctx))
	rec, err := db.Line(ctx, "ev")
	require.NoError(t, err)
	require.Equal(t, []int64{5, 9}, rec.Owed)
	store.owed = nil
	require.NoError(t, r.Sync(ctx))
	rec, err = db.Line(ctx, "ev")
	require.NoError(t, err)
	require.Empty(t, rec.Owed, "the queue emptied")
}
