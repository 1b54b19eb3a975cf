package token

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/waitroom/waitroom/internal/queue"
)

var (
	t0         = time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC) // a fake "now"
	sessionEnd = t0.Add(10 * time.Minute)                               // 12:10:00.25
	testTicket = "AAAAAwAAAAAAAAPodMh7uF9JS78893jY52-rXw"
)

func testAdmissions(t testing.TB) (*Admissions, Keys) {
	t.Helper()
	k := mustKeys(t, testSecret)
	return NewAdmissions(k), k
}

func mint(t testing.TB, a *Admissions, expires, now time.Time) string {
	t.Helper()
	tok, err := a.Mint("concert", testTicket, 1000, expires, now)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// segments decodes the header and claims of a compact JWS into maps.
func segments(t *testing.T, tok string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q has %d segments", tok, len(parts))
	}
	for i, dst := range []*map[string]any{&header, &claims} {
		b, err := base64.RawURLEncoding.Strict().DecodeString(parts[i])
		if err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.UseNumber()
		if err := dec.Decode(dst); err != nil {
			t.Fatalf("segment %d %s: %v", i, b, err)
		}
	}
	return header, claims
}

// signJWT signs arbitrary claims with golang-jwt, for attacks and malformed claim sets.
func signJWT(t *testing.T, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"iss": "waitroom", "sub": testTicket, "evt": "concert", "num": 1000,
		"iat": t0.Unix(), "exp": sessionEnd.Unix() + 1, "jti": "00112233445566778899aabbccddeeff",
	}
}

