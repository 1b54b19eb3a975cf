package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
)

// limitedJoin joins as client with a limit of limit joins per window.
func limitedJoin(s queue.Store, event, client string, limit int64, window time.Duration) (queue.Ticket, error) {
	return s.Join(context.Background(), queue.JoinParams{Event: event, ClientKey: client, JoinLimit: limit, JoinWindow: window})
}

// testJoinsPerClientAreLimited: a client's bucket holds limit joins and refills limit per
// window; a refused join gets a RateLimitedError telling when its next join passes, and takes
// no number; other clients and unlimited joins are not affected.
func testJoinsPerClientAreLimited(t *testing.T, newStore Factory) {
	clock := NewClock() // on a whole minute: the 10 s windows start now
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	const window = 10 * time.Second // 3 per 10 s: one every 3,333.3 ms
	for i := 0; i < 3; i++ {
		_, err := limitedJoin(s, cfg.ID, "203.0.113.9", 3, window)
		require.NoError(t, err)
	}
	clock.Advance(3 * time.Second)
	_, err := limitedJoin(s, cfg.ID, "203.0.113.9", 3, window)
	var rl *queue.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.ErrorIs(t, err, queue.ErrRateLimited)
	require.Equal(t, 334*time.Millisecond, rl.RetryAfter, "the next join passes at 3,333.3 ms, rounded up")
	require.False(t, rl.Prequeue)

	other, err := limitedJoin(s, cfg.ID, "2001:db8:1:2::/64", 3, window)
	require.NoError(t, err)
	require.Equal(t, int64(4), other.Number, "a refused join takes no number")
	require.Equal(t, int64(5), join(t, s, cfg.ID, "").Number, "joins without a client key are not limited")

	clock.Advance(333 * time.Millisecond) // 3,333 ms: not yet
	_, err = limitedJoin(s, cfg.ID, "203.0.113.9", 3, window)
	require.ErrorAs(t, err, &rl)
	require.Equal(t, time.Millisecond, rl.RetryAfter)
	clock.Advance(time.Millisecond) // 3,334 ms
	tk, err := limitedJoin(s, cfg.ID, "203.0.113.9", 3, window)
	require.NoError(t, err)
	require.Equal(t, int64(6), tk.Number)
	_, err = limitedJoin(s, cfg.ID, "203.0.113.9", 3, window)
	require.ErrorAs(t, err, &rl, "one join refilled, one taken")
	require.Equal(t, 3333*time.Millisecond, rl.RetryAfter, "the next at 6,666.7 ms")
	st, err := s.Stats(context.Background(), cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(6), st.LastNumber)
}

// testJoinLimitSparesLiveTickets: joins_per_client counts the joins that take a new ticket.
// A client whose bucket is empty still gets back the live ticket of its idempotency key (the
// retry of a join whose answer it never read) and of its user, as created false; a join that
// would take a new ticket is refused, also for a key or a user whose ticket ended.
func testJoinLimitSparesLiveTickets(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	const window = time.Minute // 1 a minute
	j := func(client, key, user string) (queue.Ticket, error) {
		return s.Join(ctx, queue.JoinParams{Event: cfg.ID, ClientKey: client, JoinLimit: 1, JoinWindow: window, IdempotencyKey: key, UserKey: user})
	}
	var rl *queue.RateLimitedError
	first, err := j("203.0.113.9", "idem-key-16bytes", "")
	require.NoError(t, err)
	require.True(t, first.Created)
	again, err := j("203.0.113.9", "idem-key-16bytes", "")
	require.NoError(t, err, "the retry finds its ticket though the bucket is empty")
	require.False(t, again.Created)
	require.Equal(t, first.Number, again.Number)
	_, err = j("203.0.113.9", "", "")
	require.ErrorAs(t, err, &rl, "a new ticket is counted")
	_, err = j("203.0.113.9", "other-key-16byte", "")
	require.ErrorAs(t, err, &rl, "so is a key that made none")

	user := fmt.Sprintf("%x", sha256.Sum256([]byte("user-1")))[:16]
	mine, err := j("198.51.100.7", "", user)
	require.NoError(t, err)
	back, err := j("198.51.100.7", "", user)
	require.NoError(t, err, "the user's live ticket, whatever the bucket holds")
	require.Equal(t, mine.Number, back.Number)
	require.False(t, back.Created)
	require.NoError(t, s.Leave(ctx, mine.TicketRef))
	_, err = j("198.51.100.7", "", user)
	require.ErrorAs(t, err, &rl, "a user whose ticket ended takes a new one: counted")
	clock.Advance(window)
	next, err := j("198.51.100.7", "", user)
	require.NoError(t, err)
	require.True(t, next.Created)
	require.Greater(t, next.Number, mine.Number)

	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, next.Number, st.LastNumber, "the refused joins took no number")
}

