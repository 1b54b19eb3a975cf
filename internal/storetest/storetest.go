// Package storetest is the conformance suite every queue.Store runs: the in-process store, a
// standalone Redis and a Redis Cluster are held to the same behaviour by the same tests.
package storetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
)

// Factory returns a fresh, empty store whose clock is now (nil: the store's own clock). It
// registers its own cleanup with t.
type Factory func(t *testing.T, now func() time.Time) queue.Store

var eventSeq atomic.Int64

// newEvent creates an event with a unique id on s and returns its configuration.
func newEvent(t *testing.T, s queue.Store, mod func(*queue.EventConfig)) queue.EventConfig {
	t.Helper()
	cfg := queue.EventConfig{
		ID:        fmt.Sprintf("ev-%d", eventSeq.Add(1)),
		MaxActive: 2,
	}
	if mod != nil {
		mod(&cfg)
	}
	cfg = withDefaults(cfg)
	_, err := s.PutEvent(context.Background(), cfg, 7)
	require.NoError(t, err)
	return cfg
}

// withDefaults gives cfg's zero fields the defaults an event gets (event.Event.WithDefaults).
func withDefaults(cfg queue.EventConfig) queue.EventConfig {
	d := event.Event{ID: cfg.ID, MaxActive: cfg.MaxActive, SessionTTL: cfg.SessionTTL, ClaimTTL: cfg.ClaimTTL}.WithDefaults()
	cfg.SessionTTL, cfg.ClaimTTL = d.SessionTTL, d.ClaimTTL
	return cfg
}

// LineConfig is the line configuration of an event id with max_active and every other field
// at its default, as the registry would write it (benchmarks and store tests).
func LineConfig(id string, maxActive int64) queue.EventConfig {
	return event.Event{ID: id, MaxActive: maxActive}.WithDefaults().LineConfig()
}

func join(t *testing.T, s queue.Store, event, user string) queue.Ticket {
	t.Helper()
	tk, err := s.Join(context.Background(), queue.JoinParams{Event: event, UserKey: user})
	require.NoError(t, err)
	return tk
}

func status(t *testing.T, s queue.Store, tk queue.Ticket) queue.Ticket {
	t.Helper()
	st, err := s.Status(context.Background(), tk.TicketRef)
	require.NoError(t, err)
	return st
}

func admit(t *testing.T, s queue.Store, event string, maxBatch int64) queue.AdmitResult {
	t.Helper()
	r, err := s.Admit(context.Background(), event, maxBatch)
	require.NoError(t, err)
	return r
}

// suiteTest is one named test of a conformance suite; F is the suite's factory type.
type suiteTest[F any] struct {
	name string
	run  func(t *testing.T, newStore F)
}

// runSuite runs each test as a parallel subtest of t named test.name, in the order given.
func runSuite[F any](t *testing.T, newStore F, tests []suiteTest[F]) {
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			test.run(t, newStore)
		})
	}
}

// Run runs the conformance suite against the stores newStore makes: each test below as a
// parallel subtest on stores of its own.
func Run(t *testing.T, newStore Factory) {
	runSuite(t, newStore, []suiteTest[Factory]{
		{"EventLifecycle", testEventLifecycle},
		{"JoinAdmitsWhileFreeThenQueuesInOrder", testJoinAdmitsWhileFreeThenQueuesInOrder},
		{"LeaveFreesSlotAndProcessorAdmitsHead", testLeaveFreesSlotAndProcessorAdmitsHead},
		{"UnknownTickets", testUnknownTickets},
		{"BatchAdmissionIsCappedAndClaimed", testBatchAdmissionIsCappedAndClaimed},
		{"ShorterClaimTTLAppliesToWaitingClaims", testShorterClaimTTLAppliesToWaitingClaims},
		{"SessionsEndWhenIdle", testSessionsEndWhenIdle},
		{"AdmitRateBucket", testAdmitRateBucket},
		{"PaceIsNotTheFill", testPaceIsNotTheFill},
		{"AdmitRateIsExact", testAdmitRateIsExact},
		{"AdmitRateLateStep", testAdmitRateLateStep},
		{"ClosedEvent", testClosedEvent},
		{"OnePlacePerUser", testOnePlacePerUser},
		{"IdempotentJoins", testIdempotentJoins},
		{"PauseStopsAdmissions", testPauseStopsAdmissions},
		{"ExtendGivesSessionsMore", testExtendGivesSessionsMore},
		{"SoldOutPassesOverTheLine", testSoldOutPassesOverTheLine},
		{"CompleteEndsTheSession", testCompleteEndsTheSession},
		{"ConcurrentJoinersAndProcessors", testConcurrentJoinersAndProcessors},
		{"JoinsPerClientAreLimited", testJoinsPerClientAreLimited},
		{"JoinLimitHasNoWindowEdge", testJoinLimitHasNoWindowEdge},
		{"JoinLimitSparesLiveTickets", testJoinLimitSparesLiveTickets},
		{"JoinLimitIsExactUnderConcurrency", testJoinLimitIsExactUnderConcurrency},
		{"TicketsPerClientInThePreQueue", testTicketsPerClientInThePreQueue},
		{"TicketCapIsExactUnderConcurrency", testTicketCapIsExactUnderConcurrency},
		{"RefusedJoinsCountAgainstTheBucket", testRefusedJoinsCountAgainstTheBucket},
		{"PollsPerTicketAreLimited", testPollsPerTicketAreLimited},
		{"PollLimitIsExactUnderConcurrency", testPollLimitIsExactUnderConcurrency},
		{"SessionEndsAtSessionMax", testSessionEndsAtSessionMax},
		{"AdmittedTicketsCarryTheirUser", testAdmittedTicketsCarryTheirUser},
		{"ChallengesAreSingleUse", testChallengesAreSingleUse},
		{"ChallengeUseIsExactUnderConcurrency", testChallengeUseIsExactUnderConcurrency},
		{"AbandonmentIsCounted", testAbandonmentIsCounted},
		{"ViewTellsWaitingPositions", testViewTellsWaitingPositions},
	})
	runSuite(t, newStore, drawTests)
}

