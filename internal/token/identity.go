package token

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/golang-jwt/jwt/v5"
)

// MaxUserIDLen is the largest "sub" (user id), in bytes, that [IdentityVerifier.Verify]
// accepts.
const MaxUserIDLen = 128

// maxIdentityTokenLen bounds the input of [IdentityVerifier.Verify]; longer input is
// rejected as malformed before any decoding.
const maxIdentityTokenLen = 8192

// Errors of the identity verifier.
var (
	// ErrNoIdentityKey is returned by [NewIdentityVerifier] when neither key is given.
	ErrNoIdentityKey = errors.New("token: no identity key configured")
	// ErrBadIdentity is wrapped by every error of [IdentityVerifier.Verify], with the reason
	// appended (malformed, unsupported alg, bad signature, expired, missing exp, bad sub...).
	ErrBadIdentity = errors.New("token: bad identity token")
	// ErrBadPublicKey is returned by [ParseEd25519PublicKey].
	ErrBadPublicKey = errors.New("token: not an Ed25519 public key")
)

// IdentityVerifier checks identity JWTs (RFC 7519): tokens with which the integrating site
// vouches that its visitor is the user named in "sub". The site signs them with HS256
// (HMAC-SHA256 with a shared secret, RFC 7518 §3.2) or EdDSA (Ed25519, RFC 8037), whichever
// the operator configured. It is safe for concurrent use.
type IdentityVerifier struct {
	hmacKey []byte            // nil: HS256 not accepted
	pub     ed25519.PublicKey // nil: EdDSA not accepted
	algs    []string          // the accepted "alg" values
	iss     string            // "" = not checked
	aud     string            // "" = not checked
}

// CheckClaims returns a copy of v that also requires "iss" to equal issuer and "aud" to
// contain audience (RFC 7519 §4.1.1, §4.1.3); an empty value leaves that claim unchecked.
func (v *IdentityVerifier) CheckClaims(issuer, audience string) *IdentityVerifier {
	c := *v
	c.iss, c.aud = issuer, audience
	return &c
}

// NewIdentityVerifier returns a verifier accepting HS256 tokens signed with hmacKey (if
// non-empty) and EdDSA tokens signed by the private key of edPublic (if non-nil); at least one
// must be given, else [ErrNoIdentityKey]. hmacKey is the bytes of WAITROOM_IDENTITY_KEY
// exactly as given (no decoding); RFC 7518 §3.2 asks for at least 32 bytes for HS256, which
// is the operator's responsibility. edPublic must be 32 bytes (see [ParseEd25519PublicKey]),
// else [ErrBadPublicKey]. Both keys are copied.
func NewIdentityVerifier(hmacKey []byte, edPublic ed25519.PublicKey) (*IdentityVerifier, error) {
	v := &IdentityVerifier{}
	if len(hmacKey) > 0 {
		v.hmacKey = append([]byte(nil), hmacKey...)
		v.algs = append(v.algs, jwt.SigningMethodHS256.Alg())
	}
	if edPublic != nil {
		if len(edPublic) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: %d bytes, want %d", ErrBadPublicKey, len(edPublic), ed25519.PublicKeySize)
		}
		v.pub = append(ed25519.PublicKey(nil), edPublic...)
		v.algs = append(v.algs, jwt.SigningMethodEdDSA.Alg())
	}
	if len(v.algs) == 0 {
		return nil, ErrNoIdentityKey
	}
	return v, nil
}