// testJoinLimitHasNoWindowEdge: a client that empties its bucket just before a window's edge
// gets no fresh bucket after it (a fixed window would give it limit joins more), its bucket
// refills across the edge at the same rate, and a client idle for a window or more finds it
// full; new limits start it afresh.
func testJoinLimitHasNoWindowEdge(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	const window, limit = 10 * time.Second, 5 // one join every 2 s
	const c = "198.51.100.7"
	takes := func(want int) {
		t.Helper()
		got := 0
		for range limit * 3 {
			_, err := limitedJoin(s, cfg.ID, c, limit, window)
			if errors.Is(err, queue.ErrRateLimited) {
				break
			}
			require.NoError(t, err)
			got++
		}
		require.Equal(t, want, got, "at %s", clock.Now().Format("15:04:05.000"))
	}
	clock.Advance(window - 100*time.Millisecond) // 9.9 s: 100 ms before the edge
	takes(limit)
	clock.Advance(200 * time.Millisecond) // 10.1 s, in the next window
	takes(0)
	clock.Advance(1900 * time.Millisecond) // 12 s: 2.1 s since the bucket was emptied
	takes(1)
	clock.Advance(2 * time.Second) // 14 s
	takes(1)
	clock.Advance(7 * time.Second) // 21 s, in the third window: 3.5 joins refilled
	takes(3)
	clock.Advance(window + 10*time.Second) // 41 s: idle for 20 s, two windows on
	takes(limit)
	_, err := limitedJoin(s, cfg.ID, c, limit+1, window)
	require.NoError(t, err, "new limits start afresh")
}

// testJoinLimitIsExactUnderConcurrency: 40 concurrent joins of one client with a limit of 7
// make exactly 7 tickets.
func testJoinLimitIsExactUnderConcurrency(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	ok, limited := concurrently(t, 40, queue.ErrRateLimited, func() error {
		_, err := limitedJoin(s, cfg.ID, "198.51.100.1", 7, time.Minute)
		return err
	})
	require.Equal(t, 7, ok)
	require.Equal(t, 33, limited)
	st, err := s.Stats(context.Background(), cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(7), st.LastNumber)
}

