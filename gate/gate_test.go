package gate_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/waitroom/waitroom/gate"
	"github.com/waitroom/waitroom/internal/token"
)

func TestValidTokenPassesWithClaims(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	clock := newFakeClock(t0)
	g, _ := newGate(t, room, clock, nil)
	var s seen
	h := g.Handler(s.handler())

	exp := t0.Add(5 * time.Minute)
	tok := mint(t, adm, "concert", 42, exp)
	rec := do(h, apiRequest(tok))
	if rec.Code != 200 || rec.Body.String() != "protected" {
		t.Fatalf("status %d body %q, want 200 protected", rec.Code, rec.Body)
	}
	if len(s.admits) != 1 {
		t.Fatalf("handler saw %d admissions, want 1", len(s.admits))
	}
	a := s.admits[0]
	want := gate.Admission{Event: "concert", TicketID: "ticket-42", Number: 42, Expires: exp, IssuedAt: t0, Token: tok}
	if !a.Expires.Equal(want.Expires) || !a.IssuedAt.Equal(want.IssuedAt) || a.Event != want.Event ||
		a.TicketID != want.TicketID || a.Number != want.Number || a.Token != want.Token {
		t.Fatalf("admission %+v, want %+v", a, want)
	}

	// Verify gives the same, and FromContext of a context without a gate gives nothing.
	v, err := g.Verify(context.Background(), tok)
	if err != nil || v.Number != 42 {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
	if _, ok := gate.FromContext(context.Background()); ok {
		t.Fatal("FromContext of a bare context reported an admission")
	}
	if n := room.fetches.Load(); n != 1 {
		t.Fatalf("%d key fetches, want 1 (at start)", n)
	}
}

// TestOneAuthorizationField: a valid admission token sent in two Authorization fields does not
// admit (which field a proxy in front of the origin reads would be a guess); BearerToken, the rule
// the service reads its own bearers by too, takes one field only.
func TestOneAuthorizationField(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	g, _ := newGate(t, newFakeRoom(t, adm), newFakeClock(t0), nil)
	var s seen
	h := g.Handler(s.handler())
	tok := mint(t, adm, "concert", 42, t0.Add(5*time.Minute))
	for _, other := range []string{"Bearer " + tok, "Bearer nope", "Basic dTpw"} {
		req := apiRequest(tok)
		req.Header.Add("Authorization", other)
		if rec := do(h, req); rec.Code != 401 || problem(t, rec)["code"] != "admission_required" {
			t.Fatalf("with a second field %q: status %d %s, want 401 admission_required", other, rec.Code, rec.Body)
		}
	}
	if len(s.admits) != 0 {
		t.Fatalf("the handler ran %d times", len(s.admits))
	}
	if rec := do(h, apiRequest(tok)); rec.Code != 200 {
		t.Fatalf("the token alone: status %d, want 200", rec.Code)
	}

	for _, c := range []struct {
		fields []string
		want   string
	}{
		{nil, ""},
		{[]string{"Bearer abc"}, "abc"},
		{[]string{"bearer  abc "}, "abc"},
		{[]string{"BEARER abc"}, "abc"},
		{[]string{"Basic dTpw"}, ""},
		{[]string{"Bearer"}, ""},
		{[]string{"Bearer   "}, ""},
		{[]string{"Bearer abc", "Bearer abc"}, ""}, // two fields, even agreeing
		{[]string{"Bearer abc", "Basic dTpw"}, ""},
		{[]string{"Basic dTpw", "Bearer abc"}, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for _, f := range c.fields {
			r.Header.Add("Authorization", f)
		}
		if got, ok := gate.BearerToken(r); got != c.want || ok != (c.want != "") {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", c.fields, got, ok, c.want)
		}
	}
}

func TestQueryHandoffSetsCookieAndRedirects(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	clock := newFakeClock(t0.Add(10 * time.Second))
	exp := t0.Add(5 * time.Minute)
	tok := mint(t, adm, "concert", 7, exp)

	cases := []struct {
		name       string
		trustProxy bool
		tls        bool
		proto      string
		wantSecure bool
	}{
		{"plain http", false, false, "", false},
		{"tls", false, true, "", true},
		{"trusted proxy https", true, false, "https", true},
		{"untrusted X-Forwarded-Proto", false, false, "https", false},
		{"trusted proxy http", true, false, "http", false},
		{"a proxy chain's list, by the client's hop", true, false, "https, http", true},
		{"a proxy chain's list over http first", true, false, "http, https", false},
		// With TrustedProxies (10.0.0.0/8), only their X-Forwarded-Proto is believed.
		{"TrustedProxies: the proxy's https", true, false, "https", true},
		{"TrustedProxies: a stranger's https", true, false, "https", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			proxies := strings.HasPrefix(c.name, "TrustedProxies")
			g, _ := newGate(t, room, clock, func(cfg *gate.Config) {
				cfg.TrustForwardedProto = c.trustProxy
				cfg.CookieDomain = "shop.example"
				if proxies {
					cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
				}
			})
			var s seen
			h := g.Handler(s.handler())
			req := pageRequest("http://shop.example/checkout?step=2&waitroom_token=" + tok + "&lang=fr")
			if proxies && strings.Contains(c.name, "the proxy's") {
				req.RemoteAddr = "10.1.2.3:4000"
			}
			if c.tls {
				req.TLS = &tls.ConnectionState{}
			}
			if c.proto != "" {
				req.Header.Set("X-Forwarded-Proto", c.proto)
			}
			rec := do(h, req)
			if rec.Code != http.StatusSeeOther {
				t.Fatalf("status %d, want 303", rec.Code)
			}
			if loc := rec.Header().Get("Location"); loc != "/checkout?step=2&lang=fr" {
				t.Fatalf("Location %q, want /checkout?step=2&lang=fr", loc)
			}
			if s.calls != 0 {
				t.Fatal("the protected handler ran on the hand-off request")
			}
			cookies := rec.Result().Cookies()
			if len(cookies) != 1 {
				t.Fatalf("%d cookies set, want 1", len(cookies))
			}
			ck := cookies[0]
			wantAge := int(exp.Sub(clock.Now()) / time.Second)
			if ck.Name != "waitroom_admission_concert" || ck.Value != tok || ck.Path != "/" || ck.Domain != "shop.example" ||
				!ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.MaxAge != wantAge || ck.Secure != c.wantSecure {
				t.Fatalf("cookie %q (raw %q), want HttpOnly SameSite=Lax Max-Age=%d Secure=%v Domain=shop.example",
					ck, rec.Header().Get("Set-Cookie"), wantAge, c.wantSecure)
			}

			// The next request carries the cookie and reaches the handler.
			next := pageRequest("http://shop.example/checkout?step=2&lang=fr")
			next.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
			rec = do(h, next)
			if rec.Code != 200 || len(s.admits) != 1 || s.admits[0].Number != 7 {
				t.Fatalf("with the cookie: status %d, admissions %+v", rec.Code, s.admits)
			}
		})
	}

	t.Run("redirect stays on the site", func(t *testing.T) {
		g, _ := newGate(t, room, clock, nil)
		req := pageRequest("http://shop.example/x")
		req.RequestURI = "//evil.example/path?waitroom_token=" + tok
		var err error
		if req.URL, err = url.ParseRequestURI(req.RequestURI); err != nil {
			t.Fatal(err)
		}
		rec := do(g.Handler(http.NotFoundHandler()), req)
		if loc := rec.Header().Get("Location"); rec.Code != 303 || loc != "/evil.example/path" {
			t.Fatalf("status %d Location %q, want 303 /evil.example/path", rec.Code, loc)
		}
	})

	t.Run("POST is served at once", func(t *testing.T) {
		g, _ := newGate(t, room, clock, nil)
		var s seen
		req := httptest.NewRequest("POST", "http://shop.example/checkout?waitroom_token="+tok, nil)
		rec := do(g.Handler(s.handler()), req)
		if rec.Code != 200 || s.calls != 1 || len(rec.Result().Cookies()) != 1 {
			t.Fatalf("status %d, handler calls %d, cookies %d; want 200, 1, 1", rec.Code, s.calls, len(rec.Result().Cookies()))
		}
	})
}

// signed makes a JWT with golang-jwt directly, for the tokens internal/token never mints.
func signed(t *testing.T, method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tk := jwt.NewWithClaims(method, c)
	if kid != "" {
		tk.Header["kid"] = kid
	}
	s, err := tk.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRejectedTokens(t *testing.T) {
	ka := keys(t, secretA)
	adm := token.NewAdmissions(ka)
	room := newFakeRoom(t, adm)
	now := t0.Add(time.Minute)
	exp := t0.Add(5 * time.Minute)
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": "waitroom", "sub": "ticket-1", "evt": "concert", "num": 1, "iat": t0.Unix(), "exp": exp.Unix()}
		if edit != nil {
			edit(c)
		}
		return c
	}
	good := mint(t, adm, "concert", 1, exp)
	parts := strings.Split(good, ".")
	sig := []byte(parts[2])
	if sig[0] == 'A' {
		sig[0] = 'B'
	} else {
		sig[0] = 'A'
	}
	tampered := parts[0] + "." + parts[1] + "." + string(sig)
	otherKey := keys(t, secretB) // signs with B but claims A's kid

	cases := []struct {
		name  string
		tok   string
		now   time.Time
		skew  time.Duration
		want  error
		input string // substring of the problem's detail
	}{
		{"control: valid", good, now, 0, nil, ""},
		{"expired beyond the skew", good, exp.Add(31 * time.Second), 0, gate.ErrTokenExpired, "expired"},
		{"expired within the skew", good, exp.Add(29 * time.Second), 0, nil, ""},
		{"expired, no skew", good, exp.Add(time.Second), -1, gate.ErrTokenExpired, "expired"},
		{"expired beyond a 2 min skew", good, exp.Add(121 * time.Second), 2 * time.Minute, gate.ErrTokenExpired, "expired"},
		{"wrong event", mint(t, adm, "other", 1, exp), now, 0, gate.ErrWrongEvent, "another event"},
		{"wrong issuer", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { c["iss"] = "evil" })), now, 0, gate.ErrInvalidToken, "wrong issuer"},
		{"no issuer", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { delete(c, "iss") })), now, 0, gate.ErrInvalidToken, "iss"},
		{"bad signature", tampered, now, 0, gate.ErrInvalidToken, "bad signature"},
		{"signed by another key under a known kid", signed(t, jwt.SigningMethodEdDSA, otherKey.Signing, ka.KID, claims(nil)), now, 0, gate.ErrInvalidToken, "bad signature"},
		{"alg none", signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, ka.KID, claims(nil)), now, 0, gate.ErrInvalidToken, "unsupported alg"},
		{"HS256 keyed with the public key", signed(t, jwt.SigningMethodHS256, []byte(ka.Public), ka.KID, claims(nil)), now, 0, gate.ErrInvalidToken, "unsupported alg"},
		{"malformed", "not.a.jwt", now, 0, gate.ErrInvalidToken, "malformed"},
		{"garbage", "@@@", now, 0, gate.ErrInvalidToken, "malformed"},
		{"too long", strings.Repeat("a", 5000), now, 0, gate.ErrInvalidToken, "malformed"},
		{"no kid", signed(t, jwt.SigningMethodEdDSA, ka.Signing, "", claims(nil)), now, 0, gate.ErrInvalidToken, "missing kid"},
		{"no exp", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { delete(c, "exp") })), now, 0, gate.ErrInvalidToken, "exp"},
		{"no sub", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { delete(c, "sub") })), now, 0, gate.ErrInvalidToken, "sub"},
		{"num 0", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { c["num"] = 0 })), now, 0, gate.ErrInvalidToken, "num"},
		{"no iat", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { delete(c, "iat") })), now, 0, gate.ErrInvalidToken, "iat"},
		{"iat in the future beyond the skew", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { c["iat"] = now.Add(time.Minute).Unix() })), now, 0, gate.ErrInvalidToken, "issued in the future"},
		{"iat in the future within the skew", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { c["iat"] = now.Add(10 * time.Second).Unix() })), now, 0, nil, ""},
		{"iat after exp", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { c["iat"] = now.Unix(); c["exp"] = now.Add(-5 * time.Second).Unix() })), now.Add(-10 * time.Second), 0, gate.ErrInvalidToken, "iat after exp"},
		{"nbf in the future", signed(t, jwt.SigningMethodEdDSA, ka.Signing, ka.KID, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Minute).Unix() })), now, 0, gate.ErrInvalidToken, "not valid yet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock(c.now)
			g, _ := newGate(t, room, clock, func(cfg *gate.Config) { cfg.ClockSkew = c.skew })
			_, err := g.Verify(context.Background(), c.tok)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v, want success", err)
				}
			} else if !errors.Is(err, c.want) {
				t.Fatalf("Verify: %v, want %v", err, c.want)
			}
			var s seen
			rec := do(g.Handler(s.handler()), apiRequest(c.tok))
			if c.want == nil {
				if rec.Code != 200 {
					t.Fatalf("status %d, want 200", rec.Code)
				}
				return
			}
			if rec.Code != 401 || s.calls != 0 {
				t.Fatalf("status %d, handler calls %d; want 401, 0", rec.Code, s.calls)
			}
			p := problem(t, rec)
			if p["code"] != "admission_required" || !strings.Contains(p["detail"].(string), c.input) {
				t.Fatalf("problem %v, want code admission_required and %q in detail", p, c.input)
			}
			if wa := rec.Header().Get("WWW-Authenticate"); !strings.Contains(wa, `error="invalid_token"`) {
				t.Fatalf("WWW-Authenticate %q, want error=\"invalid_token\"", wa)
			}
		})
	}
	// A bad alg never names a key: no case above fetched the key set more than at each start.
	if n, starts := room.fetches.Load(), int64(len(cases)); n != starts {
		t.Fatalf("%d key fetches for %d gates: a rejected token caused a fetch", n, starts)
	}
}