// testEventLifecycle: events are created, updated (never by an older version) and deleted; a line
// keeps its generation until it is deleted, and a line made after deletion starts over.
func testEventLifecycle(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	_, err := s.Stats(ctx, "nope")
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	_, err = s.Join(ctx, queue.JoinParams{Event: "nope"})
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	_, err = s.Admit(ctx, "nope", 0)
	require.ErrorIs(t, err, queue.ErrEventNotFound)

	cfg := newEvent(t, s, nil)
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, uint32(7), st.Generation)
	require.Zero(t, st.Waiting+st.Active+st.Serving+st.AdmittedTotal+st.LastNumber)

	// An update keeps the line and its generation.
	join(t, s, cfg.ID, "")
	cfg.MaxActive = 5
	gen, err := s.PutEvent(ctx, cfg, 99)
	require.NoError(t, err)
	require.Equal(t, uint32(7), gen)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.LastNumber)

	// An older configuration never reverts a newer one.
	cfg.Version = 10
	_, err = s.PutEvent(ctx, cfg, 0)
	require.NoError(t, err)
	stale := cfg
	stale.Version, stale.MaxActive = 9, 1
	_, err = s.PutEvent(ctx, stale, 0)
	require.NoError(t, err)
	join(t, s, cfg.ID, "")
	tk := join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, tk.Status, "max_active is still 5")

	require.NoError(t, s.DeleteEvent(ctx, cfg.ID))
	require.NoError(t, s.DeleteEvent(ctx, cfg.ID))
	// Generation 0 only updates: it never creates a line.
	_, err = s.PutEvent(ctx, cfg, 0)
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	_, err = s.Stats(ctx, cfg.ID)
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	// A new line after deletion starts over with the new generation.
	gen, err = s.PutEvent(ctx, cfg, 8)
	require.NoError(t, err)
	require.Equal(t, uint32(8), gen)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, st.LastNumber)
}

// testJoinAdmitsWhileFreeThenQueuesInOrder: joins take strictly increasing numbers, are admitted at
// once while max_active allows, and queue in arrival order after that.
func testJoinAdmitsWhileFreeThenQueuesInOrder(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	var tks []queue.Ticket
	for i := 0; i < 5; i++ {
		tks = append(tks, join(t, s, cfg.ID, ""))
	}
	for i, tk := range tks {
		require.Equal(t, int64(i+1), tk.Number, "numbers strictly increase with arrival")
		require.True(t, tk.Created)
		require.Equal(t, uint32(7), tk.Generation)
		require.Equal(t, clock.Now(), tk.Now)
	}
	require.Equal(t, queue.StatusAdmitted, tks[0].Status)
	require.Equal(t, clock.Now().Add(event.DefaultSessionTTL), tks[0].AdmittedUntil)
	require.Equal(t, queue.StatusAdmitted, tks[1].Status)
	require.Equal(t, int64(2), tks[1].Serving)
	for i, tk := range tks[2:] {
		require.Equal(t, queue.StatusQueued, tk.Status)
		require.Equal(t, int64(i+1), tk.Position)
		require.Equal(t, int64(i+1), tk.Waiting)
		require.Equal(t, int64(2), tk.Serving)
		require.True(t, tk.AdmittedUntil.IsZero())
	}
	st := status(t, s, tks[4])
	require.Equal(t, queue.StatusQueued, st.Status)
	require.Equal(t, int64(3), st.Position)
	require.Equal(t, int64(3), st.Waiting)

	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Stats{Generation: 7, Waiting: 3, Active: 2, AdmittedTotal: 2, Serving: 2,
		LastNumber: 5, Rate: stats.Rate, Now: clock.Now()}, stats)

	// Full: the processor admits nobody.
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted)
}

// testLeaveFreesSlotAndProcessorAdmitsHead: leaving frees an admitted slot for the head of the
// line, or a waiting place the processor then passes over; tickets that left are not found.
func testLeaveFreesSlotAndProcessorAdmitsHead(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	tks := make([]queue.Ticket, 6)
	for i := range tks {
		tks[i] = join(t, s, cfg.ID, "")
	}
	require.NoError(t, s.Leave(ctx, tks[0].TicketRef))
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, queue.AdmitResult{Admitted: 1, From: 3, To: 3, Now: clock.Now()}, r)
	st := status(t, s, tks[2])
	require.Equal(t, queue.StatusAdmitted, st.Status)
	require.Equal(t, clock.Now().Add(cfg.SessionTTL), st.AdmittedUntil)
	require.Equal(t, int64(1), status(t, s, tks[3]).Position)

	// A waiting ticket leaves: those behind move up, and the processor skips it.
	require.NoError(t, s.Leave(ctx, tks[3].TicketRef))
	require.Equal(t, int64(1), status(t, s, tks[4]).Position)
	require.Equal(t, int64(2), status(t, s, tks[5]).Position)
	require.Equal(t, int64(2), status(t, s, tks[5]).Waiting)
	require.NoError(t, s.Leave(ctx, tks[1].TicketRef))
	r = admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(1), r.Admitted)
	require.Equal(t, int64(4), r.From)
	require.Equal(t, int64(5), r.To, "serving passes over the ticket that left")
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[4]).Status)
	require.Equal(t, int64(1), status(t, s, tks[5]).Position)

	// Gone tickets are not found, and cannot leave twice.
	for _, i := range []int{0, 1, 3} {
		_, err := s.Status(ctx, tks[i].TicketRef)
		require.ErrorIs(t, err, queue.ErrTicketNotFound)
		require.ErrorIs(t, s.Leave(ctx, tks[i].TicketRef), queue.ErrTicketNotFound)
	}
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.Waiting)
	require.Equal(t, int64(2), stats.Active)
	require.Equal(t, int64(4), stats.AdmittedTotal)
	require.Equal(t, int64(5), stats.Serving)
}