// ParseEd25519PublicKey parses an Ed25519 public key given either as a PEM block of type
// "PUBLIC KEY" holding a PKIX SubjectPublicKeyInfo (RFC 8410 §4), or as the raw 32-byte key
// (RFC 8032 §5.1.5) in base64, standard or URL alphabet (RFC 4648 §4, §5), padded or not.
// Surrounding white space is ignored. Errors wrap [ErrBadPublicKey].
func ParseEd25519PublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		block, rest := pem.Decode([]byte(s))
		if block == nil {
			return nil, fmt.Errorf("%w: invalid PEM", ErrBadPublicKey)
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("%w: PEM block type %q, want \"PUBLIC KEY\"", ErrBadPublicKey, block.Type)
		}
		if len(strings.TrimSpace(string(rest))) != 0 {
			return nil, fmt.Errorf("%w: trailing data after PEM block", ErrBadPublicKey)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadPublicKey, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%w: PEM holds a %T", ErrBadPublicKey, k)
		}
		return pub, nil
	}
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("%w: %d bytes, want %d", ErrBadPublicKey, len(b), ed25519.PublicKeySize)
			}
			return ed25519.PublicKey(b), nil
		}
	}
	return nil, fmt.Errorf("%w: neither PEM nor base64", ErrBadPublicKey)
}

// identityJWT is the claim set of an identity token; other claims are ignored.
type identityJWT struct {
	jwt.RegisteredClaims
}

// Validate implements jwt.ClaimsValidator (called after the signature is verified).
func (c *identityJWT) Validate() error {
	switch {
	case c.Subject == "":
		return fmt.Errorf("%w: sub", jwt.ErrTokenRequiredClaimMissing)
	case len(c.Subject) > MaxUserIDLen:
		return fmt.Errorf("%w: sub longer than %d bytes", jwt.ErrTokenInvalidSubject, MaxUserIDLen)
	case strings.ContainsFunc(c.Subject, unicode.IsControl):
		// A NUL cannot be stored in PostgreSQL text (a coupon entry's user id).
		return fmt.Errorf("%w: sub holds a control character", jwt.ErrTokenInvalidSubject)
	}
	// A NumericDate beyond what int64 seconds hold (exp 1e20) becomes, in the JWT library, a
	// date before the Unix epoch, and would be refused as expired: a time outside the years
	// 1970 to 9999 is a malformed claim, whatever else is wrong.
	for _, d := range []struct {
		name string
		t    *jwt.NumericDate
	}{{"exp", c.ExpiresAt}, {"nbf", c.NotBefore}, {"iat", c.IssuedAt}} {
		if d.t != nil && (d.t.Year() < 1970 || d.t.Year() > 9999) {
			return fmt.Errorf("%w: %s is not a time from 1970 to 9999", jwt.ErrTokenMalformed, d.name)
		}
	}
	return nil
}

func (v *IdentityVerifier) keyFor(t *jwt.Token) (any, error) {
	// Pick the key by the algorithm the verifier itself associates with it, never by what the
	// token claims the key is (RFC 8725 §2.1, §3.1): an HS256 token is only ever checked with
	// the HMAC key, an EdDSA token only with the Ed25519 key.
	if err := critical(t); err != nil {
		return nil, err
	}
	switch t.Method {
	case jwt.SigningMethodHS256:
		if v.hmacKey != nil {
			return v.hmacKey, nil
		}
	case jwt.SigningMethodEdDSA:
		if v.pub != nil {
			return v.pub, nil
		}
	}
	return nil, fmt.Errorf("alg %v not accepted", t.Header["alg"])
}

// Verify checks an identity token and returns the user id it vouches for (its "sub").
//
// The token must be a compact JWS (RFC 7515) with "alg" HS256 (only if an HMAC key is
// configured) or EdDSA (only if a public key is configured); "none", RS256, HS256 without an
// HMAC key and every other algorithm are rejected (RFC 8725 §3.1). "sub" must be non-empty and
// at most [MaxUserIDLen] bytes; "exp" is required and the token is expired when exp <= now
// (RFC 7519 §4.1.4, no leeway); "nbf", if present, must be <= now. "iss" and "aud" are
// checked when CheckClaims asked for them; other claims are not checked. A "crit" header is
// refused (no extension is understood, RFC 7515 §4.1.11). Every error wraps [ErrBadIdentity]
// with the reason.
func (v *IdentityVerifier) Verify(token string, now time.Time) (userID string, err error) {
	if len(token) > maxIdentityTokenLen {
		return "", fmt.Errorf("%w: malformed: longer than %d bytes", ErrBadIdentity, maxIdentityTokenLen)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.algs),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
	}
	if v.iss != "" {
		opts = append(opts, jwt.WithIssuer(v.iss))
	}
	if v.aud != "" {
		opts = append(opts, jwt.WithAudience(v.aud))
	}
	if err := strictJSON(token); err != nil {
		return "", err
	}
	p := jwt.NewParser(opts...)
	var c identityJWT
	t, err := p.ParseWithClaims(token, &c, v.keyFor)
	if err != nil {
		return "", classify(ErrBadIdentity, nil, v.algs, t, err)
	}
	return c.Subject, nil
}