func TestUnknownKidThenRotation(t *testing.T) {
	ka, kb := keys(t, secretA), keys(t, secretB)
	admA := token.NewAdmissions(ka)
	admB := token.NewAdmissions(kb, ka) // the waiting room after WAITROOM_TOKEN_KEY=B,A
	room := newFakeRoom(t, admA)
	clock := newFakeClock(t0.Add(time.Minute))
	g, first := newGate(t, room, clock, nil)
	if first != 300*time.Second {
		t.Fatalf("after the first fetch the loop waits %v, want the max-age 300 s", first)
	}
	h := g.Handler(http.NotFoundHandler())
	exp := t0.Add(10 * time.Minute)
	tokA, tokB := mint(t, admA, "concert", 1, exp), mint(t, admB, "concert", 2, exp)

	// A kid the gate does not know: one immediate fetch (still the old set), then rejected.
	rec := do(h, apiRequest(tokB))
	if rec.Code != 401 {
		t.Fatalf("unknown kid: status %d, want 401", rec.Code)
	}
	if n := room.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after an unknown kid, want 2", n)
	}
	clock.nextTimer(t)
	if _, err := g.Verify(context.Background(), tokB); !errors.Is(err, gate.ErrInvalidToken) || !strings.Contains(err.Error(), "unknown kid") {
		t.Fatalf("Verify: %v, want unknown kid", err)
	}

	// The waiting room rotates. Within JWKSMinRefresh (10 s) no further fetch happens.
	room.setJWKS(admB.JWKS(), 200, "public, max-age=300")
	clock.Advance(9 * time.Second)
	for range 5 {
		if rec := do(h, apiRequest(tokB)); rec.Code != 401 {
			t.Fatalf("within the rate limit: status %d, want 401", rec.Code)
		}
	}
	if n := room.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches within the rate limit, want still 2", n)
	}
	clock.noTimer(t)

	// Past the limit, the unknown kid fetches the new set and passes; the old key still works.
	clock.Advance(time.Second)
	if rec := do(h, apiRequest(tokB)); rec.Code != 404 { // the NotFoundHandler behind the gate
		t.Fatalf("after rotation: status %d, want the handler's 404", rec.Code)
	}
	if rec := do(h, apiRequest(tokA)); rec.Code != 404 {
		t.Fatalf("previous key after rotation: status %d, want the handler's 404", rec.Code)
	}
	if n := room.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
	clock.nextTimer(t)

	// Once the old key leaves the set, the next scheduled refresh drops it.
	room.setJWKS(token.NewAdmissions(kb).JWKS(), 200, "")
	clock.Advance(300 * time.Second)
	if d := clock.nextTimer(t); d != gate.DefaultJWKSRefresh {
		t.Fatalf("without Cache-Control the loop waits %v, want %v", d, gate.DefaultJWKSRefresh)
	}
	clock.Advance(gate.DefaultJWKSMinRefresh) // let the unknown kid fetch once more
	if _, err := g.Verify(context.Background(), tokA); !errors.Is(err, gate.ErrInvalidToken) {
		t.Fatalf("token of a retired key: %v, want rejected", err)
	}
}

