package token

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// MinSecretLen is the minimum length, in bytes, of the operator secret (WAITROOM_TOKEN_KEY)
// accepted by [DeriveKeys].
const MinSecretLen = 16

// HKDF "info" strings (RFC 5869 §3.2): one per purpose, so that the derived keys are
// independent of each other even though they come from the same secret. Changing one
// invalidates every credential made with the old value, hence the version suffix.
const (
	infoAdmissionEd25519 = "waitroom admission token ed25519 v1"
	infoTicketID         = "waitroom ticket id v1"
)

// ErrShortSecret is returned by [DeriveKeys] when the secret is shorter than [MinSecretLen].
var ErrShortSecret = errors.New("token: secret must be at least 16 bytes")

// Keys is the key material derived from one operator secret by [DeriveKeys]. The zero value
// is not usable. Keys holds secrets: never log it.
type Keys struct {
	// Signing is the Ed25519 private key (64 bytes, RFC 8032) that signs admission tokens.
	Signing ed25519.PrivateKey
	// Public is Signing's public key (32 bytes); it is published in the JWKS.
	Public ed25519.PublicKey
	// KID is the JWS "kid" header (RFC 7515 §4.1.4) naming Public: the first 16 hex
	// characters (64 bits) of SHA-256(Public), lower case.
	KID string
	// TicketMAC is the 32-byte HMAC-SHA256 key that authenticates ticket ids
	// (see [NewTicketIDs]).
	TicketMAC []byte
}

// DeriveKeys derives the service's keys from the operator secret (the value of
// WAITROOM_TOKEN_KEY, taken as bytes exactly as given; any string of at least [MinSecretLen]
// bytes). It uses HKDF-SHA256 (RFC 5869) with no salt and a distinct info string per purpose:
//
//   - "waitroom admission token ed25519 v1": a 32-byte seed, expanded into the Ed25519 key
//     pair that signs admission tokens (RFC 8032 §5.1.5);
//   - "waitroom ticket id v1": the 32-byte HMAC key for ticket ids.
//
// The same secret always gives the same keys, so every replica of the service (and every
// restart) agrees without any key distribution. Errors: [ErrShortSecret].
func DeriveKeys(secret string) (Keys, error) {
	if len(secret) < MinSecretLen {
		return Keys{}, ErrShortSecret
	}
	ikm := []byte(secret)

	seed := make([]byte, ed25519.SeedSize)
	if err := expand(ikm, infoAdmissionEd25519, seed); err != nil {
		return Keys{}, err
	}
	priv := ed25519.NewKeyFromSeed(seed)
	clear(seed)
	pub := priv.Public().(ed25519.PublicKey)

	mac := make([]byte, 32)
	if err := expand(ikm, infoTicketID, mac); err != nil {
		return Keys{}, err
	}

	return Keys{Signing: priv, Public: pub, KID: KeyID(pub), TicketMAC: mac}, nil
}

// expand fills out with HKDF-SHA256(ikm, no salt, info) (RFC 5869, extract then expand).
func expand(ikm []byte, info string, out []byte) error {
	okm, err := hkdf.Key(sha256.New, ikm, nil, info, len(out))
	if err != nil {
		// Unreachable: HKDF-SHA256 can produce up to 255*32 bytes.
		return fmt.Errorf("token: hkdf %q: %w", info, err)
	}
	copy(out, okm)
	clear(okm)
	return nil
}

// KeyID returns the "kid" for an Ed25519 public key: the first 16 hex characters of
// SHA-256(pub), lower case. It is what [DeriveKeys] puts in [Keys.KID].
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateSecret returns a fresh operator secret: 32 bytes from crypto/rand, encoded as
// base64url without padding (RFC 4648 §5), 43 characters. The embedded deployment uses it to
// create WAITROOM_TOKEN_KEY on first start. The error is always nil on supported platforms
// (crypto/rand does not fail); it is kept so that callers handle it.
func GenerateSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: generate secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
