package line

import (
	"context"
	"errors"
	"net/http"

	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/registry"
)

// problems is the one table from the line's errors to the problems every door answers with:
// the kind, the status and stable code (docs/api.md), and the detail when the error carries
// none of its own. Checked in order with errors.Is.
var problems = []struct {
	kind   error
	status int
	code   string
	detail func(eventID string) string
}{
	{ErrInvalidJoin, 422, "invalid_field", nil},
	{ErrInvalidIdempotencyKey, 400, "invalid_idempotency_key", nil},
	{ErrAdminRequired, 401, "admin_key_required", nil},
	{ErrIdentityNotSupported, 422, "identity_not_supported", nil},
	{ErrInvalidIdentity, 401, "invalid_identity", nil},
	{ErrIdentityRequired, 401, "identity_required", nil},
	{ErrChallengeRequired, 401, "challenge_required", nil},
	{ErrChallengeFailed, 403, "challenge_failed", nil},
	{queue.ErrChallengeUsed, 403, "challenge_failed", func(string) string { return "this challenge was used already: fetch a new one" }},
	{ErrChallengeUnavailable, 503, "challenge_unavailable", nil},
	{queue.ErrEventNotFound, 404, "event_not_found", func(id string) string { return "no event " + id }},
	{registry.ErrNotFound, 404, "event_not_found", func(id string) string { return "no event " + id }},
	{queue.ErrTicketNotFound, 404, "ticket_not_found", func(id string) string { return "no such ticket in event " + id + " (unknown, or it left)" }},
	{queue.ErrEventClosed, 410, "event_closed", func(id string) string { return "event " + id + " is closed" }},
	{queue.ErrSoldOut, 410, "sold_out", func(id string) string { return "event " + id + " is sold out" }},
}

// Problem is the problem a door answers for err, an error of the service's (or of the line
// store, or the registry) about event eventID: a refusal of the rules to its stable code, a
// *queue.RateLimitedError to 429 rate_limited with its Retry-After, a problem as it is, and
// anything else to 503 store_unavailable (the store or the database did not answer: counted
// and logged).
func (s *Service) Problem(err error, eventID string) *httpjson.Problem {
	var p *httpjson.Problem
	if errors.As(err, &p) {
		return p
	}
	detail := ""
	var le *Error
	if errors.As(err, &le) {
		detail = le.Detail
	}
	var rl *queue.RateLimitedError
	if errors.As(err, &rl) {
		if detail == "" {
			detail = "too many requests about event " + eventID + " from this address"
		}
		return httpjson.RateLimited(rl.RetryAfter, detail)
	}
	for _, e := range problems {
		if !errors.Is(err, e.kind) {
			continue
		}
		if detail == "" && e.detail != nil {
			detail = e.detail(eventID)
		}
		if detail == "" {
			detail = err.Error()
		}
		p := httpjson.NewProblem(e.status, e.code, detail)
		if e.kind == ErrChallengeRequired || e.kind == ErrChallengeFailed || e.kind == queue.ErrChallengeUsed {
			p.Extra = map[string]any{"challenge_url": ChallengeURL(eventID)}
		}
		return p
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.StoreErrors.Inc()
	}
	s.cfg.Logger.Warn("store call failed", "event", eventID, "err", err)
	return httpjson.NewProblem(http.StatusServiceUnavailable, "store_unavailable", "the line is unreachable right now; retry shortly")
}

// Offer is what a join of an event needs (GET /v1/events/{event_id}/challenge).
type Offer struct {
	Event event.Event
	// Challenge is a new signed, expiring proof-of-work challenge for an event with
	// "challenge": {"type": "pow"}; nil otherwise.
	Challenge *challenge.Challenge
}

// Challenge issues what a join of event id needs: for an event with a proof-of-work challenge,
// a new signed challenge (single use is enforced when a join uses it; issuing stores nothing).
// Errors: the event's lookup's, ErrChallengeUnavailable without a challenge key.
func (s *Service) Challenge(ctx context.Context, id string) (Offer, error) {
	e, err := s.Event(ctx, id)
	if err != nil {
		return Offer{}, err
	}
	o := Offer{Event: e}
	if e.Challenge.Type == event.ChallengePow {
		if s.cfg.Challenges == nil {
			return o, refuse(ErrChallengeUnavailable, "this instance has no challenge key")
		}
		c, err := s.cfg.Challenges.Issue(id, e.Challenge.Difficulty, s.cfg.Now())
		if err != nil { // a validated event's id and difficulty: cannot happen
			return o, err
		}
		o.Challenge = &c
	}
	return o, nil
}
