package line_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math/bits"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		// A cluster client's connection closed (at the test's end too) schedules a topology
		// refresh after a delay of up to a second (rueidis's lazyRefresh); it ends on its own.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

// backends are the line stores every rule is checked on: the embedded store, Redis, and a
// Redis Cluster (each test on a fresh key prefix).
var backends = []struct {
	name string
	new  func(t *testing.T) store.Backend
}{
	{"memory", func(t *testing.T) store.Backend { b, _ := memstore.NewBackend(memstore.Config{}); return b }},
	{"redis", func(t *testing.T) store.Backend { return redisBackend(t, redistest.Client(t)) }},
	{"cluster", func(t *testing.T) store.Backend { return redisBackend(t, redistest.Cluster(t)) }},
}

func redisBackend(t *testing.T, c rueidis.Client) store.Backend {
	b, err := redisstore.NewBackend(redisstore.Config{Client: c, Prefix: redistest.Prefix(t, c)})
	require.NoError(t, err)
	return b
}

// onEveryBackend runs test on each backend, in parallel.
func onEveryBackend(t *testing.T, test func(t *testing.T, r *rig)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, newRig(t, b.new(t)))
		})
	}
}

// events are the rig's events, as the registry keeps them: written to the line store, and
// written again by Restore (under a new generation) when the store lost the line.
type events struct {
	store  queue.Store
	mu     sync.Mutex
	m      map[string]event.Event
	gen    uint32
	hidden map[string]bool // made on another instance: in the database (Get), not cached yet
}

func (ev *events) Cached(id string) (event.Event, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	e, ok := ev.m[id]
	return e, ok && !ev.hidden[id]
}

func (ev *events) Get(_ context.Context, id string) (event.Event, error) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if e, ok := ev.m[id]; ok {
		return e, nil
	}
	return event.Event{}, registry.ErrNotFound
}

// hide makes id's event one this instance has not cached yet.
func (ev *events) hide(id string) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.hidden == nil {
		ev.hidden = map[string]bool{}
	}
	ev.hidden[id] = true
}

func (ev *events) Restore(ctx context.Context, id string) error {
	e, err := ev.Get(ctx, id)
	if err != nil {
		return err
	}
	ev.mu.Lock()
	ev.gen++
	gen := ev.gen
	ev.mu.Unlock()
	_, err = ev.store.PutEvent(ctx, e.LineConfig(), gen)
	return err
}

func (ev *events) put(t *testing.T, e event.Event) event.Event {
	t.Helper()
	e = e.WithDefaults()
	require.NoError(t, e.Validate())
	ev.mu.Lock()
	ev.m[e.ID] = e
	ev.gen++
	gen := ev.gen
	ev.mu.Unlock()
	_, err := ev.store.PutEvent(context.Background(), e.LineConfig(), gen)
	require.NoError(t, err)
	return e
}

// countingStore counts the calls that reach the store.
type countingStore struct {
	queue.Store
	joins, polls atomic.Int64
}

func (c *countingStore) Join(ctx context.Context, p queue.JoinParams) (queue.Ticket, error) {
	c.joins.Add(1)
	return c.Store.Join(ctx, p)
}

func (c *countingStore) Poll(ctx context.Context, p queue.PollParams) (queue.Ticket, error) {
	c.polls.Add(1)
	return c.Store.Poll(ctx, p)
}

// history records what the service counted for the console.
type history struct {
	mu      sync.Mutex
	counts  map[string]int
	refused map[string]int // "event code"
	waits   map[string][]time.Duration
}

func (h *history) Count(id string, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[id+" "+http.StatusText(status)]++
}

func (h *history) Refused(id, code string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused == nil {
		h.refused = map[string]int{}
	}
	h.refused[id+" "+code]++
}

func (h *history) Waited(id string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waits == nil {
		h.waits = map[string][]time.Duration{}
	}
	h.waits[id] = append(h.waits[id], d)
}

type rig struct {
	svc     *line.Service
	store   *countingStore
	events  *events
	metrics *metrics.Metrics
	history *history
	tickets *token.TicketIDs
	endedMu sync.Mutex
	left    []queue.TicketRef // what OnEnd was told
}

// noteLeft is the rig's OnEnd.
func (r *rig) noteLeft(ref queue.TicketRef) {
	r.endedMu.Lock()
	defer r.endedMu.Unlock()
	r.left = append(r.left, ref)
}

// lefts returns what OnEnd was told so far.
func (r *rig) lefts() []queue.TicketRef {
	r.endedMu.Lock()
	defer r.endedMu.Unlock()
	return slices.Clone(r.left)
}

var identityKey = []byte("the site's shared secret, 32+ bytes long")

