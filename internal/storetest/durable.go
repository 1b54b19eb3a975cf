package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/queue"
)

// DurableFactory sets up a store whose line numbers are kept by numbers (a fresh database).
// mk returns a Store on it (a new instance each call, sharing the line's storage: one Redis,
// or, for the in-process store, a new process — nothing shared); lose destroys everything the
// line's storage holds (Redis restarted with no data; for the in-process store, a crash is mk
// itself, so lose may do nothing). The stores read the time from now (nil: the real clock)
// and, when wrap is not nil, keep their numbers in wrap(numbers) (a case that makes SQL fail).
type DurableFactory func(t *testing.T, now func() time.Time, wrap func(queue.Numbers) queue.Numbers) (mk func() queue.Store, lose func(), numbers queue.Numbers)

// RunDurable runs the durable-numbers cases (docs/durability.md) against f.
func RunDurable(t *testing.T, f DurableFactory) {
	t.Run("EmptyLoss", func(t *testing.T) { durableEmptyLoss(t, f) })
	t.Run("SecondLoss", func(t *testing.T) { durableSecondLoss(t, f) })
	t.Run("Ceilings", func(t *testing.T) { durableCeilings(t, f) })
	t.Run("PacedCeilings", func(t *testing.T) { durablePacedCeilings(t, f) })
	t.Run("DrawLoss", func(t *testing.T) { durableDrawLoss(t, f) })
	t.Run("PrequeueLoss", func(t *testing.T) { durablePrequeueLoss(t, f) })
	t.Run("PrequeuePendingLoss", func(t *testing.T) { durablePrequeuePendingLoss(t, f) })
	t.Run("PrequeueShownLoss", func(t *testing.T) { durablePrequeueShownLoss(t, f) })
	t.Run("OwedQueue", func(t *testing.T) { durableOwedQueue(t, f) })
	t.Run("OwedAcrossALoss", func(t *testing.T) { durableOwedAcrossALoss(t, f) })
	t.Run("PendingAtOnce", func(t *testing.T) { durablePendingAtOnce(t, f) })
	t.Run("LimitCountsOnce", func(t *testing.T) { durableLimitCountsOnce(t, f) })
	t.Run("CeilingAhead", func(t *testing.T) { durableCeilingAhead(t, f) })
	t.Run("AtOnceAsksOnce", func(t *testing.T) { durableAtOnceAsksOnce(t, f) })
	t.Run("HandedOutBelowServing", func(t *testing.T) { durableHandedOutBelowServing(t, f) })
}

func durableConfig(id string, maxActive int64) queue.EventConfig {
	return queue.EventConfig{ID: id, MaxActive: maxActive, SessionTTL: time.Minute, ClaimTTL: 30 * time.Second, Version: 1}
}

// durableEmptyLoss: the line's storage loses everything (a Redis restart with no data, a crash
// of the embedded process). The line comes back under its generation; no ticket handed out is
// told 404 or moves back; no more than max_active are admitted; admissions go on in order; a
// new join gets a number never handed out and waits only behind real tickets.
func durableEmptyLoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	mk, lose, numbers := f(t, nil, nil)
	s0 := mk()
	cfg := durableConfig("dur-empty", 2)
	gen, err := s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	rec, err := numbers.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, rec.Generation, gen, "the generation comes from the durable record")

	var tickets []queue.Ticket
	for range 10 {
		tk, err := s0.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	require.Equal(t, queue.StatusAdmitted, tickets[1].Status)
	require.Equal(t, int64(8), tickets[9].Position)
	// The checkpoint (registry, every second) saw 6 numbers and serving at 2.
	require.NoError(t, numbers.Mark(ctx, cfg.ID, 6, 2))

	lose()
	s := mk() // an instance that has not seen the line yet
	_, err = s.Status(ctx, tickets[2].TicketRef)
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	again, err := s.PutEvent(ctx, cfg, 99) // as registry.Restore does
	require.NoError(t, err)
	require.Equal(t, gen, again, "the line keeps its generation")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(7), st.VoidFrom, "void: the numbers past the checkpoint, up to the ceiling")
	require.Equal(t, st.VoidTo-st.VoidFrom+1, st.VoidLeft, "every void number is still void")
	require.Equal(t, int64(6), st.LastNumber-st.VoidLeft, "the tickets known to be given out (the report's arrivals)")
	voidBefore := st.VoidLeft

	seen := map[int64]bool{}
	for i, tk := range tickets {
		seen[tk.Number] = true
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err, "ticket %d", i+1)
		switch {
		case i < 2: // admitted before the checkpoint: the session is lost with the storage
			require.Equal(t, queue.StatusExpired, got.Status, "ticket %d", i+1)
		default: // still waiting (nobody was admitted above the serving ceiling), never moved back, never 404
			require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", i+1)
			require.LessOrEqual(t, got.Position, tk.Position, "ticket %d moved back", i+1)
		}
	}
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Active, cfg.MaxActive, "a loss grants no more than max_active")
	require.Equal(t, int64(8), st.Waiting)
	require.Equal(t, voidBefore-4, st.VoidLeft, "tickets 7 to 10 showed up: their numbers are known")
	require.Equal(t, int64(10), st.LastNumber-st.VoidLeft)
	next, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.False(t, seen[next.Number])
	require.Greater(t, next.Number, rec.SeqCeiling, "numbers resume above the ceiling")
	require.Equal(t, int64(9), next.Position, "behind the eight still waiting: the numbers never handed out cost no wait")

	// Admissions go on in order: 3 and 4 next, then 5 and 6 as slots free up.
	_, err = s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	for _, tk := range tickets[2:4] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d", tk.Number)
		require.NoError(t, s.Complete(ctx, tk.TicketRef))
	}
	_, err = s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	for i, tk := range tickets[4:6] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d", i+5)
	}
	got, err := s.Status(ctx, next.TicketRef)
	require.NoError(t, err)
	require.Equal(t, int64(5), got.Position)
	rec, err = numbers.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(6), rec.ServingCeiling, "the serving ceiling is exactly what was admitted")
}