// strictJSON refuses an identity token whose header or claims the JWT library would read one
// way where the site's own parser, or a proxy's, might read another: a name given twice (RFC
// 7519 section 4 lets a parser take the last one; this one refuses), invalid UTF-8 or an
// unpaired surrogate escape in a string (decoded as U+FFFD, so two users' subs would become
// one user), and exp, nbf or iat given as anything but a number (RFC 7519 section 2,
// NumericDate; the library also reads a string holding one). A token that does not split
// into base64url parts is left to the parser, which refuses it. Errors wrap ErrBadIdentity.
func strictJSON(token string) error {
	header, rest, ok1 := strings.Cut(token, ".")
	claims, _, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return nil
	}
	for i, part := range [2]string{header, claims} {
		b, err := base64.RawURLEncoding.DecodeString(part)
		if err != nil {
			return nil
		}
		var m map[string]jsontext.Value
		if err := jsonv2.Unmarshal(b, &m); err != nil {
			var se *jsontext.SyntacticError
			if errors.As(err, &se) {
				err = se.Err
			}
			return fmt.Errorf("%w: malformed: %s: %v", ErrBadIdentity, [2]string{"header", "claims"}[i], err)
		}
		if i == 1 {
			for _, name := range [...]string{"exp", "nbf", "iat"} {
				if v, ok := m[name]; ok && v.Kind() != '0' {
					return fmt.Errorf("%w: malformed: %s is not a number (NumericDate)", ErrBadIdentity, name)
				}
			}
		}
	}
	return nil
}

// EmptyIdentity is what a join or a campaign entry whose "identity" member is given but empty is
// told (422): not taken for an anonymous request.
const EmptyIdentity = "identity, when given, is the site's identity JWT of its user: it is not empty"

// UserKey returns the key the store deduplicates users by: the first 16 bytes of
// SHA-256("waitroom user\x00" ‖ userID), as a 16-byte string of raw bytes (not hex, to save
// store memory). It depends only on the user id, so a user vouched for by the admin key and
// by an identity JWT gets the same key.
func UserKey(userID string) string {
	const prefix = "waitroom user\x00"
	var buf [len(prefix) + MaxUserIDLen]byte
	sum := sha256.Sum256(append(append(buf[:0], prefix...), userID...))
	return string(sum[:16])
}

// MaxIdempotencyKeyLen bounds an Idempotency-Key (bytes).
const MaxIdempotencyKeyLen = 128

// IdempotencyKeyRule says in words what ValidIdempotencyKey accepts, and OneIdempotencyKey
// what a request with two keys is told, for problem details.
const (
	IdempotencyKeyRule = "Idempotency-Key must be 1 to 128 printable ASCII characters"
	OneIdempotencyKey  = "send one Idempotency-Key, not several"
)

// ValidIdempotencyKey reports whether key is 1 to MaxIdempotencyKeyLen printable ASCII
// characters (0x20-0x7e: what a client generates, a UUID or a random token). It is the one
// rule of an Idempotency-Key, on a join and on a booking alike; the draft IETF
// Idempotency-Key header field (draft-ietf-httpapi-idempotency-key-header) makes the key a
// structured-field String, which is printable ASCII.
func ValidIdempotencyKey(key string) bool {
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// IdempotencyKey returns the key the store remembers a join's Idempotency-Key by: the first 16
// bytes of SHA-256("waitroom join\x00" ‖ key), raw, as UserKey.
func IdempotencyKey(key string) string {
	sum := sha256.Sum256([]byte("waitroom join\x00" + key))
	return string(sum[:16])
}