func newRig(t *testing.T, b store.Backend) *rig {
	t.Helper()
	keys, err := token.DeriveKeys("line-test-token-key-0123456789abcdef")
	require.NoError(t, err)
	ck, err := challenge.DeriveKey("line-test-token-key-0123456789abcdef")
	require.NoError(t, err)
	issuer, err := challenge.NewIssuer(challenge.Config{Key: ck})
	require.NoError(t, err)
	identity, err := token.NewIdentityVerifier(identityKey, nil)
	require.NoError(t, err)
	r := &rig{store: &countingStore{Store: b.Line}, metrics: metrics.New(metrics.Config{}),
		history: &history{counts: map[string]int{}}, tickets: token.NewTicketIDs(keys.TicketMAC)}
	r.events = &events{store: b.Line, m: map[string]event.Event{}}
	r.svc, err = line.New(line.Config{Store: r.store, Events: r.events, Tickets: r.tickets, Identity: identity,
		Challenges: issuer, Counters: b.Counters, Shares: b.Shares, Metrics: r.metrics, History: r.history,
		OnEnd:  r.noteLeft,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	return r
}

var (
	alice = netip.MustParseAddr("127.0.0.21")
	bob   = netip.MustParseAddr("127.0.0.22")
)

func isKind(t *testing.T, err, kind error) {
	t.Helper()
	require.ErrorIs(t, err, kind)
	var le *line.Error
	require.ErrorAs(t, err, &le, "a refusal says why")
	require.NotEmpty(t, le.Detail)
}

// TestJoinsPerClient: a client's bucket of joins_per_client is counted in the store's step on
// every backend, a refused client is remembered (its next joins cost no store call), another
// client is not touched, and admin joins are not counted.
func TestJoinsPerClient(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "limits", MaxActive: 1, Limits: event.Limits{JoinsPerClient: 3, JoinWindow: time.Hour}})
		for i := range 3 {
			_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
			require.NoError(t, err, "join %d", i+1)
		}
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		var rl *queue.RateLimitedError
		require.ErrorAs(t, err, &rl)
		require.Positive(t, rl.RetryAfter)
		stored := r.store.joins.Load()
		for range 5 {
			_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
			require.ErrorAs(t, err, &rl)
		}
		require.Equal(t, stored, r.store.joins.Load(), "a remembered refusal costs no store call")
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob})
		require.NoError(t, err, "another client has its own bucket")
		for i := range 5 {
			_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, UserID: "server-" + string(rune('a'+i))})
			require.NoError(t, err, "admin joins are not limited per client")
		}
		p := r.svc.Problem(err, e.ID)
		require.Nil(t, p.Extra)
		p = r.svc.Problem(func() error { _, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice}); return err }(), e.ID)
		require.Equal(t, 429, p.Status)
		require.Equal(t, "rate_limited", p.Code)
		require.Contains(t, p.Detail, "too many joins of event limits")
		require.GreaterOrEqual(t, p.RetryAfter, time.Second)
	})
}

// TestRefusalForgottenWithTheLimits: a refusal the instance remembers (a join's, a challenge
// fetch's) holds for the event's life at its version only. Raising joins_per_client or
// changing join_window_s starts every client's bucket afresh in the store (docs/api.md), and
// so does creating the event again: the client refused before is let through at once, not
// refused by this instance's memory for the rest of the old window (an operator raising the
// limit for a carrier's NAT, which the other instances let through), even when the limits
// come back to what they were. The same version keeps the refusal, with no store call.
func TestRefusalForgottenWithTheLimits(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		seed := func(s string) []byte { b := sha256.Sum256([]byte(s)); return b[:] }
		var version int64 // the SQL store's: one more at each write
		put := func(n int64, w time.Duration, life string, c event.Challenge) event.Event {
			version++
			return r.events.put(t, event.Event{ID: "nat", MaxActive: 100, DrawSeed: seed(life), Version: version,
				Limits: event.Limits{JoinsPerClient: n, JoinWindow: w}, Challenge: c})
		}
		var rl *queue.RateLimitedError
		refuse := func(e event.Event) {
			t.Helper()
			for i := range e.Limits.JoinsPerClient {
				_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
				require.NoError(t, err, "join %d", i+1)
			}
			_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
			require.ErrorAs(t, err, &rl)
			require.Greater(t, rl.RetryAfter, time.Minute)
			stored := r.store.joins.Load()
			_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
			require.ErrorAs(t, err, &rl, "still refused")
			require.Equal(t, stored, r.store.joins.Load(), "by the memory, with no store call")
		}
		refuse(put(2, time.Hour, "first life", event.Challenge{}))
		e := put(50, time.Hour, "first life", event.Challenge{}) // the operator raises the limit
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err, "joins_per_client raised")
		refuse(put(3, 30*time.Minute, "first life", event.Challenge{}))
		e = put(3, 10*time.Second, "first life", event.Challenge{})
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err, "join_window_s changed")
		e = put(2, time.Hour, "first life", event.Challenge{})
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err, "the limits of the first refusal again: the store's bucket is a new one")

		refuse(put(1, time.Hour, "first life", event.Challenge{}))
		require.NoError(t, r.store.DeleteEvent(ctx, e.ID))
		version = 0
		e = put(1, time.Hour, "second life", event.Challenge{}) // created again: version 1 again
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err, "the event created again")

		// A challenge fetch's refusal too (ChallengesPerJoin per join).
		pow := event.Challenge{Type: event.ChallengePow, Difficulty: 1}
		e = put(1, time.Hour, "second life", pow)
		for i := range line.ChallengesPerJoin {
			_, err = r.svc.Challenge(ctx, e.ID, bob)
			require.NoError(t, err, "fetch %d", i+1)
		}
		_, err = r.svc.Challenge(ctx, e.ID, bob)
		require.ErrorAs(t, err, &rl)
		e = put(100, time.Hour, "second life", pow)
		_, err = r.svc.Challenge(ctx, e.ID, bob)
		require.NoError(t, err, "joins_per_client raised: challenges too")
		e = put(1, time.Hour, "second life", pow)
		_, err = r.svc.Challenge(ctx, e.ID, bob)
		require.ErrorAs(t, err, &rl, "lowered again: the fetches of the window count")
		require.NoError(t, r.store.DeleteEvent(ctx, e.ID))
		version = 0
		e = put(1, time.Hour, "third life", pow) // created again: its fetches count afresh
		_, err = r.svc.Challenge(ctx, e.ID, bob)
		require.NoError(t, err, "the event created again: challenges too")
	})
}