// testUnknownTickets: tickets of another number or generation, or of an absent event, are not
// found.
func testUnknownTickets(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, NewClock().Now)
	cfg := newEvent(t, s, nil)
	tk := join(t, s, cfg.ID, "")
	for _, ref := range []queue.TicketRef{
		{Event: cfg.ID, Generation: 7, Number: 0},
		{Event: cfg.ID, Generation: 7, Number: 2},
		{Event: cfg.ID, Generation: 8, Number: 1},
	} {
		_, err := s.Status(ctx, ref)
		require.ErrorIs(t, err, queue.ErrTicketNotFound, "%+v", ref)
		require.ErrorIs(t, s.Leave(ctx, ref), queue.ErrTicketNotFound, "%+v", ref)
	}
	_, err := s.Status(ctx, queue.TicketRef{Event: "absent", Generation: 7, Number: 1})
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tk).Status)
}

// testBatchAdmissionIsCappedAndClaimed: nobody is admitted before opens_at; the processor admits
// batches capped by maxBatch; admissions not claimed by the claim deadline lapse and free their
// slots.
func testBatchAdmissionIsCappedAndClaimed(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive = 100
		c.OpensAt = time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)
	})
	tks := make([]queue.Ticket, 30)
	for i := range tks {
		tks[i] = join(t, s, cfg.ID, "")
		require.Equal(t, queue.StatusQueued, tks[i].Status, "before opening everyone waits in the pre-queue")
	}
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "nobody is admitted before opening")
	clock.Advance(time.Hour)
	r := admit(t, s, cfg.ID, 10)
	require.Equal(t, queue.AdmitResult{Admitted: 10, From: 1, To: 10, Now: clock.Now()}, r)
	r = admit(t, s, cfg.ID, 0)
	require.Equal(t, queue.AdmitResult{Admitted: 20, From: 11, To: 30, Now: clock.Now()}, r)
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(30), stats.Active)
	require.Zero(t, stats.Waiting)
	// Claimed by status; the batch stays claimable until its deadline.
	clock.Advance(cfg.ClaimTTL - time.Millisecond)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[0]).Status)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[29]).Status)
	require.NoError(t, s.Leave(ctx, tks[15].TicketRef))
	clock.Advance(time.Millisecond)
	// Unclaimed admissions lapse at the claim deadline and free their slots.
	r = admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(27), r.Expired)
	require.Zero(t, r.Admitted)
	require.Equal(t, queue.StatusExpired, status(t, s, tks[1]).Status)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[0]).Status)
	stats, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), stats.Active)
	// An expired ticket can still leave; then it is gone.
	require.NoError(t, s.Leave(ctx, tks[1].TicketRef))
	_, err = s.Status(ctx, tks[1].TicketRef)
	require.ErrorIs(t, err, queue.ErrTicketNotFound)
}

// testShorterClaimTTLAppliesToWaitingClaims: shortening claim_ttl also cuts the claim deadline of
// batches already admitted.
func testShorterClaimTTLAppliesToWaitingClaims(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive = 10
		c.ClaimTTL = time.Hour
		c.OpensAt = clock.Now().Add(time.Second)
	})
	for i := 0; i < 4; i++ {
		join(t, s, cfg.ID, "")
	}
	clock.Advance(time.Second)
	require.Equal(t, int64(2), admit(t, s, cfg.ID, 2).Admitted)
	cfg.ClaimTTL = 3 * time.Second
	cfg.Version = 1
	_, err := s.PutEvent(ctx, cfg, 0)
	require.NoError(t, err)
	clock.Advance(time.Second)
	require.Equal(t, int64(2), admit(t, s, cfg.ID, 2).Admitted)
	clock.Advance(2 * time.Second)
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(2), r.Expired, "the first batch's hour-long claim was cut to 3 s")
	clock.Advance(time.Second)
	r = admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(2), r.Expired)
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, st.Active)
}

// testSessionsEndWhenIdle: an admitted session ends session_ttl after its last activity, whether a
// sweep or a status read finds it first.
func testSessionsEndWhenIdle(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1; c.SessionTTL = 10 * time.Second })
	a := join(t, s, cfg.ID, "")
	b := join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, a.Status)
	clock.Advance(9 * time.Second)
	st := status(t, s, a) // activity extends the session
	require.Equal(t, clock.Now().Add(10*time.Second), st.AdmittedUntil)
	clock.Advance(9 * time.Second)
	r := admit(t, s, cfg.ID, 0)
	require.Zero(t, r.Admitted)
	require.Zero(t, r.Expired)
	clock.Advance(time.Second)
	r = admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(1), r.Expired)
	require.Equal(t, int64(1), r.Admitted)
	require.Equal(t, queue.StatusExpired, status(t, s, a).Status)
	require.Equal(t, queue.StatusAdmitted, status(t, s, b).Status)
	// An idle session read after its expiry, before any sweep, is expired too.
	clock.Advance(10 * time.Second)
	require.Equal(t, queue.StatusExpired, status(t, s, b).Status)
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, stats.Active)
}

