package line

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// JoinRequest is a request for a place in an event's line, from any door.
type JoinRequest struct {
	Event string
	// Client is who the join comes from, as package clientaddr finds it (the one rule of every
	// listener); its key (clientaddr.KeyOf) is what joins_per_client and tickets_per_client
	// count. The zero Addr is a client of unknown address: counted under the empty key, which
	// is not limited.
	Client netip.Addr
	// Admin: the join is made with the admin key (server to server). Only such a join may
	// name a UserID; it is neither limited per client nor challenged, since it comes from few
	// addresses on purpose and the operator vouches for it.
	Admin bool
	// UserID names the user of an admin join (1 to MaxUserID bytes of text).
	UserID string
	// Identity is a JWT the integrating site signed for its user (sub = user id).
	Identity string
	// IdempotencyKey names this join attempt (the Idempotency-Key header): a retry with the
	// same key, from the same client, gets the ticket the first attempt made while it is live.
	// Keys are scoped to the client (its key, as joins_per_client counts it; admin joins have a
	// scope of their own), so that nobody can claim another client's key first and hand its
	// holder a ticket of theirs, and to the user of a named join (UserID, Identity), so that
	// another user behind the same address sending the same key does not get the first one's
	// ticket. A retry from another address (a phone that changed network between the join and
	// its retry) takes a new place.
	IdempotencyKey string
	// IdempotencyKeySent: the request carried the Idempotency-Key header, so that an empty one
	// is refused (ErrInvalidIdempotencyKey) rather than taken for none.
	IdempotencyKeySent bool
	// Proof is the answer to the event's challenge.
	Proof Proof
}

// Proof answers an event's challenge: a solved proof of work (Challenge and Solution, for
// "challenge": {"type": "pow"}), or the token of the operator's captcha widget (CaptchaToken,
// for "challenge": {"type": "external"}).
type Proof struct {
	Challenge, Solution string
	CaptchaToken        string
}

// MaxUserID is the longest user id accepted (bytes).
const MaxUserID = 128

// CaptchaTokenTTL is how long a verified captcha token is remembered as used: Turnstile's
// tokens live 300 s (hCaptcha's 120 s), and the services refuse a second verification anyway.
const CaptchaTokenTTL = 300 * time.Second