func TestJWKSDownAtStartThenUp(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	room.setJWKS(nil, 503, "")
	clock := newFakeClock(t0.Add(time.Minute))
	g, first := newGate(t, room, clock, nil)
	tok := mint(t, adm, "concert", 3, t0.Add(10*time.Minute))
	h := g.Handler(http.NotFoundHandler())

	// Exponential backoff: each wait doubles, and exactly one fetch happens per wait.
	if first != time.Second {
		t.Fatalf("first retry after %v, want 1 s", first)
	}
	if n := room.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
	// Meanwhile a visitor with a token gets 503 (not the line: the token may be fine); the
	// unknown kid asks for one fetch (it fails too, so the backoff goes on), and a second
	// visitor within JWKSMinRefresh asks for none.
	for i := range 2 {
		rec := do(h, apiRequest(tok))
		if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("no keys: status %d Retry-After %q, want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
		}
		if p := problem(t, rec); p["code"] != "admission_unavailable" {
			t.Fatalf("problem %v", p)
		}
		if i == 0 {
			if d := clock.nextTimer(t); d != 2*time.Second {
				t.Fatalf("after the visitor's fetch the loop waits %v, want 2 s", d)
			}
		}
		if n := room.fetches.Load(); n != 2 {
			t.Fatalf("%d fetches after visitor %d, want 2", n, i+1)
		}
	}
	// Without a token it is the line as usual.
	if rec := do(h, pageRequest("http://shop.example/checkout")); rec.Code != 303 {
		t.Fatalf("no token, no keys: status %d, want 303", rec.Code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := g.Ready(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ready while down: %v", err)
	}
	cancel()
	for i, want := range []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second} {
		clock.noTimer(t)
		clock.Advance(want / 2)
		if d := clock.nextTimer(t); d != want {
			t.Fatalf("retry %d waits %v, want %v", i+3, d, want)
		}
		if n := room.fetches.Load(); n != int64(i+3) {
			t.Fatalf("%d fetches after retry %d, want %d", n, i+3, i+3)
		}
	}

	// The key set comes back: the next retry loads it and the token passes.
	room.setJWKS(adm.JWKS(), 200, "max-age=60")
	clock.Advance(16 * time.Second)
	if d := clock.nextTimer(t); d != time.Minute {
		t.Fatalf("after recovery the loop waits %v, want the max-age 60 s", d)
	}
	if err := g.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := do(h, apiRequest(tok)); rec.Code != 404 {
		t.Fatalf("keys back: status %d, want the handler's 404", rec.Code)
	}
	if n := room.fetches.Load(); n != 6 {
		t.Fatalf("%d fetches in all, want 6", n)
	}
	clock.noTimer(t)
}

// Requests that arrive while the first key fetch is under way wait for it rather than fail
// or fetch again.
func TestRequestsAtStartWaitForTheFirstFetch(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	room.jwksHold = make(chan struct{})
	clock := newFakeClock(t0.Add(time.Minute))
	g, err := gate.New(gate.Config{WaitingRoomURL: room.srv.URL, EventID: "concert", Clock: clock,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	h := g.Handler(http.NotFoundHandler())
	tok := mint(t, adm, "concert", 1, t0.Add(time.Hour))

	const n = 20
	codes := make(chan int, n)
	for range n {
		go func() { codes <- do(h, apiRequest(tok)).Code }()
	}
	// The fetch has started (the server counted it) and holds; release it.
	deadline := time.Now().Add(10 * time.Second)
	for room.fetches.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first key fetch did not start within 10 s")
		}
		runtime.Gosched()
	}
	close(room.jwksHold)
	for range n {
		if c := <-codes; c != 404 {
			t.Fatalf("a request at start got %d, want the handler's 404", c)
		}
	}
	clock.nextTimer(t)
	if f := room.fetches.Load(); f != 1 {
		t.Fatalf("%d key fetches for %d requests at start, want 1", f, n)
	}
}

func TestBackoffIsCappedAndResets(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	room.setJWKS([]byte(`{"keys":[{"kty":"RSA","kid":"x"}]}`), 200, "") // no usable key: a failure
	clock := newFakeClock(t0)
	_, d := newGate(t, room, clock, func(cfg *gate.Config) { cfg.JWKSRefresh = 5 * time.Second })
	var got []time.Duration
	for range 5 {
		got = append(got, d)
		clock.Advance(d)
		d = clock.nextTimer(t)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	room.setJWKS(adm.JWKS(), 200, "max-age=0") // max-age below JWKSMinRefresh: the floor applies
	clock.Advance(d)
	if d := clock.nextTimer(t); d != gate.DefaultJWKSMinRefresh {
		t.Fatalf("max-age=0 gives a wait of %v, want the floor %v", d, gate.DefaultJWKSMinRefresh)
	}
}

func TestOnlineCheck(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	clock := newFakeClock(t0.Add(time.Minute))
	g, _ := newGate(t, room, clock, func(cfg *gate.Config) { cfg.OnlineCheck = true })
	var s seen
	h := g.Handler(s.handler())
	exp := t0.Add(10 * time.Minute)
	tok := mint(t, adm, "concert", 5, exp)

	for range 3 {
		if rec := do(h, apiRequest(tok)); rec.Code != 200 {
			t.Fatalf("live session: status %d, want 200", rec.Code)
		}
	}
	if n := room.checks.Load(); n != 1 {
		t.Fatalf("%d online checks for 3 requests within 2 s, want 1", n)
	}

	// The session ends (the visitor left): within the cache TTL the old answer stands...
	room.setAdmission(tok, 401)
	clock.Advance(time.Second)
	if rec := do(h, apiRequest(tok)); rec.Code != 200 {
		t.Fatalf("cached live answer: status %d, want 200", rec.Code)
	}
	// ...then the visitor is sent to the line, and that answer is cached too.
	clock.Advance(1500 * time.Millisecond)
	page := pageRequest("http://shop.example/checkout")
	page.AddCookie(&http.Cookie{Name: "waitroom_admission_concert", Value: tok})
	rec := do(h, page)
	if rec.Code != 303 || rec.Header().Get("Location") != room.srv.URL+"/e/concert?return_url=http%3A%2F%2Fshop.example%2Fcheckout" {
		t.Fatalf("ended session: status %d Location %q, want 303 to the waiting room", rec.Code, rec.Header().Get("Location"))
	}
	if sc := rec.Header().Get("Set-Cookie"); !strings.Contains(sc, "Max-Age=0") {
		t.Fatalf("the stale cookie is not deleted: Set-Cookie %q", sc)
	}
	if rec := do(h, apiRequest(tok)); rec.Code != 401 {
		t.Fatalf("ended session, API: status %d, want 401", rec.Code)
	}
	if _, err := g.VerifyFrom(context.Background(), tok, netip.MustParseAddr("192.0.2.1")); !errors.Is(err, gate.ErrNotLive) {
		t.Fatalf("Verify: %v, want ErrNotLive", err) // the requests' address: their cached answer
	}
	if n := room.checks.Load(); n != 2 {
		t.Fatalf("%d online checks, want 2", n)
	}
	if s.calls != 4 {
		t.Fatalf("handler ran %d times, want 4", s.calls)
	}

	// A waiting room that answers neither 200 nor 401: fail closed by default...
	tok2 := mint(t, adm, "concert", 6, exp)
	room.setAdmission(tok2, 500)
	if rec := do(h, apiRequest(tok2)); rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("check failed, fail closed: status %d Retry-After %q, want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if _, err := g.Verify(context.Background(), tok2); !errors.Is(err, gate.ErrOnlineUnavailable) {
		t.Fatalf("Verify: %v, want ErrOnlineUnavailable", err)
	}
	// ...open when asked.
	gc, _ := newGate(t, room, clock, func(cfg *gate.Config) { cfg.OnlineCheck, cfg.OnlineFailOpen = true, true })
	rec = do(gc.Handler(s.handler()), apiRequest(tok2))
	if rec.Code != 200 {
		t.Fatalf("check failed, fail open: status %d, want 200", rec.Code)
	}
	if _, err := gc.Verify(context.Background(), tok2); err != nil {
		t.Fatalf("Verify with OnlineFailOpen: %v, want nil", err)
	}
}

func TestHTMLAndAPIAnswers(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	clock := newFakeClock(t0)
	g, _ := newGate(t, room, clock, nil)
	var s seen
	h := g.Handler(s.handler())
	roomURL := room.srv.URL + "/e/concert"
	if g.WaitingRoomURL() != roomURL {
		t.Fatalf("WaitingRoomURL %q", g.WaitingRoomURL())
	}

	// The page the visitor asked for comes back with the line's page (return_url), its query
	// kept but for a hand-off's token; a POST, whose body cannot be sent again, does not.
	rec := do(h, pageRequest("http://shop.example/checkout"))
	if rec.Code != 303 || rec.Header().Get("Location") != roomURL+"?return_url=http%3A%2F%2Fshop.example%2Fcheckout" {
		t.Fatalf("page without admission: %d %q, want 303 %s with return_url", rec.Code, rec.Header().Get("Location"), roomURL)
	}
	rec = do(h, pageRequest("http://shop.example/checkout/step?n=3&waitroom_token=x.y.z&lang=fr"))
	if want := roomURL + "?return_url=" + url.QueryEscape("http://shop.example/checkout/step?n=3&lang=fr"); rec.Header().Get("Location") != want {
		t.Fatalf("a page with a query: %q, want %q", rec.Header().Get("Location"), want)
	}
	post := pageRequest("http://shop.example/checkout")
	post.Method = "POST"
	if rec := do(h, post); rec.Header().Get("Location") != roomURL {
		t.Fatalf("a POST: %q, want %q", rec.Header().Get("Location"), roomURL)
	}

	rec = do(h, apiRequest(""))
	if rec.Code != 401 {
		t.Fatalf("API without admission: %d, want 401", rec.Code)
	}
	p := problem(t, rec)
	if p["code"] != "admission_required" || p["status"] != float64(401) || p["waiting_room_url"] != roomURL ||
		p["type"] != "urn:waitroom:problem:admission_required" || p["title"] == "" || p["detail"] == "" {
		t.Fatalf("problem %v", p)
	}
	if wa := rec.Header().Get("WWW-Authenticate"); wa != `Bearer realm="waitroom admission"` {
		t.Fatalf("WWW-Authenticate %q", wa)
	}
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("Cache-Control %q, want no-store", rec.Header().Get("Cache-Control"))
	}

	for _, accept := range []string{"", "*/*", "application/json", "text/html;q=0"} {
		req := httptest.NewRequest("GET", "http://shop.example/api", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if rec := do(h, req); rec.Code != 401 {
			t.Fatalf("Accept %q: %d, want 401", accept, rec.Code)
		}
	}
	for _, accept := range []string{"text/html", "TEXT/HTML; charset=utf-8", "application/json, text/html;q=0.5"} {
		req := httptest.NewRequest("GET", "http://shop.example/page", nil)
		req.Header.Set("Accept", accept)
		if rec := do(h, req); rec.Code != 303 {
			t.Fatalf("Accept %q: %d, want 303", accept, rec.Code)
		}
	}
	if s.calls != 0 {
		t.Fatalf("handler ran %d times without an admission", s.calls)
	}

	// A bad ?waitroom_token= on a page is the line too, and sets no cookie.
	rec = do(h, pageRequest("http://shop.example/checkout?waitroom_token=nonsense"))
	if rec.Code != 303 || rec.Header().Get("Location") != roomURL+"?return_url=http%3A%2F%2Fshop.example%2Fcheckout" || rec.Header().Get("Set-Cookie") != "" {
		t.Fatalf("bad hand-off: %d %q Set-Cookie %q", rec.Code, rec.Header().Get("Location"), rec.Header().Get("Set-Cookie"))
	}
	// A bad hand-off with a good cookie keeps the visitor in.
	good := mint(t, adm, "concert", 9, t0.Add(time.Hour))
	req := pageRequest("http://shop.example/checkout?waitroom_token=nonsense")
	req.AddCookie(&http.Cookie{Name: "waitroom_admission_concert", Value: good})
	if rec := do(h, req); rec.Code != 200 {
		t.Fatalf("bad hand-off, good cookie: %d, want 200", rec.Code)
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []gate.Config{
		{EventID: "concert"},
		{WaitingRoomURL: "queue.example.com", EventID: "concert"},
		{WaitingRoomURL: "ftp://queue.example.com", EventID: "concert"},
		{WaitingRoomURL: "https://queue.example.com?x=1", EventID: "concert"},
		{WaitingRoomURL: "https://queue.example.com"},
		{WaitingRoomURL: "https://queue.example.com", EventID: "Concert"},
		{WaitingRoomURL: "https://queue.example.com", EventID: "-concert"},
		{WaitingRoomURL: "https://queue.example.com", EventID: strings.Repeat("a", 65)},
		{WaitingRoomURL: "https://queue.example.com", EventID: "concert", CookieName: "bad name"},
		{WaitingRoomURL: "https://queue.example.com", EventID: "concert", JWKSURL: "/jwks"},
		{WaitingRoomURL: "https://queue.example.com", EventID: "concert", JWKSRefresh: -time.Second},
	}
	for i, cfg := range bad {
		if g, err := gate.New(cfg); err == nil {
			g.Close()
			t.Errorf("config %d (%+v) accepted", i, cfg)
		}
	}
}

// TestOnlineCheckNamesTheVisitor: the online check names the visitor's address (?client=, the
// request's RemoteAddr by default, or Config.ClientAddr), one cached answer per token and
// address, so that the waiting room can refuse an admission used from too many addresses: its
// 403 is ErrShared, and that visitor is sent to the line.
func TestOnlineCheckNamesTheVisitor(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	clock := newFakeClock(t0.Add(time.Minute))
	g, _ := newGate(t, room, clock, func(cfg *gate.Config) { cfg.OnlineCheck = true })
	var s seen
	h := g.Handler(s.handler())
	tok := mint(t, adm, "concert", 5, t0.Add(10*time.Minute))
	room.setAdmission(tok+"@203.0.113.9", 403) // one address too many

	holder := apiRequest(tok)
	holder.RemoteAddr = "198.51.100.4:5000"
	if rec := do(h, holder); rec.Code != 200 {
		t.Fatalf("the holder: status %d, want 200", rec.Code)
	}
	sharer := pageRequest("http://shop.example/checkout")
	sharer.AddCookie(&http.Cookie{Name: "waitroom_admission_concert", Value: tok})
	sharer.RemoteAddr = "203.0.113.9:5000"
	if rec := do(h, sharer); rec.Code != 303 || rec.Header().Get("Location") != room.srv.URL+"/e/concert?return_url=http%3A%2F%2Fshop.example%2Fcheckout" {
		t.Fatalf("a copy of the cookie elsewhere: status %d, want 303 to the waiting room", rec.Code)
	}
	if _, err := g.VerifyFrom(context.Background(), tok, netip.MustParseAddr("203.0.113.9")); !errors.Is(err, gate.ErrShared) {
		t.Fatalf("VerifyFrom: %v, want ErrShared", err)
	}
	if rec := do(h, holder); rec.Code != 200 {
		t.Fatalf("the holder again: status %d, want 200 (its own cached answer)", rec.Code)
	}
	room.mu.Lock()
	clients := append([]string(nil), room.clients...)
	room.mu.Unlock()
	if want := []string{"198.51.100.4", "203.0.113.9"}; !slices.Equal(clients, want) {
		t.Fatalf("the checks named %q, want %q", clients, want)
	}

	// Behind the site's own proxy, ClientAddr names the visitor.
	g2, _ := newGate(t, room, clock, func(cfg *gate.Config) {
		cfg.OnlineCheck = true
		cfg.ClientAddr = func(r *http.Request) netip.Addr { return netip.MustParseAddr(r.Header.Get("X-Site-Client")) }
	})
	req := apiRequest(tok)
	req.Header.Set("X-Site-Client", "203.0.113.9")
	if rec := do(g2.Handler(s.handler()), req); rec.Code != 401 {
		t.Fatalf("ClientAddr's address too many: status %d, want 401", rec.Code)
	}

	// Behind the site's proxies (TrustedProxies), the visitor is the address they name, read
	// as the waiting room reads it: from the right, past each trusted proxy; a request from
	// elsewhere is its peer, whatever header it writes.
	g3, _ := newGate(t, room, clock, func(cfg *gate.Config) {
		cfg.OnlineCheck = true
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	room.mu.Lock()
	room.clients = nil
	room.mu.Unlock()
	for _, c := range []struct{ peer, xff string }{
		{"10.1.2.3:4000", "192.0.2.77, 203.0.113.9, 10.9.9.9"}, // a visitor's own entry on the left, then the proxies
		{"198.51.100.8:4000", "203.0.113.9"},                   // not a proxy of the site's: its own address
	} {
		req := apiRequest(tok)
		req.RemoteAddr = c.peer
		req.Header.Set("X-Forwarded-For", c.xff)
		do(g3.Handler(s.handler()), req)
	}
	room.mu.Lock()
	clients = append([]string(nil), room.clients...)
	room.mu.Unlock()
	if want := []string{"203.0.113.9", "198.51.100.8"}; !slices.Equal(clients, want) {
		t.Fatalf("behind TrustedProxies the checks named %q, want %q", clients, want)
	}
	// A visitor whose address cannot be told (a unix socket's peer) is not let through
	// uncounted: 503, logged, its cookie kept; one without a token is sent to the line as ever.
	g4, _ := newGate(t, room, clock, func(cfg *gate.Config) { cfg.OnlineCheck = true })
	var s4 seen
	room.mu.Lock()
	room.clients = nil
	room.mu.Unlock()
	unix := apiRequest(tok)
	unix.RemoteAddr = "@"
	if rec := do(g4.Handler(s4.handler()), unix); rec.Code != 503 || !strings.Contains(rec.Body.String(), "admission_unavailable") {
		t.Fatalf("an unknown address with a token: status %d (%s), want 503 admission_unavailable", rec.Code, rec.Body)
	}
	page := pageRequest("http://shop.example/checkout")
	page.AddCookie(&http.Cookie{Name: "waitroom_admission_concert", Value: tok})
	page.RemoteAddr = ""
	if rec := do(g4.Handler(s4.handler()), page); rec.Code != 503 || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("an unknown address with a cookie: status %d, cookies %v, want 503 and the cookie kept", rec.Code, rec.Result().Cookies())
	}
	none := pageRequest("http://shop.example/checkout")
	none.RemoteAddr = ""
	if rec := do(g4.Handler(s4.handler()), none); rec.Code != 303 {
		t.Fatalf("an unknown address without a token: status %d, want 303 to the line", rec.Code)
	}
	room.mu.Lock()
	asked := len(room.clients)
	room.mu.Unlock()
	if asked != 0 || s4.calls != 0 {
		t.Fatalf("the room was asked %d times and the handler ran %d times for unknown addresses", asked, s.calls)
	}
	for _, bad := range []func(*gate.Config){
		func(cfg *gate.Config) {
			cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
			cfg.ClientAddr = func(*http.Request) netip.Addr { return netip.Addr{} }
		},
		func(cfg *gate.Config) { cfg.ClientIPHeader = "X-Real-IP" },
	} {
		cfg := gate.Config{WaitingRoomURL: room.srv.URL, EventID: "concert"}
		bad(&cfg)
		if g, err := gate.New(cfg); err == nil {
			g.Close()
			t.Fatalf("New accepted %+v", cfg)
		}
	}
}
