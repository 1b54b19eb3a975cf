package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
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

// secretForNewURL is the rule of a PATCH that changes an external challenge's siteverify_url
// (issue 20, item 9): it must give the secret again. A merge patch keeps what it does not name,
// so a patch of the URL alone would send the stored secret — which no response shows — to
// whatever URL an admin key names, with the next join. It returns a 422 detail, or "".
func secretForNewURL(patch map[string]json.RawMessage, b eventBody, cur event.Event) string {
	if cur.Challenge.Secret == "" || b.Challenge == nil || b.Challenge.SiteverifyURL == nil ||
		*b.Challenge.SiteverifyURL == cur.Challenge.SiteverifyURL {
		return ""
	}
	var ch map[string]json.RawMessage
	if json.Unmarshal(patch["challenge"], &ch) == nil {
		if s, ok := ch["secret"]; ok && string(s) != "null" {
			return ""
		}
	}
	return "challenge.siteverify_url changes: give challenge.secret again in the same PATCH (the stored secret is never sent to a new URL)"
}

// siteverifyAllowed is the rule of a configuration that names a new siteverify_url (a new
// external challenge, or another URL than before's): the URL must be one the operator allows
// (Config.Captcha, serve --captcha-siteverify-urls), not whatever an admin key names (issue 20,
// item 9). A URL unchanged is not checked here, so that an event the operator's list no longer
// covers can still be closed or paused; its joins are refused by the verifier itself, which
// sends nothing to it. It returns a 422 detail, or "".
func (a *API) siteverifyAllowed(e event.Event, before *event.Event) string {
	c := e.Challenge
	if c.Type != event.ChallengeExternal || (before != nil && before.Challenge.SiteverifyURL == c.SiteverifyURL) {
		return ""
	}
	if err := a.cfg.Captcha.Allowed(c.SiteverifyURL); err != nil {
		_, allows, _ := strings.Cut(err.Error(), ": this instance allows ")
		return "challenge.siteverify_url must be one of the verification URLs the operator allows (serve --captcha-siteverify-urls); this instance allows " + allows
	}
	return ""
}

// siteverifyURLs serves GET /v1/captcha/siteverify-urls (admin): the verification URLs an
// event's external challenge may name (serve --captcha-siteverify-urls), for the console to
// offer: {"siteverify_urls": [...]}, in the operator's order.
func (a *API) siteverifyURLs(w http.ResponseWriter, _ *http.Request, _ Actor) {
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"siteverify_urls": a.cfg.Captcha.AllowedURLs()})
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

// getChallenge serves GET /v1/events/{event_id}/challenge: what a join of the event needs
// (line.Service.Challenge): a new signed, expiring proof-of-work challenge, "external" (the
// operator's captcha) or "none"; 429 beyond the client's limit of fetches.
func (a *API) getChallenge(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	o, err := a.cfg.Line.Challenge(r.Context(), id, a.cfg.Clients.Addr(r))
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	v := challengeJSON{EventID: id, Type: o.Event.Challenge.Type}
	if v.Type == event.ChallengeNone {
		v.Type = "none"
	}
	if c := o.Challenge; c != nil {
		v.Challenge, v.Algorithm, v.Difficulty, v.ExpiresAt = c.String, challengeAlgorithm, c.Difficulty, &c.ExpiresAt
	}
	httpjson.WriteJSON(w, http.StatusOK, v)
}