// durableSecondLoss: the line's storage is lost twice in a row, with a checkpoint between as
// the registry makes it (queue.Stats.SeqMark). The first loss's void numbers whose holders
// never showed up do not come back as waiting tickets at the second: only real tickets wait,
// the holders of void numbers and of tickets joined after the first loss keep a place when
// they show up, and a new join waits behind them alone (helper-83: 1,023 waiting for ~13
// people, a join placed at 1,023).
func durableSecondLoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	l := loseLine(t, f, durableConfig("dur-twice", 2), 10, 6, 2, nil)
	s1, cfg, numbers, tickets := l.s, l.cfg, l.numbers, l.tks
	for range 3 {
		tk := join(t, s1, cfg.ID, "")
		require.Equal(t, queue.StatusQueued, tk.Status)
		tickets = append(tickets, tk)
	}
	st, err := s1.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Positive(t, st.VoidLeft, "7 to 10 and the rest of the block are void")
	require.Equal(t, int64(6), st.SeqMark(), "the checkpoint stops before the void numbers")
	require.NoError(t, numbers.Mark(ctx, cfg.ID, st.SeqMark(), st.Serving)) // as registry.mark does

	l.lose()
	s := l.mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Waiting, "3 to 6 wait; no void number of the first loss came back as a ticket")
	for i, tk := range tickets[2:] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err, "ticket %d", tk.Number)
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", tk.Number)
		require.LessOrEqual(t, got.Position, int64(i+1), "ticket %d keeps a place among the 11 real ones", tk.Number)
	}
	require.Equal(t, int64(12), join(t, s, cfg.ID, "").Position, "behind the 11 real tickets waiting, and nobody else")
}

// durableCeilings: joins and admissions never pass the ceilings of the durable record, and
// reserve more as they go. Each join carries a challenge (queue.JoinParams.ChallengeID): a join
// retried after a reservation does not find its own challenge used.
func durableCeilings(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	mk, _, numbers := f(t, nil, nil)
	s := mk()
	cfg := durableConfig("dur-ceil", 1000)
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	exp := time.Now().Add(2 * time.Minute)
	for i := range queue.SeqBlock + 100 {
		_, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID, ChallengeID: "c" + strconv.Itoa(i), ChallengeExpires: exp})
		require.NoError(t, err, "join %d", i+1)
	}
	_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID, ChallengeID: "c0", ChallengeExpires: exp})
	require.ErrorIs(t, err, queue.ErrChallengeUsed)
	for range 20 {
		_, err := s.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
	}
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	rec, err := numbers.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st.LastNumber, rec.SeqCeiling)
	require.LessOrEqual(t, st.Serving, rec.ServingCeiling)
	require.Equal(t, int64(queue.SeqBlock+100), st.LastNumber)
	require.Equal(t, int64(1000), st.Serving, "admitted at once up to max_active, reserving as it went")
}

// durablePacedCeilings: the serving ceiling is reserved as far ahead as the admissions go
// (queue.Pace), so an admission step is bounded by max_active and admit_rate, not by a fixed
// block of the hi-lo allocator: 1,200 people waiting behind free slots, with no admit_rate,
// are all admitted within 30 steps of the admission processor's cadence (100 ms). With the
// serving ceiling raised a fixed block of 32 at a time, 30 steps admit at most 960.
func durablePacedCeilings(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	mk, _, numbers := f(t, nil, nil)
	s := mk()
	cfg := durableConfig("dur-paced", 1)
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	const waiting = 1200
	for i := range waiting + 1 {
		_, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err, "join %d", i+1)
	}
	cfg.MaxActive, cfg.Version = 5000, 2
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)

	tick := time.NewTicker(100 * time.Millisecond) // the admission processor's cadence
	defer tick.Stop()
	admitted, steps, best := int64(0), 0, int64(0)
	for ; steps < 30 && admitted < waiting; steps++ {
		<-tick.C
		r, err := s.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
		admitted += r.Admitted
		best = max(best, r.Admitted)
	}
	require.Equal(t, int64(waiting), admitted, "admitted in %d steps (largest step %d)", steps, best)
	require.Greater(t, best, int64(32), "a step admitted more than a fixed serving block")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	rec, err := numbers.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Serving, rec.ServingCeiling, "serving never passes the durable ceiling")
}

