package token

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	identityHMAC = []byte("the site's shared secret, 32+ bytes long")
	siteKey      = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)) // the site's signing key
	sitePub      = siteKey.Public().(ed25519.PublicKey)
)

func identityClaims(sub string) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "exp": t0.Add(time.Minute).Unix(), "iat": t0.Unix()}
}

func newVerifier(t *testing.T, hmacKey []byte, pub ed25519.PublicKey) *IdentityVerifier {
	t.Helper()
	v, err := NewIdentityVerifier(hmacKey, pub)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNewIdentityVerifier(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hmacKey []byte
		pub     ed25519.PublicKey
		wantErr error
	}{
		{"neither", nil, nil, ErrNoIdentityKey},
		{"empty hmac key counts as unset", []byte{}, nil, ErrNoIdentityKey},
		{"hmac only", identityHMAC, nil, nil},
		{"ed25519 only", nil, sitePub, nil},
		{"both", identityHMAC, sitePub, nil},
		{"short public key", nil, sitePub[:31], ErrBadPublicKey},
		{"empty non-nil public key", identityHMAC, ed25519.PublicKey{}, ErrBadPublicKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewIdentityVerifier(tc.hmacKey, tc.pub)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (v != nil) {
				t.Fatalf("NewIdentityVerifier = %v, %v; want error %v", v, err, tc.wantErr)
			}
		})
	}
}

func TestIdentityVerify(t *testing.T) {
	hsTok := signJWT(t, jwt.SigningMethodHS256, identityHMAC, "", identityClaims("user-42"))
	edTok := signJWT(t, jwt.SigningMethodEdDSA, siteKey, "", identityClaims("user-42"))
	// Alg confusion: HS256 keyed with the bytes of the configured Ed25519 public key.
	confused := signJWT(t, jwt.SigningMethodHS256, []byte(sitePub), "", identityClaims("user-42"))
	confusedB64 := signJWT(t, jwt.SigningMethodHS256, []byte(base64.StdEncoding.EncodeToString(sitePub)), "", identityClaims("user-42"))
	otherEd := signJWT(t, jwt.SigningMethodEdDSA, ed25519.NewKeyFromSeed(make([]byte, 32)), "", identityClaims("user-42"))
	otherHS := signJWT(t, jwt.SigningMethodHS256, []byte("another secret, also long enough"), "", identityClaims("user-42"))
	hs512 := signJWT(t, jwt.SigningMethodHS512, identityHMAC, "", identityClaims("user-42"))
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, identityClaims("user-42")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rs256 := signJWT(t, jwt.SigningMethodRS256, rsaKey, "", identityClaims("user-42"))
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	es256 := signJWT(t, jwt.SigningMethodES256, ecKey, "", identityClaims("user-42"))

	critTok := jwt.NewWithClaims(jwt.SigningMethodHS256, identityClaims("user-42"))
	critTok.Header["crit"] = []string{"x"}
	crit, err := critTok.SignedString(identityHMAC)
	if err != nil {
		t.Fatal(err)
	}

	hsOnly := newVerifier(t, identityHMAC, nil)
	edOnly := newVerifier(t, nil, sitePub)
	both := newVerifier(t, identityHMAC, sitePub)

	for _, tc := range []struct {
		name   string
		v      *IdentityVerifier
		tok    string
		reason string // "" = accepted
	}{
		{"HS256 with hmac key", hsOnly, hsTok, ""},
		{"HS256 with both", both, hsTok, ""},
		{"EdDSA with public key", edOnly, edTok, ""},
		{"EdDSA with both", both, edTok, ""},
		{"EdDSA without public key", hsOnly, edTok, "unsupported alg"},
		{"HS256 without hmac key", edOnly, hsTok, "unsupported alg"},
		{"alg confusion, ed only", edOnly, confused, "unsupported alg"},
		{"alg confusion base64, ed only", edOnly, confusedB64, "unsupported alg"},
		{"alg confusion, both", both, confused, "bad signature"},
		{"EdDSA other key", both, otherEd, "bad signature"},
		{"HS256 other secret", both, otherHS, "bad signature"},
		{"HS512", both, hs512, "unsupported alg"},
		{"none, hmac", hsOnly, none, "unsupported alg"},
		{"none, both", both, none, "unsupported alg"},
		{"RS256", both, rs256, "unsupported alg"},
		{"ES256", both, es256, "unsupported alg"},
		{"crit header (RFC 7515 §4.1.11)", both, crit, "unsupported crit header"},
		{"empty", both, "", "malformed"},
		{"garbage", both, "a.b.c", "malformed"},
		{"huge", both, strings.Repeat("x", 9000), "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, err := tc.v.Verify(tc.tok, t0)
			if tc.reason == "" {
				if err != nil || user != "user-42" {
					t.Fatalf("Verify = %q, %v; want user-42", user, err)
				}
				return
			}
			if !errors.Is(err, ErrBadIdentity) || !strings.Contains(err.Error(), tc.reason) || user != "" {
				t.Fatalf("Verify = %q, %v; want ErrBadIdentity with %q", user, err, tc.reason)
			}
		})
	}
}