// TestOneAddressCannotStuffThePreQueue (issue 20, in the spirit of its measurement): one
// address joins a pre-queue as fast as its bucket lets it (joins_per_client lifted, as an hour
// of pre-queue refills it) beside 100 people on their own addresses; it gets tickets_per_client
// tickets (the default, 50) and no more, while every person gets theirs; its refusals say so
// and when its next ticket is (the opening), are not remembered by the service (the store
// still gives back a live ticket to an idempotent retry), and admin joins are not capped.
func TestOneAddressCannotStuffThePreQueue(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		opens := time.Now().Add(time.Hour)
		e := r.events.put(t, event.Event{ID: "prequeue", MaxActive: 10, OpensAt: opens,
			DrawSeed: make([]byte, 32), Limits: event.Limits{JoinsPerClient: event.MaxLimit}})
		require.EqualValues(t, event.DefaultTicketsPerClient, e.Limits.TicketsPerClient)
		var botTickets, people int
		var refused error
		for i := range 300 {
			if i%3 == 0 {
				_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: netip.AddrFrom4([4]byte{198, 51, 100, byte(i / 3)})})
				require.NoError(t, err)
				people++
			}
			_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "bot-" + strconv.Itoa(i)})
			if err != nil {
				refused = err
				continue
			}
			botTickets++
		}
		require.Equal(t, 50, botTickets, "one address, tickets_per_client tickets")
		require.Equal(t, 100, people)
		st, err := r.svc.Stats(ctx, e.ID)
		require.NoError(t, err)
		require.EqualValues(t, 150, st.LastNumber)
		require.True(t, st.DrawPending)

		var rl *queue.RateLimitedError
		require.ErrorAs(t, refused, &rl)
		require.True(t, rl.Prequeue)
		require.InDelta(t, time.Until(opens).Seconds(), rl.RetryAfter.Seconds(), 5, "its next ticket is at the opening")
		p := r.svc.Problem(refused, e.ID)
		require.Equal(t, 429, p.Status)
		require.Equal(t, "rate_limited", p.Code)
		require.Equal(t, "this address took its tickets_per_client (50) of the pre-queue of event prequeue: its next new ticket is at the opening", p.Detail)

		calls := r.store.joins.Load()
		again, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "bot-3"})
		require.NoError(t, err, "an idempotent retry of a join that made a ticket gets it")
		require.False(t, again.Created)
		require.Equal(t, calls+1, r.store.joins.Load(), "the refusal was not remembered: the store answered")
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, UserID: "server-side"})
		require.NoError(t, err, "admin joins are not capped")
	})
}

// TestWhoMayJoin: user_id only with the admin key, not with an identity; identity tokens
// verified; identity_required refuses anonymous joins; the same user gets the same ticket.
func TestWhoMayJoin(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "vouched", MaxActive: 1, IdentityRequired: true})
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		isKind(t, err, line.ErrIdentityRequired)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, UserID: "u1"})
		isKind(t, err, line.ErrAdminRequired)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, UserID: "u1", Identity: "x.y.z"})
		isKind(t, err, line.ErrInvalidJoin)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, UserID: "bad\x00id"})
		isKind(t, err, line.ErrInvalidJoin)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Identity: "not.a.jwt"})
		isKind(t, err, line.ErrInvalidIdentity)

		tok := identity(t, "carol", time.Now().Add(time.Minute))
		first, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Identity: tok})
		require.NoError(t, err)
		require.True(t, first.Created)
		again, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob, Identity: identity(t, "carol", time.Now().Add(time.Minute))})
		require.NoError(t, err)
		require.False(t, again.Created, "one place per person, whichever address")
		require.Equal(t, first.TicketRef, again.TicketRef)
		byAdmin, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, UserID: "carol"})
		require.NoError(t, err)
		require.Equal(t, first.TicketRef, byAdmin.TicketRef, "the admin's user_id and the site's sub name the same person")

		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Identity: identity(t, "dave", time.Now().Add(-time.Minute))})
		isKind(t, err, line.ErrInvalidIdentity)
	})
}

// wrongSolution is a solution of challenge that does not hold at difficulty d: at a low
// difficulty a fixed string holds by chance (1 in 2^d), so one is looked for.
func wrongSolution(challenge string, d int) string {
	for i := 0; ; i++ {
		cand := "wrong" + strconv.Itoa(i)
		sum := sha256.Sum256([]byte(challenge + ":" + cand))
		if zeros := bits.LeadingZeros64(binary.BigEndian.Uint64(sum[:8])); zeros < d {
			return cand
		}
	}
}

func identity(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(identityKey)
	require.NoError(t, err)
	return s
}

// TestProofOfWork: an event's challenge holds at the service: none, a wrong one, a solved one
// once, and not twice (the store's single use).
func TestProofOfWork(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "pow", MaxActive: 1, Challenge: event.Challenge{Type: event.ChallengePow, Difficulty: 4}})
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		isKind(t, err, line.ErrChallengeRequired)
		p := r.svc.Problem(err, e.ID)
		require.Equal(t, 401, p.Status)
		require.Equal(t, "/v1/events/pow/challenge", p.Extra["challenge_url"])

		o, err := r.svc.Challenge(ctx, e.ID, alice)
		require.NoError(t, err)
		require.NotNil(t, o.Challenge)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: line.Proof{Challenge: o.Challenge.String, Solution: wrongSolution(o.Challenge.String, 4)}})
		isKind(t, err, line.ErrChallengeFailed)
		require.Equal(t, 403, r.svc.Problem(err, e.ID).Status)

		sol, err := challenge.Solve(ctx, o.Challenge.String)
		require.NoError(t, err)
		proof := line.Proof{Challenge: o.Challenge.String, Solution: sol}
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: proof})
		require.NoError(t, err)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob, Proof: proof})
		isKind(t, err, line.ErrChallengeFailed)
		require.Equal(t, "challenge_failed", r.svc.Problem(err, e.ID).Code)

		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, UserID: "server"})
		require.NoError(t, err, "admin joins are not challenged")
	})
}