// testPaceIsNotTheFill: the admission rate ETAs read (Stats.Rate, Ticket.Rate) does not count
// the admissions that fill the empty room: after two joins took both slots of a room whose
// sessions last 300 s, the ticket second in line is told 300 s, the room's turnover, as its
// join was told, not 2 s (helper-82: the rate read the fill as 2 admissions a second). Then,
// at a slow pace (a session ends every 10 s and the next gets in), no admission reads as 1 a
// second (helper-83: an ETA of 19 s for a wait of ~570 s), and once a window of it closes
// (queue.RateEvents) the rate is its pace.
func testPaceIsNotTheFill(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive, c.SessionTTL = 2, 300*time.Second })
	e := event.Event{ID: cfg.ID, MaxActive: 2, SessionTTL: 300 * time.Second}.WithDefaults()
	var tks []queue.Ticket
	for range 8 {
		tks = append(tks, join(t, s, cfg.ID, ""))
	}
	require.Equal(t, queue.StatusAdmitted, tks[1].Status)
	require.Equal(t, int64(300), e.TicketETA(tks[3]), "the join's ETA: second in line, one slot per 150 s")
	for range 3 {
		clock.Advance(700 * time.Millisecond)
		admit(t, s, cfg.ID, 0)
		st, err := s.Status(ctx, tks[3].TicketRef)
		require.NoError(t, err)
		require.Zero(t, st.Rate, "the room's fill is no pace")
		require.Equal(t, int64(300), e.TicketETA(st), "the same ETA as the join's")
	}
	for i := range 4 {
		require.NoError(t, s.Complete(ctx, tks[i].TicketRef))
		require.Equal(t, int64(1), admit(t, s, cfg.ID, 0).Admitted, "a slot freed: the next gets in")
		for range 10 {
			clock.Advance(time.Second)
			admit(t, s, cfg.ID, 0)
			st, err := s.Status(ctx, tks[7].TicketRef)
			require.NoError(t, err)
			require.Less(t, st.Rate, 0.3, "one admission in 10 s is no pace of 1 a second (after %d)", i+1)
		}
	}
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.InDelta(t, 0.1, stats.Rate, 0.05, "admissions into freed slots, one every 10 s, are the pace")

	// With admit_rate set the fill is no pace either: the rate reads 0 (unmeasured), and the
	// ETA waits for the turnover once the slots are taken (helper-83: eta_s 1, for ~150 s, as
	// the store answered admit_rate until the room turned over).
	cfg = newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive, c.SessionTTL, c.AdmitRate = 2, 300*time.Second, 10 })
	e = event.Event{ID: cfg.ID, MaxActive: 2, SessionTTL: 300 * time.Second, AdmitRate: 10}.WithDefaults()
	tks = tks[:0]
	for range 4 {
		clock.Advance(time.Second) // the bucket of admit_rate fills again
		tks = append(tks, join(t, s, cfg.ID, ""))
	}
	require.Equal(t, queue.StatusAdmitted, tks[1].Status)
	require.Zero(t, tks[3].Rate, "the room's fill is no pace")
	require.Equal(t, int64(300), e.TicketETA(tks[3]), "the join's ETA: second in line of a full room, one slot per 150 s")
	clock.Advance(time.Second)
	admit(t, s, cfg.ID, 0)
	st, err := s.Status(ctx, tks[3].TicketRef)
	require.NoError(t, err)
	require.Zero(t, st.Rate)
	require.Equal(t, int64(300), e.TicketETA(st), "the same ETA as the join's")
}

// testAdmitRateBucket: admit_rate throttles admissions, join-time ones included, through a bucket
// holding a tenth of a second.
func testAdmitRateBucket(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1000; c.AdmitRate = 100 })
	// The bucket holds a tenth of a second: 10 admissions, join-time ones included.
	var admitted, queued int
	tks := make([]queue.Ticket, 0, 40)
	for i := 0; i < 40; i++ {
		tk := join(t, s, cfg.ID, "")
		tks = append(tks, tk)
		if tk.Status == queue.StatusAdmitted {
			admitted++
		} else {
			queued++
		}
	}
	require.Equal(t, 10, admitted)
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted)
	clock.Advance(50 * time.Millisecond)
	require.Equal(t, int64(5), admit(t, s, cfg.ID, 0).Admitted)
	// While nobody can be admitted (here: paused; steps on time), the bucket holds no more
	// than a tenth of a second: resumed, a step admits 10, not the second's 100.
	pause := func(paused bool) {
		cfg.Paused, cfg.Version = paused, cfg.Version+1
		_, err := s.PutEvent(ctx, cfg, 0)
		require.NoError(t, err)
	}
	pause(true)
	for range 10 {
		clock.Advance(queue.AdmitStep)
		require.Zero(t, admit(t, s, cfg.ID, 0).Admitted)
	}
	pause(false)
	clock.Advance(queue.AdmitStep)
	require.Equal(t, int64(10), admit(t, s, cfg.ID, 0).Admitted, "the bucket never holds more than a tenth of a second")
	clock.Advance(queue.AdmitStep)
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(10), r.Admitted)
	require.Equal(t, int64(35), r.To)
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(5), stats.Waiting)
	require.Zero(t, stats.Rate, "35 of 1,000 slots filled: no pace measured (event.ETA fills the free slots at admit_rate)")
}

// testAdmitRateLateStep (issue 22): a step of the admission processor that comes late (every
// instance starved of CPU, or the store slow) makes up its delay beyond queue.AdmitStep, up to
// queue.AdmitLateMax, so that the line keeps admit_rate; time when nobody could be admitted
// (no free slot) is not made up.
func testAdmitRateLateStep(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1_000_000; c.AdmitRate = 100 })
	_, err := FillLine(ctx, s, cfg.ID, 1000)
	require.NoError(t, err)
	admit(t, s, cfg.ID, 0) // the line's first bucket
	clock.Advance(queue.AdmitStep)
	require.Equal(t, int64(10), admit(t, s, cfg.ID, 0).Admitted, "a step on time: a tenth of a second")
	clock.Advance(4 * queue.AdmitStep)
	require.Equal(t, int64(40), admit(t, s, cfg.ID, 0).Admitted, "a step 300 ms late makes them up")
	clock.Advance(queue.AdmitStep)
	require.Equal(t, int64(10), admit(t, s, cfg.ID, 0).Admitted, "and the next on time takes its tenth only")
	clock.Advance(3 * time.Second)
	// 2,900 ms late: the bucket's 10 and AdmitLateMax's (1 s) 100 of admit_rate 100/s.
	require.Equal(t, int64(110), admit(t, s, cfg.ID, 0).Admitted, "at most AdmitLateMax of a delay is made up")
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "a second step at once finds the bucket empty")
	clock.Advance(queue.AdmitStep)
	require.Equal(t, int64(4), admit(t, s, cfg.ID, 4).Admitted, "a step cut short by its batch cap")
	clock.Advance(queue.AdmitStep)
	require.Equal(t, int64(16), admit(t, s, cfg.ID, 0).Admitted, "owes the 6 it left to the next")

	// No free slot for a second, steps on time: when slots free, a step admits a tenth of a second.
	full := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 20; c.AdmitRate = 100 })
	tks := make([]queue.Ticket, 60)
	for i := range tks {
		tks[i] = join(t, s, full.ID, "")
	}
	for clock.Advance(queue.AdmitStep); admit(t, s, full.ID, 0).Admitted > 0; clock.Advance(queue.AdmitStep) {
	}
	for range 10 {
		clock.Advance(queue.AdmitStep)
		require.Zero(t, admit(t, s, full.ID, 0).Admitted, "max_active holds")
	}
	for _, tk := range tks[:20] {
		require.NoError(t, s.Leave(ctx, tk.TicketRef))
	}
	clock.Advance(queue.AdmitStep)
	require.Equal(t, int64(10), admit(t, s, full.ID, 0).Admitted, "time without a free slot is not made up")
}

