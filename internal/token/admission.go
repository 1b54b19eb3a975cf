package token

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is the "iss" claim (RFC 7519 §4.1.1) of every admission token.
const Issuer = "waitroom"

// maxAdmissionTokenLen bounds the input of [Admissions.Verify]; a real token is about 330
// bytes. Longer input is rejected as malformed before any decoding.
const maxAdmissionTokenLen = 2048

// Errors returned by [Admissions.Verify].
var (
	// ErrBadToken is wrapped by every error of [Admissions.Verify], with the reason appended
	// (malformed, unsupported alg, unknown kid, bad signature, expired, missing or invalid
	// claim).
	ErrBadToken = errors.New("token: bad admission token")
	// ErrTokenExpired is the [ErrBadToken] of an authentic token whose "exp" has passed
	// (exp <= now). errors.Is(err, ErrBadToken) holds for it too. Callers may want to tell
	// this case apart: the holder should fetch a new token rather than give up.
	ErrTokenExpired = fmt.Errorf("%w: expired", ErrBadToken)
)

// AdmissionClaims is what an authentic, unexpired admission token asserts.
type AdmissionClaims struct {
	Event    string    // "evt": the event id
	TicketID string    // "sub": the ticket id (see [TicketIDs])
	Number   int64     // "num": the ticket number, >= 1
	Expires  time.Time // "exp", whole seconds: the token's end (see [Admissions.Mint])
	IssuedAt time.Time // "iat", whole seconds
	// User is "usr": the ticket's user key (UserKey, 16 bytes) in hex, "" for an anonymous
	// ticket. The sale caps a user's purchases by it (max_per_user).
	User string
}

// admissionJWT is the JSON claim set of an admission token, as decoded by golang-jwt.
type admissionJWT struct {
	Event  string `json:"evt"`
	Number int64  `json:"num"`
	User   string `json:"usr,omitempty"`
	jwt.RegisteredClaims
}

// Validate implements jwt.ClaimsValidator; golang-jwt calls it only after the signature has
// been verified. exp and iss are checked by parser options.
func (c *admissionJWT) Validate() error {
	switch {
	case c.Subject == "":
		return fmt.Errorf("%w: sub", jwt.ErrTokenRequiredClaimMissing)
	case c.Event == "":
		return fmt.Errorf("%w: evt", jwt.ErrTokenRequiredClaimMissing)
	case c.Number < 1:
		return fmt.Errorf("%w: num", jwt.ErrTokenRequiredClaimMissing)
	case c.IssuedAt == nil:
		return fmt.Errorf("%w: iat", jwt.ErrTokenRequiredClaimMissing)
	}
	return nil
}

// Admissions mints and verifies admission tokens: the credential an admitted visitor presents
// to the protected back end. It is safe for concurrent use.
//
// An admission token is a JWT (RFC 7519) signed with EdDSA over Ed25519 (RFC 8037 §3.1,
// RFC 8032), compact JWS serialization (RFC 7515 §7.1). The protected header is
//
//	{"alg":"EdDSA","kid":"<kid>","typ":"JWT"}
//
// and the claims are
//
//	iss  "waitroom"
//	sub  ticket id (string)
//	evt  event id (string)
//	num  ticket number (integer)
//	iat  issue time, seconds since the Unix epoch (RFC 7519 §2 NumericDate)
//	exp  the token's end, seconds: the end of the admitted session rounded up, but at most
//	     the token TTL after iat when one is set (WithTTL), so that a token of a line lost or
//	     left dies soon; every status read and push message carries a fresh one
//	jti  16 random bytes, 32 lower-case hex characters (RFC 7519 §4.1.7)
//
// Keys rotate by "kid" (RFC 7515 §4.1.4): tokens are signed with the current key and verified
// with whichever configured key the "kid" names, so tokens minted under a previous key stay
// valid for as long as that key is kept in the previous list. The public keys are published as
// a JWK Set by [Admissions.JWKS] so that back ends verify offline.
type Admissions struct {
	ttl    time.Duration // the longest life of a token, 0 = the session's end; see WithTTL
	signer ed25519.PrivateKey
	prefix string // base64url(header) + "."
	keys   map[string]ed25519.PublicKey
	kids   []string // the keys' ids, current first
	jwks   []byte
}