// Join takes a place in the line of r.Event, or gives back the live ticket of the same user or
// of the same idempotency key (Ticket.Created false). The rules, in order: the request's own
// shape (ErrInvalidJoin, ErrAdminRequired, ErrIdentityNotSupported), the event (its lookup's
// error), the idempotency key (ErrInvalidIdempotencyKey); for a join not made with the admin
// key, the client's refusal remembered here (*queue.RateLimitedError; a join with an
// Idempotency-Key is then asked of the store as a retry that may only find the ticket its key
// made, which it gets back, and is refused otherwise); the identity token
// (ErrInvalidIdentity), identity_required (ErrIdentityRequired), the challenge
// (ErrChallengeRequired, ErrChallengeFailed, ErrChallengeUnavailable) — each of these
// refusals of an anonymous join's credentials is taken from the client's joins_per_client like
// a join, and answers *queue.RateLimitedError once that is empty, so that refusals cost a bot
// what joins cost —, and in the
// store's one atomic step the client's joins_per_client (*queue.RateLimitedError), the single
// use of the proof (ErrChallengeFailed), the client's tickets_per_client before the opening
// (*queue.RateLimitedError until the opening), the event's state (queue.ErrEventClosed,
// queue.ErrSoldOut). A line the store lost is restored and the join made again.
func (s *Service) Join(ctx context.Context, r JoinRequest) (queue.Ticket, error) {
	var p queue.JoinParams
	p.Event = r.Event
	switch {
	case r.UserID != "" && r.Identity != "":
		return queue.Ticket{}, refuse(ErrInvalidJoin, "give user_id or identity, not both")
	case r.UserID != "":
		if !r.Admin {
			return queue.Ticket{}, refuse(ErrAdminRequired, "user_id is honoured only on joins made with the admin key; browsers send an identity token instead")
		}
		if len(r.UserID) > MaxUserID || !event.ValidText(r.UserID) {
			return queue.Ticket{}, refuse(ErrInvalidJoin, "user_id must be at most 128 bytes of UTF-8 text without control characters")
		}
		p.UserKey = token.UserKey(r.UserID)
	case r.Identity != "" && s.cfg.Identity == nil:
		return queue.Ticket{}, refuse(ErrIdentityNotSupported, "this instance has no identity key (WAITROOM_IDENTITY_KEY or WAITROOM_IDENTITY_PUBLIC_KEY)")
	}
	e, err := s.Event(ctx, r.Event)
	if err != nil {
		return queue.Ticket{}, err
	}
	client := "admin" // the scope of admin joins' idempotency keys: not a client's key
	if !r.Admin {
		client = clientaddr.KeyOf(r.Client)
	}
	if r.IdempotencyKey != "" || r.IdempotencyKeySent {
		if !token.ValidIdempotencyKey(r.IdempotencyKey) {
			return queue.Ticket{}, refuse(ErrInvalidIdempotencyKey, token.IdempotencyKeyRule)
		}
	}
	var refusal string
	var refusedLeft time.Duration // the refusal's time left, when retryOnly
	retryOnly := false            // the client is refused here: the join may only find its ticket
	if !r.Admin {
		p.ClientKey, p.JoinLimit, p.JoinWindow = client, e.Limits.JoinsPerClient, e.Limits.JoinWindow
		p.TicketLimit = e.Limits.TicketsPerClient
		// A client the store refused is refused here until its window ends: a bot joining at
		// full speed costs no store call (the store counts its window's joins exactly anyway).
		// A join with an Idempotency-Key may be the retry of one whose answer was lost: the
		// store answers it with the ticket its key made, if live, and with nothing else
		// (RetryOnly; its challenge is not checked, since it can make nothing).
		refusal = refusalKey("join", e, p.ClientKey)
		if left, refused := s.refusals.Refused(refusal); refused {
			if r.IdempotencyKey == "" {
				return queue.Ticket{}, joinRefused(e.ID, left)
			}
			refusedLeft, retryOnly = left, true
		}
	}
	if retryOnly {
		if r.Identity != "" { // its user scopes its key (idempotencyScope)
			if p.UserKey, err = s.identityKey(r.Identity); err != nil {
				return queue.Ticket{}, joinRefused(e.ID, refusedLeft)
			}
		}
		p.RetryOnly = true
	} else if err := s.checkCredentials(ctx, e, r, &p); err != nil {
		if !r.Admin && (errors.Is(err, ErrInvalidIdentity) || errors.Is(err, ErrIdentityRequired) ||
			errors.Is(err, ErrChallengeRequired) || errors.Is(err, ErrChallengeFailed)) {
			err = s.countRefusal(ctx, e, p, refusal, err)
		}
		return queue.Ticket{}, err
	}
	if r.IdempotencyKey != "" {
		// Scoped after the credentials: a named join's key is its user's too.
		p.IdempotencyKey = idempotencyScope(client, p.UserKey, r.IdempotencyKey)
	}
	var t queue.Ticket
	err = s.restored(ctx, e.ID, func() (err error) {
		t, err = s.cfg.Store.Join(ctx, p)
		return err
	})
	var rl *queue.RateLimitedError
	switch {
	case errors.As(err, &rl) && rl.Prequeue:
		// Not remembered here: the store still answers this client's joins that find a live
		// ticket (a user's, an idempotent retry), and its bucket bounds how often it asks.
		return t, &Error{Kind: rl, Detail: "this address took its tickets_per_client (" + strconv.FormatInt(e.Limits.TicketsPerClient, 10) +
			") of the pre-queue of event " + e.ID + ": its next new ticket is at the opening"}
	case errors.As(err, &rl):
		if refusal != "" {
			s.refusals.Refuse(refusal, rl.RetryAfter)
		}
		return t, joinRefused(e.ID, rl.RetryAfter)
	case errors.Is(err, queue.ErrChallengeUsed) && retryOnly:
		return t, joinRefused(e.ID, refusedLeft) // no live ticket of its key: still refused
	case errors.Is(err, queue.ErrChallengeUsed):
		if p.RetryOnly {
			return t, challengeRefusal(ErrChallengeFailed, "the captcha service refused the token, and no earlier join with this Idempotency-Key made a ticket")
		}
		return t, challengeRefusal(ErrChallengeFailed, "this challenge was used already: fetch a new one")
	case err != nil:
		return t, err
	}
	s.counted(e.ID, t)
	return t, nil
}