// testAdmitRateIsExact (issue 21): with the admission processor stepping every 100 ms, the
// admissions of every 10 s match admit_rate within 5 %, for rates from 0.1 to 10,000 per second:
// the fraction of a token a step cannot use is carried to the next (15/s used to admit 10.1/s,
// 25/s 20.2/s). Every other step is made twice, as two instances at once would: they share the
// one bucket, so the rate holds across instances.
func testAdmitRateIsExact(t *testing.T, newStore Factory) {
	ctx := context.Background()
	for _, rate := range []float64{0.1, 1, 7.5, 10, 15, 19, 20, 25, 40, 333, 1000, 10_000} {
		clock := NewClock()
		s := newStore(t, clock.Now)
		cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1_000_000; c.AdmitRate = rate })
		const steps, window = 120, 100 // 12 s of 100 ms steps; windows of 10 s
		_, err := FillLine(ctx, s, cfg.ID, int(rate*steps/10)+20)
		require.NoError(t, err)
		per := make([]int64, steps)
		for i := range per {
			clock.Advance(100 * time.Millisecond)
			per[i] = admit(t, s, cfg.ID, 0).Admitted
			if i%2 == 1 {
				per[i] += admit(t, s, cfg.ID, 0).Admitted // another instance's step, at the same time
			}
		}
		want := rate * window / 10
		for from := 10; from+window <= steps; from++ { // after the first second (the line's first bucket)
			var got int64
			for _, n := range per[from : from+window] {
				got += n
			}
			if math.Abs(float64(got)-want) > 0.05*want {
				t.Fatalf("admit_rate %v: %d admissions in the 10 s from step %d, want %v within 5%%", rate, got, from, want)
			}
		}
	}
}

// testClosedEvent: after closes_at joins are refused and waiting tickets are CLOSED; admitted
// sessions go on. A closes_at set, moved or dropped on a line with tickets applies at once.
func testClosedEvent(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1; c.ClosesAt = clock.Now().Add(time.Minute) })
	a := join(t, s, cfg.ID, "")
	b := join(t, s, cfg.ID, "")
	clock.Advance(time.Minute)
	_, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrEventClosed)
	require.Equal(t, queue.StatusClosed, status(t, s, b).Status)
	require.Equal(t, queue.StatusAdmitted, status(t, s, a).Status, "admitted sessions outlive closing")
	require.NoError(t, s.Leave(ctx, a.TicketRef))
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted)

	// closes_at set (then moved, then dropped) on a line that people joined already.
	cfg = newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	join(t, s, cfg.ID, "")
	join(t, s, cfg.ID, "")
	cfg.ClosesAt, cfg.Version = clock.Now(), cfg.Version+1
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrEventClosed)
	cfg.ClosesAt, cfg.Version = clock.Now().Add(time.Minute), cfg.Version+1
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	c := join(t, s, cfg.ID, "")
	require.Equal(t, int64(2), c.Position)
	clock.Advance(time.Minute)
	_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrEventClosed)
	cfg.ClosesAt, cfg.Version = time.Time{}, cfg.Version+1
	_, err = s.PutEvent(ctx, cfg, 7)
	require.NoError(t, err)
	require.Equal(t, int64(3), join(t, s, cfg.ID, "").Position)
}

// testOnePlacePerUser: a user key holds one place in line; after leaving, or once its session
// ended, it joins again at the back.
func testOnePlacePerUser(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	alice1 := join(t, s, cfg.ID, "alice-key-16byte")
	bob1 := join(t, s, cfg.ID, "bob-key-16bytes!")
	carol := join(t, s, cfg.ID, "")
	require.True(t, bob1.Created)
	bob2 := join(t, s, cfg.ID, "bob-key-16bytes!")
	require.False(t, bob2.Created)
	require.Equal(t, bob1.Number, bob2.Number)
	require.Equal(t, queue.StatusQueued, bob2.Status)
	require.Equal(t, int64(1), bob2.Position)
	alice2 := join(t, s, cfg.ID, "alice-key-16byte")
	require.Equal(t, alice1.Number, alice2.Number)
	require.Equal(t, queue.StatusAdmitted, alice2.Status)

	// After leaving, the same user goes to the back.
	require.NoError(t, s.Leave(ctx, bob1.TicketRef))
	bob3 := join(t, s, cfg.ID, "bob-key-16bytes!")
	require.True(t, bob3.Created)
	require.Greater(t, bob3.Number, carol.Number)
	require.Equal(t, int64(2), bob3.Position)
	// After the session ended, too.
	clock.Advance(cfg.SessionTTL)
	admit(t, s, cfg.ID, 0)
	alice3 := join(t, s, cfg.ID, "alice-key-16byte")
	require.True(t, alice3.Created)
	require.Greater(t, alice3.Number, bob3.Number)
}