// NewAdmissions returns an Admissions that signs with current and verifies tokens signed with
// current or any of previous. A key whose KID is already present is ignored. Keys should come
// from [DeriveKeys]; an empty KID is computed with [KeyID]. It panics if a key has the wrong
// size (a programming error: [DeriveKeys] cannot produce one).
func NewAdmissions(current Keys, previous ...Keys) *Admissions {
	if len(current.Signing) != ed25519.PrivateKeySize {
		panic("token: NewAdmissions: current signing key is not an Ed25519 private key")
	}
	a := &Admissions{signer: current.Signing, keys: make(map[string]ed25519.PublicKey, 1+len(previous))}

	type jwk struct {
		Kty string `json:"kty"`
		Crv string `json:"crv"`
		X   string `json:"x"`
		Kid string `json:"kid"`
		Alg string `json:"alg"`
		Use string `json:"use"`
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	var curKID string
	for i, k := range append([]Keys{current}, previous...) {
		pub := k.Public
		if pub == nil && len(k.Signing) == ed25519.PrivateKeySize {
			pub = k.Signing.Public().(ed25519.PublicKey)
		}
		if len(pub) != ed25519.PublicKeySize {
			panic("token: NewAdmissions: public key is not an Ed25519 public key")
		}
		kid := k.KID
		if kid == "" {
			kid = KeyID(pub)
		}
		if i == 0 {
			curKID = kid
		}
		if _, dup := a.keys[kid]; dup {
			continue
		}
		a.keys[kid] = append(ed25519.PublicKey(nil), pub...)
		a.kids = append(a.kids, kid)
		set.Keys = append(set.Keys, jwk{
			Kty: "OKP", Crv: "Ed25519", // RFC 8037 §2
			X:   base64.RawURLEncoding.EncodeToString(pub),
			Kid: kid, Alg: "EdDSA", Use: "sig",
		})
	}

	header, err := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
		Typ string `json:"typ"`
	}{"EdDSA", curKID, "JWT"})
	if err != nil {
		panic(err) // unreachable: strings only
	}
	a.prefix = base64.RawURLEncoding.EncodeToString(header) + "."
	if a.jwks, err = json.Marshal(set); err != nil {
		panic(err)
	}
	return a
}

// WithTTL returns a copy of a whose tokens live at most ttl after issue (rounded up to whole
// seconds), or until the session's end if that comes first; ttl <= 0 = until the session's
// end (what NewAdmissions gives). Holders get a fresh token with every status read and push
// message, so a live session always has one; a token of a session that ended, or of a line the
// store lost, stops verifying offline within the TTL. Call it before use.
func (a *Admissions) WithTTL(ttl time.Duration) *Admissions {
	c := *a
	c.ttl = max(0, (ttl + time.Second - 1).Truncate(time.Second))
	return &c
}

// TTL is the longest life of a token, 0 = until the session's end (see WithTTL).
func (a *Admissions) TTL() time.Duration { return a.ttl }

// JWKS returns the JSON Web Key Set (RFC 7517 §5) of the verification keys, current first,
// each an OKP key (RFC 8037 §2):
//
//	{"keys":[{"kty":"OKP","crv":"Ed25519","x":"<base64url public key>","kid":"…","alg":"EdDSA","use":"sig"}]}
//
// It is computed once by [NewAdmissions]; the returned slice is shared and must not be
// modified. Serve it as application/jwk-set+json (or application/json).
func (a *Admissions) JWKS() []byte { return a.jwks }