func TestAdmissionRoundTrip(t *testing.T) {
	a, k := testAdmissions(t)
	tok := mint(t, a, sessionEnd, t0)

	header, claims := segments(t, tok)
	if len(header) != 3 || header["alg"] != "EdDSA" || header["kid"] != k.KID || header["typ"] != "JWT" {
		t.Errorf("header = %v", header)
	}
	want := map[string]string{
		"iss": "waitroom", "sub": testTicket, "evt": "concert", "num": "1000",
		"iat": "1772366400", // 2026-03-01T12:00:00Z, rounded down
		"exp": "1772367001", // 12:10:00.25 rounded up to 12:10:01
	}
	for name, v := range want {
		if got, ok := claims[name]; !ok || fmt.Sprint(got) != v {
			t.Errorf("claim %s = %v, want %s", name, got, v)
		}
	}
	if _, ok := claims["num"].(json.Number); !ok {
		t.Errorf("num is %T, want a JSON number", claims["num"])
	}
	for _, name := range []string{"iat", "exp"} {
		if n, ok := claims[name].(json.Number); !ok || strings.ContainsAny(n.String(), ".eE") {
			t.Errorf("%s = %v, want an integer", name, claims[name])
		}
	}
	if jti, _ := claims["jti"].(string); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(jti) {
		t.Errorf("jti = %q, want 32 hex characters", jti)
	}
	if len(claims) != 7 {
		t.Errorf("claims = %v, want exactly 7", claims)
	}

	got, err := a.Verify(tok, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantClaims := AdmissionClaims{
		Event: "concert", TicketID: testTicket, Number: 1000,
		Expires:  time.Date(2026, 3, 1, 12, 10, 1, 0, time.UTC),
		IssuedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
	if got.Event != wantClaims.Event || got.TicketID != wantClaims.TicketID || got.Number != wantClaims.Number ||
		!got.Expires.Equal(wantClaims.Expires) || !got.IssuedAt.Equal(wantClaims.IssuedAt) {
		t.Fatalf("Verify = %+v, want %+v", got, wantClaims)
	}
}

func TestAdmissionWithRealTicketID(t *testing.T) {
	a, k := testAdmissions(t)
	ids := NewTicketIDs(k.TicketMAC)
	ref := queue.TicketRef{Event: "concert", Generation: 9, Number: 77}
	tok, err := a.Mint(ref.Event, ids.Encode(ref), ref.Number, sessionEnd, t0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Verify(tok, t0)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ids.Decode(c.Event, c.TicketID)
	if err != nil || back != ref || c.Number != ref.Number {
		t.Fatalf("claims %+v decode to %+v, %v", c, back, err)
	}
}

func TestAdmissionExpiryRounding(t *testing.T) {
	a, _ := testAdmissions(t)
	base := time.Date(2026, 3, 1, 12, 10, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		expires time.Time
		wantExp int64
	}{
		{"whole second kept", base, base.Unix()},
		{"1ns rounds up", base.Add(time.Nanosecond), base.Unix() + 1},
		{"999ms rounds up", base.Add(999 * time.Millisecond), base.Unix() + 1},
		{"other zone, same instant", base.In(time.FixedZone("X", 3*3600)), base.Unix()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := a.Verify(mint(t, a, tc.expires, t0), t0)
			if err != nil {
				t.Fatal(err)
			}
			if c.Expires.Unix() != tc.wantExp {
				t.Fatalf("exp = %d, want %d", c.Expires.Unix(), tc.wantExp)
			}
		})
	}
}

func TestAdmissionExpired(t *testing.T) {
	a, _ := testAdmissions(t)
	exp := time.Date(2026, 3, 1, 12, 10, 0, 0, time.UTC)
	tok := mint(t, a, exp, t0)
	for _, tc := range []struct {
		name string
		now  time.Time
		ok   bool
	}{
		{"well before", t0, true},
		{"1ns before exp", exp.Add(-time.Nanosecond), true},
		{"exactly exp", exp, false}, // exp <= now is expired, no leeway
		{"1ns after", exp.Add(time.Nanosecond), false},
		{"a day after", exp.Add(24 * time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Verify(tok, tc.now)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && (!errors.Is(err, ErrTokenExpired) || !errors.Is(err, ErrBadToken)) {
				t.Fatalf("err = %v, want ErrTokenExpired wrapping ErrBadToken", err)
			}
		})
	}
}

func TestAdmissionMintErrors(t *testing.T) {
	a, _ := testAdmissions(t)
	for _, tc := range []struct {
		name, event, ticket string
		num                 int64
		expires             time.Time
	}{
		{"empty event", "", testTicket, 1, sessionEnd},
		{"empty ticket", "concert", "", 1, sessionEnd},
		{"number 0", "concert", testTicket, 0, sessionEnd},
		{"negative number", "concert", testTicket, -1, sessionEnd},
		{"expires now", "concert", testTicket, 1, t0.Truncate(time.Second)},
		{"expires in the past", "concert", testTicket, 1, t0.Add(-time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tok, err := a.Mint(tc.event, tc.ticket, tc.num, tc.expires, t0); err == nil {
				t.Fatalf("Mint = %q, want error", tok)
			}
		})
	}
	// Rounding up can save a session ending within the current second.
	if _, err := a.Mint("concert", testTicket, 1, t0.Add(time.Millisecond), t0); err != nil {
		t.Fatalf("session ending in 1ms: %v", err)
	}
}

func TestAdmissionEscapesClaims(t *testing.T) {
	a, _ := testAdmissions(t)
	for _, s := range []string{`quo"te`, `back\slash`, "new\nline", "ünïcödé", "<&>", "\x00", "\xff bad utf-8"} {
		tok, err := a.Mint(s, s, 1, sessionEnd, t0)
		if err != nil {
			t.Fatal(err)
		}
		c, err := a.Verify(tok, t0)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); c.Event != want || c.TicketID != want {
			t.Fatalf("%q came back as %q / %q", s, c.Event, c.TicketID)
		}
	}
}

func TestAdmissionJTIUnique(t *testing.T) {
	a, _ := testAdmissions(t)
	seen := map[string]bool{}
	for range 200 {
		_, claims := segments(t, mint(t, a, sessionEnd, t0))
		jti := claims["jti"].(string)
		if seen[jti] {
			t.Fatal("duplicate jti")
		}
		seen[jti] = true
	}
}

func TestAdmissionTampering(t *testing.T) {
	a, _ := testAdmissions(t)
	tok := mint(t, a, sessionEnd, t0)
	// Change every character of the token to another one of the alphabet: header, claims and
	// signature are all covered by the signature (or break the encoding).
	for i := range len(tok) {
		if tok[i] == '.' {
			continue
		}
		c := byte('A')
		if tok[i] == 'A' {
			c = 'B'
		}
		bad := tok[:i] + string(c) + tok[i+1:]
		if _, err := a.Verify(bad, t0); !errors.Is(err, ErrBadToken) {
			t.Fatalf("char %d changed: err = %v, want ErrBadToken", i, err)
		}
	}
	// Re-signing modified claims with another key fails even with the right kid.
	_, k := testAdmissions(t)
	other := mustKeys(t, "some other secret!!")
	claims := validClaims()
	claims["num"] = 1
	forged := signJWT(t, jwt.SigningMethodEdDSA, other.Signing, k.KID, claims)
	if _, err := a.Verify(forged, t0); !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "bad signature") {
		t.Fatalf("forged: err = %v, want bad signature", err)
	}
}