// testSoldOutPassesOverTheLine: SetSoldOut passes over everyone waiting and refuses joins; back on
// sale, new joins are admitted and tickets told SOLD_OUT stay so.
func testSoldOutPassesOverTheLine(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	tks := make([]queue.Ticket, 5)
	for i := range tks {
		tks[i] = join(t, s, cfg.ID, "")
	}
	require.NoError(t, s.Leave(ctx, tks[3].TicketRef))
	passed, err := s.SetSoldOut(ctx, cfg.ID, true)
	require.NoError(t, err)
	require.Equal(t, int64(2), passed)
	again, err := s.SetSoldOut(ctx, cfg.ID, true)
	require.NoError(t, err)
	require.Zero(t, again)
	_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID})
	require.ErrorIs(t, err, queue.ErrSoldOut)
	require.Equal(t, queue.StatusSoldOut, status(t, s, tks[2]).Status)
	require.Equal(t, queue.StatusSoldOut, status(t, s, tks[4]).Status)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[0]).Status, "admitted sessions are left alone")
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.True(t, st.SoldOut)
	require.Zero(t, st.Waiting)
	require.NoError(t, s.Leave(ctx, tks[0].TicketRef))
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "nobody is admitted while sold out")

	// Back on sale: told SOLD_OUT stays so; new joins queue and are admitted.
	_, err = s.SetSoldOut(ctx, cfg.ID, false)
	require.NoError(t, err)
	require.Equal(t, queue.StatusSoldOut, status(t, s, tks[2]).Status)
	fresh := join(t, s, cfg.ID, "")
	require.Equal(t, int64(6), fresh.Number)
	require.Equal(t, queue.StatusAdmitted, fresh.Status)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.False(t, st.SoldOut)
}

// testCompleteEndsTheSession: Complete ends an admitted session, claimed or not, and frees its slot
// at once; a waiting, gone or expired ticket cannot complete.
func testCompleteEndsTheSession(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	a := join(t, s, cfg.ID, "")
	b := join(t, s, cfg.ID, "")
	require.ErrorIs(t, s.Complete(ctx, b.TicketRef), queue.ErrNotAdmitted)
	require.NoError(t, s.Complete(ctx, a.TicketRef))
	require.NoError(t, s.Complete(ctx, a.TicketRef), "completing twice is fine")
	require.Equal(t, queue.StatusCompleted, status(t, s, a).Status)
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(1), r.Admitted, "the slot is free at once")
	// Completing an unclaimed admission works too, and frees its slot.
	require.NoError(t, s.Complete(ctx, b.TicketRef))
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, st.Active)
	require.ErrorIs(t, s.Complete(ctx, queue.TicketRef{Event: cfg.ID, Generation: 7, Number: 9}), queue.ErrTicketNotFound)
	require.ErrorIs(t, s.Leave(ctx, a.TicketRef), nil)
	require.ErrorIs(t, s.Complete(ctx, a.TicketRef), queue.ErrTicketNotFound)
	// An expired session cannot complete.
	c := join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, c.Status)
	clock.Advance(cfg.SessionTTL)
	require.ErrorIs(t, s.Complete(ctx, c.TicketRef), queue.ErrNotAdmitted)
}

// testConcurrentJoinersAndProcessors: 1,000 concurrent joiners and 3 processors on one event (see
// runConcurrency).
func testConcurrentJoinersAndProcessors(t *testing.T, newStore Factory) {
	runConcurrency(t, newStore(t, nil), 1000, 3)
}

// runConcurrency sends users concurrent joiners at one event while procs processors admit; each
// user leaves once admitted. It checks that active never exceeds max_active, that admission is
// strict FIFO (the admitted ranges tile 1..users in order) and that every user is admitted
// exactly once.
func runConcurrency(t *testing.T, s queue.Store, users, procs int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const maxActive = 25
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = maxActive })

	// step is closed and replaced after every admission step, so waiting users wake on it.
	var stepMu sync.Mutex
	step := make(chan struct{})
	nextStep := func() <-chan struct{} { stepMu.Lock(); defer stepMu.Unlock(); return step }

	var holding, maxHolding atomic.Int64
	var admittedBy sync.Map // number -> count of ADMITTED observations that led to a leave
	var ranges []queue.AdmitResult
	var rangesMu sync.Mutex
	done := make(chan struct{})
	var procWG sync.WaitGroup
	for p := 0; p < procs; p++ {
		procWG.Add(1)
		go func() {
			defer procWG.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				r, err := s.Admit(ctx, cfg.ID, 7)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("admit: %v", err)
					}
					return
				}
				if r.Admitted > 0 {
					rangesMu.Lock()
					ranges = append(ranges, r)
					rangesMu.Unlock()
				}
				st, err := s.Stats(ctx, cfg.ID)
				if err == nil && st.Active > maxActive {
					t.Errorf("active %d > max_active %d", st.Active, maxActive)
				}
				stepMu.Lock()
				close(step)
				step = make(chan struct{})
				stepMu.Unlock()
			}
		}()
	}

	var wg sync.WaitGroup
	errs := make(chan error, users)
	for i := 0; i < users; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
			for err == nil && tk.Status == queue.StatusQueued {
				if tk.Number <= tk.Serving || tk.Position < 1 {
					errs <- fmt.Errorf("ticket %d queued with serving %d, position %d", tk.Number, tk.Serving, tk.Position)
					return
				}
				wait := nextStep()
				select {
				case <-wait:
				case <-ctx.Done():
					errs <- fmt.Errorf("ticket %d: still %s at the deadline", tk.Number, tk.Status)
					return
				}
				tk, err = s.Status(ctx, tk.TicketRef)
			}
			if err != nil {
				errs <- err
				return
			}
			if tk.Status != queue.StatusAdmitted {
				errs <- fmt.Errorf("ticket %d: %s", tk.Number, tk.Status)
				return
			}
			if tk.Number > tk.Serving {
				errs <- fmt.Errorf("ticket %d admitted above serving %d", tk.Number, tk.Serving)
			}
			h := holding.Add(1)
			for m := maxHolding.Load(); h > m && !maxHolding.CompareAndSwap(m, h); m = maxHolding.Load() {
			}
			c, _ := admittedBy.LoadOrStore(tk.Number, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
			holding.Add(-1)
			if err := s.Leave(ctx, tk.TicketRef); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(done)
	procWG.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.LessOrEqual(t, maxHolding.Load(), int64(maxActive))
	n := 0
	admittedBy.Range(func(k, v any) bool {
		n++
		if c := v.(*atomic.Int64).Load(); c != 1 {
			t.Errorf("ticket %v admitted %d times", k, c)
		}
		return true
	})
	require.Equal(t, users, n, "every user admitted exactly once")

	// The processors' ranges, together with join-time admissions, never overlap and never
	// admit a number before a lower waiting one: sorted by From they are disjoint.
	rangesMu.Lock()
	defer rangesMu.Unlock()
	seen := make(map[int64]bool)
	for _, r := range ranges {
		for x := r.From; x <= r.To; x++ {
			if seen[x] {
				t.Fatalf("number %d admitted by two processor steps", x)
			}
			seen[x] = true
		}
	}
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(users), st.AdmittedTotal)
	require.Equal(t, int64(users), st.Serving)
	require.Zero(t, st.Active)
	require.Zero(t, st.Waiting)
}