// testTicketsPerClientInThePreQueue: before the opening a client makes at most TicketLimit
// tickets, in a drawn pre-queue and in one kept in arrival order: the next join is refused
// with the time until the opening, takes no number and gives its challenge back; a join
// answered with a live ticket that exists (a user's, an idempotent retry's) is neither
// refused nor counted; other clients and joins without a client key are not capped; from the
// opening on nothing is capped.
func testTicketsPerClientInThePreQueue(t *testing.T, newStore Factory) {
	for _, drawn := range []bool{true, false} {
		t.Run(map[bool]string{true: "drawn", false: "arrival"}[drawn], func(t *testing.T) {
			ctx := context.Background()
			clock := NewClock()
			s := newStore(t, clock.Now)
			cfg := newEvent(t, s, func(c *queue.EventConfig) {
				c.OpensAt = clock.Now().Add(time.Hour)
				if drawn {
					sum := sha256.Sum256([]byte("tickets per client"))
					c.DrawSeed = sum[:]
				}
			})
			const client, other = "203.0.113.50", "2001:db8:5::/64"
			capped := func(p queue.JoinParams) (queue.Ticket, error) {
				p.Event, p.TicketLimit, p.JoinLimit, p.JoinWindow = cfg.ID, 3, 1000, time.Minute
				if p.ClientKey == "" {
					p.ClientKey = client
				}
				return s.Join(ctx, p)
			}
			first, err := capped(queue.JoinParams{UserKey: "user-key-16bytes"})
			require.NoError(t, err)
			_, err = capped(queue.JoinParams{IdempotencyKey: "idem-key-16bytes"})
			require.NoError(t, err)
			_, err = capped(queue.JoinParams{})
			require.NoError(t, err)
			clock.Advance(10 * time.Second)
			chal := queue.JoinParams{ChallengeID: "0123456789abcdef0123456789abcdef", ChallengeExpires: clock.Now().Add(2 * time.Minute)}
			_, err = capped(chal)
			var rl *queue.RateLimitedError
			require.ErrorAs(t, err, &rl, "the fourth ticket of the pre-queue")
			require.Equal(t, time.Hour-10*time.Second, rl.RetryAfter, "until the opening")
			require.True(t, rl.Prequeue, "refused for the cap of the pre-queue")
			st, err := s.Stats(ctx, cfg.ID)
			require.NoError(t, err)
			require.Equal(t, int64(3), st.LastNumber, "a refused join takes no number")

			again, err := capped(queue.JoinParams{UserKey: "user-key-16bytes"})
			require.NoError(t, err, "a user's live ticket is given back")
			require.False(t, again.Created)
			require.Equal(t, first.Number, again.Number)
			_, err = capped(queue.JoinParams{IdempotencyKey: "idem-key-16bytes"})
			require.NoError(t, err, "an idempotent retry gets its ticket")
			chal.ClientKey = other
			_, err = capped(chal)
			require.NoError(t, err, "another client, with the challenge the refused join gave back")
			_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID})
			require.NoError(t, err, "joins without a client key are not capped")
			_, err = capped(queue.JoinParams{})
			require.ErrorAs(t, err, &rl, "still capped")

			clock.Advance(time.Hour) // past the opening
			for range 4 {
				_, err = capped(queue.JoinParams{})
				require.NoError(t, err, "from the opening on the bucket alone limits joins")
			}
			st, err = s.Stats(ctx, cfg.ID)
			require.NoError(t, err)
			require.Equal(t, int64(9), st.LastNumber)
			if drawn {
				require.Equal(t, int64(5), st.DrawN, "the draw holds the 5 tickets of the pre-queue")
			}
		})
	}
}

// testTicketCapIsExactUnderConcurrency: 40 concurrent joins of one client to a pre-queue with a
// cap of 7 tickets make exactly 7 tickets.
func testTicketCapIsExactUnderConcurrency(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.OpensAt = clock.Now().Add(time.Minute) })
	ok, limited := concurrently(t, 40, queue.ErrRateLimited, func() error {
		_, err := s.Join(context.Background(), queue.JoinParams{Event: cfg.ID, ClientKey: "198.51.100.2", TicketLimit: 7})
		return err
	})
	require.Equal(t, 7, ok)
	require.Equal(t, 33, limited)
	st, err := s.Stats(context.Background(), cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(7), st.LastNumber)
}