// durableDrawLoss: a pre-queue drawn at the opening (docs/draw.md), then the line's storage
// loses everything after some admissions. The line comes back with its draw: every ticket keeps
// its drawn place, no waiting ticket moves back, the pending range of the resume is admitted in
// places (a ticket of it that leaves is skipped, nobody else), and admission goes on in place
// order, a join after the loss last.
func durableDrawLoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	mk, lose, numbers := f(t, nil, nil)
	s0 := mk()
	cfg := durableConfig("dur-draw", 3)
	cfg.OpensAt = time.Now().Add(time.Hour)
	cfg.DrawSeed = TestSeed
	_, err := s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	const n = 40
	tks := make([]queue.Ticket, n+1) // by number
	for i := 1; i <= n; i++ {
		tk, err := s0.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		require.Equal(t, int64(i), tk.Number)
		require.Zero(t, tk.Position, "no place before the draw")
		tks[i] = tk
	}
	// The opening: opens_at moved to the past by a later configuration.
	cfg.OpensAt, cfg.Version = time.Now().Add(-time.Second), 2
	_, err = s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	d, err := draw.New(TestSeed, n)
	require.NoError(t, err)
	byPlace := make([]int64, n+1) // place -> number
	moved := false
	for i := int64(1); i <= n; i++ {
		got, err := s0.Status(ctx, tks[i].TicketRef)
		require.NoError(t, err)
		require.Equal(t, d.Place(i), got.Place, "ticket %d", i)
		require.Equal(t, got.Place, got.Position, "ticket %d: nobody admitted yet", i)
		byPlace[got.Place] = i
		moved = moved || got.Place != i
		if i == 1 {
			rec, err := numbers.Line(ctx, cfg.ID)
			require.NoError(t, err)
			require.Equal(t, int64(n), rec.DrawN, "the draw is recorded before anybody is told a drawn place")
		}
	}
	require.True(t, moved, "the draw reorders the pre-queue")

	// Places 1..3 admitted and completed, then 4..6 admitted and claimed; the checkpoint saw
	// all 40 numbers but serving at 3 only.
	admitted := func(s queue.Store, num int64) bool {
		got, err := s.Status(ctx, tks[num].TicketRef)
		require.NoError(t, err)
		return got.Status == queue.StatusAdmitted
	}
	_, err = s0.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	for p := 1; p <= 3; p++ {
		require.True(t, admitted(s0, byPlace[p]), "place %d", p)
		require.NoError(t, s0.Complete(ctx, tks[byPlace[p]].TicketRef))
	}
	_, err = s0.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	for p := 4; p <= 6; p++ {
		require.True(t, admitted(s0, byPlace[p]), "place %d", p)
	}
	before := make([]int64, n+1) // by number: the position shown last before the loss
	for p := int64(7); p <= n; p++ {
		got, err := s0.Status(ctx, tks[byPlace[p]].TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusQueued, got.Status)
		require.Equal(t, p-6, got.Position, "place %d", p)
		before[byPlace[p]] = got.Position
	}
	require.NoError(t, numbers.Mark(ctx, cfg.ID, n, 3))

	lose()
	s := mk()
	_, err = s.PutEvent(ctx, cfg, 99) // as registry.Restore does
	require.NoError(t, err)
	for p := int64(1); p <= n; p++ {
		num := byPlace[p]
		got, err := s.Status(ctx, tks[num].TicketRef)
		require.NoError(t, err, "place %d", p)
		require.Equal(t, p, got.Place, "ticket %d keeps its drawn place", num)
		switch {
		case p <= 3: // admitted before the checkpoint: the session is lost with the storage
			require.Equal(t, queue.StatusExpired, got.Status, "place %d", p)
		case p <= 6: // the first of the pending range, in the free slots at once
			require.Equal(t, queue.StatusAdmitted, got.Status, "place %d", p)
		default:
			require.Equal(t, queue.StatusQueued, got.Status, "place %d", p)
			require.LessOrEqual(t, got.Position, before[num], "ticket %d (place %d) moved back", num, p)
		}
	}
	late, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.Equal(t, late.Number, late.Place, "a join after the loss queues behind the draw")

	// A ticket of the pending range leaves: chosen so that its number is another pending
	// ticket's place (the range is places, its tickets' marks are by number).
	var gone int64
	for num := int64(7); num <= 32 && gone == 0; num++ {
		if p := d.Place(num); p >= 8 && p <= 32 && p != num {
			gone = num
		}
	}
	require.NotZero(t, gone)
	require.NoError(t, s.Leave(ctx, tks[gone].TicketRef))

	// Admission follows the places: each step admits places above all admitted before.
	waiting := map[int64]queue.Ticket{}
	for p := int64(7); p <= n; p++ {
		if byPlace[p] != gone {
			waiting[p] = tks[byPlace[p]]
		}
	}
	waiting[late.Place] = late
	last := int64(6)
	active := []queue.TicketRef{tks[byPlace[4]].TicketRef, tks[byPlace[5]].TicketRef, tks[byPlace[6]].TicketRef}
	for step := 0; len(waiting) > 0; step++ {
		require.Less(t, step, 100, "admission stalled with %d waiting", len(waiting))
		for _, ref := range active {
			require.NoError(t, s.Complete(ctx, ref))
		}
		active = active[:0]
		_, err := s.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
		var now []int64
		for p, tk := range waiting {
			got, err := s.Status(ctx, tk.TicketRef)
			require.NoError(t, err, "place %d", p)
			require.Equal(t, p, got.Place)
			switch got.Status {
			case queue.StatusAdmitted:
				now = append(now, p)
				active = append(active, tk.TicketRef)
			case queue.StatusQueued:
			default:
				require.Failf(t, "not admitted", "place %d (ticket %d) reads %v", p, tk.Number, got.Status)
			}
		}
		for _, p := range now {
			require.Greater(t, p, last, "place %d admitted after place %d", p, last)
			delete(waiting, p)
		}
		for _, p := range now {
			last = max(last, p)
		}
		st, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Active, cfg.MaxActive)
	}
}

// lostLine is a line whose storage was lost once (loseLine).
type lostLine struct {
	mk      func() queue.Store
	lose    func()
	numbers queue.Numbers
	cfg     queue.EventConfig
	tks     []queue.Ticket // joined before the loss, tks[i] numbered i+1
	s       queue.Store    // the store resumed after it
}

// loseLine makes cfg's line on a store of f with joins tickets, a checkpoint that saw mark
// numbers and serving at serving (prepare, if not nil, may then reserve more in SQL), and a
// loss of its storage; the line is resumed on a new store.
func loseLine(t *testing.T, f DurableFactory, cfg queue.EventConfig, joins int, mark, serving int64, prepare func(queue.Numbers)) lostLine {
	ctx := context.Background()
	l := lostLine{cfg: cfg}
	l.mk, l.lose, l.numbers = f(t, nil, nil)
	s0 := l.mk()
	_, err := s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	for range joins {
		l.tks = append(l.tks, join(t, s0, cfg.ID, ""))
	}
	require.NoError(t, l.numbers.Mark(ctx, cfg.ID, mark, serving))
	if prepare != nil {
		prepare(l.numbers)
	}
	l.lose()
	l.s = l.mk()
	_, err = l.s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	return l
}

// losePrequeue is loseLine of a pre-queue drawn at its opening (an hour ahead), lost before it.
func losePrequeue(t *testing.T, f DurableFactory, id string, maxActive int64, joins int, mark int64, prepare func(queue.Numbers)) lostLine {
	cfg := durableConfig(id, maxActive)
	cfg.OpensAt = time.Now().Add(time.Hour)
	cfg.DrawSeed = TestSeed
	return loseLine(t, f, cfg, joins, mark, 0, prepare)
}

