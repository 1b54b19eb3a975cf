// Package line is the one way into an event's line. Every door a person uses — the HTTP API
// (httpapi), the gate's reverse proxy and its forward-auth check (gateway), push connections
// (push) and the waiting page, which calls the API — calls this Service, so that every rule
// that protects the line holds whichever door is used:
//
//   - who may join: user_id only with the admin key, identity tokens verified, an event's
//     identity_required, its challenge (a proof of work, or the operator's captcha);
//   - how often: an event's joins_per_client per client (the client as package clientaddr
//     finds it, the one rule for every listener), a failed proof counted as a join, its
//     tickets_per_client in the pre-queue, its polls_per_ticket per ticket, counted exactly in
//     the store's atomic steps, the challenges a client fetches (ChallengesPerJoin per join),
//     and a refusal remembered here until it ends so that a client refused at full speed costs
//     no store call;
//   - the restore of a line the store lost (a Redis restart: the event's configuration is
//     written back and the call made again);
//   - what is counted: waitroom_joins_total, waitroom_admissions_total{kind="join"}, the zero
//     wait of a join admitted at once in waitroom_time_in_queue_seconds, store errors, and the
//     refusals (429) and failures (503) of the console's history;
//   - how each refusal is told: Problem, the one table from errors to RFC 9457 problems.
//
// The doors keep only their transport: decoding a request into a JoinRequest, encoding the
// ticket or the problem.
package line

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/ratelimit"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// Events is what the service reads of the events (the registry).
type Events interface {
	// Cached returns an event from the cache, without I/O.
	Cached(id string) (event.Event, bool)
	// Get returns an event from the cache, else the database. Errors: the event is unknown
	// (registry.ErrNotFound), or the database did not answer.
	Get(ctx context.Context, id string) (event.Event, error)
	// Restore writes a known event's configuration back to a line store that lost it.
	// Errors: as Get's.
	Restore(ctx context.Context, id string) error
}

// History counts, for the console's history and the report after the sale (package recorder):
// the answers 429 and 503 on an event's routes (other statuses are ignored), the refusals of
// the line's rules by problem code (Problem), and the time in line of the admissions made at
// a join (0).
type History interface {
	Count(eventID string, status int)
	// Refused counts a refusal answered with the line's problem code (history.RefusalKind).
	Refused(eventID, code string)
	// Waited counts an admission's time in line.
	Waited(eventID string, wait time.Duration)
}

// Config configures a Service.
type Config struct {
	Store   queue.Store      // required: the line store
	Events  Events           // required
	Tickets *token.TicketIDs // required: ticket ids of the doors (encode, decode)
	// Identity verifies identity JWTs; nil refuses joins that carry one
	// (ErrIdentityNotSupported).
	Identity *token.IdentityVerifier
	// Challenges verifies the proofs of work of events with "challenge": {"type": "pow"}. Nil:
	// their joins fail with ErrChallengeUnavailable.
	Challenges *challenge.Issuer
	// Captcha checks the captcha tokens of events with "challenge": {"type": "external"}.
	// Defaults to captcha.New's defaults (a 3 s timeout).
	Captcha *captcha.Verifier
	// Counters keep the counts shared by the instances (the store's: store.Backend.Counters):
	// the captcha verifications per client. Nil, or when they do not answer: this instance's
	// own count.
	Counters store.Counters
	// Shares count, across the instances, the addresses using each admission (Bind; the
	// store's: store.Backend.Shares). Nil: admissions are not bound to addresses.
	Shares store.Shares
	// Metrics counts joins, admissions at join, the zero wait of those, and store errors.
	// Nil: nothing counted.
	Metrics *metrics.Metrics
	// History counts the refusals and failures answered on events. Nil: not counted.
	History History
	// OnEnd is called after a ticket left the line (Leave, or Complete without an admission)
	// or completed its admitted session (Complete) through this instance: the push hub tells
	// its live streams, on every instance, and ends them. Nil: nothing is told.
	OnEnd  func(ref queue.TicketRef)
	Now    func() time.Time // defaults to time.Now
	Logger *slog.Logger     // defaults to slog.Default()
}

// Service is the line's one implementation of its rules. It is safe for concurrent use.
type Service struct {
	cfg      Config
	refusals *ratelimit.Refusals
	bind     binder
	counts   *ratelimit.Window // the shared counts' stand-in while the store does not answer
	views    sync.Map          // event id -> *lineView (view.go)
	epochs   epochMemo
}

// epochMemo keeps event.Event.Epoch by draw seed: a guarded join's check needs its event's
// epoch, a SHA-256 of the seed and a hex string (~0.4 µs and an allocation a join), and an
// event's seed never changes in its life.
type epochMemo struct {
	mu sync.RWMutex
	m  map[string]string // string(DrawSeed) -> Epoch
}

// epochMemoMax bounds the memo: past it (events made and deleted over a long life), it starts
// afresh.
const epochMemoMax = 4096