// testIdempotentJoins: a join retried with the same idempotency key gets the ticket the first
// made (not created again) while it is live, for at least queue.IdempotencyWindow and at most
// twice that; concurrent retries take one place; a key whose ticket left makes a new one.
func testIdempotentJoins(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	join := func(key string) queue.Ticket {
		t.Helper()
		tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID, IdempotencyKey: key})
		require.NoError(t, err)
		return tk
	}
	first := join("k1")
	require.True(t, first.Created)
	require.Equal(t, queue.StatusAdmitted, first.Status)
	again := join("k1")
	require.False(t, again.Created, "a retry takes no second place")
	require.Equal(t, first.TicketRef, again.TicketRef)
	require.Equal(t, queue.StatusAdmitted, again.Status)
	other := join("k2")
	require.True(t, other.Created)
	require.Equal(t, first.Number+1, other.Number)
	require.Equal(t, queue.StatusQueued, join("k2").Status)
	require.Equal(t, other.Number, join("k2").Number)

	// Remembered for a whole window, whatever the epoch boundaries; forgotten after two.
	clock.Advance(queue.IdempotencyWindow)
	require.Equal(t, other.TicketRef, join("k2").TicketRef)
	clock.Advance(2*queue.IdempotencyWindow + time.Millisecond)
	fresh := join("k2")
	require.True(t, fresh.Created, "a key older than two windows is forgotten")

	// A key whose ticket left makes a new ticket, remembered under the same key.
	require.NoError(t, s.Leave(ctx, fresh.TicketRef))
	again = join("k2")
	require.True(t, again.Created)
	require.Equal(t, again.TicketRef, join("k2").TicketRef)

	// Concurrent retries of one join take one place.
	var wg sync.WaitGroup
	tickets := make(chan queue.Ticket, 20)
	for range 20 {
		wg.Go(func() {
			tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID, IdempotencyKey: "burst"})
			if assert.NoError(t, err) {
				tickets <- tk
			}
		})
	}
	wg.Wait()
	close(tickets)
	created, numbers := 0, map[int64]bool{}
	for tk := range tickets {
		if tk.Created {
			created++
		}
		numbers[tk.Number] = true
	}
	require.Equal(t, 1, created)
	require.Len(t, numbers, 1)
}

// testPauseStopsAdmissions: a paused event admits nobody, at join or by the processor, while
// joins still queue in order; resumed, it admits again.
func testPauseStopsAdmissions(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 5 })
	cfg.Paused, cfg.Version = true, cfg.Version+1
	_, err := s.PutEvent(ctx, cfg, 0)
	require.NoError(t, err)
	a, b := join(t, s, cfg.ID, ""), join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusQueued, a.Status, "no admission at join while paused")
	require.Equal(t, int64(2), b.Position)
	clock.Advance(time.Second)
	require.Zero(t, admit(t, s, cfg.ID, 0).Admitted, "no admission by the processor while paused")
	cfg.Paused, cfg.Version = false, cfg.Version+1
	_, err = s.PutEvent(ctx, cfg, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), admit(t, s, cfg.ID, 0).Admitted)
	require.Equal(t, queue.StatusAdmitted, status(t, s, a).Status)
}

// testExtendGivesSessionsMore: Extend adds to every live claimed session and to the claim
// deadline of claimable admissions; ended sessions stay ended.
func testExtendGivesSessionsMore(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive = 1
		c.SessionTTL = 10 * time.Second
		c.ClaimTTL = 10 * time.Second
	})
	a := join(t, s, cfg.ID, "") // admitted at join: claimed, until now+10 s
	b := join(t, s, cfg.ID, "")
	_, err := s.Extend(ctx, "nope", time.Minute)
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	n, err := s.Extend(ctx, cfg.ID, time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	clock.Advance(30 * time.Second)
	st, err := s.Status(ctx, a.TicketRef)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, st.Status, "10 s + 60 s: still live after 30 s")
	require.NoError(t, s.Leave(ctx, a.TicketRef))
	require.Equal(t, int64(1), admit(t, s, cfg.ID, 0).Admitted) // b: claimable until +10 s
	n, err = s.Extend(ctx, cfg.ID, time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the claimable admission")
	clock.Advance(30 * time.Second)
	st, err = s.Status(ctx, b.TicketRef)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, st.Status, "claimed after its deadline moved")
}