// TestChallengeFollowsTheEvent (issue 20): a challenge issued before the operator raised the
// difficulty is refused (challenge_required: fetch a new one), and a challenge used before the
// event was deleted and created again is refused by the new event, whose line has forgotten its
// use (the challenge is bound to the event's epoch); on every backend.
func TestChallengeFollowsTheEvent(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		seed := func(s string) []byte { b := sha256.Sum256([]byte(s)); return b[:] }
		pow := func(d int, life string) event.Event {
			return event.Event{ID: "harder", MaxActive: 1, DrawSeed: seed(life), Challenge: event.Challenge{Type: event.ChallengePow, Difficulty: d}}
		}
		e := r.events.put(t, pow(3, "first life"))
		proof := func() line.Proof {
			t.Helper()
			o, err := r.svc.Challenge(ctx, e.ID, alice)
			require.NoError(t, err)
			sol, err := challenge.Solve(ctx, o.Challenge.String)
			require.NoError(t, err)
			return line.Proof{Challenge: o.Challenge.String, Solution: sol}
		}
		easy := proof()
		e = r.events.put(t, pow(5, "first life")) // the operator raises the difficulty
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: easy})
		isKind(t, err, line.ErrChallengeRequired)
		p := r.svc.Problem(err, e.ID)
		require.Equal(t, 401, p.Status)
		require.Equal(t, "the difficulty was raised: fetch a new one", p.Detail)
		require.Equal(t, "/v1/events/harder/challenge", p.Extra["challenge_url"])

		used := proof()
		require.Equal(t, 5, func() int { c, _ := challenge.Parse(used.Challenge); return c.Difficulty }())
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: used})
		require.NoError(t, err, "a challenge at the new difficulty")
		e = r.events.put(t, pow(3, "first life")) // lowered: the harder challenges still pass
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: proof()})
		require.NoError(t, err)
		unused := proof()

		// The event is deleted and created again (the SQL store makes it a new seed).
		require.NoError(t, r.store.DeleteEvent(ctx, e.ID))
		e = r.events.put(t, pow(3, "second life"))
		for _, old := range []line.Proof{used, unused} {
			_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob, Proof: old})
			isKind(t, err, line.ErrChallengeFailed)
		}
		st, err := r.svc.Stats(ctx, e.ID)
		require.NoError(t, err)
		require.Zero(t, st.LastNumber, "no ticket for a challenge of the event's earlier life")
		tk, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob, Proof: proof()})
		require.NoError(t, err, "a challenge of the new life")
		require.True(t, tk.Created)
	})
}

// TestRefusalsCost (issue 20): a join refused for its proof (challenge_failed) is taken from the
// client's joins_per_client like a join, in the store's step, so that once the bucket is empty
// the client gets 429 (remembered: no store call) instead of failing for free; its problem is
// held like a 429's; another client is not touched. Challenge fetches are limited per client
// too (ChallengesPerJoin x joins_per_client per window), a refusal remembered; a client of
// unknown address is not limited. On every backend.
func TestRefusalsCost(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "refusals", MaxActive: 1, Limits: event.Limits{JoinsPerClient: 3, JoinWindow: time.Hour},
			Challenge: event.Challenge{Type: event.ChallengePow, Difficulty: 4}})
		offer := func(c netip.Addr) (line.Offer, error) { return r.svc.Challenge(ctx, e.ID, c) }
		o, err := offer(alice)
		require.NoError(t, err)
		wrong := line.Proof{Challenge: o.Challenge.String, Solution: wrongSolution(o.Challenge.String, 4)}
		for i := range 3 {
			_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: wrong})
			isKind(t, err, line.ErrChallengeFailed)
			p := r.svc.Problem(err, e.ID)
			require.Equal(t, "challenge_failed", p.Code, "refusal %d", i+1)
			require.True(t, p.Held, "a challenge_failed answer is held like a 429")
		}
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: wrong})
		var rl *queue.RateLimitedError
		require.ErrorAs(t, err, &rl, "three refusals took the bucket of 3")
		require.Equal(t, "rate_limited", r.svc.Problem(err, e.ID).Code)
		calls := r.store.joins.Load()
		o, err = offer(alice)
		require.NoError(t, err)
		sol, err := challenge.Solve(ctx, o.Challenge.String)
		require.NoError(t, err)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: line.Proof{Challenge: o.Challenge.String, Solution: sol}})
		require.ErrorAs(t, err, &rl, "even with a good proof: the bucket is empty")
		require.Equal(t, calls, r.store.joins.Load(), "the refusal is remembered: no store call")

		o, err = offer(bob)
		require.NoError(t, err)
		sol, err = challenge.Solve(ctx, o.Challenge.String)
		require.NoError(t, err)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob, Proof: line.Proof{Challenge: o.Challenge.String, Solution: sol}})
		require.NoError(t, err, "another client has its own bucket")
		st, err := r.svc.Stats(ctx, e.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.LastNumber, "refusals make no ticket")

		// Fetches: 2 x 3 per window for alice (two made above); the 7th is refused.
		for i := 2; i < line.ChallengesPerJoin*3; i++ {
			_, err = offer(alice)
			require.NoError(t, err, "fetch %d", i+1)
		}
		_, err = offer(alice)
		require.ErrorAs(t, err, &rl)
		p := r.svc.Problem(err, e.ID)
		require.Equal(t, 429, p.Status)
		require.Equal(t, "too many challenges of event refusals fetched from this address", p.Detail)
		_, err = offer(alice)
		require.ErrorAs(t, err, &rl, "remembered")
		_, err = offer(bob)
		require.NoError(t, err)
		for range 10 {
			_, err = offer(netip.Addr{})
			require.NoError(t, err, "a client of unknown address is not limited")
		}
	})
}

