package storetest

import (
	"bytes"
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// drawTests are the conformance cases of the opening's draw (docs/draw.md), run by Run.
var drawTests = []suiteTest[Factory]{
	{"DrawOrdersThePreQueue", testDrawOrdersThePreQueue},
	{"DrawIsFixedAtTheOpening", testDrawIsFixedAtTheOpening},
	{"SellOutBeforeOpeningDrawsNothing", testSellOutBeforeOpeningDrawsNothing},
	{"OpenLineDrawsNobody", testOpenLineDrawsNobody},
}

// TestSeed is a fixed draw seed (32 bytes) for tests.
var TestSeed = bytes.Repeat([]byte{0x5e}, draw.SeedLen)

// opensAt is the opening of the draw tests: an hour after NewClock's time.
var opensAt = NewClock().Now().Add(time.Hour)

// newDrawEvent creates an event whose pre-queue (opening at opensAt) is drawn with TestSeed.
func newDrawEvent(t *testing.T, s queue.Store, maxActive int64) queue.EventConfig {
	return newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive = maxActive
		c.OpensAt = opensAt
		c.DrawSeed = TestSeed
	})
}

// testDrawOrdersThePreQueue: before the opening a pre-queue ticket has no place (position 0);
// at the opening the N tickets that joined before it get the draw's places, those who left
// before it are skipped, later joins queue behind the draw in arrival order, and admission
// follows the places; named users and idempotent retries get their ticket back.
func testDrawOrdersThePreQueue(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	const n = 60
	cfg := newDrawEvent(t, s, 1000)
	tks := make([]queue.Ticket, n+1) // by number
	for i := 1; i <= n; i++ {
		p := queue.JoinParams{Event: cfg.ID}
		switch i {
		case 7:
			p.UserKey = "user-seven-key00"
		case 9:
			p.IdempotencyKey = "idem-nine-key000"
		}
		tk, err := s.Join(ctx, p)
		require.NoError(t, err)
		require.Equal(t, int64(i), tk.Number)
		require.Equal(t, queue.StatusQueued, tk.Status)
		require.Zero(t, tk.Position, "no place before the draw")
		require.Zero(t, tk.Place)
		require.Equal(t, int64(i), tk.Waiting)
		tks[i] = tk
	}
	st := status(t, s, tks[1])
	require.Equal(t, queue.StatusQueued, st.Status)
	require.Zero(t, st.Position)
	again, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID, IdempotencyKey: "idem-nine-key000"})
	require.NoError(t, err)
	require.False(t, again.Created, "a retry gets its pre-queue ticket back")
	require.Equal(t, int64(9), again.Number)
	require.Zero(t, again.Position)
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.True(t, stats.DrawPending)
	require.Nil(t, stats.DrawSeed, "the seed stays secret before the opening")
	left := map[int64]bool{3: true, 20: true, 41: true, 55: true}
	for num := range left {
		require.NoError(t, s.Leave(ctx, tks[num].TicketRef))
	}
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "nobody is admitted before the opening")

	clock.Advance(time.Hour) // the opening
	late := make([]queue.Ticket, 3)
	for i := range late {
		late[i] = join(t, s, cfg.ID, "")
		require.Equal(t, int64(n+1+i), late[i].Number)
		require.Equal(t, late[i].Number, late[i].Place, "joins after the opening queue behind the draw")
		require.Equal(t, int64(n-len(left)+1+i), late[i].Position)
	}
	stats, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.False(t, stats.DrawPending)
	require.Equal(t, int64(n), stats.DrawN)
	require.Equal(t, TestSeed, stats.DrawSeed)
	d, err := draw.New(TestSeed, n)
	require.NoError(t, err)

	// Every ticket is told its drawn place, and its position counts the present ones ahead.
	var leftPlaces []int64
	for num := range left {
		leftPlaces = append(leftPlaces, d.Place(num))
	}
	sort.Slice(leftPlaces, func(i, j int) bool { return leftPlaces[i] < leftPlaces[j] })
	for num := int64(1); num <= n; num++ {
		if left[num] {
			continue
		}
		st := status(t, s, tks[num])
		place := d.Place(num)
		require.Equal(t, place, st.Place, "number %d", num)
		ahead := int64(sort.Search(len(leftPlaces), func(i int) bool { return leftPlaces[i] >= place }))
		require.Equal(t, place-ahead, st.Position, "number %d", num)
	}
	// The named user gets its ticket back, with its place.
	again, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID, UserKey: "user-seven-key00"})
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Equal(t, int64(7), again.Number)
	require.Equal(t, d.Place(7), again.Place)

	// Admission follows the places: after each step exactly the present tickets whose place
	// the serving counter passed are admitted.
	byPlace := make(map[int64]queue.Ticket)
	for num := int64(1); num <= n; num++ {
		if !left[num] {
			byPlace[d.Place(num)] = tks[num]
		}
	}
	for _, tk := range late {
		byPlace[tk.Place] = tk
	}
	var admitted int64
	for admitted < int64(len(byPlace)) {
		r := admit(t, s, cfg.ID, 7)
		require.NotZero(t, r.Admitted)
		admitted += r.Admitted
		var got int64
		for p := r.From; p <= r.To; p++ {
			tk, ok := byPlace[p]
			if !ok {
				continue // left
			}
			got++
			require.Equal(t, queue.StatusAdmitted, status(t, s, tk).Status, "place %d", p)
		}
		require.Equal(t, r.Admitted, got, "a batch admits the present tickets of its places")
		if next, ok := byPlace[r.To+1]; ok {
			require.Equal(t, queue.StatusQueued, status(t, s, next).Status)
			require.Equal(t, int64(1), status(t, s, next).Position)
		}
	}
	// A drawn ticket's session completes like any other.
	first := byPlace[1]
	if first.Number == 0 {
		first = byPlace[2]
	}
	require.NoError(t, s.Complete(ctx, first.TicketRef))
	require.Equal(t, queue.StatusCompleted, status(t, s, first).Status)
}