// testRefusedJoinsCountAgainstTheBucket: a join refused before the store (CountOnly: its proof
// failed) takes one from the client's bucket like a join, and makes nothing; once the bucket is
// empty it is refused like a join; exactly so under concurrency; without a limit it counts
// nothing; an unknown event is not found.
func testRefusedJoinsCountAgainstTheBucket(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	const client = "203.0.113.60"
	refused := func(c string, limit int64) error {
		_, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID, ClientKey: c, JoinLimit: limit, JoinWindow: time.Minute,
			CountOnly: true, UserKey: "user-key-16bytes", TicketLimit: 1})
		return err
	}
	for range 2 {
		require.NoError(t, refused(client, 3))
	}
	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Zero(t, st.LastNumber, "a refused join makes nothing")
	_, err = limitedJoin(s, cfg.ID, client, 3, time.Minute)
	require.NoError(t, err, "the third of the bucket")
	_, err = limitedJoin(s, cfg.ID, client, 3, time.Minute)
	require.ErrorIs(t, err, queue.ErrRateLimited, "two refusals and a join took the bucket of 3")
	var rl *queue.RateLimitedError
	require.ErrorAs(t, refused(client, 3), &rl)
	require.Equal(t, 20*time.Second, rl.RetryAfter, "the next join of 3 a minute")
	require.NoError(t, refused(client, 0), "without a limit nothing is counted")
	_, err = s.Join(ctx, queue.JoinParams{Event: "absent", ClientKey: client, JoinLimit: 3, JoinWindow: time.Minute, CountOnly: true})
	require.ErrorIs(t, err, queue.ErrEventNotFound)

	ok, limited := concurrently(t, 40, queue.ErrRateLimited, func() error { return refused("198.51.100.3", 7) })
	require.Equal(t, 7, ok)
	require.Equal(t, 33, limited)
	st, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.LastNumber)
}

// poll reads tk with a limit of limit reads per window.
func poll(s queue.Store, tk queue.Ticket, limit int64, window time.Duration) (queue.Ticket, error) {
	return s.Poll(context.Background(), queue.PollParams{Ref: tk.TicketRef, Limit: limit, Window: window})
}

// testPollsPerTicketAreLimited: a ticket gets limit reads per fixed window and then a
// RateLimitedError telling when the window ends; a refused read is no activity (an admitted
// session is not extended by it); other tickets and unlimited reads are not affected; the next
// window starts afresh; an unknown ticket is still not found.
func testPollsPerTicketAreLimited(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock() // on a whole minute: the 10 s windows start now
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1; c.SessionTTL = 20 * time.Second })
	a, b := join(t, s, cfg.ID, ""), join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, a.Status)
	const window = 10 * time.Second
	for i := 0; i < 3; i++ {
		tk, err := poll(s, a, 3, window)
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, tk.Status)
	}
	clock.Advance(4 * time.Second)
	_, err := poll(s, a, 3, window)
	var rl *queue.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.ErrorIs(t, err, queue.ErrRateLimited)
	require.Equal(t, 6*time.Second, rl.RetryAfter)

	got, err := poll(s, b, 3, window)
	require.NoError(t, err, "tickets are counted apart")
	require.Equal(t, queue.StatusQueued, got.Status)
	st, err := s.Status(ctx, b.TicketRef)
	require.NoError(t, err, "a read without a limit is not counted")
	require.Equal(t, queue.StatusQueued, st.Status)

	// The session was last extended by the third read, at 0 s: the refused read at 4 s did
	// not extend it.
	clock.Advance(6 * time.Second) // the next window, at 10 s
	tk, err := poll(s, a, 3, window)
	require.NoError(t, err)
	require.Equal(t, queue.StatusAdmitted, tk.Status)
	require.Equal(t, clock.Now().Add(20*time.Second).UnixMilli(), tk.AdmittedUntil.UnixMilli())

	_, err = poll(s, queue.Ticket{TicketRef: queue.TicketRef{Event: cfg.ID, Generation: a.Generation, Number: 99}}, 3, window)
	require.ErrorIs(t, err, queue.ErrTicketNotFound)
	_, err = poll(s, queue.Ticket{TicketRef: queue.TicketRef{Event: "absent", Generation: 1, Number: 1}}, 3, window)
	require.ErrorIs(t, err, queue.ErrEventNotFound)
}

// testPollLimitIsExactUnderConcurrency: 40 concurrent reads of one ticket with a limit of 7
// read it exactly 7 times.
func testPollLimitIsExactUnderConcurrency(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	tk := join(t, s, cfg.ID, "")
	ok, limited := concurrently(t, 40, queue.ErrRateLimited, func() error {
		_, err := poll(s, tk, 7, time.Minute)
		return err
	})
	require.Equal(t, 7, ok)
	require.Equal(t, 33, limited)
}