// TestRefusedClientsRetryFindsItsTicket: a client whose bucket of joins is empty, and whose
// refusal this instance remembers, still gets back the ticket of a join whose answer it lost
// when it retries with the same Idempotency-Key (the store answers the retry and makes
// nothing; the proof it carries is not checked again); a key that made no ticket, and a join
// without a key, are refused with 429 as before, the latter without a store call. On every
// backend.
func TestRefusedClientsRetryFindsItsTicket(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "retry-refused", MaxActive: 1, Limits: event.Limits{JoinsPerClient: 2, JoinWindow: time.Hour},
			Challenge: event.Challenge{Type: event.ChallengePow, Difficulty: 4}})
		solved := func() line.Proof {
			o, err := r.svc.Challenge(ctx, e.ID, alice)
			require.NoError(t, err)
			sol, err := challenge.Solve(ctx, o.Challenge.String)
			require.NoError(t, err)
			return line.Proof{Challenge: o.Challenge.String, Solution: sol}
		}
		first, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k-1", Proof: solved()})
		require.NoError(t, err)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: solved()})
		require.NoError(t, err)
		var rl *queue.RateLimitedError
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, Proof: solved()})
		require.ErrorAs(t, err, &rl, "the bucket of 2 is empty")
		calls := r.store.joins.Load()
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.ErrorAs(t, err, &rl)
		require.Equal(t, calls, r.store.joins.Load(), "remembered: no store call")

		again, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k-1"})
		require.NoError(t, err, "the retry of the first join, its proof spent")
		require.Equal(t, first.TicketRef, again.TicketRef)
		require.False(t, again.Created)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k-2", Proof: solved()})
		require.ErrorAs(t, err, &rl, "a key that made nothing: still refused")
		require.Equal(t, "rate_limited", r.svc.Problem(err, e.ID).Code)
		st, err := r.svc.Stats(ctx, e.ID)
		require.NoError(t, err)
		require.EqualValues(t, 2, st.LastNumber, "the retries made no ticket")
	})
}

// TestIdempotentJoin: a retry with the same key gets the same ticket; a malformed key is
// refused before anything is taken.
func TestIdempotentJoin(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "retry", MaxActive: 1})
		a, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k-1"})
		require.NoError(t, err)
		b, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k-1"})
		require.NoError(t, err)
		require.Equal(t, a.TicketRef, b.TicketRef)
		require.False(t, b.Created)
		joins := r.store.joins.Load()
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "bad\nkey"})
		isKind(t, err, line.ErrInvalidIdempotencyKey)
		require.Equal(t, 400, r.svc.Problem(err, e.ID).Status)
		// An empty key sent is refused too, not taken for none.
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKeySent: true})
		isKind(t, err, line.ErrInvalidIdempotencyKey)
		require.Equal(t, joins, r.store.joins.Load())
	})
}

// TestIdempotencyKeysAreTheClients: a key claimed first by another client does not hand its
// owner the claimer's ticket (a link's author cannot pre-claim the rejoin of everyone who opens
// it); the owner's retry from its own address still gets its own ticket back.
func TestIdempotencyKeysAreTheClients(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "scoped", MaxActive: 1})
		attacker, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob, IdempotencyKey: "rejoin-known"})
		require.NoError(t, err)
		mine, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "rejoin-known"})
		require.NoError(t, err)
		require.True(t, mine.Created, "a new ticket of its own")
		require.NotEqual(t, attacker.TicketRef, mine.TicketRef)
		again, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "rejoin-known"})
		require.NoError(t, err)
		require.Equal(t, mine.TicketRef, again.TicketRef, "its retry gets it back")
		admin, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Admin: true, IdempotencyKey: "rejoin-known"})
		require.NoError(t, err)
		require.True(t, admin.Created, "admin joins have a scope of their own")
	})
}

// TestIdempotencyKeysAreTheUsers: behind one address (a NAT, a shared computer, an integrator
// reusing keys) a key one user's join made does not hand its ticket to another user, nor to an
// anonymous join, nor an anonymous join's ticket to a user; each one's retry still gets its own.
func TestIdempotencyKeysAreTheUsers(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "users", MaxActive: 1})
		soon := time.Now().Add(time.Minute)
		join := func(req line.JoinRequest) queue.Ticket {
			t.Helper()
			req.Event, req.IdempotencyKey = e.ID, "shared-key"
			tk, err := r.svc.Join(ctx, req)
			require.NoError(t, err)
			return tk
		}
		dora := join(line.JoinRequest{Client: alice, Identity: identity(t, "dora", soon)})
		require.True(t, dora.Created)
		erin := join(line.JoinRequest{Client: alice, Identity: identity(t, "erin", soon)})
		require.True(t, erin.Created, "another user's join with the same key makes a ticket of its own")
		require.NotEqual(t, dora.TicketRef, erin.TicketRef)
		anon := join(line.JoinRequest{Client: alice})
		require.True(t, anon.Created, "an anonymous join with the key does not get a user's ticket")
		require.NotEqual(t, dora.TicketRef, anon.TicketRef)
		require.NotEqual(t, erin.TicketRef, anon.TicketRef)
		again := join(line.JoinRequest{Client: alice, Identity: identity(t, "dora", soon)})
		require.False(t, again.Created)
		require.Equal(t, dora.TicketRef, again.TicketRef, "the user's own retry gets its ticket back")
		anonAgain := join(line.JoinRequest{Client: alice})
		require.False(t, anonAgain.Created)
		require.Equal(t, anon.TicketRef, anonAgain.TicketRef, "the anonymous retry gets its own back")

		// Admin joins naming users: the same key for two users makes two tickets.
		a1 := join(line.JoinRequest{Admin: true, UserID: "alice2"})
		b1 := join(line.JoinRequest{Admin: true, UserID: "bob2"})
		require.True(t, b1.Created)
		require.NotEqual(t, a1.TicketRef, b1.TicketRef)
		a2 := join(line.JoinRequest{Admin: true, UserID: "alice2"})
		require.Equal(t, a1.TicketRef, a2.TicketRef)
	})
}