// open opens the line (opens_at moved to the past by a later configuration) on s, settles
// the draw with a status read of the first ticket, and returns the line's record and draw.
func (l *lostLine) open(t *testing.T, s queue.Store) (queue.LineRecord, *draw.Draw) {
	ctx := context.Background()
	l.cfg.OpensAt, l.cfg.Version = time.Now().Add(-time.Second), 2
	_, err := s.PutEvent(ctx, l.cfg, 99)
	require.NoError(t, err)
	_ = status(t, s, l.tks[0])
	rec, err := l.numbers.Line(ctx, l.cfg.ID)
	require.NoError(t, err)
	d, err := draw.New(TestSeed, rec.DrawN)
	require.NoError(t, err)
	return rec, d
}

// durablePrequeueLoss: a drawn pre-queue's storage is lost before its opening, then again after
// it. Before (helper-83, 7 December 2026), the second loss took the first's void numbers inside
// the draw for tickets: real tickets moved back by hundreds of places behind numbers nobody
// holds. The draw goes on after the first loss: the void numbers draw places nobody holds,
// which positions and admissions skip; the draw records them with its N (queue.Numbers.Draw),
// so they are void again at a second loss, and every real ticket keeps its drawn place, never
// moves back, and is admitted in place order.
func durablePrequeueLoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	l := losePrequeue(t, f, "dur-preloss", 2, 10, 4, nil) // the checkpoint saw 4 numbers
	s1, tks, cfg, numbers, lose, mk := l.s, l.tks, l.cfg, l.numbers, l.lose, l.mk
	st, err := s1.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(5), st.VoidFrom, "void: the numbers past the checkpoint")
	// Holders of 5 to 7 show up before the opening, 8 to 10 do not (yet); 3 more join.
	for _, tk := range tks[4:7] {
		got := status(t, s1, tk)
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", tk.Number)
	}
	for range 3 {
		tk := join(t, s1, cfg.ID, "")
		require.Greater(t, tk.Number, int64(10))
		tks = append(tks, tk)
	}
	last := tks[len(tks)-1].Number

	// The opening: the draw.
	l.tks = tks
	rec, d := l.open(t, s1)
	cfg = l.cfg
	require.Equal(t, last, rec.DrawN, "every number handed out, or void, before the opening is drawn")
	require.Equal(t, int64(8), rec.DrawVoid[0], "the draw's void numbers: those whose holders did not show up")
	for _, tk := range append(append([]queue.Ticket{}, tks[:7]...), tks[10:]...) {
		require.NotContains(t, rec.DrawVoid, tk.Number, "ticket %d: its holder showed up before the draw", tk.Number)
	}
	present := append(append([]queue.Ticket{}, tks[:7]...), tks[10:]...)
	byPlace := func() {
		sort.Slice(present, func(i, j int) bool { return d.Place(present[i].Number) < d.Place(present[j].Number) })
	}
	byPlace()
	for i, tk := range present {
		got := status(t, s1, tk)
		require.Equal(t, d.Place(tk.Number), got.Place, "ticket %d", tk.Number)
		require.Equal(t, int64(i+1), got.Position, "ticket %d: only real tickets are ahead", tk.Number)
	}
	got := status(t, s1, tks[7]) // a void number's holder shows up: its drawn place
	require.Equal(t, queue.StatusQueued, got.Status)
	require.Equal(t, d.Place(8), got.Place)
	present = append(present, tks[7])
	byPlace()

	admit(t, s1, cfg.ID, 0)
	before := map[int64]int64{} // by number: the last position shown before the loss
	for i, tk := range present {
		got := status(t, s1, tk)
		if i < 2 {
			require.Equal(t, queue.StatusAdmitted, got.Status, "place %d (ticket %d)", got.Place, tk.Number)
			continue
		}
		require.Equal(t, queue.StatusQueued, got.Status, "place %d (ticket %d)", got.Place, tk.Number)
		require.Equal(t, int64(i-1), got.Position, "ticket %d", tk.Number)
		before[tk.Number] = got.Position
	}
	st, err = s1.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.NoError(t, numbers.Mark(ctx, cfg.ID, st.SeqMark(), st.Serving)) // as registry.mark does

	lose()
	s := mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st.Waiting, int64(len(before)), "no void number of the draw came back as a ticket")
	admitted := map[int64]bool{}
	for _, tk := range present[2:] {
		got := status(t, s, tk)
		require.Equal(t, d.Place(tk.Number), got.Place, "ticket %d keeps its drawn place", tk.Number)
		switch got.Status {
		case queue.StatusAdmitted: // the resume's pending range (the serving ceiling reserved ahead)
			admitted[tk.Number] = true
		case queue.StatusQueued:
			require.LessOrEqual(t, got.Position, before[tk.Number], "ticket %d moved back", tk.Number)
		default:
			require.Failf(t, "lost", "ticket %d reads %v", tk.Number, got.Status)
		}
	}
	got = status(t, s, tks[8]) // another void number's holder, after both losses
	require.Equal(t, d.Place(9), got.Place)
	present = append(present, tks[8])
	byPlace()
	late := join(t, s, cfg.ID, "")
	require.Equal(t, late.Number, late.Place, "a join after the opening queues behind the draw")
	present = append(present, late)

	// Admission follows the places, and admits every real ticket.
	lastPlace := int64(0)
	for _, tk := range present[2:] {
		if admitted[tk.Number] {
			lastPlace = max(lastPlace, d.Place(tk.Number))
		}
	}
	waiting := map[int64]queue.Ticket{}
	var active []queue.TicketRef
	for _, tk := range present[2:] {
		if admitted[tk.Number] {
			active = append(active, tk.TicketRef)
		} else {
			waiting[status(t, s, tk).Place] = tk
		}
	}
	for step := 0; len(waiting) > 0; step++ {
		require.Less(t, step, 100, "admission stalled with %d waiting", len(waiting))
		for _, ref := range active {
			require.NoError(t, s.Complete(ctx, ref))
		}
		active = active[:0]
		admit(t, s, cfg.ID, 0)
		var now []int64
		for p, tk := range waiting {
			got := status(t, s, tk)
			if got.Status == queue.StatusAdmitted {
				now = append(now, p)
				active = append(active, tk.TicketRef)
				continue
			}
			require.Equal(t, queue.StatusQueued, got.Status, "place %d (ticket %d)", p, tk.Number)
		}
		for _, p := range now {
			require.Greater(t, p, lastPlace, "place %d admitted after place %d", p, lastPlace)
			delete(waiting, p)
		}
		for _, p := range now {
			lastPlace = max(lastPlace, p)
		}
	}
}