func TestIdentityClaims(t *testing.T) {
	v := newVerifier(t, identityHMAC, sitePub)
	with := func(name string, val any) jwt.MapClaims {
		c := identityClaims("user-42")
		if val == nil {
			delete(c, name)
		} else {
			c[name] = val
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		claims   jwt.MapClaims
		now      time.Time
		wantUser string
		reason   string
	}{
		{"ok", identityClaims("user-42"), t0, "user-42", ""},
		{"sub 128 bytes", identityClaims(strings.Repeat("u", 128)), t0, strings.Repeat("u", 128), ""},
		{"sub 128 bytes multibyte", identityClaims(strings.Repeat("é", 64)), t0, strings.Repeat("é", 64), ""},
		{"sub 129 bytes", identityClaims(strings.Repeat("u", 129)), t0, "", "invalid sub"},
		{"sub with a NUL", identityClaims("a\x00b"), t0, "", "invalid sub"},
		{"sub 65 two-byte runes", identityClaims(strings.Repeat("é", 65)), t0, "", "invalid sub"},
		{"empty sub", identityClaims(""), t0, "", "missing claim"},
		{"missing sub", with("sub", nil), t0, "", "missing claim"},
		{"sub not a string", with("sub", 42), t0, "", "malformed"},
		{"missing exp", with("exp", nil), t0, "", "missing claim"},
		{"exp not a number", with("exp", "tomorrow"), t0, "", "malformed"},
		{"exp beyond int64 seconds", with("exp", 1e20), t0, "", "malformed"},
		{"exp after 9999", with("exp", 253402300800), t0, "", "malformed"},
		{"nbf beyond int64 seconds", with("nbf", -1e20), t0, "", "malformed"},
		{"expired: exp == now", identityClaims("user-42"), t0.Add(time.Minute).Truncate(time.Second), "", "expired"},
		{"expired long ago", identityClaims("user-42"), t0.Add(time.Hour), "", "expired"},
		{"1ns before exp", identityClaims("user-42"), t0.Add(time.Minute).Truncate(time.Second).Add(-1), "user-42", ""},
		{"nbf in the future", with("nbf", t0.Unix()+30), t0, "", "not valid yet"},
		{"nbf now", with("nbf", t0.Unix()), t0, "user-42", ""},
		{"iss and aud are not checked", with("aud", "anything"), t0, "user-42", ""},
	} {
		for _, alg := range []struct {
			m   jwt.SigningMethod
			key any
		}{{jwt.SigningMethodHS256, identityHMAC}, {jwt.SigningMethodEdDSA, siteKey}} {
			t.Run(tc.name+"/"+alg.m.Alg(), func(t *testing.T) {
				user, err := v.Verify(signJWT(t, alg.m, alg.key, "", tc.claims), tc.now)
				if tc.reason == "" {
					if err != nil || user != tc.wantUser {
						t.Fatalf("Verify = %q, %v; want %q", user, err, tc.wantUser)
					}
					return
				}
				if !errors.Is(err, ErrBadIdentity) || !strings.Contains(err.Error(), tc.reason) || user != "" {
					t.Fatalf("Verify = %q, %v; want ErrBadIdentity with %q", user, err, tc.reason)
				}
			})
		}
	}
}

func TestIdentityVerifierCopiesKeys(t *testing.T) {
	k := bytes.Clone(identityHMAC)
	p := bytes.Clone(sitePub)
	v := newVerifier(t, k, p)
	clear(k)
	clear(p)
	for _, tok := range []string{
		signJWT(t, jwt.SigningMethodHS256, identityHMAC, "", identityClaims("u")),
		signJWT(t, jwt.SigningMethodEdDSA, siteKey, "", identityClaims("u")),
	} {
		if _, err := v.Verify(tok, t0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestParseEd25519PublicKey(t *testing.T) {
	// A key whose encodings differ between the standard and URL alphabets.
	raw := ed25519.PublicKey(bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 11)[:32])
	der, err := x509.MarshalPKIXPublicKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsaDER, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	rsaPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaDER}))
	privDER, _ := x509.MarshalPKCS8PrivateKey(siteKey)
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))

	std := base64.StdEncoding.EncodeToString(raw)
	if !strings.ContainsAny(std, "+/") {
		t.Fatal("test key does not exercise the standard alphabet")
	}
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"PEM", pemKey, true},
		{"PEM with CRLF and spaces", "  \r\n" + strings.ReplaceAll(pemKey, "\n", "\r\n") + "\n\n", true},
		{"base64 std", std, true},
		{"base64 std raw", base64.RawStdEncoding.EncodeToString(raw), true},
		{"base64url", base64.URLEncoding.EncodeToString(raw), true},
		{"base64url raw", base64.RawURLEncoding.EncodeToString(raw), true},
		{"base64 with surrounding space", "\t" + std + "\n", true},
		{"empty", "", false},
		{"garbage", "not a key!", false},
		{"31 bytes", base64.StdEncoding.EncodeToString(raw[:31]), false},
		{"33 bytes", base64.StdEncoding.EncodeToString(append(bytes.Clone(raw), 0)), false},
		{"hex", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
		{"PKIX DER in base64 without PEM", base64.StdEncoding.EncodeToString(der), false},
		{"RSA PEM", rsaPEM, false},
		{"private key PEM", privPEM, false},
		{"truncated PEM", pemKey[:40], false},
		{"PEM with trailing data", pemKey + "junk", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEd25519PublicKey(tc.in)
			if !tc.ok {
				if !errors.Is(err, ErrBadPublicKey) || got != nil {
					t.Fatalf("= %x, %v; want ErrBadPublicKey", got, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("= %x, %v; want %x", got, err, []byte(raw))
			}
		})
	}
}