// TestLostLineIsRestored: every call of the service restores a line the store lost (a Redis
// restart) and is answered, instead of failing with event_not_found.
func TestLostLineIsRestored(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "lost", MaxActive: 2})
		lose := func() { require.NoError(t, r.store.DeleteEvent(ctx, e.ID)) }

		lose()
		tk, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, tk.Status)
		require.Equal(t, []time.Duration{0}, r.history.waits[e.ID], "admitted at once: a wait of 0 in the history")
		lose()
		_, err = r.svc.Poll(ctx, tk.TicketRef)
		require.ErrorIs(t, err, queue.ErrTicketNotFound, "the line is back; the ticket of the lost one is unknown")
		lose()
		_, err = r.svc.Stats(ctx, e.ID)
		require.NoError(t, err)
		tk, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err)
		lose()
		require.ErrorIs(t, r.svc.Leave(ctx, tk.TicketRef), queue.ErrTicketNotFound)
		lose()
		_, err = r.svc.Extend(ctx, e.ID, time.Minute)
		require.NoError(t, err)

		_, err = r.svc.Join(ctx, line.JoinRequest{Event: "nothing", Client: alice})
		require.ErrorIs(t, err, registry.ErrNotFound)
		require.Equal(t, "event_not_found", r.svc.Problem(err, "nothing").Code)
	})
}

// TestJoinCounts: every join counts in waitroom_joins_total by result, and a join admitted at
// once counts an admission and a zero wait in waitroom_time_in_queue_seconds, whichever door.
func TestJoinCounts(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "counted", MaxActive: 1})
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k"})
		require.NoError(t, err)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice, IdempotencyKey: "k"})
		require.NoError(t, err)
		_, err = r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob})
		require.NoError(t, err)
		m := r.metrics
		require.Equal(t, 1.0, testutil.ToFloat64(m.Joins.WithLabelValues(e.ID, "admitted")))
		require.Equal(t, 1.0, testutil.ToFloat64(m.Joins.WithLabelValues(e.ID, "existing")))
		require.Equal(t, 1.0, testutil.ToFloat64(m.Joins.WithLabelValues(e.ID, "queued")))
		require.Equal(t, 1.0, testutil.ToFloat64(m.Admissions.WithLabelValues(e.ID, "join")))
		require.Equal(t, 1, testutil.CollectAndCount(m.TimeInQueue), "one series")
		h := histogram(t, m)
		require.Equal(t, uint64(1), h.GetSampleCount(), "the admission at once is observed")
		require.Zero(t, h.GetSampleSum(), "with no wait")
	})
}

func histogram(t *testing.T, m *metrics.Metrics) *dto.Histogram {
	t.Helper()
	ms, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range ms {
		if mf.GetName() == "waitroom_time_in_queue_seconds" {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatal("no waitroom_time_in_queue_seconds")
	return nil
}

// TestPollsPerTicket: a ticket's reads are counted in the store's step; over the limit it is
// refused and remembered; the service's own reads (Status) are not counted.
func TestPollsPerTicket(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "polls", MaxActive: 1, Limits: event.Limits{PollsPerTicket: 2, PollWindow: time.Hour}})
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err)
		tk, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob})
		require.NoError(t, err)
		for range 2 {
			_, err = r.svc.Poll(ctx, tk.TicketRef)
			require.NoError(t, err)
		}
		_, err = r.svc.Poll(ctx, tk.TicketRef)
		var rl *queue.RateLimitedError
		require.ErrorAs(t, err, &rl)
		polls := r.store.polls.Load()
		_, err = r.svc.Poll(ctx, tk.TicketRef)
		require.ErrorAs(t, err, &rl)
		require.Equal(t, polls, r.store.polls.Load(), "a remembered refusal costs no store call")
		require.Contains(t, r.svc.Problem(err, e.ID).Detail, "poll_after_s")
		got, err := r.svc.Status(ctx, tk.TicketRef)
		require.NoError(t, err, "the service's own reads are not polls")
		require.Equal(t, queue.StatusQueued, got.Status)
	})
}

