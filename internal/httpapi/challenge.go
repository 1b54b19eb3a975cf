package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/captcha"
	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
)

// challengeConfigJSON is "challenge": {...} of an event's configuration. Secret is read (PUT,
// PATCH) and kept for a PATCH to merge into, never shown (eventConfigView and auditView drop
// it).
type challengeConfigJSON struct {
	Type          string  `json:"type"`
	Difficulty    *int    `json:"difficulty,omitempty"`
	SiteverifyURL *string `json:"siteverify_url,omitempty"`
	Secret        *string `json:"secret,omitempty"`
}

// challenge reads the JSON into e.Challenge; it returns a 422 detail, or "". The ranges are
// event.Challenge.Validate's.
func (c *challengeConfigJSON) challenge(e *event.Event) string {
	if c == nil {
		return ""
	}
	if c.Type == "" {
		return `challenge.type is required ("pow" or "external"); "challenge": null removes the challenge`
	}
	e.Challenge = event.Challenge{Type: c.Type}
	if c.Difficulty != nil {
		if *c.Difficulty < 1 {
			return fmt.Sprintf("challenge.difficulty must be between 1 and %d", event.MaxChallengeDifficulty)
		}
		e.Challenge.Difficulty = *c.Difficulty
	}
	if c.SiteverifyURL != nil {
		e.Challenge.SiteverifyURL = *c.SiteverifyURL
	}
	if c.Secret != nil {
		e.Challenge.Secret = *c.Secret
	}
	return ""
}

// challengeConfigView is an event's challenge as PUT takes it, secret included (nil: none).
func challengeConfigView(c event.Challenge) *challengeConfigJSON {
	if c.Type == event.ChallengeNone {
		return nil
	}
	v := &challengeConfigJSON{Type: c.Type}
	if c.Type == event.ChallengePow {
		d := c.Difficulty
		v.Difficulty = &d
	}
	if c.SiteverifyURL != "" {
		u := c.SiteverifyURL
		v.SiteverifyURL = &u
	}
	if c.Secret != "" {
		s := c.Secret
		v.Secret = &s
	}
	return v
}

// publicChallengeView is challengeConfigView without the secret: what responses show.
func publicChallengeView(c event.Challenge) *challengeConfigJSON {
	v := challengeConfigView(c)
	if v != nil {
		v.Secret = nil
	}
	return v
}

// challengeURL is the path of an event's challenge (issue 12: the challenge_url of a
// challenge_required problem).
func challengeURL(eventID string) string { return "/v1/events/" + eventID + "/challenge" }

// challengeAlgorithm names the work of a proof-of-work challenge for clients (docs/challenge.md).
const challengeAlgorithm = "sha256-leading-zero-bits"