// durablePrequeuePendingLoss: as durablePrequeueLoss, with the second loss just after the
// serving counter passed a void place of the draw more than 4,096 places into what the last
// checkpoint saw: the resume's pending range admits its first 4,096 places at once and the rest
// with the next step. The holder of that void number shows up in between: it is admitted with
// the rest of the range (it may have been told before the loss), not skipped as void.
func durablePrequeuePendingLoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	l := losePrequeue(t, f, "dur-prepend", 2, 10, 4, func(numbers queue.Numbers) {
		_, err := numbers.Reserve(ctx, "dur-prepend", 6000, 0) // a busy line reserves far ahead (queue.Pace)
		require.NoError(t, err)
	})
	s1, tks, numbers := l.s, l.tks, l.numbers
	present := append([]queue.Ticket{}, tks[:4]...)
	for range 30 { // they draw places among the void ones
		present = append(present, join(t, s1, l.cfg.ID, ""))
	}
	rec, d := l.open(t, s1)
	cfg := l.cfg
	require.GreaterOrEqual(t, rec.DrawN, int64(6000))
	var absent queue.Ticket // a void number whose place is past the pending range's first 4,096
	for _, tk := range tks[4:] {
		if p := d.Place(tk.Number); p > 4096+1 && (absent.Number == 0 || p < d.Place(absent.Number)) {
			absent = tk
		}
	}
	require.NotZero(t, absent.Number, "the draw of TestSeed places one of 5 to 10 past 4,097")
	for step := 0; ; step++ {
		require.Less(t, step, 100)
		st, err := s1.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		if st.Serving >= d.Place(absent.Number) {
			break
		}
		for _, tk := range present {
			_ = s1.Complete(ctx, tk.TicketRef) // ends the session of each admitted
		}
		admit(t, s1, cfg.ID, 0)
	}
	rec, err := numbers.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.GreaterOrEqual(t, rec.ServingCeiling, d.Place(absent.Number))
	require.Zero(t, rec.ServingMark, "no checkpoint saw the admissions")

	l.lose()
	s := l.mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	st0, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.LessOrEqual(t, st0.Waiting, int64(len(present)), "the range's void places do not wait")
	got := status(t, s, absent)
	require.Equal(t, d.Place(absent.Number), got.Place)
	if got.Status == queue.StatusQueued { // waits for the rest of the range: the next step
		admit(t, s, cfg.ID, 0)
		got = status(t, s, absent)
	}
	require.Equal(t, queue.StatusAdmitted, got.Status, "the serving counter passed it: it may have been told")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	rest := int64(1) // the range past its first 4,096 places: the absent ticket and the real ones
	for _, tk := range present {
		if p := d.Place(tk.Number); p > 4096 && p <= st.Serving {
			rest++
		}
	}
	require.Equal(t, st0.AdmittedTotal+rest, st.AdmittedTotal, "admitted with the range, counted once")
}