func TestAdmissionRotation(t *testing.T) {
	old := mustKeys(t, "the old operator secret")
	cur := mustKeys(t, "the new operator secret")
	oldTok := mint(t, NewAdmissions(old), sessionEnd, t0)

	during := NewAdmissions(cur, old)
	if _, err := during.Verify(oldTok, t0); err != nil {
		t.Fatalf("old token during rotation: %v", err)
	}
	newTok := mint(t, during, sessionEnd, t0)
	if h, _ := segments(t, newTok); h["kid"] != cur.KID {
		t.Fatalf("signed with kid %v, want current %s", h["kid"], cur.KID)
	}
	if _, err := during.Verify(newTok, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := NewAdmissions(old).Verify(newTok, t0); !errors.Is(err, ErrBadToken) {
		t.Fatalf("new token verified by old-only: %v", err)
	}

	after := NewAdmissions(cur)
	_, err := after.Verify(oldTok, t0)
	if !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "unknown kid") {
		t.Fatalf("old token after rotation: err = %v, want unknown kid", err)
	}
	if _, err := after.Verify(newTok, t0); err != nil {
		t.Fatal(err)
	}
}

func TestAdmissionRejects(t *testing.T) {
	a, k := testAdmissions(t)
	good := mint(t, a, sessionEnd, t0)
	parts := strings.Split(good, ".")
	without := func(name string) jwt.MapClaims {
		c := validClaims()
		delete(c, name)
		return c
	}
	with := func(name string, v any) jwt.MapClaims {
		c := validClaims()
		c[name] = v
		return c
	}
	noneTok, err := jwt.NewWithClaims(jwt.SigningMethodNone, validClaims()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	// "alg":"none" with the kid header and the real signature kept.
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"` + k.KID + `","typ":"JWT"}`))

	for _, tc := range []struct {
		name, tok, reason string
	}{
		{"empty", "", "malformed"},
		{"garbage", "not a token", "malformed"},
		{"two segments", parts[0] + "." + parts[1], "malformed"},
		{"four segments", good + ".x", "malformed"},
		{"padded signature", good + "==", "malformed"},
		{"huge", strings.Repeat("a", 5000), "malformed"},
		{"bad json header", base64.RawURLEncoding.EncodeToString([]byte("{")) + "." + parts[1] + "." + parts[2], "malformed"},
		{"alg none", noneTok, "unsupported alg"},
		{"alg none, kid and real signature", noneHeader + "." + parts[1] + "." + parts[2], "unsupported alg"},
		{"alg none, kid, empty signature", noneHeader + "." + parts[1] + ".", "unsupported alg"},
		// Alg confusion: HS256 keyed with the (public) Ed25519 key bytes.
		{"HS256 with public key", signJWT(t, jwt.SigningMethodHS256, []byte(k.Public), k.KID, validClaims()), "unsupported alg"},
		{"HS256 with public key as base64url", signJWT(t, jwt.SigningMethodHS256, []byte(base64.RawURLEncoding.EncodeToString(k.Public)), k.KID, validClaims()), "unsupported alg"},
		{"HS256 with ticket MAC key", signJWT(t, jwt.SigningMethodHS256, k.TicketMAC, k.KID, validClaims()), "unsupported alg"},
		{"unknown alg", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"XX","kid":"`+k.KID+`"}`)) + "." + parts[1] + "." + parts[2], "unsupported alg"},
		{"missing kid", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, "", validClaims()), "missing kid"},
		{"unknown kid", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, "0000000000000000", validClaims()), "unknown kid"},
		{"wrong issuer", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, with("iss", "someone")), "wrong issuer"},
		{"missing iss", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, without("iss")), "missing claim"},
		{"missing sub", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, without("sub")), "missing claim"},
		{"missing evt", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, without("evt")), "missing claim"},
		{"missing num", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, without("num")), "missing claim"},
		{"num 0", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, with("num", 0)), "missing claim"},
		{"num string", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, with("num", "1000")), "malformed"},
		{"missing iat", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, without("iat")), "missing claim"},
		{"missing exp", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, without("exp")), "missing claim"},
		{"nbf in the future", signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, with("nbf", t0.Unix()+60)), "not valid yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := a.Verify(tc.tok, t0)
			if !errors.Is(err, ErrBadToken) {
				t.Fatalf("Verify = %+v, %v; want ErrBadToken", c, err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err = %q, want reason %q", err, tc.reason)
			}
			if c != (AdmissionClaims{}) {
				t.Fatalf("claims returned with error: %+v", c)
			}
		})
	}
	// Sanity: the golang-jwt helper makes tokens Verify accepts when nothing is wrong.
	if _, err := a.Verify(signJWT(t, jwt.SigningMethodEdDSA, k.Signing, k.KID, validClaims()), t0); err != nil {
		t.Fatalf("valid golang-jwt token rejected: %v", err)
	}
}

