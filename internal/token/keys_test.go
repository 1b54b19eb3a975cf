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

	// Recompute from the spec: HKDF-SHA256 (RFC 5869), salt nil, one info string per purpose.
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

// TestDeriveKeysVectors pins the whole derivation for a few secrets (computed with
// golang.org/x/crypto/hkdf before the switch to crypto/hkdf): the same secret must keep giving
// byte-identical keys, or every ticket id and admission token in flight becomes invalid.
func TestDeriveKeysVectors(t *testing.T) {
	for _, tc := range []struct {
		name, secret        string
		seed, pub, kid, mac string // hex; seed is Signing.Seed()
	}{
		{
			"16 bytes", strings.Repeat("x", 16),
			"df37b53a9c0b07542953ca542b59e09425fb67b079863729de6bfb9b9bad258f",
			"257f2af4e0bc96ee97f68b29e5a9bcd2941e7d03412abfca6723c7a309ea444c",
			"4bdb393dc907b333",
			"d71b1bda7be6ebd5914c3895498df2b11a96ae8cbb33356f948020c319e99c4b",
		},
		{
			"passphrase", testSecret,
			"13d84ea965630f0e29be0263b1cf0fcb1fee957208b1148daf123cafbc9c43c1",
			"0297e5a18afbde5bd732376b952b2be703923aa8a4cb5905c87d507b4f330e71",
			"dd63d02b40c54072",
			"4746d221f8ed9f8c563faac5cad65862f94d71d38e2b32b2cd6c9164505c7bf8",
		},
		{
			"two-byte runes", "éééééééé",
			"c3abad7e6c58291629a734ff7ab4aa7fa12000adf355774b6d06d704ffcbbb45",
			"ca9136e718dde54e973dbf2cc43454bf2736caa1b628741921babbffee0b9569",
			"37e696757ed384e7",
			"6c8e100f98ce244b01790e28c9ef7d8bd68f3c7faea4489bf1e1b340c1516d3e",
		},
		{
			"32 bytes", "0123456789abcdef0123456789abcdef",
			"e37d7e237428dc6d17104c9b5bd550c4fdd58391d8fd5953992d97762c218094",
			"17fb173a8ed7f74bae429a061226ab582555e3a28621dd9daa382094e422484a",
			"d193d3b530e29b00",
			"725e5742e182b2a9aa8ecf2d646c0869dd3c7b788a0205d839980609c7c16170",
		},
		{
			"4096 bytes (longer than a SHA-256 block)", strings.Repeat("y", 4096),
			"de4b641939eb022479ff3019ad1a481876644a53dc751e97f8a5c7c854232119",
			"933b09588c9a92153ed17b98a5c9897abdce9162ec6ae749edef377cd98cd6b2",
			"88e06c8bd05366dd",
			"08d4e544f23129709bd572f74fe7b7364cc6271823b61383427034fdcbd08cb5",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := mustKeys(t, tc.secret)
			for _, got := range []struct{ field, got, want string }{
				{"seed", hex.EncodeToString(k.Signing.Seed()), tc.seed},
				{"public", hex.EncodeToString(k.Public), tc.pub},
				{"kid", k.KID, tc.kid},
				{"ticket mac", hex.EncodeToString(k.TicketMAC), tc.mac},
			} {
				if got.got != got.want {
					t.Errorf("%s = %s, want %s", got.field, got.got, got.want)
				}
			}
		})
	}
}

// TestExpandRFC5869 checks the HKDF step on RFC 5869 Appendix A.3 (SHA-256, zero-length salt
// and info), the case [DeriveKeys] relies on: no salt.
func TestExpandRFC5869(t *testing.T) {
	okm := make([]byte, 42)
	if err := expand(bytes.Repeat([]byte{0x0b}, 22), "", okm); err != nil {
		t.Fatal(err)
	}
	const want = "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
	if got := hex.EncodeToString(okm); got != want {
		t.Fatalf("OKM = %s, want %s", got, want)
	}
}

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