// challengeJSON is GET /v1/events/{event_id}/challenge.
type challengeJSON struct {
	EventID string `json:"event_id"`
	// Type is "none" (joins need nothing), "pow" (solve Challenge) or "external" (send the
	// operator's captcha token as captcha_token).
	Type       string     `json:"type"`
	Challenge  string     `json:"challenge,omitempty"`
	Algorithm  string     `json:"algorithm,omitempty"`
	Difficulty int        `json:"difficulty,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
}

// getChallenge serves GET /v1/events/{event_id}/challenge: for an event with a proof-of-work
// challenge, a new signed, expiring challenge (single use is enforced when a join uses it);
// otherwise what a join of the event needs ("none" or "external"). Issuing stores nothing.
func (a *API) getChallenge(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	e, ok := a.cfg.Registry.Cached(id)
	if !ok {
		var err error
		if e, err = a.cfg.Registry.Get(r.Context(), id); err != nil {
			a.StoreError(w, err, id)
			return
		}
	}
	v := challengeJSON{EventID: id, Type: e.Challenge.Type}
	switch e.Challenge.Type {
	case event.ChallengeNone:
		v.Type = "none"
	case event.ChallengePow:
		if a.cfg.Challenges == nil {
			httpjson.WriteProblem(w, httpjson.NewProblem(503, "challenge_unavailable", "this instance has no challenge key"))
			return
		}
		c, err := a.cfg.Challenges.Issue(id, e.Challenge.Difficulty, a.cfg.Now())
		if err != nil { // a validated event's id and difficulty: cannot happen
			httpjson.WriteProblem(w, httpjson.NewProblem(500, "internal_error", "could not issue a challenge"))
			return
		}
		v.Challenge, v.Algorithm, v.Difficulty, v.ExpiresAt = c.String, challengeAlgorithm, c.Difficulty, &c.ExpiresAt
	}
	httpjson.WriteJSON(w, http.StatusOK, v)
}

// checkChallenge checks the proof a join of e carries against e's challenge and names it in p
// (p.ChallengeID, or p.RetryOnly for a retry whose captcha token cannot be checked again); it
// returns the problem to answer instead, or nil. A proof of work costs one HMAC and one SHA-256
// (challenge.Issuer.Verify); a captcha token one POST to the operator's service, bounded by
// captcha.DefaultTimeout and counted against the client's joins_per_client first (in the shared
// counters: one store call), so that a flood of bogus tokens does not become a flood of
// requests to the service.
func (a *API) checkChallenge(r *http.Request, e event.Event, b joinBody, p *queue.JoinParams) *httpjson.Problem {
	switch e.Challenge.Type {
	case event.ChallengePow:
		if a.cfg.Challenges == nil {
			return httpjson.NewProblem(503, "challenge_unavailable", "this instance has no challenge key")
		}
		if b.Challenge == "" {
			return challengeRequired(e.ID, "joins of event "+e.ID+` carry a solved proof of work: GET `+challengeURL(e.ID)+
				`, solve it, and join with {"challenge": "…", "solution": "…"}`)
		}
		c, err := a.cfg.Challenges.Verify(b.Challenge, b.Solution, e.ID, a.cfg.Now())
		switch {
		case errors.Is(err, challenge.ErrRequired):
			return challengeRequired(e.ID, challengeReason(err)+": fetch a new one")
		case err != nil:
			return challengeFailed(e.ID, challengeReason(err))
		}
		p.ChallengeID, p.ChallengeExpires = c.ID, c.ExpiresAt
	case event.ChallengeExternal:
		if b.CaptchaToken == "" {
			return challengeRequired(e.ID, "joins of event "+e.ID+` carry a token of the site's captcha: join with {"captcha_token": "…"}`)
		}
		if len(b.CaptchaToken) > captcha.MaxToken || !event.ValidText(b.CaptchaToken) {
			return challengeFailed(e.ID, "the captcha token is malformed")
		}
		addr := a.cfg.Clients.Addr(r)
		if n, left := a.captchaVerifications(r.Context(), e.ID, clientaddr.KeyOf(addr), e.Limits.JoinWindow); n > e.Limits.JoinsPerClient {
			return httpjson.RateLimited(left, "too many joins of event "+e.ID+" from this address")
		}
		remote := ""
		if addr.IsValid() {
			remote = addr.String()
		}
		res, err := a.cfg.Captcha.Verify(r.Context(), e.Challenge.SiteverifyURL, e.Challenge.Secret, b.CaptchaToken, remote)
		if err != nil {
			a.cfg.Logger.Warn("captcha verification failed", "event", e.ID, "err", err)
			return httpjson.NewProblem(503, "challenge_unavailable", "the captcha service did not answer; retry shortly")
		}
		if !res.Success {
			if p.IdempotencyKey != "" {
				// A token is single use at the service: the retry of a join that used it
				// gets the ticket that join made, and nothing else (queue.JoinParams.RetryOnly).
				p.RetryOnly = true
				return nil
			}
			return challengeFailed(e.ID, captchaReason(res))
		}
		sum := sha256.Sum256([]byte(b.CaptchaToken))
		p.ChallengeID, p.ChallengeExpires = hex.EncodeToString(sum[:16]), a.cfg.Now().Add(CaptchaTokenTTL)
	}
	return nil
}

// captchaVerifications counts a captcha verification of client for event in the current
// window and returns the count and the time left in the window: Config.Counters' count (all
// instances together), or, when there are none or they do not answer, this instance's own.
func (a *API) captchaVerifications(ctx context.Context, eventID, client string, window time.Duration) (int64, time.Duration) {
	name := eventID + " " + client
	if a.cfg.Counters != nil {
		n, left, err := a.cfg.Counters.Count(ctx, store.CountKey{Scope: "captcha", Name: name}, 1, window)
		if err == nil {
			return n, left
		}
		a.cfg.Logger.Warn("counting captcha verifications in the store; this instance counts alone meanwhile",
			"event", eventID, "client", client, "err", err)
	}
	return a.captchas.Count(name, 1, window)
}

// CaptchaTokenTTL is how long a verified captcha token is remembered as used: Turnstile's
// tokens live 300 s (hCaptcha's 120 s), and the services refuse a second verification anyway.
const CaptchaTokenTTL = 300 * time.Second

// challengeUsed is the problem of a join refused by the store with queue.ErrChallengeUsed.
func challengeUsed(eventID string, p queue.JoinParams) *httpjson.Problem {
	if p.RetryOnly {
		return challengeFailed(eventID, "the captcha service refused the token, and no earlier join with this Idempotency-Key made a ticket")
	}
	return challengeFailed(eventID, "this challenge was used already: fetch a new one")
}

func challengeRequired(eventID, detail string) *httpjson.Problem {
	p := httpjson.NewProblem(401, "challenge_required", detail)
	p.Extra = map[string]any{"challenge_url": challengeURL(eventID)}
	return p
}

func challengeFailed(eventID, detail string) *httpjson.Problem {
	p := httpjson.NewProblem(403, "challenge_failed", detail)
	p.Extra = map[string]any{"challenge_url": challengeURL(eventID)}
	return p
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