// TestComplete: completing an admitted ticket ends its session; a queued one leaves instead.
func TestComplete(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		e := r.events.put(t, event.Event{ID: "done", MaxActive: 1})
		in, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: alice})
		require.NoError(t, err)
		waiting, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: bob})
		require.NoError(t, err)
		require.Equal(t, queue.StatusQueued, waiting.Status)
		require.NoError(t, r.svc.Complete(ctx, in.TicketRef))
		got, err := r.svc.Status(ctx, in.TicketRef)
		require.NoError(t, err)
		require.Equal(t, queue.StatusCompleted, got.Status)
		require.Equal(t, []queue.TicketRef{in.TicketRef}, r.lefts(), "a completed session's streams are told")
		require.NoError(t, r.svc.Complete(ctx, waiting.TicketRef))
		_, err = r.svc.Status(ctx, waiting.TicketRef)
		require.ErrorIs(t, err, queue.ErrTicketNotFound, "a ticket without an admission leaves")
		require.Equal(t, []queue.TicketRef{in.TicketRef, waiting.TicketRef}, r.lefts(), "its streams are told, as on Leave")
		third, err := r.svc.Join(ctx, line.JoinRequest{Event: e.ID, Client: netip.MustParseAddr("127.0.0.23")})
		require.NoError(t, err)
		require.NoError(t, r.svc.Leave(ctx, third.TicketRef))
		require.Equal(t, []queue.TicketRef{in.TicketRef, waiting.TicketRef, third.TicketRef}, r.lefts())
		require.ErrorIs(t, r.svc.Leave(ctx, third.TicketRef), queue.ErrTicketNotFound)
		require.Len(t, r.lefts(), 3, "a leave refused tells nobody")
	})
}

// TestProblems: the one table, and the history's counts of what doors answered.
func TestProblems(t *testing.T) {
	r := newRig(t, backends[0].new(t))
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{queue.ErrEventClosed, 410, "event_closed"},
		{queue.ErrSoldOut, 410, "sold_out"},
		{queue.ErrTicketNotFound, 404, "ticket_not_found"},
		{queue.ErrEventNotFound, 404, "event_not_found"},
		{queue.ErrChallengeUsed, 403, "challenge_failed"},
		{&line.Error{Kind: line.ErrChallengeUnavailable, Detail: "x"}, 503, "challenge_unavailable"},
		{&queue.RateLimitedError{RetryAfter: 3 * time.Second}, 429, "rate_limited"},
		{errors.New("dial tcp: connection refused"), 503, "store_unavailable"},
	} {
		p := r.svc.Problem(c.err, "ev")
		require.Equal(t, c.status, p.Status, c.err.Error())
		require.Equal(t, c.code, p.Code, c.err.Error())
		require.NotEmpty(t, p.Title, "every code has its title")
	}
	require.Equal(t, 1.0, testutil.ToFloat64(r.metrics.StoreErrors), "a store that did not answer is counted")
	require.Equal(t, 1, r.history.refused["ev rate_limited"], "every problem answered is counted by its code once")
	require.Equal(t, 1, r.history.refused["ev challenge_failed"])
	r.svc.Answered("ev", 429)
	r.svc.Answered("ev", 503)
	r.svc.Answered("ev", 503)
	r.svc.Answered("", 503)
	require.Equal(t, map[string]int{"ev Too Many Requests": 1, "ev Service Unavailable": 2}, r.history.counts)
}

// TestCredentialRefusalsCost (issue 20, a black-box run: 401 challenge_required answered 3,400
// times a second to one connection, and the address then joined): every refusal of an
// anonymous join's credentials — no proof, a wrong one, no identity, an invalid identity — is
// taken from the client's joins_per_client like a join, so a bot repeating it meets 429, and
// is held like a 429.
func TestCredentialRefusalsCost(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		lim := event.Limits{JoinsPerClient: 3, JoinWindow: time.Hour}
		pow := r.events.put(t, event.Event{ID: "pow-cost", MaxActive: 1, Limits: lim,
			Challenge: event.Challenge{Type: event.ChallengePow, Difficulty: 4}})
		vouched := r.events.put(t, event.Event{ID: "id-cost", MaxActive: 1, Limits: lim, IdentityRequired: true})
		for _, c := range []struct {
			event string
			req   line.JoinRequest
			kind  error
		}{
			{pow.ID, line.JoinRequest{Client: alice}, line.ErrChallengeRequired},
			{vouched.ID, line.JoinRequest{Client: alice}, line.ErrIdentityRequired},
			{vouched.ID, line.JoinRequest{Client: bob, Identity: "not.a.jwt"}, line.ErrInvalidIdentity},
		} {
			c.req.Event = c.event
			for i := range 3 {
				_, err := r.svc.Join(ctx, c.req)
				require.ErrorIs(t, err, c.kind, "%s: refusal %d", c.event, i+1)
				require.True(t, r.svc.Problem(err, c.event).Held, "held like a 429")
			}
			_, err := r.svc.Join(ctx, c.req)
			var rl *queue.RateLimitedError
			require.ErrorAs(t, err, &rl, "%s: the bucket is empty after three refusals", c.event)
		}
		_, err := r.svc.Join(ctx, line.JoinRequest{Event: pow.ID, Client: netip.MustParseAddr("127.0.0.23")})
		require.ErrorIs(t, err, line.ErrChallengeRequired, "another address is not touched")
	})
}