// durablePrequeueShownLoss (helper-84): a drawn pre-queue lost before its opening, most holders
// of the void numbers showing up before the opening, then lost again after it. Those holders
// are tickets at the second loss as at the first: not void again, so the admissions after it
// take them in place order within max_active. Before, the draw recorded the whole void range,
// the second resume made them void again, admissions passed their places, and each was
// admitted above max_active when it showed up: 228 sessions at max_active 5.
func durablePrequeueShownLoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	l := losePrequeue(t, f, "dur-preshown", 5, 300, 5, nil)
	s1 := l.s
	shown := append([]queue.Ticket{}, l.tks[:250]...) // 251 to 300 never show up
	for _, tk := range shown[5:] {
		require.Equal(t, queue.StatusQueued, status(t, s1, tk).Status)
	}
	for range 3 {
		shown = append(shown, join(t, s1, l.cfg.ID, ""))
	}
	l.open(t, s1)
	cfg, numbers := l.cfg, l.numbers
	for range 3 {
		admit(t, s1, cfg.ID, 0)
		for _, tk := range shown {
			if status(t, s1, tk).Status == queue.StatusAdmitted {
				require.NoError(t, s1.Complete(ctx, tk.TicketRef))
			}
		}
	}
	rec, err := numbers.Line(ctx, cfg.ID)
	require.NoError(t, err)
	require.Len(t, rec.DrawVoid, int(rec.DrawN)-len(shown), "void at the draw: all but the shown")
	st, err := s1.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.NoError(t, numbers.Mark(ctx, cfg.ID, st.SeqMark(), st.Serving))

	l.lose()
	s := l.mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	for step := 0; step < 20; step++ {
		admit(t, s, cfg.ID, 0)
		for _, tk := range shown {
			_ = status(t, s, tk) // every holder shown before the draw shows up again
		}
		st, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Active, cfg.MaxActive, "step %d: nobody shown before the draw is owed an admission", step)
		require.LessOrEqual(t, st.Waiting, int64(len(shown)), "step %d", step)
		for _, tk := range shown {
			if status(t, s, tk).Status == queue.StatusAdmitted {
				require.NoError(t, s.Complete(ctx, tk.TicketRef))
			}
		}
	}

	// The holders of the 50 numbers still void show up at last. Those whose places the serving
	// counter passed are owed their admission: they get it ahead of the line, first come
	// first, within max_active (helper-84, helper-85: admitted at once above it, 10 at 5).
	admit(t, s, cfg.ID, 0) // the room is full
	var passed []int64     // owed numbers, in the order they first read QUEUED
	for _, tk := range l.tks[250:] {
		got := status(t, s, tk)
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d: the room is full", tk.Number)
		if got.Place <= got.Serving {
			passed = append(passed, tk.Number)
			require.Equal(t, int64(len(passed)), got.Position, "ticket %d: first come first", tk.Number)
		}
		st, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.Equal(t, cfg.MaxActive, st.Active, "ticket %d read", tk.Number)
	}
	require.GreaterOrEqual(t, len(passed), 2, "some of the 50 places were passed")
	// The last of them leaves before its turn: it is dropped, never admitted.
	gone := passed[len(passed)-1]
	passed = passed[:len(passed)-1]
	require.NoError(t, s.Leave(ctx, l.tks[gone-1].TicketRef))
	var all []queue.Ticket
	for _, tk := range append(append([]queue.Ticket{}, l.tks[250:]...), shown...) {
		if tk.Number != gone {
			all = append(all, tk)
		}
	}
	done := map[int64]bool{}
	for step := 0; len(done) < len(all); step++ {
		require.Less(t, step, 200, "admission stalled: %d of %d admitted", len(done), len(all))
		for _, tk := range all {
			if done[tk.Number] {
				continue
			}
			got := status(t, s, tk)
			switch {
			case got.Status == queue.StatusAdmitted:
				if len(passed) > 0 && slices.Contains(passed, tk.Number) {
					require.Equal(t, passed[0], tk.Number, "the owed are admitted in the order they showed up")
					passed = passed[1:]
				}
				done[tk.Number] = true
				require.NoError(t, s.Complete(ctx, tk.TicketRef))
			case got.Status == queue.StatusCompleted || got.Status == queue.StatusExpired:
				done[tk.Number] = true // before, or a session lost with the storage
			case got.Status == queue.StatusQueued && got.Place <= got.Serving && !slices.Contains(passed, tk.Number):
				passed = append(passed, tk.Number)
			default:
				require.Equal(t, queue.StatusQueued, got.Status, "ticket %d", tk.Number)
			}
			st, err := s.Stats(ctx, cfg.ID)
			require.NoError(t, err)
			require.LessOrEqual(t, st.Active, cfg.MaxActive, "step %d, ticket %d read", step, tk.Number)
		}
		admit(t, s, cfg.ID, 0)
		st, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Active, cfg.MaxActive, "step %d", step)
	}
	require.Empty(t, passed, "every owed holder was admitted")
	_, err = s.Status(ctx, l.tks[gone-1].TicketRef)
	require.ErrorIs(t, err, queue.ErrTicketNotFound, "the one that left is gone")
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, st.Waiting, "nobody is left waiting, the one that left included")
}

// owed is a line whose storage was lost, its tickets 2 and 3 void and owed (the serving
// counter passed them to admit late, a join after the loss, into the room of 1), their holders
// queued in that order (oweTwo).
type owed struct {
	lostLine
	late queue.Ticket
}

func oweTwo(t *testing.T, f DurableFactory, id string) owed {
	o := owed{lostLine: loseLine(t, f, durableConfig(id, 1), 3, 1, 1, nil)} // 2 and 3 are void after the loss
	o.late = join(t, o.s, id, "")
	admit(t, o.s, id, 0)
	require.Equal(t, queue.StatusAdmitted, status(t, o.s, o.late).Status, "serving passed the void 2 and 3 to admit it")
	for i, tk := range o.tks[1:] {
		got := status(t, o.s, tk)
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d: the room is full", tk.Number)
		require.Equal(t, int64(i+1), got.Position, "ticket %d: first come first", tk.Number)
	}
	return o
}

// durableOwedQueue: holders of void numbers that the serving counter passed, showing up when
// the room is full, wait ahead of the line in the order they showed up, and the steps admit
// them first, within max_active; once the event sells out they read SOLD_OUT.
func durableOwedQueue(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	o := oweTwo(t, f, "dur-owed")
	s, cfg, tks, late := o.s, o.cfg, o.tks, o.late
	after := join(t, s, cfg.ID, "")
	require.Equal(t, int64(3), after.Position, "behind the two owed")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Active)
	require.Equal(t, int64(3), st.Waiting)
	require.Equal(t, []int64{2, 3}, st.Owed)

	require.NoError(t, s.Complete(ctx, late.TicketRef))
	admit(t, s, cfg.ID, 0)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[1]).Status, "the first owed, first")
	got := status(t, s, tks[2])
	require.Equal(t, queue.StatusQueued, got.Status)
	require.Equal(t, int64(1), got.Position)
	require.Equal(t, int64(2), status(t, s, after).Position)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Active, "within max_active")

	_, err = s.SetSoldOut(ctx, cfg.ID, true)
	require.NoError(t, err)
	require.Equal(t, queue.StatusSoldOut, status(t, s, tks[2]).Status, "nobody is admitted once sold out")
	require.Equal(t, queue.StatusSoldOut, status(t, s, after).Status)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, st.Waiting)
}

// durableOwedAcrossALoss (helper-86): the owed queue is recorded at the checkpoint
// (queue.LineRecord.Owed), so that after a loss of the storage those in it are owed again when
// they show up. Before, the resume took every number below the serving ceiling for handed out,
// and they read EXPIRED for good: 95 of 95.
func durableOwedAcrossALoss(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	o := oweTwo(t, f, "dur-owedloss")
	s, cfg, tks := o.s, o.cfg, o.tks
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3}, st.Owed)
	require.NoError(t, o.numbers.Mark(ctx, cfg.ID, st.SeqMark(), st.Serving)) // as registry.mark does
	owedMark, ok := o.numbers.(interface {
		MarkOwed(context.Context, string, []int64) error
	})
	require.True(t, ok, "the factory's numbers record the owed queue (sqlstore.DB)")
	require.NoError(t, owedMark.MarkOwed(ctx, cfg.ID, st.Owed))

	o.lose()
	s = o.mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	require.Equal(t, queue.StatusExpired, status(t, s, o.late).Status, "admitted before the checkpoint: lost with the storage")
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[1]).Status, "owed again: the slot is free")
	got := status(t, s, tks[2])
	require.Equal(t, queue.StatusQueued, got.Status, "owed again, the room full")
	require.Equal(t, int64(1), got.Position)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Active)
	require.Equal(t, []int64{3}, st.Owed)
	require.NoError(t, s.Complete(ctx, tks[1].TicketRef))
	admit(t, s, cfg.ID, 0)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[2]).Status)
}