// idempotencyScope returns the key the store remembers a join's Idempotency-Key by: key within
// the scope of its client (clientaddr.KeyOf, or "admin" for admin joins) and, for a named join,
// of its user (token.UserKey), hashed by token.IdempotencyKey. A key gives back only a ticket
// that its own client and user made: another person behind the same address (a NAT, a shared
// computer, an integrator reusing keys) who sends the same key takes a place of their own
// instead of the first one's ticket. An anonymous join's scope is its client's alone. The parts
// cannot run into each other: a client's key and an Idempotency-Key hold no NUL
// (token.ValidIdempotencyKey), so the user key, raw bytes, is all that follows the second.
func idempotencyScope(client, userKey, key string) string {
	scoped := client + "\x00" + key
	if userKey != "" {
		scoped += "\x00" + userKey
	}
	return token.IdempotencyKey(scoped)
}

// checkCredentials checks what a join says of who it is: the identity token (verified after
// the refusal memory, so that a refused client costs no signature check), the event's
// identity_required, and for a join not made with the admin key the event's challenge.
func (s *Service) checkCredentials(ctx context.Context, e event.Event, r JoinRequest, p *queue.JoinParams) error {
	if r.Identity != "" {
		var err error
		if p.UserKey, err = s.identityKey(r.Identity); err != nil {
			return refuse(ErrInvalidIdentity, "the identity token is invalid: "+TokenReason(err))
		}
	}
	if e.IdentityRequired && p.UserKey == "" {
		return refuse(ErrIdentityRequired,
			"event "+e.ID+` admits only identified people: join with {"identity": "<JWT>"} signed by the site`)
	}
	if r.Admin {
		return nil
	}
	return s.checkChallenge(ctx, e, r, p)
}

// identityKey verifies an identity token and returns its user's key (token.UserKey); errors
// are the token's (Config.Identity's Verify).
func (s *Service) identityKey(identity string) (string, error) {
	uid, err := s.cfg.Identity.Verify(identity, s.cfg.Now())
	if err != nil {
		return "", err
	}
	return token.UserKey(uid), nil
}

// countRefusal takes a join refused for its credentials (failed: an invalid identity, a
// missing identity, a missing or failed proof) from the
// client's bucket of joins_per_client in the store's step (queue.JoinParams.CountOnly), so that
// a refusal costs a bot what a join costs, exact across instances: once the bucket is empty it
// answers 429 (remembered here until the bucket lets a join through, like a join's) instead of
// failed. A closed or sold-out event says so; when the store does not answer, failed stands.
func (s *Service) countRefusal(ctx context.Context, e event.Event, p queue.JoinParams, refusal string, failed error) error {
	c := queue.JoinParams{Event: e.ID, ClientKey: p.ClientKey, JoinLimit: p.JoinLimit, JoinWindow: p.JoinWindow, CountOnly: true}
	err := s.restored(ctx, e.ID, func() error { _, err := s.cfg.Store.Join(ctx, c); return err })
	var rl *queue.RateLimitedError
	switch {
	case errors.As(err, &rl):
		s.refusals.Refuse(refusal, rl.RetryAfter)
		return joinRefused(e.ID, rl.RetryAfter)
	case errors.Is(err, queue.ErrEventClosed), errors.Is(err, queue.ErrSoldOut):
		return err
	case err != nil:
		s.cfg.Logger.Debug("counting a refused join", "event", e.ID, "err", err)
	}
	return failed
}