// jwkSet is parsed independently of the package's own types.
type jwkSet struct {
	Keys []struct {
		Kty, Crv, X, Kid, Alg, Use string
	} `json:"keys"`
}

func TestJWKS(t *testing.T) {
	cur := mustKeys(t, "the new operator secret")
	old := mustKeys(t, "the old operator secret")
	a := NewAdmissions(cur, old, cur) // the duplicate is dropped

	raw := a.JWKS()
	var generic map[string][]map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	if len(generic) != 1 || len(generic["keys"]) != 2 {
		t.Fatalf("JWKS = %s", raw)
	}
	for _, k := range generic["keys"] {
		if len(k) != 6 {
			t.Fatalf("JWK has members %v, want exactly kty crv x kid alg use", k)
		}
	}
	var set jwkSet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	for i, want := range []Keys{cur, old} {
		k := set.Keys[i]
		x, err := base64.RawURLEncoding.Strict().DecodeString(k.X)
		if k.Kty != "OKP" || k.Crv != "Ed25519" || k.Alg != "EdDSA" || k.Use != "sig" || k.Kid != want.KID || err != nil || string(x) != string(want.Public) {
			t.Fatalf("key %d = %+v (x err %v), want %s", i, k, err, want.KID)
		}
	}
	if string(a.JWKS()) != string(raw) {
		t.Fatal("JWKS not stable")
	}
}

// TestJWKSOfflineVerifier does what a protected back end does: fetch the JWKS once, then
// verify admission tokens with golang-jwt alone.
func TestJWKSOfflineVerifier(t *testing.T) {
	cur := mustKeys(t, "the new operator secret")
	old := mustKeys(t, "the old operator secret")
	a := NewAdmissions(cur, old)

	var set jwkSet
	if err := json.Unmarshal(a.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || k.Kty != "OKP" || k.Crv != "Ed25519" || len(x) != ed25519.PublicKeySize {
			t.Fatalf("bad JWK %+v", k)
		}
		keys[k.Kid] = ed25519.PublicKey(x)
	}
	keyfunc := func(tok *jwt.Token) (any, error) {
		if k, ok := keys[tok.Header["kid"].(string)]; ok {
			return k, nil
		}
		return nil, errors.New("unknown kid")
	}
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer("waitroom"),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return t0 }),
	)
	for _, tok := range []string{mint(t, a, sessionEnd, t0), mint(t, NewAdmissions(old), sessionEnd, t0)} {
		claims := jwt.MapClaims{}
		if _, err := parser.ParseWithClaims(tok, claims, keyfunc); err != nil {
			t.Fatalf("offline verifier rejected %s: %v", tok, err)
		}
		if claims["evt"] != "concert" || claims["sub"] != testTicket || claims["num"] != float64(1000) {
			t.Fatalf("claims = %v", claims)
		}
	}
}