func TestUserKey(t *testing.T) {
	spec := func(id string) string {
		sum := sha256.Sum256([]byte("waitroom user\x00" + id))
		return string(sum[:16])
	}
	seen := map[string]string{}
	for _, id := range []string{"", "a", "a\x00", "user-42", "User-42", strings.Repeat("u", 128), "ünïcödé"} {
		k := UserKey(id)
		if len(k) != 16 || k != spec(id) || UserKey(id) != k {
			t.Fatalf("UserKey(%q) = %x, want %x", id, k, spec(id))
		}
		if prev, dup := seen[k]; dup {
			t.Fatalf("UserKey(%q) == UserKey(%q)", id, prev)
		}
		seen[k] = id
	}
	// Pinned: changing the derivation would split every named user's ticket in the store.
	if got := hex.EncodeToString([]byte(UserKey("user-42"))); got != "63d7003e0f4d1d5e07928dd62447b086" {
		t.Fatalf("UserKey(user-42) = %s", got)
	}
}

// A user vouched for by an identity JWT (either algorithm) and the same user id given through
// the admin key dedupe to one store key.
func TestUserKeySameWhicheverWayVouched(t *testing.T) {
	v := newVerifier(t, identityHMAC, sitePub)
	const admin = "user-42"
	for _, tok := range []string{
		signJWT(t, jwt.SigningMethodHS256, identityHMAC, "", identityClaims(admin)),
		signJWT(t, jwt.SigningMethodEdDSA, siteKey, "", identityClaims(admin)),
	} {
		user, err := v.Verify(tok, t0)
		if err != nil {
			t.Fatal(err)
		}
		if UserKey(user) != UserKey(admin) {
			t.Fatal("store keys differ")
		}
	}
}