// counted counts a join in the metrics: its result, and an admission at once with its zero
// wait (waitroom_time_in_queue_seconds promises one observation per admission).
func (s *Service) counted(id string, t queue.Ticket) {
	if s.cfg.History != nil && t.Created && t.Status == queue.StatusAdmitted {
		s.cfg.History.Waited(id, 0) // the report's measured time in line, as the metric
	}
	m := s.cfg.Metrics
	if m == nil {
		return
	}
	result := "existing"
	if t.Created {
		result = "queued"
		if t.Status == queue.StatusAdmitted {
			result = "admitted"
			m.Admissions.WithLabelValues(id, "join").Inc()
			m.TimeInQueue.WithLabelValues(id).Observe(0)
		}
	}
	m.Joins.WithLabelValues(id, result).Inc()
}

// refusalKey names the refusal of kind ("join", "challenge") of the client key client that
// this instance remembers for e (Service.refusals): in e's life (its draw seed, made anew when
// the event is created again) and at its version (one more at every change of its settings).
// The store starts every client's bucket afresh when joins_per_client or join_window_s change,
// and in a new life (docs/api.md, "Limits"): a refusal remembered under other settings must
// not refuse what the store would now let through, as the instances that remember nothing
// do. (Any other change forgets the refusals too: the next join of each refused client asks
// the store once. The seed never leaves this process.)
func refusalKey(kind string, e event.Event, client string) string {
	return kind + ":" + e.ID + "\x00" + string(e.DrawSeed) + "\x00" + strconv.FormatInt(e.Version, 10) + "\x00" + client
}

func joinRefused(id string, left time.Duration) error {
	return &Error{Kind: &queue.RateLimitedError{RetryAfter: left}, Detail: "too many joins of event " + id + " from this address"}
}

// ChallengeURL is the path of an event's challenge (the challenge_url of its problems).
func ChallengeURL(eventID string) string { return "/v1/events/" + eventID + "/challenge" }

func challengeRefusal(kind error, detail string) error { return &Error{Kind: kind, Detail: detail} }

// challengeTarget is what e's proofs of work are for: e in its life (event.Event.Epoch: a
// challenge of the event before it was deleted and created again fails, since the line that
// recorded its use is gone), at e's current difficulty (one issued before the operator raised
// it is refused: challenge_required, fetch a new one).
func (s *Service) challengeTarget(e event.Event) challenge.Target {
	return challenge.Target{Event: e.ID, Epoch: s.epochs.of(e), Difficulty: e.Challenge.Difficulty}
}