// KIDs returns the ids of the verification keys (the JWKS's kids), the current (signing) key's
// first. They are public, and tell whether two instances share their token keys: an instance
// whose current kid another does not hold makes tickets and tokens the other cannot read. The
// returned slice is shared and must not be modified.
func (a *Admissions) KIDs() []string { return a.kids }

// Mint returns a signed admission token for the ticket numbered number with id ticketID in
// event eventID, issued at now (rounded down), valid until expires (the session's
// admitted_until) rounded up to the next whole second, or until iat + TTL (WithTTL) if that is
// earlier.
// It fails if eventID or ticketID is empty, if number < 1, or if the token would already be
// expired at now.
func (a *Admissions) Mint(eventID, ticketID string, number int64, expires time.Time, now time.Time) (string, error) {
	return a.MintUser(eventID, ticketID, number, "", expires, now)
}

// MintUser is Mint for a ticket of a named user: userKey (a UserKey, raw bytes; "" = none) is
// carried hex-encoded in the "usr" claim.
func (a *Admissions) MintUser(eventID, ticketID string, number int64, userKey string, expires time.Time, now time.Time) (string, error) {
	switch {
	case eventID == "":
		return "", errors.New("token: mint: empty event id")
	case ticketID == "":
		return "", errors.New("token: mint: empty ticket id")
	case number < 1:
		return "", errors.New("token: mint: ticket number < 1")
	}
	exp := expires.Unix()
	if expires.Nanosecond() != 0 {
		exp++ // round up: the token must not end before the session does
	}
	if a.ttl > 0 {
		exp = min(exp, now.Unix()+int64(a.ttl/time.Second))
	}
	if !time.Unix(exp, 0).After(now) {
		return "", fmt.Errorf("token: mint: expiry %s is not after now %s", expires.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}

	var jti [16]byte
	_, _ = rand.Read(jti[:]) // never fails (crypto/rand, Go >= 1.24)

	// The claim set is built by hand rather than with encoding/json: Mint runs once per
	// admitted visitor and this keeps it to a few allocations. Verify (golang-jwt) and the
	// tests check that the result is a standard JWT.
	var cbuf [320]byte
	c := append(cbuf[:0], `{"iss":"`+Issuer+`","sub":`...)
	c = appendJSONString(c, ticketID)
	c = append(c, `,"evt":`...)
	c = appendJSONString(c, eventID)
	c = append(c, `,"num":`...)
	c = strconv.AppendInt(c, number, 10)
	c = append(c, `,"iat":`...)
	c = strconv.AppendInt(c, now.Unix(), 10)
	c = append(c, `,"exp":`...)
	c = strconv.AppendInt(c, exp, 10)
	c = append(c, `,"jti":"`...)
	c = hex.AppendEncode(c, jti[:])
	if userKey != "" {
		c = append(c, `","usr":"`...)
		c = hex.AppendEncode(c, []byte(userKey))
	}
	c = append(c, `"}`...)

	enc := base64.RawURLEncoding
	signedLen := len(a.prefix) + enc.EncodedLen(len(c))
	var sbuf [768]byte
	var s []byte
	if signedLen <= len(sbuf) {
		s = sbuf[:signedLen]
	} else {
		s = make([]byte, signedLen)
	}
	copy(s, a.prefix)
	enc.Encode(s[len(a.prefix):], c)

	sig := ed25519.Sign(a.signer, s)
	var sigb64 [86]byte // base64url of 64 bytes, no padding
	enc.Encode(sigb64[:], sig)

	var b strings.Builder
	b.Grow(signedLen + 1 + len(sigb64))
	b.Write(s)
	b.WriteByte('.')
	b.Write(sigb64[:])
	return b.String(), nil
}

// appendJSONString appends s as a JSON string (RFC 8259 §7). Ids are plain ASCII, which is
// the fast path; anything else goes through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // cannot fail for a string
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

var (
	errNoKID      = errors.New("no kid header")
	errUnknownKID = errors.New("unknown kid")
	// errCrit: a "crit" header names extensions the recipient must understand; none is
	// understood here, so such a token is refused (RFC 7515 §4.1.11).
	errCrit = errors.New("crit header")
)

// critical reports errCrit for a token with a "crit" header.
func critical(t *jwt.Token) error {
	if _, ok := t.Header["crit"]; ok {
		return errCrit
	}
	return nil
}

func (a *Admissions) keyFor(t *jwt.Token) (any, error) {
	if err := critical(t); err != nil {
		return nil, err
	}
	if t.Method != jwt.SigningMethodEdDSA { // also enforced by WithValidMethods
		return nil, fmt.Errorf("unexpected alg %v", t.Header["alg"])
	}
	kid, ok := t.Header["kid"].(string)
	if !ok {
		return nil, errNoKID
	}
	pub, ok := a.keys[kid]
	if !ok {
		return nil, errUnknownKID
	}
	return pub, nil
}

var edDSAOnly = []string{"EdDSA"}

// Verify checks an admission token and returns its claims. The token must be a compact JWS
// with "alg":"EdDSA" (never "none", HS256 or anything else: RFC 8725 §3.1), a "kid" naming one
// of the configured keys and a valid Ed25519 signature under it; its claims must include
// iss "waitroom", sub, evt, num >= 1, iat and exp, and it must not be expired at now: expired
// means exp <= now (RFC 7519 §4.1.4), with no leeway. nbf, if present, must be <= now.
//
// Every error wraps [ErrBadToken] and states the reason; an expired (but otherwise authentic)
// token gives [ErrTokenExpired].
func (a *Admissions) Verify(token string, now time.Time) (AdmissionClaims, error) {
	if len(token) > maxAdmissionTokenLen {
		return AdmissionClaims{}, fmt.Errorf("%w: malformed: longer than %d bytes", ErrBadToken, maxAdmissionTokenLen)
	}
	p := jwt.NewParser(
		jwt.WithValidMethods(edDSAOnly),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(Issuer),
		jwt.WithStrictDecoding(),
	)
	var c admissionJWT
	t, err := p.ParseWithClaims(token, &c, a.keyFor)
	if err != nil {
		return AdmissionClaims{}, classify(ErrBadToken, ErrTokenExpired, edDSAOnly, t, err)
	}
	return AdmissionClaims{
		Event:    c.Event,
		TicketID: c.Subject,
		Number:   c.Number,
		Expires:  c.ExpiresAt.Time,
		IssuedAt: c.IssuedAt.Time,
		User:     c.User,
	}, nil
}

// classify turns an error of jwt.Parser.ParseWithClaims into base (or expired) wrapped with a
// short reason; allowed lists the algorithms the caller accepts.
func classify(base, expired error, allowed []string, t *jwt.Token, err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w: malformed: %v", base, err)
	case t != nil && t.Method == nil:
		return fmt.Errorf("%w: unsupported alg %q", base, fmt.Sprint(t.Header["alg"]))
	case errors.Is(err, errCrit):
		return fmt.Errorf("%w: unsupported crit header", base)
	case errors.Is(err, errNoKID):
		return fmt.Errorf("%w: missing kid", base)
	case errors.Is(err, errUnknownKID):
		return fmt.Errorf("%w: unknown kid %q", base, fmt.Sprint(t.Header["kid"]))
	case t != nil && !slices.Contains(allowed, t.Method.Alg()):
		return fmt.Errorf("%w: unsupported alg %q", base, t.Method.Alg())
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return fmt.Errorf("%w: bad signature", base)
	case errors.Is(err, jwt.ErrTokenExpired):
		if expired != nil {
			return expired
		}
		return fmt.Errorf("%w: expired", base)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return fmt.Errorf("%w: missing claim: %v", base, err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return fmt.Errorf("%w: wrong issuer", base)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("%w: not valid yet", base)
	case errors.Is(err, jwt.ErrTokenInvalidSubject):
		return fmt.Errorf("%w: invalid sub: %v", base, err)
	default:
		return fmt.Errorf("%w: invalid: %v", base, err)
	}
}
