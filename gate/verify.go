package gate

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxTokenLen bounds the tokens the gate decodes; a real admission token is about 330 bytes.
const maxTokenLen = 4096

// Errors of [Gate.Verify].
var (
	// ErrInvalidToken is wrapped by every rejection of a token itself, with the reason
	// appended: malformed, unsupported alg, missing or unknown kid, bad signature, wrong
	// issuer, wrong event, missing claim, expired, not valid yet, issued in the future.
	ErrInvalidToken = errors.New("gate: invalid admission token")
	// ErrTokenExpired is the ErrInvalidToken of an authentic token whose exp (plus the clock
	// skew) has passed: the visitor should fetch a fresh token from the waiting room.
	ErrTokenExpired = fmt.Errorf("%w: expired", ErrInvalidToken)
	// ErrWrongEvent is the ErrInvalidToken of an authentic token of another event.
	ErrWrongEvent = fmt.Errorf("%w: another event", ErrInvalidToken)
	// ErrNotLive means the token verifies but the waiting room says the admitted session
	// ended or the ticket left (online check answered 401).
	ErrNotLive = errors.New("gate: admission not live")
	// ErrKeysUnavailable means no key set has been fetched yet, so no token can be verified;
	// the gate answers 503 then rather than sending the visitor to the line.
	ErrKeysUnavailable = errors.New("gate: the waiting room's keys are not available yet")
	// ErrShared means the token verifies but the waiting room says its admission is used from
	// more addresses at once than the event allows (online check answered 403): it is its
	// holder's, not to be shared.
	ErrShared = errors.New("gate: admission used from too many addresses")
	// ErrOnlineUnavailable means the online check got no usable answer (and
	// [Config.OnlineFailOpen] is not set).
	ErrOnlineUnavailable = errors.New("gate: the waiting room did not answer the admission check")
	// ErrClientUnknown means [Gate.Handler] could not tell the visitor's address
	// ([Config.ClientAddr] gave the zero Addr: a unix socket's peer, say) while the online
	// check is on: an address not named is not counted against the event's
	// addresses_per_admission, so the visitor is turned away (503) rather than let through
	// uncounted. Set Config.ClientAddr or TrustedProxies to name visitors.
	ErrClientUnknown = errors.New("gate: the visitor's address is unknown, so the admission check cannot count it")
)

var errIATAfterEXP = errors.New("iat after exp")

var edDSAOnly = []string{jwt.SigningMethodEdDSA.Alg()}

// claims is the claim set of an admission token as golang-jwt decodes it.
type claims struct {
	Event  string `json:"evt"`
	Number int64  `json:"num"`
	jwt.RegisteredClaims
}

// Validate implements jwt.ClaimsValidator; golang-jwt calls it after the signature verified,
// next to its own exp/nbf/iat/iss checks (so exp may be absent here: that is reported by
// WithExpirationRequired).
func (c *claims) Validate() error {
	switch {
	case c.Subject == "":
		return fmt.Errorf("%w: sub", jwt.ErrTokenRequiredClaimMissing)
	case c.Event == "":
		return fmt.Errorf("%w: evt", jwt.ErrTokenRequiredClaimMissing)
	case c.Number < 1:
		return fmt.Errorf("%w: num", jwt.ErrTokenRequiredClaimMissing)
	case c.IssuedAt == nil:
		return fmt.Errorf("%w: iat", jwt.ErrTokenRequiredClaimMissing)
	case c.ExpiresAt != nil && c.IssuedAt.After(c.ExpiresAt.Time):
		return errIATAfterEXP
	}
	return nil
}