func TestNewAdmissionsPanicsOnBadKeys(t *testing.T) {
	k := mustKeys(t, testSecret)
	for name, f := range map[string]func(){
		"zero current":       func() { NewAdmissions(Keys{}) },
		"short previous key": func() { NewAdmissions(k, Keys{Public: k.Public[:31]}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
	// A previous key given only as its public key (and no KID) is fine.
	a := NewAdmissions(mustKeys(t, "the new operator secret"), Keys{Public: k.Public})
	if _, err := a.Verify(mint(t, NewAdmissions(k), sessionEnd, t0), t0); err != nil {
		t.Fatal(err)
	}
}

func FuzzAdmissionVerify(f *testing.F) {
	a, _ := testAdmissions(f)
	good, _ := a.Mint("concert", testTicket, 1000, sessionEnd, t0)
	f.Add(good)
	f.Add("")
	f.Add("..")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := a.Verify(tok, t0)
		if err != nil {
			if !errors.Is(err, ErrBadToken) {
				t.Fatalf("error %v does not wrap ErrBadToken", err)
			}
			return
		}
		if c.Event == "" || c.TicketID == "" || c.Number < 1 || !c.Expires.After(t0) {
			t.Fatalf("accepted incomplete claims %+v", c)
		}
	})
}

func BenchmarkMint(b *testing.B) {
	a, _ := testAdmissions(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Mint("concert", testTicket, 1000, sessionEnd, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	a, _ := testAdmissions(b)
	tok, _ := a.Mint("concert", testTicket, 1000, sessionEnd, t0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Verify(tok, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMintGolangJWT is the reference Mint is measured against: the same token made the
// straightforward way with golang-jwt (struct claims, header map, encoding/json).
func BenchmarkMintGolangJWT(b *testing.B) {
	_, k := testAdmissions(b)
	b.ReportAllocs()
	for b.Loop() {
		c := &admissionJWT{Event: "concert", Number: 1000, RegisteredClaims: jwt.RegisteredClaims{
			Issuer: "waitroom", Subject: testTicket, ID: "00112233445566778899aabbccddeeff",
			IssuedAt: jwt.NewNumericDate(t0), ExpiresAt: jwt.NewNumericDate(sessionEnd),
		}}
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		tok.Header["kid"] = k.KID
		if _, err := tok.SignedString(k.Signing); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAdmissionTTL: with a TTL, a token ends TTL after its issue even when the session runs
// longer, and at the session's end when that is sooner; it verifies until then, not after.
func TestAdmissionTTL(t *testing.T) {
	base, _ := testAdmissions(t)
	a := base.WithTTL(59500 * time.Millisecond) // rounded up to 60 s
	if a.TTL() != time.Minute || base.TTL() != 0 {
		t.Fatalf("TTL = %v (base %v), want 1m (0)", a.TTL(), base.TTL())
	}
	now := t0.Add(300 * time.Millisecond) // iat rounds down to t0
	c, err := a.Verify(mint(t, a, t0.Add(time.Hour), now), now)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Minute).Unix(); c.Expires.Unix() != want {
		t.Fatalf("exp = %d, want iat + 60 = %d", c.Expires.Unix(), want)
	}
	tok := mint(t, a, t0.Add(time.Hour), now)
	if _, err := a.Verify(tok, t0.Add(59*time.Second)); err != nil {
		t.Fatalf("59 s after issue: %v", err)
	}
	if _, err := a.Verify(tok, t0.Add(time.Minute)); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("60 s after issue: %v, want expired", err)
	}
	end := time.Unix(t0.Unix()+20, 0)
	c, err = a.Verify(mint(t, a, end, now), now)
	if err != nil || c.Expires.Unix() != end.Unix() {
		t.Fatalf("a session ending sooner: exp %v, %v", c.Expires, err)
	}
	hour := time.Unix(t0.Unix()+3600, 0)
	c, err = base.Verify(mint(t, base, hour, now), now)
	if err != nil || c.Expires.Unix() != hour.Unix() {
		t.Fatalf("without a TTL the session's end: exp %v, %v", c.Expires, err)
	}
}

func TestMintUserCarriesTheUserKey(t *testing.T) {
	k, err := DeriveKeys("a test token key, long enough")
	if err != nil {
		t.Fatal(err)
	}
	a := NewAdmissions(k)
	now := time.Now()
	tok, err := a.MintUser("ev", "tid", 3, UserKey("alice"), now.Add(time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Verify(tok, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString([]byte(UserKey("alice"))); c.User != want {
		t.Fatalf("User = %q, want %q", c.User, want)
	}
	tok, _ = a.Mint("ev", "tid", 3, now.Add(time.Minute), now)
	if c, _ := a.Verify(tok, now); c.User != "" {
		t.Fatalf("anonymous token carries user %q", c.User)
	}
}
