package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/queue"
)

// challengeTTL is the life of the challenges of these tests (package challenge's default).
const challengeTTL = 120 * time.Second

// testChallengesAreSingleUse: a challenge makes one ticket; used again it is refused without
// taking a number; a retry with the same idempotency key (or a user with a live ticket) gets
// its ticket back whatever challenge it carries, and uses none; a retry-only join finds its
// ticket or is refused; once the ticket ended, its used challenge makes no new one.
func testChallengesAreSingleUse(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, func(c *queue.EventConfig) { c.MaxActive = 1 })
	exp := clock.Now().Add(challengeTTL)
	with := func(id, idem, user string) queue.JoinParams {
		return queue.JoinParams{Event: cfg.ID, ChallengeID: id, ChallengeExpires: exp, IdempotencyKey: idem, UserKey: user}
	}

	first, err := s.Join(ctx, with("c1", "", ""))
	require.NoError(t, err)
	require.True(t, first.Created)
	_, err = s.Join(ctx, with("c1", "", ""))
	require.ErrorIs(t, err, queue.ErrChallengeUsed)
	clock.Advance(challengeTTL - time.Second)
	_, err = s.Join(ctx, with("c1", "", ""))
	require.ErrorIs(t, err, queue.ErrChallengeUsed, "used until it expires")
	second, err := s.Join(ctx, with("c2", "", ""))
	require.NoError(t, err)
	require.Equal(t, first.Number+1, second.Number, "a refused join takes no number")

	// Idempotent retries: the same ticket, with the used challenge or a fresh one, which
	// stays unused.
	third, err := s.Join(ctx, with("c3", "idem-key-16bytes", ""))
	require.NoError(t, err)
	for _, id := range []string{"c3", "c4"} {
		again, err := s.Join(ctx, with(id, "idem-key-16bytes", ""))
		require.NoError(t, err, id)
		require.False(t, again.Created, id)
		require.Equal(t, third.TicketRef, again.TicketRef, id)
	}
	fourth, err := s.Join(ctx, with("c4", "", ""))
	require.NoError(t, err, "a retry answered with its ticket uses no challenge")
	require.Equal(t, third.Number+1, fourth.Number)

	// Retry-only joins find the ticket their key made, or nothing.
	found, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID, IdempotencyKey: "idem-key-16bytes", RetryOnly: true})
	require.NoError(t, err)
	require.Equal(t, third.TicketRef, found.TicketRef)
	_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID, IdempotencyKey: "other-key-16byte", RetryOnly: true})
	require.ErrorIs(t, err, queue.ErrChallengeUsed)
	_, err = s.Join(ctx, queue.JoinParams{Event: cfg.ID, RetryOnly: true})
	require.ErrorIs(t, err, queue.ErrChallengeUsed)

	// A user with a live ticket gets it back; the challenge it carried stays unused.
	alice, err := s.Join(ctx, with("c5", "", "alice-key-16byte"))
	require.NoError(t, err)
	again, err := s.Join(ctx, with("c6", "", "alice-key-16byte"))
	require.NoError(t, err)
	require.Equal(t, alice.TicketRef, again.TicketRef)
	_, err = s.Join(ctx, with("c6", "", ""))
	require.NoError(t, err)

	// Once the ticket left, its key's retry would make a new ticket: not with a used challenge.
	require.NoError(t, s.Leave(ctx, third.TicketRef))
	_, err = s.Join(ctx, with("c3", "idem-key-16bytes", ""))
	require.ErrorIs(t, err, queue.ErrChallengeUsed)
	fresh, err := s.Join(ctx, with("c7", "idem-key-16bytes", ""))
	require.NoError(t, err)
	require.True(t, fresh.Created)

	st, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, fresh.Number, st.LastNumber, "no refused join took a number")
	require.Equal(t, int64(7), st.LastNumber)
}

// testChallengeUseIsExactUnderConcurrency: 30 concurrent joins with one challenge make exactly
// one ticket.
func testChallengeUseIsExactUnderConcurrency(t *testing.T, newStore Factory) {
	clock := NewClock()
	s := newStore(t, clock.Now)
	cfg := newEvent(t, s, nil)
	ok, used := concurrently(t, 30, queue.ErrChallengeUsed, func() error {
		_, err := s.Join(context.Background(), queue.JoinParams{Event: cfg.ID, ChallengeID: "0123456789abcdef0123456789abcdef",
			ChallengeExpires: clock.Now().Add(challengeTTL)})
		return err
	})
	require.Equal(t, 1, ok)
	require.Equal(t, 29, used)
	st, err := s.Stats(context.Background(), cfg.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.LastNumber)
}