// durablePendingAtOnce: the storage is lost just after an admission step whose tickets were
// told, one of them by its holder, the other not yet; sessions ended since the last checkpoint,
// and the store cannot tell which. Every ticket the serving counter had passed is admitted at
// once when its holder shows up — none reads QUEUED while a later one was told ADMITTED (a FIFO
// inversion as the holders see it) — and none above it (the serving ceiling is exactly what was
// admitted); the admissions of the lost copy count against max_active within what is left
// (never above it), and their slots come back when their claims lapse.
func durablePendingAtOnce(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	clock := NewClock()
	mk, lose, numbers := f(t, clock.Now, nil)
	s0 := mk()
	cfg := durableConfig("dur-pending", 2)
	_, err := s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	var tickets []queue.Ticket
	for range 8 {
		tk, err := s0.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	// 1 and 2 were admitted at once; 3 and 4, then 5 and 6, by steps as slots freed up. The
	// holders of 3, 4 and 6 read their admission; 5's holder has not looked yet.
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		for _, i := range pair {
			if i >= 2 {
				got, err := s0.Status(ctx, tickets[i].TicketRef)
				require.NoError(t, err)
				require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d", i+1)
			}
			require.NoError(t, s0.Complete(ctx, tickets[i].TicketRef))
		}
		r, err := s0.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
		require.Equal(t, int64(2), r.Admitted)
	}
	got, err := s0.Status(ctx, tickets[5].TicketRef)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, got.Status)
	// The last checkpoint saw serving at 2.
	require.NoError(t, numbers.Mark(ctx, cfg.ID, 8, 2))

	lose()
	s := mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	for i, tk := range tickets[4:6] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d: admitted before the loss, it must not wait behind 6", i+5)
	}
	for i, tk := range tickets[6:] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusQueued, got.Status, "ticket %d was never admitted", i+7)
		require.Equal(t, int64(i+1), got.Position, "ticket %d", i+7)
	}
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, cfg.MaxActive, st.Active, "5 and 6 hold the slots; 3 and 4 (ended, unknown to the store) count within max_active")
	_, err = s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	got, err = s.Status(ctx, tickets[6].TicketRef)
	require.NoError(t, err)
	require.Equal(t, queue.StatusQueued, got.Status, "no slot is free")

	// 5 and 6 end; the claims of 3 and 4 lapse: 7 and 8 are next.
	for _, tk := range tickets[4:6] {
		require.NoError(t, s.Complete(ctx, tk.TicketRef))
	}
	clock.Advance(cfg.ClaimTTL)
	r, err := s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Admitted)
	for i, tk := range tickets[6:] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d", i+7)
	}
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, cfg.MaxActive, st.Active)
}

// durableLimitCountsOnce: a join that has to wait for a ceiling to be reserved in SQL (the
// first join of a line, admitted at once, raises the serving ceiling) counts once against its
// client's joins_per_client, however many times the store retries it.
func durableLimitCountsOnce(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	mk, _, _ := f(t, nil, nil)
	s := mk()
	cfg := durableConfig("dur-limit", 1)
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	p := queue.JoinParams{Event: cfg.ID, ClientKey: "c1", JoinLimit: 2, JoinWindow: time.Minute}
	tk, err := s.Join(ctx, p)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, tk.Status)
	_, err = s.Join(ctx, p)
	require.NoError(t, err, "the client's second join of two")
	_, err = s.Join(ctx, p)
	require.ErrorIs(t, err, queue.ErrRateLimited)
}

// failingNumbers is a queue.Numbers whose Reserve fails while fail is set (SQL unreachable).
type failingNumbers struct {
	queue.Numbers
	fail atomic.Bool
}

func (n *failingNumbers) Reserve(ctx context.Context, event string, seq, serving int64) (queue.LineRecord, error) {
	if n.fail.Load() {
		return queue.LineRecord{}, errors.New("storetest: the database is unreachable")
	}
	return n.Numbers.Reserve(ctx, event, seq, serving)
}

