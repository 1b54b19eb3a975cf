package event

import (
	"errors"
	"fmt"
)

// Challenge types (Challenge.Type).
const (
	// ChallengeNone: joins need no challenge (the default).
	ChallengeNone = ""
	// ChallengePow: a join carries a solved proof-of-work challenge of package challenge
	// (GET /v1/events/{event_id}/challenge issues one).
	ChallengePow = "pow"
	// ChallengeExternal: a join carries a token of the operator's captcha service, checked at a
	// Turnstile- or hCaptcha-compatible siteverify URL (package captcha).
	ChallengeExternal = "external"
)

// Ranges of Challenge (Validate). Package challenge takes its DefaultDifficulty and
// MaxDifficulty from here, so that the range lives once.
const (
	// DefaultChallengeDifficulty: 2^19 = 524,288 SHA-256 hashes on average, about a second on
	// a mid-range phone (docs/challenge.md has the calibration).
	DefaultChallengeDifficulty = 19
	// MaxChallengeDifficulty: 2^40 hashes is hours even for native code.
	MaxChallengeDifficulty = 40
	// MaxSiteverifyURL and MaxChallengeSecret bound an external challenge's fields (bytes).
	MaxSiteverifyURL   = 2000
	MaxChallengeSecret = 1000
)

// Challenge is what an event asks of a join besides its body (issue 12: "challenge": {"type":
// "pow", "difficulty": D} or {"type": "external", "siteverify_url": U, "secret": S}). Joins
// made with the admin key are never challenged.
type Challenge struct {
	// Type is ChallengeNone, ChallengePow or ChallengeExternal.
	Type string
	// Difficulty is the leading zero bits a proof of work must show (pow only;
	// 1..MaxChallengeDifficulty). Defaults to DefaultChallengeDifficulty.
	Difficulty int
	// SiteverifyURL is the captcha service's verification endpoint, an absolute http or https
	// URL (external only), e.g. https://challenges.cloudflare.com/turnstile/v0/siteverify.
	SiteverifyURL string
	// Secret is the operator's secret at that service (external only). It is stored, sent to
	// SiteverifyURL, and never shown by the API.
	Secret string
}

// WithDefaults returns a copy with a proof of work's zero difficulty set to its default.
func (c Challenge) WithDefaults() Challenge {
	if c.Type == ChallengePow && c.Difficulty == 0 {
		c.Difficulty = DefaultChallengeDifficulty
	}
	return c
}

// Validate names the first field out of range (JSON names under "challenge"). Call it on
// WithDefaults' result.
func (c Challenge) Validate() error {
	switch c.Type {
	case ChallengeNone:
		if c != (Challenge{}) {
			return errors.New("challenge.type is required")
		}
	case ChallengePow:
		switch {
		case c.Difficulty < 1 || c.Difficulty > MaxChallengeDifficulty:
			return fmt.Errorf("challenge.difficulty must be between 1 and %d", MaxChallengeDifficulty)
		case c.SiteverifyURL != "" || c.Secret != "":
			return errors.New(`challenge.siteverify_url and challenge.secret belong to "type": "external" (send them as null to drop them)`)
		}
	case ChallengeExternal:
		switch {
		case c.Difficulty != 0:
			return errors.New(`challenge.difficulty belongs to "type": "pow" (send it as null to drop it)`)
		case c.SiteverifyURL == "" || len(c.SiteverifyURL) > MaxSiteverifyURL || !ValidText(c.SiteverifyURL) || !httpURL(c.SiteverifyURL):
			return fmt.Errorf("challenge.siteverify_url must be an absolute http or https URL of at most %d bytes", MaxSiteverifyURL)
		case c.Secret == "" || len(c.Secret) > MaxChallengeSecret || !ValidText(c.Secret):
			return fmt.Errorf("challenge.secret must be 1 to %d bytes of text", MaxChallengeSecret)
		}
	default:
		return fmt.Errorf(`challenge.type must be "pow" or "external", not %q`, c.Type)
	}
	return nil
}