// of returns e.Epoch().
func (m *epochMemo) of(e event.Event) string {
	m.mu.RLock()
	ep, ok := m.m[string(e.DrawSeed)]
	m.mu.RUnlock()
	if ok {
		return ep
	}
	ep = e.Epoch()
	m.mu.Lock()
	if m.m == nil || len(m.m) >= epochMemoMax {
		m.m = make(map[string]string)
	}
	m.m[string(e.DrawSeed)] = ep
	m.mu.Unlock()
	return ep
}

// New checks cfg and returns the service. Errors: a required field missing.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Events == nil || cfg.Tickets == nil {
		return nil, errors.New("line: Store, Events and Tickets are required")
	}
	cfg.Captcha = cmp.Or(cfg.Captcha, captcha.New(captcha.Config{}))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Service{cfg: cfg, refusals: ratelimit.NewRefusals(cfg.Now), counts: ratelimit.New(cfg.Now)}, nil
}

// Tickets is the service's codec of ticket ids.
func (s *Service) Tickets() *token.TicketIDs { return s.cfg.Tickets }

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.cfg.Now() }

// Event returns an event's configuration, from the cache when it is there, else from the
// database. Errors: Events.Get's.
func (s *Service) Event(ctx context.Context, id string) (event.Event, error) {
	if e, ok := s.cfg.Events.Cached(id); ok {
		return e, nil
	}
	return s.cfg.Events.Get(ctx, id)
}

// limitsOf returns an event's configuration for a security limit's check (Bind): the cache's,
// or, while the event is not cached yet (made on another instance less than a sync ago), the
// database's rather than the defaults (addresses_per_admission set to 1 let a second address
// in for that second); the defaults only when the database does not answer or has no such
// event. The registry caches what it reads.
func (s *Service) limitsOf(ctx context.Context, id string) event.Event {
	if e, ok := s.cfg.Events.Cached(id); ok {
		return e
	}
	if e, err := s.cfg.Events.Get(ctx, id); err == nil {
		return e
	}
	return event.Event{ID: id}.WithDefaults()
}

// Cached returns an event's configuration without I/O: the cache's, or the defaults while the
// event is not cached yet (its limits and ETA rule are then the defaults').
func (s *Service) Cached(id string) event.Event {
	if e, ok := s.cfg.Events.Cached(id); ok {
		return e
	}
	return event.Event{ID: id}.WithDefaults()
}

// Ref decodes a ticket id of event eventID. Errors: queue.ErrTicketNotFound for an id that is
// not one of ours (forged, of another event, malformed).
func (s *Service) Ref(eventID, ticketID string) (queue.TicketRef, error) {
	ref, err := s.cfg.Tickets.Decode(eventID, ticketID)
	if err != nil {
		return queue.TicketRef{}, queue.ErrTicketNotFound
	}
	return ref, nil
}

// restored runs call, and once more after restoring the event's line when the store lost it
// (queue.ErrEventNotFound: a Redis restart, a crash of the embedded process; the registry's
// sync would do it within a second, this spares the caller the wait). The restore's own
// error (the event is unknown) replaces call's.
func (s *Service) restored(ctx context.Context, id string, call func() error) error {
	err := call()
	if errors.Is(err, queue.ErrEventNotFound) {
		if err = s.cfg.Events.Restore(ctx, id); err == nil {
			err = call()
		}
	}
	return err
}

// Poll reads a ticket for its holder (the page's or a client's status request); for an
// admitted ticket it counts as activity. A ticket waiting far from the front is answered from
// this instance's view of its line (view.go: no store call; the same answer as the store's
// at the view's read, never QUEUED once the ticket could have been admitted, never for a
// ticket that left), any other from the store. Every read is counted against the event's
// polls_per_ticket on this instance, and a read that reaches the store in the store's status
// step too (exact across instances); a ticket refused is remembered here until its window
// ends, so that its next reads cost no store call. Errors: *queue.RateLimitedError (wrapped
// in an *Error), queue.ErrTicketNotFound, store errors.
func (s *Service) Poll(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	return s.poll(ctx, ref, true)
}

// Connect reads a ticket for a push connection opening on it (its first status) and counts
// the read against the event's polls_per_ticket as Poll does, on this instance and in the
// store's status step (exact across instances), but always from the store: the connection
// needs the ticket's state as the store has it when it registers. So connecting and closing
// again is no way around the limit on reads of a ticket (each connect would otherwise cost
// the store a status read and the client's push share, uncounted). Errors: those of Poll.
func (s *Service) Connect(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	return s.poll(ctx, ref, false)
}