// TestPollFromView: a ticket waiting far from the front is answered from the instance's view
// of its line, with what the store says of it, without a store call; a ticket near the front,
// one that left (here or through another instance), or any ticket once the view is too old
// to tell, is read from the store; every read is counted on the instance.
func TestPollFromView(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		newService, advance := r.instances(t)
		svc := newService(r.store)
		e := r.events.put(t, event.Event{ID: "far", MaxActive: 1, Limits: event.Limits{PollsPerTicket: 3, PollWindow: time.Hour}})
		var tks []queue.Ticket
		for range 400 {
			tk, err := r.store.Join(ctx, queue.JoinParams{Event: e.ID})
			require.NoError(t, err)
			tks = append(tks, tk)
		}
		far, near := tks[389].TicketRef, tks[9].TicketRef // numbers 390 and 10; one slot, max_active 1
		polls := r.store.polls.Load()
		got, err := svc.Poll(ctx, far)
		require.NoError(t, err)
		require.Equal(t, polls, r.store.polls.Load(), "far from the front: no store read")
		want, err := r.store.Status(ctx, far)
		require.NoError(t, err)
		got.Now, want.Now = time.Time{}, time.Time{}
		require.Equal(t, want, got, "the store's answer")
		require.EqualValues(t, 389, got.Position)

		_, err = svc.Poll(ctx, near)
		require.NoError(t, err)
		require.Equal(t, polls+1, r.store.polls.Load(), "near the front: the store")

		// A leave here is read from the store at once; one through another instance once the
		// view is read again (at most ViewRefresh later).
		require.NoError(t, svc.Leave(ctx, tks[379].TicketRef))
		_, err = svc.Poll(ctx, tks[379].TicketRef)
		require.ErrorIs(t, err, queue.ErrTicketNotFound)
		require.NoError(t, r.store.Leave(ctx, tks[369].TicketRef))
		advance(line.ViewRefresh)
		_, err = svc.Poll(ctx, tks[369].TicketRef)
		require.ErrorIs(t, err, queue.ErrTicketNotFound, "left through another instance")
		polls = r.store.polls.Load()
		got, err = svc.Poll(ctx, far)
		require.NoError(t, err)
		require.Equal(t, polls, r.store.polls.Load())
		require.EqualValues(t, 387, got.Position, "the two that left ahead")
		want, err = r.store.Status(ctx, far)
		require.NoError(t, err)
		require.Equal(t, want.Position, got.Position)

		// Counted on the instance: far's third read is its last in the window (and the view's
		// next read counts them in the store, TestPollsFromViewsAcrossInstances).
		_, err = svc.Poll(ctx, far)
		require.NoError(t, err)
		_, err = svc.Poll(ctx, far)
		var rl *queue.RateLimitedError
		require.ErrorAs(t, err, &rl)

		// A view too old to tell (its read fails, the store stopped answering for it): the store.
		other := tks[349].TicketRef
		svc2 := newService(&viewless{r.store})
		polls = r.store.polls.Load()
		_, err = svc2.Poll(ctx, other)
		require.NoError(t, err)
		require.Equal(t, polls+1, r.store.polls.Load(), "no view: the store")
	})
}

// instances returns a maker of services on the rig's events and tickets (instances, each
// with its own view of the lines) sharing one fake clock, and the clock's advance.
func (r *rig) instances(t *testing.T) (newService func(queue.Store) *line.Service, advance func(time.Duration)) {
	var mu sync.Mutex
	at := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	newService = func(s queue.Store) *line.Service {
		svc, err := line.New(line.Config{Store: s, Events: r.events, Tickets: r.tickets, Now: clock,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		return svc
	}
	return newService, func(d time.Duration) { mu.Lock(); at = at.Add(d); mu.Unlock() }
}

// viewless is a store whose View fails.
type viewless struct{ queue.Store }

func (viewless) View(context.Context, queue.ViewParams) (queue.View, error) {
	return queue.View{}, errors.New("no view")
}

// TestPollsFromViewsAcrossInstances: reads answered from two instances' views are counted in
// the store's count of polls_per_ticket when each reads its view again; past the limit on
// both together, each refuses the ticket until the window ends.
func TestPollsFromViewsAcrossInstances(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		newService, advance := r.instances(t)
		svcs := []*line.Service{newService(r.store), newService(r.store)}
		e := r.events.put(t, event.Event{ID: "far2", MaxActive: 1, Limits: event.Limits{PollsPerTicket: 5, PollWindow: time.Hour}})
		var far queue.TicketRef
		for range 400 {
			tk, err := r.store.Join(ctx, queue.JoinParams{Event: e.ID})
			require.NoError(t, err)
			far = tk.TicketRef
		}
		polls := r.store.polls.Load()
		for _, svc := range svcs {
			for range 3 {
				_, err := svc.Poll(ctx, far)
				require.NoError(t, err, "three of five on each instance")
			}
		}
		require.Equal(t, polls, r.store.polls.Load(), "all from the views")
		advance(line.ViewRefresh)
		_, err := svcs[0].Poll(ctx, far)
		require.NoError(t, err, "the store counts a's three: three of five")
		_, err = svcs[1].Poll(ctx, far)
		var rl *queue.RateLimitedError
		require.ErrorAs(t, err, &rl, "and then b's three: six of five")
		advance(line.ViewRefresh)
		_, err = svcs[0].Poll(ctx, far)
		require.ErrorAs(t, err, &rl, "a's next read of its view brings the refusal too")
		require.Equal(t, polls, r.store.polls.Load())
	})
}

// TestBindReadsAnUncachedEventsLimit: an admission of an event this instance has not cached yet
// (made on another instance less than a sync ago) is bound by the event's own
// addresses_per_admission, read from the database, not by the default (a limit of 1 let a
// second address in for that second).
func TestBindReadsAnUncachedEventsLimit(t *testing.T) {
	onEveryBackend(t, func(t *testing.T, r *rig) {
		ctx := context.Background()
		r.events.put(t, event.Event{ID: "fresh", MaxActive: 5, Limits: event.Limits{AddressesPerAdmission: 1}})
		r.events.hide("fresh")
		tk, err := r.svc.Join(ctx, line.JoinRequest{Event: "fresh", Client: netip.MustParseAddr("127.0.0.71")})
		require.NoError(t, err)
		require.Equal(t, queue.StatusAdmitted, tk.Status)
		require.NoError(t, r.svc.Bind(ctx, tk.TicketRef, netip.MustParseAddr("127.0.0.71")))
		err = r.svc.Bind(ctx, tk.TicketRef, netip.MustParseAddr("127.0.0.72"))
		require.ErrorIs(t, err, line.ErrAdmissionShared, "a second address, over the event's limit of 1")
	})
}