// testAbandonmentIsCounted: the line counts the tickets that leave while waiting (in the
// pre-queue too) and the admissions that end unclaimed at their claim deadline
// (queue.Stats.LeftWaiting, Unclaimed); an admitted ticket that leaves, a claimed session that
// ends idle and a ticket unknown to the line count in neither.
func testAbandonmentIsCounted(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive = 3
		c.ClaimTTL = 10 * time.Second
		c.SessionTTL = 20 * time.Second
		c.OpensAt = clock.Now().Add(time.Minute)
	})
	stats := func() queue.Stats {
		t.Helper()
		st, err := s.Stats(ctx, cfg.ID)
		require.NoError(t, err)
		return st
	}
	tks := make([]queue.Ticket, 8)
	for i := range tks {
		tks[i] = join(t, s, cfg.ID, "")
	}
	require.NoError(t, s.Leave(ctx, tks[7].TicketRef), "a ticket of the pre-queue leaves")
	require.Equal(t, int64(1), stats().LeftWaiting)
	clock.Advance(time.Minute)
	require.Equal(t, int64(3), admit(t, s, cfg.ID, 0).Admitted) // 1, 2, 3 admitted
	require.NoError(t, s.Leave(ctx, tks[6].TicketRef), "a waiting ticket leaves")
	require.NoError(t, s.Leave(ctx, tks[0].TicketRef), "an admitted one leaves: not abandonment")
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[1]).Status, "2 claims its admission")
	err := s.Leave(ctx, tks[6].TicketRef)
	require.ErrorIs(t, err, queue.ErrTicketNotFound, "leaving twice counts once")
	st := stats()
	require.Equal(t, int64(2), st.LeftWaiting)
	require.Zero(t, st.Unclaimed)
	// 3's admission lapses unclaimed; 4 is admitted into 1's slot and lapses too.
	require.Equal(t, int64(1), admit(t, s, cfg.ID, 0).Admitted)
	clock.Advance(10 * time.Second)
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(2), r.Expired)
	require.Equal(t, int64(2), stats().Unclaimed, "two admissions nobody claimed")
	require.Equal(t, int64(2), r.Admitted, "5 and 6 take the slots")
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[4]).Status)
	require.Equal(t, queue.StatusAdmitted, status(t, s, tks[5]).Status)
	// The claimed sessions end idle: not unclaimed.
	clock.Advance(20 * time.Second)
	require.Equal(t, int64(3), admit(t, s, cfg.ID, 0).Expired)
	st = stats()
	require.Equal(t, int64(2), st.Unclaimed)
	require.Equal(t, int64(2), st.LeftWaiting)
}

// testViewTellsWaitingPositions: a line's view (queue.View) holds its counters as Stats gives
// them, its limits, whether it is plain and the places of the tickets that left while
// waiting; in a plain line every waiting ticket's position is place − serving − (those places
// below it), as its status says.
func testViewTellsWaitingPositions(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	_, err := s.View(ctx, queue.ViewParams{Event: "nope"})
	require.ErrorIs(t, err, queue.ErrEventNotFound)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive, c.AdmitRate = 1, 40 })
	var tks []queue.Ticket
	for range 12 {
		tks = append(tks, join(t, s, cfg.ID, ""))
	}
	for _, i := range []int{4, 7, 8} {
		require.NoError(t, s.Leave(ctx, tks[i].TicketRef))
	}
	v, err := s.View(ctx, queue.ViewParams{Event: cfg.ID})
	require.NoError(t, err)
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, st, v.Stats)
	require.True(t, v.Plain)
	require.True(t, v.LeftAll)
	require.Equal(t, []int64{5, 8, 9}, v.Left)
	require.EqualValues(t, 1, v.MaxActive)
	require.InDelta(t, 40, v.AdmitRate, 1e-9)
	require.Empty(t, v.Over)
	// Reads answered from a view count with the store's own (polls_per_ticket): none refused,
	// the tickets past the limit named; another generation's are not counted.
	far, other := tks[11].TicketRef, tks[10].TicketRef
	lim := queue.ViewParams{Event: cfg.ID, Generation: far.Generation, Limit: 3, Window: time.Minute}
	p := lim
	p.Polls = []queue.PollCount{{Number: far.Number, Count: 3}, {Number: other.Number, Count: 1}}
	v, err = s.View(ctx, p)
	require.NoError(t, err)
	require.Empty(t, v.Over, "three reads of three")
	_, err = s.Poll(ctx, queue.PollParams{Ref: far, Limit: 3, Window: time.Minute})
	var rl *queue.RateLimitedError
	require.ErrorAs(t, err, &rl, "the fourth read, in the store's own count")
	p.Polls = []queue.PollCount{{Number: other.Number, Count: 3}}
	v, err = s.View(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []int64{other.Number}, v.Over)
	require.Positive(t, v.OverFor)
	require.LessOrEqual(t, v.OverFor, time.Minute)
	p.Generation++
	p.Polls = []queue.PollCount{{Number: tks[9].Number, Count: 5}}
	v, err = s.View(ctx, p)
	require.NoError(t, err)
	require.Empty(t, v.Over, "another generation's reads")
	_, err = s.Poll(ctx, queue.PollParams{Ref: tks[9].TicketRef, Limit: 3, Window: time.Minute})
	require.NoError(t, err)
	for i, tk := range tks[1:] {
		if i+1 == 4 || i+1 == 7 || i+1 == 8 {
			continue
		}
		got := status(t, s, tk)
		ahead := int64(0)
		for _, p := range v.Left {
			if p < tk.Number {
				ahead++
			}
		}
		require.Equal(t, queue.StatusQueued, got.Status)
		require.Equal(t, tk.Number-v.Serving-ahead, got.Position, "ticket %d", tk.Number)
		require.Equal(t, v.Waiting, got.Waiting)
	}
	// A closing time makes it not plain (status reads it), as does a sell-out.
	cfg.ClosesAt = clock.Now().Add(time.Hour)
	cfg.Version++
	_, err = s.PutEvent(ctx, cfg, 0)
	require.NoError(t, err)
	v, err = s.View(ctx, queue.ViewParams{Event: cfg.ID})
	require.NoError(t, err)
	require.False(t, v.Plain)
}