// Verify checks an admission token and returns what it asserts. Offline: a compact JWS with
// alg EdDSA only (never "none", HS256 or other: RFC 8725 §3.1), a kid naming a key of the
// waiting room's key set (an unknown kid fetches the set again, at most once per
// [Config.JWKSMinRefresh]), a valid Ed25519 signature (RFC 8037), iss "waitroom", evt equal to
// the gate's event, sub, num >= 1, iat not in the future and not after exp, nbf (if present)
// passed, and exp not passed; the times with [Config.ClockSkew] of tolerance. Then, with
// [Config.OnlineCheck], the waiting room must confirm the session is live.
//
// Errors: [ErrInvalidToken] (wrapped with the reason; [ErrTokenExpired] and [ErrWrongEvent]
// are such), [ErrNotLive], [ErrKeysUnavailable], [ErrOnlineUnavailable], or ctx's error when
// ctx ends while a key fetch or online check is under way.
func (g *Gate) Verify(ctx context.Context, token string) (Admission, error) {
	return g.VerifyFrom(ctx, token, netip.Addr{})
}

// VerifyFrom is Verify for a visitor at address client: the online check names it, so that the
// waiting room counts it among the addresses using the admission (limits.addresses_per_admission),
// and answers [ErrShared] to one address too many. [Gate.Handler] calls it with
// [Config.ClientAddr]; the zero Addr names no address.
func (g *Gate) VerifyFrom(ctx context.Context, token string, client netip.Addr) (Admission, error) {
	a, err := g.verifyOffline(ctx, token)
	if err != nil {
		return Admission{}, err
	}
	if g.online != nil {
		if err := g.online.check(ctx, token, client, a.Expires); err != nil {
			return Admission{}, err
		}
	}
	return a, nil
}

func (g *Gate) verifyOffline(ctx context.Context, token string) (Admission, error) {
	if len(token) > maxTokenLen {
		return Admission{}, fmt.Errorf("%w: malformed: longer than %d bytes", ErrInvalidToken, maxTokenLen)
	}
	p := jwt.NewParser(
		jwt.WithValidMethods(edDSAOnly),
		jwt.WithTimeFunc(g.cfg.Clock.Now),
		jwt.WithLeeway(g.cfg.ClockSkew),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(Issuer),
		jwt.WithStrictDecoding(),
	)
	var keyErr error
	keyFunc := func(t *jwt.Token) (any, error) {
		kid, ok := t.Header["kid"].(string)
		if !ok || kid == "" {
			keyErr = fmt.Errorf("%w: missing kid", ErrInvalidToken)
			return nil, keyErr
		}
		var pub ed25519.PublicKey
		pub, keyErr = g.keys.lookup(ctx, kid)
		if keyErr != nil {
			return nil, keyErr
		}
		return pub, nil
	}
	var c claims
	t, err := p.ParseWithClaims(token, &c, keyFunc)
	if err != nil {
		if keyErr != nil {
			return Admission{}, keyErr
		}
		return Admission{}, reason(t, err)
	}
	if c.Event != g.cfg.EventID {
		return Admission{}, fmt.Errorf("%w %q", ErrWrongEvent, c.Event)
	}
	return Admission{
		Event:    c.Event,
		TicketID: c.Subject,
		Number:   c.Number,
		Expires:  c.ExpiresAt.Time,
		IssuedAt: c.IssuedAt.Time,
		Token:    token,
	}, nil
}

// reason turns an error of jwt.Parser.ParseWithClaims into ErrInvalidToken with a short
// reason.
func reason(t *jwt.Token, err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w: malformed: %v", ErrInvalidToken, err)
	case t != nil && (t.Method == nil || t.Method.Alg() != jwt.SigningMethodEdDSA.Alg()):
		return fmt.Errorf("%w: unsupported alg %q", ErrInvalidToken, fmt.Sprint(t.Header["alg"]))
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return fmt.Errorf("%w: bad signature", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenExpired):
		return ErrTokenExpired
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("%w: missing claim: %v", ErrInvalidToken, err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return fmt.Errorf("%w: wrong issuer", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("%w: not valid yet", ErrInvalidToken)
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return fmt.Errorf("%w: issued in the future", ErrInvalidToken)
	default:
		return fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
}

// maxAge returns the cookie lifetime for a token ending at exp: whole seconds until exp,
// at least 1.
func maxAge(exp, now time.Time) int {
	s := int(exp.Sub(now) / time.Second)
	return max(s, 1)
}