// poll is Poll, answered from the view only when view is true.
func (s *Service) poll(ctx context.Context, ref queue.TicketRef, view bool) (queue.Ticket, error) {
	key := pollKey(ref.Event, ref.Generation, ref.Number)
	if left, refused := s.refusals.Refused(key); refused {
		return queue.Ticket{}, pollRefused(left)
	}
	e := s.Cached(ref.Event) // no I/O: a poll of a deleted event must not cost a database read
	if n, left := s.counts.Count(key, 1, e.Limits.PollWindow); e.Limits.PollsPerTicket > 0 && n > e.Limits.PollsPerTicket {
		s.refusals.Refuse(key, left)
		return queue.Ticket{}, pollRefused(left)
	}
	if view {
		if t, ok, refused := s.fromView(ctx, ref, e, key); ok {
			return t, nil
		} else if refused > 0 {
			return t, pollRefused(refused)
		}
	}
	var t queue.Ticket
	err := s.restored(ctx, ref.Event, func() (err error) {
		t, err = s.cfg.Store.Poll(ctx, queue.PollParams{Ref: ref, Limit: e.Limits.PollsPerTicket, Window: e.Limits.PollWindow})
		return err
	})
	var rl *queue.RateLimitedError
	if errors.As(err, &rl) {
		s.refusals.Refuse(key, rl.RetryAfter)
		return t, pollRefused(rl.RetryAfter)
	}
	return t, err
}

// pollKey names a ticket's reads in the refusals remembered and this instance's count.
func pollKey(event string, gen uint32, n int64) string {
	var kb [96]byte
	key := append(append(kb[:0], "poll:"...), event...)
	key = strconv.AppendUint(append(key, ':'), uint64(gen), 10)
	key = strconv.AppendInt(append(key, ':'), n, 10)
	return string(key)
}

func pollRefused(left time.Duration) error {
	return &Error{Kind: &queue.RateLimitedError{RetryAfter: left}, Detail: "this ticket asks for its status far more often than poll_after_s says"}
}

// Status reads a ticket without counting it against polls_per_ticket: the service's own reads
// (the gate's refresh of an admitted visitor, a push connection's deliveries and renewals, a
// back end's online check), each bounded by its door. For an admitted ticket it counts as
// activity. Errors: queue.ErrTicketNotFound, store errors.
func (s *Service) Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	var t queue.Ticket
	err := s.restored(ctx, ref.Event, func() (err error) {
		t, err = s.cfg.Store.Status(ctx, ref)
		return err
	})
	return t, err
}

// Leave gives up a ticket's place, or its admitted slot, at once. Errors:
// queue.ErrTicketNotFound (it left already, or never was), store errors.
func (s *Service) Leave(ctx context.Context, ref queue.TicketRef) error {
	err := s.restored(ctx, ref.Event, func() error { return s.cfg.Store.Leave(ctx, ref) })
	if err == nil {
		s.left(ref)
	}
	return err
}

// left records that ref left through this instance: its polls are read from the store (this
// instance's view may be older than the leave), and OnEnd is told.
func (s *Service) left(ref queue.TicketRef) {
	s.noteLeave(ref)
	if s.cfg.OnEnd != nil {
		s.cfg.OnEnd(ref)
	}
}

// Complete ends a ticket's admitted session with a sale (the origin's "Waitroom-Command:
// complete"): the ticket reads COMPLETED; one that holds no admission any more leaves instead
// (as Leave). Errors: queue.ErrTicketNotFound, store errors.
func (s *Service) Complete(ctx context.Context, ref queue.TicketRef) error {
	leaving := false
	err := s.restored(ctx, ref.Event, func() error {
		err := s.cfg.Store.Complete(ctx, ref)
		if leaving = errors.Is(err, queue.ErrNotAdmitted); leaving {
			err = s.cfg.Store.Leave(ctx, ref)
		}
		return err
	})
	switch {
	case err != nil:
	case leaving:
		s.left(ref)
	case s.cfg.OnEnd != nil:
		s.cfg.OnEnd(ref) // completed: its streams hear so
	}
	return err
}

// Stats reads an event's counters. Errors: queue.ErrEventNotFound for an unknown event, store
// errors.
func (s *Service) Stats(ctx context.Context, id string) (queue.Stats, error) {
	var st queue.Stats
	err := s.restored(ctx, id, func() (err error) {
		st, err = s.cfg.Store.Stats(ctx, id)
		return err
	})
	return st, err
}

// Extend gives every live admitted session of an event d more, and returns how many it
// extended (the operator's extend). Errors: as Stats'.
func (s *Service) Extend(ctx context.Context, id string, d time.Duration) (int64, error) {
	var n int64
	err := s.restored(ctx, id, func() (err error) {
		n, err = s.cfg.Store.Extend(ctx, id, d)
		return err
	})
	return n, err
}

// Answered counts an answer of a door on an event's request in the console's history: 429s
// and 503s (refusals and failures) are counted, other statuses ignored. Every door calls it
// with what it answered, so that the gate's refusals show beside the API's.
func (s *Service) Answered(eventID string, status int) {
	if s.cfg.History != nil && eventID != "" {
		s.cfg.History.Count(eventID, status)
	}
}
