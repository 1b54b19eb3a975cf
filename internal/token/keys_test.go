package token

import (
	"bytes"
	"crypto/ed25519"
	stdhkdf "crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
)

const testSecret = "correct horse battery staple"

func mustKeys(t testing.TB, secret string) Keys {
	t.Helper()
	k, err := DeriveKeys(secret)
	if err != nil {
		t.Fatalf("DeriveKeys(%q): %v", secret, err)
	}
	return k
}

func TestDeriveKeysSecretLength(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret string
		ok     bool
	}{
		{"empty", "", false},
		{"15 bytes", strings.Repeat("x", 15), false},
		{"16 bytes", strings.Repeat("x", 16), true},
		{"8 two-byte runes = 16 bytes", "éééééééé", true}, // the length is in bytes
		{"7 two-byte runes = 14 bytes", "ééééééé", false},
		{"long", strings.Repeat("y", 4096), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := DeriveKeys(tc.secret)
			if !tc.ok {
				if !errors.Is(err, ErrShortSecret) {
					t.Fatalf("err = %v, want ErrShortSecret", err)
				}
				if k.Signing != nil || k.Public != nil || k.KID != "" || k.TicketMAC != nil {
					t.Fatalf("keys not zero on error: %+v", k)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(k.Signing) != ed25519.PrivateKeySize || len(k.Public) != ed25519.PublicKeySize || len(k.TicketMAC) != 32 {
				t.Fatalf("sizes: signing %d public %d mac %d", len(k.Signing), len(k.Public), len(k.TicketMAC))
			}
		})
	}
}

func TestDeriveKeysMatchesSpec(t *testing.T) {
	k := mustKeys(t, testSecret)

	// Recompute with the standard library's HKDF (RFC 5869), salt nil.
	seed, err := stdhkdf.Key(sha256.New, []byte(testSecret), nil, "waitroom admission token ed25519 v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	mac, err := stdhkdf.Key(sha256.New, []byte(testSecret), nil, "waitroom ticket id v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ed25519.NewKeyFromSeed(seed), k.Signing) {
		t.Error("Signing is not the key of the HKDF seed")
	}
	if !bytes.Equal(k.Signing.Public().(ed25519.PublicKey), k.Public) {
		t.Error("Public does not match Signing")
	}
	if !bytes.Equal(mac, k.TicketMAC) {
		t.Error("TicketMAC is not the HKDF output")
	}
	if bytes.Equal(seed, mac) {
		t.Error("purposes must give independent keys")
	}
	sum := sha256.Sum256(k.Public)
	if want := hex.EncodeToString(sum[:])[:16]; k.KID != want || KeyID(k.Public) != want {
		t.Errorf("KID = %q, KeyID = %q, want %q", k.KID, KeyID(k.Public), want)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(k.KID) {
		t.Errorf("KID %q is not 16 lower-case hex characters", k.KID)
	}

	// Pinned values: changing the derivation would invalidate every id and token in flight.
	if k.KID != goldenKID || hex.EncodeToString(k.TicketMAC) != goldenMAC {
		t.Errorf("derivation changed: KID %s MAC %x", k.KID, k.TicketMAC)
	}
}

// Derived from testSecret; see TestDeriveKeysMatchesSpec.
const (
	goldenKID = "dd63d02b40c54072"
	goldenMAC = "4746d221f8ed9f8c563faac5cad65862f94d71d38e2b32b2cd6c9164505c7bf8"
)

func TestDeriveKeysDeterministicAndDistinct(t *testing.T) {
	a1, a2 := mustKeys(t, testSecret), mustKeys(t, testSecret)
	if !bytes.Equal(a1.Signing, a2.Signing) || a1.KID != a2.KID || !bytes.Equal(a1.TicketMAC, a2.TicketMAC) {
		t.Fatal("same secret gave different keys")
	}
	b := mustKeys(t, testSecret+"!")
	if bytes.Equal(a1.Public, b.Public) || a1.KID == b.KID || bytes.Equal(a1.TicketMAC, b.TicketMAC) {
		t.Fatal("different secrets gave equal keys")
	}
}

func TestGenerateSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, err := GenerateSecret()
		if err != nil {
			t.Fatal(err)
		}
		b, err := base64.RawURLEncoding.Strict().DecodeString(s)
		if len(s) != 43 || err != nil || len(b) != 32 {
			t.Fatalf("secret %q: len %d, decoded %d bytes, err %v", s, len(s), len(b), err)
		}
		if seen[s] {
			t.Fatal("duplicate secret")
		}
		seen[s] = true
		if _, err := DeriveKeys(s); err != nil {
			t.Fatal(err)
		}
	}
}