// concurrently runs call n times at once and counts the calls that succeeded and those refused
// with refused (queue.ErrRateLimited, queue.ErrChallengeUsed); any other error fails the test.
func concurrently(t *testing.T, n int, refused error, call func() error) (ok, limited int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range n {
		wg.Go(func() {
			err := call()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, refused):
				limited++
			default:
				t.Errorf("call: %v", err)
			}
		})
	}
	wg.Wait()
	return ok, limited
}

// testSessionEndsAtSessionMax: an admitted session ends session_max after its admission,
// however active it stays: extensions stop at that end, for a session admitted at its join as
// for one admitted by the processor (counted from the batch's admission, not the claim).
func testSessionEndsAtSessionMax(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive, c.SessionTTL, c.SessionMax = 1, 10*time.Second, 25*time.Second
	})
	t0 := clock.Now()
	a := join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusAdmitted, a.Status)
	require.Equal(t, t0.Add(10*time.Second), a.AdmittedUntil)
	b := join(t, s, cfg.ID, "")
	require.Equal(t, queue.StatusQueued, b.Status)

	clock.Advance(8 * time.Second)
	require.Equal(t, t0.Add(18*time.Second), status(t, s, a).AdmittedUntil)
	clock.Advance(8 * time.Second)
	require.Equal(t, t0.Add(25*time.Second), status(t, s, a).AdmittedUntil, "capped at admission + session_max")
	clock.Advance(8 * time.Second)
	require.Equal(t, t0.Add(25*time.Second), status(t, s, a).AdmittedUntil)
	clock.Advance(time.Second)
	require.Equal(t, queue.StatusExpired, status(t, s, a).Status)

	// b is admitted by the processor at t0+25 and claims 2 s later.
	r := admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(1), r.Admitted)
	t1 := clock.Now()
	clock.Advance(2 * time.Second)
	st := status(t, s, b)
	require.Equal(t, queue.StatusAdmitted, st.Status)
	require.Equal(t, clock.Now().Add(10*time.Second), st.AdmittedUntil)
	clock.Advance(9 * time.Second) // t1+11
	require.Equal(t, t1.Add(21*time.Second), status(t, s, b).AdmittedUntil)
	clock.Advance(9 * time.Second) // t1+20
	require.Equal(t, t1.Add(25*time.Second), status(t, s, b).AdmittedUntil, "counted from the batch's admission")
	clock.Advance(5 * time.Second)
	r = admit(t, s, cfg.ID, 0)
	require.Equal(t, int64(1), r.Expired, "the processor ends it at its absolute end")
	require.Equal(t, queue.StatusExpired, status(t, s, b).Status)
}

// testAdmittedTicketsCarryTheirUser: an admitted ticket of a named user reads its user key
// (the admission token carries it, for max_per_user); anonymous tickets read none.
func testAdmittedTicketsCarryTheirUser(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	alice := join(t, s, cfg.ID, "alice-key-16byte")
	require.Equal(t, queue.StatusAdmitted, alice.Status)
	require.Equal(t, "alice-key-16byte", alice.UserKey)
	require.Equal(t, "alice-key-16byte", status(t, s, alice).UserKey)
	bob := join(t, s, cfg.ID, "bob-key-16bytes!")
	anon := join(t, s, cfg.ID, "")
	require.NoError(t, s.Leave(context.Background(), alice.TicketRef))
	admit(t, s, cfg.ID, 0)
	st := status(t, s, bob)
	require.Equal(t, queue.StatusAdmitted, st.Status)
	require.Equal(t, "bob-key-16bytes!", st.UserKey)
	require.NoError(t, s.Leave(context.Background(), bob.TicketRef))
	admit(t, s, cfg.ID, 0)
	st = status(t, s, anon)
	require.Equal(t, queue.StatusAdmitted, st.Status)
	require.Equal(t, "", st.UserKey)
	// Alice joins again: her new ticket carries her key once admitted.
	again := join(t, s, cfg.ID, "alice-key-16byte")
	require.True(t, again.Created)
	require.NoError(t, s.Leave(context.Background(), anon.TicketRef))
	admit(t, s, cfg.ID, 0)
	require.Equal(t, "alice-key-16byte", status(t, s, again).UserKey)
}
