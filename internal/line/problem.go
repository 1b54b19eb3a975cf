package line

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
)

// Problems is the line's one table from its errors to the problems every door answers with
// (docs/api.md has the codes): the refusals of its rules, and the line store's errors. "{id}"
// is the event. A refusal (*Error) says why in its own detail.
var Problems = httpjson.MustTable(httpjson.Table{
	{Err: ErrInvalidJoin, Status: 422, Code: "invalid_field"},
	{Err: ErrInvalidIdempotencyKey, Status: 400, Code: "invalid_idempotency_key"},
	{Err: ErrAdminRequired, Status: 401, Code: "admin_key_required"},
	{Err: ErrIdentityNotSupported, Status: 422, Code: "identity_not_supported"},
	{Err: ErrInvalidIdentity, Status: 401, Code: "invalid_identity", With: held},
	{Err: ErrIdentityRequired, Status: 401, Code: "identity_required", With: held},
	{Err: ErrChallengeRequired, Status: 401, Code: "challenge_required", With: held},
	{Err: ErrChallengeFailed, Status: 403, Code: "challenge_failed", With: held},
	{Err: queue.ErrChallengeUsed, Status: 403, Code: "challenge_failed", Detail: "this challenge was used already: fetch a new one", With: held},
	{Err: ErrChallengeUnavailable, Status: 503, Code: "challenge_unavailable"},
	{Err: ErrAdmissionShared, Status: 403, Code: "admission_shared"},
	{Err: queue.ErrRateLimited, Status: 429, Code: "rate_limited", Detail: "too many requests about event {id} from this address",
		With: withRetryAfter},
	{Err: queue.ErrEventNotFound, Status: 404, Code: "event_not_found", Detail: "no event {id}"},
	{Err: event.ErrNotFound, Status: 404, Code: "event_not_found", Detail: "no event {id}"},
	{Err: queue.ErrTicketNotFound, Status: 404, Code: "ticket_not_found", Detail: "no such ticket in event {id} (unknown, or it left)"},
	{Err: queue.ErrEventClosed, Status: 410, Code: "event_closed", Detail: "event {id} is closed"},
	{Err: queue.ErrSoldOut, Status: 410, Code: "sold_out", Detail: "event {id} is sold out"},
})

// RefusalHold is how long every door holds a refusal a client can repeat at full speed (a 429,
// or a problem marked Held) before it sends it: half a second, half of the shortest
// Retry-After; measured in docs/bots.md (a bot's 429s from 550,000 in a minute to 1,000).
const RefusalHold = 500 * time.Millisecond

// held marks a refusal of a join's credentials (a missing or wrong proof, a missing or invalid
// identity) to be held before it is sent, like a 429 (httpjson.Problem.Held): a bot repeating
// it gets one answer per connection per hold, not thousands a second (and each is taken from
// its joins_per_client, Join).
func held(p *httpjson.Problem, _ error) { p.Held = true }

// withRetryAfter makes a rate_limited problem say when the client may try again.
func withRetryAfter(p *httpjson.Problem, err error) {
	if rl, ok := errors.AsType[*queue.RateLimitedError](err); ok {
		*p = *httpjson.RateLimited(rl.RetryAfter, p.Detail)
	}
}

// Problem is the problem a door answers for err, an error of the service's (or of the line
// store, or the events) about event eventID: Problems' row, with the refusal's own detail, or
// 503 store_unavailable for anything else (the store or the database did not answer: counted
// and logged). Every door calls it once for each problem it answers, so it is where the
// refusals are counted by code in the event's history (History.Refused).
func (s *Service) Problem(err error, eventID string) *httpjson.Problem {
	p, ok := Problems.Problem(err, eventID)
	if !ok {
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.StoreErrors.Inc()
		}
		s.cfg.Logger.Warn("store call failed", "event", eventID, "err", err)
		return httpjson.NewProblem(http.StatusServiceUnavailable, "store_unavailable", "the line is unreachable right now; retry shortly")
	}
	if le, isRefusal := errors.AsType[*Error](err); isRefusal {
		p.Detail = le.Detail
	}
	if s.cfg.History != nil && eventID != "" {
		s.cfg.History.Refused(eventID, p.Code) // the refusals by kind (the recorder keeps those of history.RefusalKind)
	}
	if p.Code == "challenge_required" || p.Code == "challenge_failed" {
		p.Extra = map[string]any{"challenge_url": ChallengeURL(eventID)} // where to fetch one
	}
	return p
}

// Offer is what a join of an event needs (GET /v1/events/{event_id}/challenge).
type Offer struct {
	Event event.Event
	// Challenge is a new signed, expiring proof-of-work challenge for an event with
	// "challenge": {"type": "pow"}; nil otherwise.
	Challenge *challenge.Challenge
}

// ChallengesPerJoin is how many challenges a client may fetch per join its joins_per_client
// allows: ChallengesPerJoin x joins_per_client per fixed window of join_window_s (100 per 10 s
// by default). Every join needs one, and the page fetches another after a refusal or when one
// expires unsolved; a bot gains nothing from more than it can join with (each makes at most
// one ticket), so the limit is there for the instance's CPU. See docs/api.md ("Limits").
const ChallengesPerJoin = 2

// Challenge issues what a join of event id needs, to client (its address, as package
// clientaddr finds it; the zero Addr is not limited): for an event with a proof-of-work
// challenge, a new signed challenge (single use is enforced when a join uses it; issuing
// stores nothing). Each fetch counts against the client's ChallengesPerJoin x joins_per_client
// per join_window_s, in the shared counters (all instances together), a refusal remembered
// here until the window ends. Errors: the event's lookup's, *queue.RateLimitedError (in an
// *Error) over the limit, ErrChallengeUnavailable without a challenge key.
func (s *Service) Challenge(ctx context.Context, id string, client netip.Addr) (Offer, error) {
	e, err := s.Event(ctx, id)
	if err != nil {
		return Offer{}, err
	}
	o := Offer{Event: e}
	if key := clientaddr.KeyOf(client); key != "" {
		refusal := refusalKey("challenge", e, key)
		left, refused := s.refusals.Refused(refusal)
		if !refused {
			var n int64
			if n, left = s.shared(ctx, "challenge", e, key); n > ChallengesPerJoin*e.Limits.JoinsPerClient {
				s.refusals.Refuse(refusal, left)
				refused = true
			}
		}
		if refused {
			return o, &Error{Kind: &queue.RateLimitedError{RetryAfter: left}, Detail: "too many challenges of event " + e.ID + " fetched from this address"}
		}
	}
	if e.Challenge.Type == event.ChallengePow {
		if s.cfg.Challenges == nil {
			return o, refuse(ErrChallengeUnavailable, "this instance has no challenge key")
		}
		c, err := s.cfg.Challenges.Issue(s.challengeTarget(e), s.cfg.Now())
		if err != nil { // a validated event's id and difficulty: cannot happen
			return o, err
		}
		o.Challenge = &c
	}
	return o, nil
}