// durableCeilingAhead: an admission step reserves the serving ceiling for the next step too
// (what it may admit: the free slots, within a tenth of a second of admit_rate), so that the
// next step admits without waiting for SQL, and no further (after a loss, everybody up to the
// ceiling is admitted at once). With the ceiling raised to exactly each step's target, every
// step that admits waits for a write, and three instances' steps chase each other's.
func durableCeilingAhead(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	clock := NewClock()
	var fn *failingNumbers
	mk, _, numbers := f(t, clock.Now, func(n queue.Numbers) queue.Numbers {
		fn = &failingNumbers{Numbers: n}
		return fn
	})
	s := mk()
	require.NotNil(t, fn, "the factory keeps the store's numbers in wrap's")
	cfg := durableConfig("dur-ahead", 1000)
	cfg.AdmitRate, cfg.Paused = 100, true // a step admits 10 at most (the bucket: 0.1 s)
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	for i := range 55 {
		_, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err, "join %d", i+1)
	}
	cfg.Paused, cfg.Version = false, 2
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	serving := func() int64 {
		rec, err := numbers.Line(ctx, cfg.ID)
		require.NoError(t, err)
		return rec.ServingCeiling
	}

	clock.Advance(100 * time.Millisecond)
	r, err := s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(10), r.Admitted)
	require.Equal(t, int64(20), serving(), "the step reserved its 10 and the next step's 10")

	// SQL is unreachable: the next step admits what was reserved for it.
	fn.fail.Store(true)
	clock.Advance(100 * time.Millisecond)
	r, err = s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err, "the step's ceiling was reserved by the step before")
	require.Equal(t, int64(10), r.Admitted)
	require.Equal(t, int64(20), r.To)
	clock.Advance(100 * time.Millisecond)
	_, err = s.Admit(ctx, cfg.ID, 0)
	require.Error(t, err, "nothing is reserved for this one: admissions stop while SQL is unreachable")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(20), st.Serving, "serving never passes the durable ceiling")

	// SQL is back: each step reserves ahead again, in the background after the step. The first
	// makes up the 10 of the step that failed (queue.AdmitLateMax), past what was reserved for
	// it: it reserves them itself before admitting.
	fn.fail.Store(false)
	for _, c := range []struct{ step, want int64 }{{3, 20}, {4, 10}} {
		step, want := c.step, c.want
		clock.Advance(100 * time.Millisecond)
		r, err = s.Admit(ctx, cfg.ID, 0)
		require.NoError(t, err)
		require.Equal(t, want, r.Admitted, "step %d", step)
		eventually.True(t, 5*time.Second, "the next step's ceiling reserved", func() bool { return serving() == r.To+min(10, 55-r.To) })
	}
	require.Equal(t, int64(55), serving(), "never past the last number")
}

// durableHandedOutBelowServing: the storage is lost while the last checkpoint of the ticket
// numbers lags the serving counter (tickets 2 and 3 joined, were admitted and claimed after it).
// Every number up to the serving ceiling was handed out (a step never reserves serving past the
// last number), so 2 and 3 are not void: their admissions count against max_active at once,
// and the joins that follow the loss wait instead of taking their slots. Counted void, they
// took no slot until their holders came back and were then admitted on top of the newcomers:
// the chaos suite's redis-restart-empty saw 12 sessions at max_active 10.
func durableHandedOutBelowServing(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	mk, lose, numbers := f(t, nil, nil)
	s0 := mk()
	cfg := durableConfig("dur-handed", 3)
	_, err := s0.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	var tickets []queue.Ticket
	for range 3 {
		tk, err := s0.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, tk.Status)
		tickets = append(tickets, tk)
	}
	require.NoError(t, numbers.Mark(ctx, cfg.ID, 1, 1))

	lose()
	s := mk()
	_, err = s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	active := func(when string) queue.Stats {
		t.Helper()
		st, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		require.LessOrEqual(t, st.Active, cfg.MaxActive, when)
		return st
	}
	st := active("after the resume")
	require.Equal(t, int64(4), st.VoidFrom, "void: the numbers above serving and the checkpoint, up to the ceiling")
	require.GreaterOrEqual(t, st.VoidTo, st.VoidFrom)
	var later []queue.Ticket
	for i := range 3 {
		tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		require.NoError(t, err)
		later = append(later, tk)
		active(fmt.Sprintf("after join %d", i+1))
	}
	require.Equal(t, queue.StatusAdmitted, later[0].Status, "ticket 1's session ended with the loss: one slot is free")
	for i, tk := range later[1:] {
		require.Equal(t, queue.StatusQueued, tk.Status, "join %d after the loss: 2 and 3 hold the other slots", i+2)
	}
	for i, tk := range tickets[1:] {
		got, err := s.Status(ctx, tk.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, got.Status, "ticket %d was admitted before the loss", i+2)
		active(fmt.Sprintf("after ticket %d came back", i+2))
	}
}

// durableAtOnceAsksOnce: a join that could be admitted at once, but only above the serving
// ceiling, makes one reservation for it; when that does not cover it, the join waits in line,
// first, for the next admission step, instead of asking again. Under a crowd on three
// instances, each instance's joins took the slots the others had just reserved and their
// sessions ended again, so a join asked eight times and failed with 503 (CI, 3 December 2026).
// Here SQL raises the seq ceiling but not the serving ceiling, as if other instances' joins had
// taken what it reserved.
func durableAtOnceAsksOnce(t *testing.T, f DurableFactory) {
	ctx := context.Background()
	clock := NewClock()
	var sn *servingStuck
	mk, _, _ := f(t, clock.Now, func(n queue.Numbers) queue.Numbers {
		sn = &servingStuck{Numbers: n}
		return sn
	})
	s := mk()
	require.NotNil(t, sn, "the factory keeps the store's numbers in wrap's")
	cfg := durableConfig("dur-atonce", 3)
	_, err := s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)

	sn.stuck.Store(true)
	tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err, "a join never fails for want of a serving ceiling to be admitted at once")
	require.Equal(t, queue.StatusQueued, tk.Status)
	require.Equal(t, int64(1), tk.Position)
	require.Equal(t, int64(1), sn.asked.Load(), "one reservation asked to admit it at once")
	second, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.Equal(t, int64(2), second.Position, "the join behind it waits behind it")
	require.Equal(t, int64(1), sn.asked.Load(), "a join with someone ahead asks nothing")

	sn.stuck.Store(false)
	clock.Advance(100 * time.Millisecond)
	r, err := s.Admit(ctx, cfg.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Admitted, "the next step admits both, in order")
	got, err := s.Status(ctx, tk.TicketRef)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, got.Status)
	third, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, third.Status, "a slot free and nobody ahead: admitted at once again")
}

// servingStuck is a queue.Numbers that, while stuck is set, raises only the seq ceiling (the
// serving ceiling asked for is left where it is) and counts those reservations in asked.
type servingStuck struct {
	queue.Numbers
	stuck atomic.Bool
	asked atomic.Int64
}

func (n *servingStuck) Reserve(ctx context.Context, event string, seq, serving int64) (queue.LineRecord, error) {
	if n.stuck.Load() {
		n.asked.Add(1)
		serving = 0
	}
	return n.Numbers.Reserve(ctx, event, seq, serving)
}