func BenchmarkIdentityVerifyHS256(b *testing.B) {
	v, _ := NewIdentityVerifier(identityHMAC, sitePub)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, identityClaims("user-42")).SignedString(identityHMAC)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func TestIdentityIssuerAndAudience(t *testing.T) {
	v := newVerifier(t, identityHMAC, nil).CheckClaims("https://shop.example", "waitroom")
	sign := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(identityHMAC)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := identityClaims("u1")
	good["iss"], good["aud"] = "https://shop.example", []string{"other", "waitroom"}
	if uid, err := v.Verify(sign(good), t0); err != nil || uid != "u1" {
		t.Fatalf("Verify(good) = %q, %v", uid, err)
	}
	for name, mod := range map[string]func(jwt.MapClaims){
		"wrong iss":   func(c jwt.MapClaims) { c["iss"] = "https://evil.example" },
		"missing iss": func(c jwt.MapClaims) { delete(c, "iss") },
		"wrong aud":   func(c jwt.MapClaims) { c["aud"] = "another-service" },
		"missing aud": func(c jwt.MapClaims) { delete(c, "aud") },
	} {
		c := identityClaims("u1")
		c["iss"], c["aud"] = "https://shop.example", "waitroom"
		mod(c)
		if _, err := v.Verify(sign(c), t0); !errors.Is(err, ErrBadIdentity) {
			t.Errorf("%s: Verify = %v, want ErrBadIdentity", name, err)
		}
	}
	// Without CheckClaims, neither claim is looked at.
	plain := newVerifier(t, identityHMAC, nil)
	c := identityClaims("u1")
	c["iss"] = "anyone"
	if _, err := plain.Verify(sign(c), t0); err != nil {
		t.Errorf("unchecked iss: %v", err)
	}
}

// TestValidIdempotencyKey: the one rule of an Idempotency-Key, at its bounds.
func TestValidIdempotencyKey(t *testing.T) {
	for key, want := range map[string]bool{
		"k": true, "0f8e1a52-9c1b-4e7f-8d2a-3b6c5e4f7a10": true, " ~": true,
		strings.Repeat("k", MaxIdempotencyKeyLen): true, strings.Repeat("k", MaxIdempotencyKeyLen+1): false,
		"": false, "a\x1f": false, "a\x7f": false, "café": false, "\xff": false,
	} {
		if got := ValidIdempotencyKey(key); got != want {
			t.Errorf("ValidIdempotencyKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestIdentityStrictJSON: an identity token whose JSON the library would read one way and
// another parser another is refused though its signature verifies: a name given twice (the
// library takes the last), invalid UTF-8 or an unpaired surrogate in sub (decoded as U+FFFD:
// "a\xffb" and "a\ud800b" would be one user), exp, nbf or iat as a string holding a number.
func TestIdentityStrictJSON(t *testing.T) {
	v := newVerifier(t, identityHMAC, sitePub)
	exp := t0.Add(time.Minute).Unix()
	// raw signs header and claims, each given as raw JSON, with HS256.
	raw := func(header, claims string) string {
		enc := base64.RawURLEncoding
		in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
		sig, err := jwt.SigningMethodHS256.Sign(in, identityHMAC)
		if err != nil {
			t.Fatal(err)
		}
		return in + "." + enc.EncodeToString(sig)
	}
	hs := `{"alg":"HS256","typ":"JWT"}`
	claims := func(sub string, extra string) string {
		return fmt.Sprintf(`{"sub":%s,"exp":%d%s}`, sub, exp, extra)
	}
	if user, err := v.Verify(raw(hs, claims(`"alice"`, "")), t0); err != nil || user != "alice" {
		t.Fatalf("the plain token: %q, %v", user, err)
	}
	if user, err := v.Verify(raw(hs, claims(`"caf\u00e9 \ud83d\ude00"`, "")), t0); err != nil || user != "café 😀" {
		t.Fatalf("escaped UTF-8 and a surrogate pair: %q, %v", user, err)
	}
	for name, tok := range map[string]string{
		"sub twice":               raw(hs, fmt.Sprintf(`{"sub":"alice","sub":"bob","exp":%d}`, exp)),
		"exp twice":               raw(hs, claims(`"alice"`, fmt.Sprintf(`,"exp":%d`, exp+60))),
		"sub invalid UTF-8":       raw(hs, claims("\"a\xffb\"", "")),
		"sub lone high surrogate": raw(hs, claims(`"a\ud800b"`, "")),
		"sub lone low surrogate":  raw(hs, claims(`"a\udc00b"`, "")),
		"exp a string":            raw(hs, fmt.Sprintf(`{"sub":"alice","exp":"%d"}`, exp)),
		"nbf a string":            raw(hs, claims(`"alice"`, `,"nbf":"0"`)),
		"iat a string":            raw(hs, claims(`"alice"`, `,"iat":"0"`)),
		"alg twice":               raw(`{"alg":"none","alg":"HS256"}`, claims(`"alice"`, "")),
	} {
		user, err := v.Verify(tok, t0)
		if !errors.Is(err, ErrBadIdentity) || !strings.Contains(err.Error(), "malformed") || user != "" {
			t.Errorf("%s: Verify = %q, %v; want ErrBadIdentity, malformed", name, user, err)
		}
	}
}