// testDrawIsFixedAtTheOpening: once the opening drew, a new seed, arrival order or a later
// opens_at changes no place.
func testDrawIsFixedAtTheOpening(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newDrawEvent(t, s, 1)
	tks := make([]queue.Ticket, 20)
	for i := range tks {
		tks[i] = join(t, s, cfg.ID, "")
	}
	clock.Advance(time.Hour)
	d, err := draw.New(TestSeed, int64(len(tks)))
	require.NoError(t, err)
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(1), r.Admitted)
	require.Equal(t, d.Number(1), mustFind(t, s, tks, queue.StatusAdmitted))

	for _, change := range []func(c *queue.EventConfig){
		func(c *queue.EventConfig) { c.DrawSeed = bytes.Repeat([]byte{1}, draw.SeedLen) },
		func(c *queue.EventConfig) { c.DrawSeed = nil },
		func(c *queue.EventConfig) { c.OpensAt = clock.Now().Add(time.Hour) },
	} {
		change(&cfg)
		cfg.Version++
		_, err := s.PutEvent(ctx, cfg, 7)
		require.NoError(t, err)
		stats, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.Equal(t, int64(len(tks)), stats.DrawN)
		require.Equal(t, TestSeed, stats.DrawSeed)
		for _, tk := range tks {
			require.Equal(t, d.Place(tk.Number), status(t, s, tk).Place)
		}
	}
}

// mustFind returns the number of the one ticket of tks with status want.
func mustFind(t *testing.T, s queue.Store, tks []queue.Ticket, want queue.Status) int64 {
	t.Helper()
	var found int64
	for _, tk := range tks {
		if status(t, s, tk).Status == want {
			require.Zero(t, found, "two tickets are %s", want)
			found = tk.Number
		}
	}
	require.NotZero(t, found, "no ticket is %s", want)
	return found
}

// testSellOutBeforeOpeningDrawsNothing: a pre-queue sold out before its opening is passed over
// (SOLD_OUT), and the opening draws nothing.
func testSellOutBeforeOpeningDrawsNothing(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newDrawEvent(t, s, 5)
	tks := []queue.Ticket{join(t, s, cfg.ID, ""), join(t, s, cfg.ID, "")}
	passed, err := s.SetSoldOut(ctx, cfg.ID, true)
	require.NoError(t, err)
	require.Equal(t, int64(2), passed)
	clock.Advance(time.Hour)
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.False(t, stats.DrawPending)
	require.Zero(t, stats.DrawN)
	require.Nil(t, stats.DrawSeed)
	for _, tk := range tks {
		require.Equal(t, queue.StatusSoldOut, status(t, s, tk).Status)
	}
}

// testOpenLineDrawsNobody: an event open from its creation has no pre-queue: the draw is of
// nobody (N = 0, the seed revealed) and the line is FIFO.
func testOpenLineDrawsNobody(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1; c.DrawSeed = TestSeed })
	a, b, c := join(t, s, cfg.ID, ""), join(t, s, cfg.ID, ""), join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, a.Status)
	require.Equal(t, []int64{1, 2}, []int64{b.Position, c.Position})
	require.Equal(t, []int64{2, 3}, []int64{b.Place, c.Place})
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.False(t, stats.DrawPending)
	require.Zero(t, stats.DrawN)
	require.Equal(t, TestSeed, stats.DrawSeed)
}