// checkChallenge checks the proof a join of e carries against e's challenge and names it in p
// (p.ChallengeID, or p.RetryOnly for a retry whose captcha token cannot be checked again). A
// proof of work costs one HMAC and one SHA-256 (challenge.Issuer.Verify); a captcha token one
// POST to the operator's service, bounded by captcha.DefaultTimeout and counted against the
// client's joins_per_client first (in the shared counters: one store call), so that a flood of
// bogus tokens does not become a flood of requests to the service.
func (s *Service) checkChallenge(ctx context.Context, e event.Event, r JoinRequest, p *queue.JoinParams) error {
	switch e.Challenge.Type {
	case event.ChallengePow:
		if r.Proof.Challenge == "" {
			return challengeRefusal(ErrChallengeRequired, "joins of event "+e.ID+` carry a solved proof of work: GET `+ChallengeURL(e.ID)+
				`, solve it, and join with {"challenge": "…", "solution": "…"}`)
		}
		if s.cfg.Challenges == nil {
			return refuse(ErrChallengeUnavailable, "this instance has no challenge key")
		}
		c, err := s.cfg.Challenges.Verify(r.Proof.Challenge, r.Proof.Solution, s.challengeTarget(e), s.cfg.Now())
		switch {
		case errors.Is(err, challenge.ErrRequired):
			return challengeRefusal(ErrChallengeRequired, challengeReason(err)+": fetch a new one")
		case err != nil:
			return challengeRefusal(ErrChallengeFailed, challengeReason(err))
		}
		p.ChallengeID, p.ChallengeExpires = c.ID, c.ExpiresAt
	case event.ChallengeExternal:
		if r.Proof.CaptchaToken == "" {
			return challengeRefusal(ErrChallengeRequired, "joins of event "+e.ID+` carry a token of the site's captcha: join with {"captcha_token": "…"}`)
		}
		if len(r.Proof.CaptchaToken) > captcha.MaxToken || !event.ValidText(r.Proof.CaptchaToken) {
			return challengeRefusal(ErrChallengeFailed, "the captcha token is malformed")
		}
		if n, left := s.shared(ctx, "captcha", e, p.ClientKey); n > e.Limits.JoinsPerClient {
			return joinRefused(e.ID, left)
		}
		remote := ""
		if r.Client.IsValid() {
			remote = r.Client.String()
		}
		res, err := s.cfg.Captcha.Verify(ctx, e.Challenge.SiteverifyURL, e.Challenge.Secret, r.Proof.CaptchaToken, remote)
		if err != nil {
			s.cfg.Logger.Warn("captcha verification failed", "event", e.ID, "err", err)
			return refuse(ErrChallengeUnavailable, "the captcha service did not answer; retry shortly")
		}
		if !res.Success {
			if r.IdempotencyKey != "" {
				// A token is single use at the service: the retry of a join that used it
				// gets the ticket that join made, and nothing else (queue.JoinParams.RetryOnly).
				p.RetryOnly = true
				return nil
			}
			return challengeRefusal(ErrChallengeFailed, captchaReason(res))
		}
		sum := sha256.Sum256([]byte(r.Proof.CaptchaToken))
		p.ChallengeID, p.ChallengeExpires = hex.EncodeToString(sum[:16]), s.cfg.Now().Add(CaptchaTokenTTL)
	}
	return nil
}

// shared counts one of what (scope: "captcha" verifications, "challenge" fetches) of client
// for e in the current fixed window of e's join_window_s and returns the count and the time
// left in the window: Config.Counters' count (all instances together), or, when there are none
// or they do not answer, this instance's own. The count is of e's life (event.Event.Epoch): an
// event created again starts afresh, as its buckets of joins do.
func (s *Service) shared(ctx context.Context, scope string, e event.Event, client string) (int64, time.Duration) {
	name := e.ID + " " + s.epochs.of(e) + " " + client
	if s.cfg.Counters != nil {
		n, left, err := s.cfg.Counters.Count(ctx, store.CountKey{Scope: scope, Name: name}, 1, e.Limits.JoinWindow)
		if err == nil {
			return n, left
		}
		s.cfg.Logger.Warn("counting in the store; this instance counts alone meanwhile",
			"scope", scope, "event", e.ID, "client", client, "err", err)
	}
	return s.counts.Count(scope+" "+name, 1, e.Limits.JoinWindow)
}

// challengeReason is a challenge error without the package's prefix ("challenge expired").
func challengeReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// captchaReason says why the service refused a token, with its codes.
func captchaReason(r captcha.Result) string {
	if len(r.ErrorCodes) == 0 {
		return "the captcha service refused the token"
	}
	return "the captcha service refused the token (" + strings.Join(r.ErrorCodes, ", ") + ")"
}

// TokenReason is the short reason of a token error ("expired", "bad signature", "malformed"),
// without the library's internals.
func TokenReason(err error) string {
	msg := err.Error()
	for _, p := range []string{"token: bad admission token: ", "token: bad identity token: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if i := strings.Index(msg, ":"); i > 0 {
		msg = msg[:i]
	}
	return msg
}
