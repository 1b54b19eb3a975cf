package app_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestJoinsPerClient: joins_per_client holds per address on both backends (exact across two
// instances on Redis), answers 429 rate_limited with Retry-After, spares admin joins, and
// follows X-Forwarded-For only from a trusted proxy.
func TestJoinsPerClient(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	t.Run("embedded", func(t *testing.T) {
		in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
		testJoinsPerClient(t, in.srv.URL, in.srv.URL, false)
	})
	t.Run("embedded behind a trusted proxy", func(t *testing.T) {
		in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), TrustedProxies: trusted})
		testJoinsPerClient(t, in.srv.URL, in.srv.URL, true)
	})
	t.Run("redis, two instances", func(t *testing.T) {
		rc := redistest.Client(t)
		prefix := redistest.Prefix(t, rc)
		db := sqltest.Postgres(t)
		x := start(t, app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, TrustedProxies: trusted})
		y := start(t, app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, TrustedProxies: trusted})
		testJoinsPerClient(t, x.srv.URL, y.srv.URL, true)
	})
}

func testJoinsPerClient(t *testing.T, x, y string, proxied bool) {
	r := putEvent(t, x, "limited", `{"max_active":1,"limits":{"joins_per_client":3,"join_window_s":60}}`)
	require.Equal(t, 201, r.code, r.raw)
	lim, _ := r.body["limits"].(map[string]any)
	require.EqualValues(t, 3, lim["joins_per_client"])
	require.EqualValues(t, 30, lim["polls_per_ticket"], "the default")
	// Both instances must know the event's limits before the count starts.
	require.Equal(t, 200, call(t, y, "GET", "/v1/events/limited", "", "").code)
	bases := []string{x, y, x}
	for i := 0; i < 3; i++ {
		require.Equal(t, 201, call(t, bases[i], "POST", "/v1/events/limited/tickets", "", "").code)
	}
	sent := time.Now()
	over := call(t, y, "POST", "/v1/events/limited/tickets", "", "")
	require.Equal(t, 429, over.code, over.raw)
	require.Equal(t, "rate_limited", str(over, "code"))
	require.GreaterOrEqual(t, time.Since(sent), httpapi.DefaultRefusalHold, "a 429 is held before it is sent")
	secs := over.header.Get("Retry-After")
	require.NotEmpty(t, secs)
	require.EqualValues(t, num(over, "retry_after_s"), mustAtoi(t, secs))
	require.True(t, num(over, "retry_after_s") >= 1 && num(over, "retry_after_s") <= 60)
	// The instance remembers the refusal: the next join of the client costs no store call.
	joins := storeCalls(t, y, "join")
	require.Equal(t, 429, call(t, y, "POST", "/v1/events/limited/tickets", "", "").code)
	require.Equal(t, joins, storeCalls(t, y, "join"))
	// Server-to-server joins with the admin key are not counted per address.
	require.Equal(t, 201, call(t, x, "POST", "/v1/events/limited/tickets", adminKey, `{"user_id":"u-1"}`).code)
	// Another client, as a trusted proxy names it; a spoofed header from an untrusted peer
	// changes nothing.
	other := callH(t, x, "POST", "/v1/events/limited/tickets", "", "", "X-Forwarded-For", "198.51.100.7")
	if proxied {
		require.Equal(t, 201, other.code, other.raw)
	} else {
		require.Equal(t, 429, other.code, other.raw)
	}
}

// TestPollsAndAdminFailuresAcrossInstances: polls_per_ticket and the failed admin
// authentications per client are counted in the store: with two instances on one Redis, a
// ticket gets its reads and a client its wrong keys on both together, not on each.
func TestPollsAndAdminFailuresAcrossInstances(t *testing.T) {
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	db := sqltest.Postgres(t)
	// Both limits count in fixed windows aligned on the store's clock (docs/api.md): a run that
	// straddled the edge of a minute saw its counts start again half way (a flake, twice). The
	// store's clock is fixed a second into a window, so that the counts are the test's alone.
	at := time.Now().Truncate(time.Minute).Add(time.Second)
	clock := func() time.Time { return at }
	x := start(t, app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, StoreClock: clock}).srv.URL
	y := start(t, app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, StoreClock: clock}).srv.URL

	require.Equal(t, 201, putEvent(t, x, "polled", `{"max_active":1,"limits":{"polls_per_ticket":3,"poll_window_s":60}}`).code)
	require.Equal(t, 200, call(t, y, "GET", "/v1/events/polled", "", "").code) // y knows the limit
	tk := call(t, x, "POST", "/v1/events/polled/tickets", "", "")
	require.Equal(t, 201, tk.code)
	path := "/v1/events/polled/tickets/" + str(tk, "ticket_id")
	for _, base := range []string{x, y, x} {
		require.Equal(t, 200, call(t, base, "GET", path, "", "").code)
	}
	over := call(t, y, "GET", path, "", "")
	require.Equal(t, 429, over.code, over.raw)
	require.Equal(t, "rate_limited", str(over, "code"))
	require.NotEmpty(t, over.header.Get("Retry-After"))
	require.Equal(t, 429, call(t, y, "GET", path, "", "").code, "remembered by the instance")

	for i := 0; i < 10; i++ {
		base := []string{x, y}[i%2]
		require.Equal(t, 401, call(t, base, "GET", "/v1/events", "guess-"+strings.Repeat("x", i), "").code)
	}
	for _, base := range []string{x, y} {
		g := call(t, base, "GET", "/v1/events", adminKey, "")
		require.Equal(t, 429, g.code, "10 wrong keys on two instances: even the right one is refused")
		require.Equal(t, "rate_limited", str(g, "code"))
	}
}

// storeCalls reads base's count of store calls of op from /metrics.
func storeCalls(t *testing.T, base, op string) string {
	t.Helper()
	m := call(t, base, "GET", "/metrics", adminKey, "")
	require.Equal(t, 200, m.code)
	prefix := `waitroom_store_call_duration_seconds_count{op="` + op + `"} `
	for _, line := range strings.Split(m.raw, "\n") {
		if n, ok := strings.CutPrefix(line, prefix); ok {
			return n
		}
	}
	t.Fatalf("no %s in /metrics", prefix)
	return ""
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', s)
		n = n*10 + int64(c-'0')
	}
	return n
}

// TestIdentityRequiredOriginsPollsAdminThrottle: identity_required refuses anonymous joins;
// cross-site browser joins are refused; polls per ticket are capped; admin guessing is
// throttled; /metrics needs the admin key.
func TestIdentityRequiredOriginsPollsAdminThrottle(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	base := in.srv.URL
	host := strings.TrimPrefix(base, "http://")

	r := putEvent(t, base, "members", `{"max_active":5,"identity_required":true}`)
	require.Equal(t, 201, r.code, r.raw)
	require.Equal(t, true, r.body["identity_required"])
	anon := call(t, base, "POST", "/v1/events/members/tickets", "", "")
	require.Equal(t, 401, anon.code)
	require.Equal(t, "identity_required", str(anon, "code"))
	id, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "m1", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(identityKey))
	require.NoError(t, err)
	require.Equal(t, 201, call(t, base, "POST", "/v1/events/members/tickets", "", `{"identity":"`+id+`"}`).code)
	require.Equal(t, 201, call(t, base, "POST", "/v1/events/members/tickets", adminKey, `{"user_id":"m2"}`).code)

	// Origins: same origin and no Origin pass, another site's page does not.
	require.Equal(t, 201, putEvent(t, base, "open", `{"max_active":1,"limits":{"polls_per_ticket":2,"poll_window_s":60}}`).code)
	cross := callH(t, base, "POST", "/v1/events/open/tickets", "", "", "Origin", "https://evil.example")
	require.Equal(t, 403, cross.code)
	require.Equal(t, "origin_not_allowed", str(cross, "code"))
	require.Equal(t, 201, callH(t, base, "POST", "/v1/events/open/tickets", "", "", "Origin", "http://"+host).code)
	// Two Origin fields are refused even when one is this page's, and the detail says why
	// (it named the allowed origin as not allowed).
	two := callH(t, base, "POST", "/v1/events/open/tickets", "", "", "Origin", "http://"+host, "Origin", "https://evil.example")
	require.Equal(t, 403, two.code, two.raw)
	require.Contains(t, str(two, "detail"), "2 Origin fields")
	tk := call(t, base, "POST", "/v1/events/open/tickets", "", "")
	require.Equal(t, 201, tk.code)
	// The same rule on the other routes that take something for a visitor: a ticket's SSE
	// stream (a push connection; the WebSocket's handshake is 403 cross_origin) and a campaign
	// entry. Both were served to any Origin.
	sse := callH(t, base, "GET", "/v1/events/open/tickets/"+str(tk, "ticket_id")+"/events", "", "", "Origin", "https://evil.example")
	require.Equal(t, 403, sse.code, sse.raw)
	require.Equal(t, "origin_not_allowed", str(sse, "code"))
	require.Equal(t, 201, call(t, base, "PUT", "/v1/campaigns/drop", adminKey, `{"stock":5}`).code)
	entry := callH(t, base, "POST", "/v1/campaigns/drop/entries", adminKey, `{"user_id":"u1"}`, "Origin", "https://evil.example")
	require.Equal(t, 403, entry.code, entry.raw)
	require.Equal(t, "origin_not_allowed", str(entry, "code"))
	require.Equal(t, 202, callH(t, base, "POST", "/v1/campaigns/drop/entries", adminKey, `{"user_id":"u1"}`, "Origin", "http://"+host).code)

	// Polls per ticket.
	path := "/v1/events/open/tickets/" + str(tk, "ticket_id")
	require.Equal(t, 200, call(t, base, "GET", path, "", "").code)
	require.Equal(t, 200, call(t, base, "GET", path, "", "").code)
	p := call(t, base, "GET", path, "", "")
	require.Equal(t, 429, p.code)
	require.Equal(t, "rate_limited", str(p, "code"))
	require.NotEmpty(t, p.header.Get("Retry-After"))

	// Metrics need the admin key.
	require.Equal(t, 401, call(t, base, "GET", "/metrics", "", "").code)
	require.Equal(t, 200, call(t, base, "GET", "/metrics", adminKey, "").code)

	// Admin guessing: 10 wrong keys a minute, then 429 even for the right one.
	for i := 0; i < 10; i++ {
		require.Equal(t, 401, call(t, base, "GET", "/v1/events", "guess-"+strings.Repeat("x", i), "").code)
	}
	g := call(t, base, "GET", "/v1/events", adminKey, "")
	require.Equal(t, 429, g.code)
	require.Equal(t, "rate_limited", str(g, "code"))
	// Admission tokens (JWTs) presented where the admin key is optional do not count: the
	// ticket above is still readable by its holder.
}

// TestRedirectURLMustBeHTTP: redirect_url accepts only http and https.
func TestRedirectURLMustBeHTTP(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	r := putEvent(t, in.srv.URL, "r", `{"max_active":1,"redirect_url":"javascript:alert(1)"}`)
	require.Equal(t, 422, r.code)
	require.Contains(t, str(r, "detail"), "redirect_url")
	require.Equal(t, 201, putEvent(t, in.srv.URL, "r", `{"max_active":1,"redirect_url":"https://shop.example/r"}`).code)
}

// TestSlowBodyIsCutOff: a request whose body trickles in is answered 408 body_timeout once the body
// deadline (httpapi.DefaultBodyTimeout, 10 s) passes, instead of holding its connection (issue
// 12: 20 slow-body connections held 40 s).
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	conn, err := net.Dial("tcp", strings.TrimPrefix(in.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("PUT /v1/events/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + adminKey +
		"\r\nContent-Length: 100\r\n\r\n{\"max_active\":"))
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, 408, res.StatusCode)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), `"code":"body_timeout"`)
	require.Less(t, time.Since(start), 20*time.Second)
}

// TestAllowedOriginsList: with --allowed-origins, joins and WebSocket handshakes pass only
// from the listed sites (the same host no longer passes by itself: DNS rebinding).
func TestAllowedOriginsList(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), AllowedOrigins: "https://shop.example"})
	base := in.srv.URL
	host := strings.TrimPrefix(base, "http://")
	require.Equal(t, 201, putEvent(t, base, "ev", `{"max_active":1}`).code)
	require.Equal(t, 201, callH(t, base, "POST", "/v1/events/ev/tickets", "", "", "Origin", "https://shop.example").code)
	require.Equal(t, 403, callH(t, base, "POST", "/v1/events/ev/tickets", "", "", "Origin", "http://"+host).code)
	tk := call(t, base, "POST", "/v1/events/ev/tickets", "", "")
	require.Equal(t, 201, tk.code)
	ws := func(origin string) int {
		req, err := http.NewRequest("GET", base+"/v1/events/ev/tickets/"+str(tk, "ticket_id")+"/ws", nil)
		require.NoError(t, err)
		for k, v := range map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": origin} {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close() // a 101's body is the socket: not read
		return res.StatusCode
	}
	require.Equal(t, 403, ws("https://evil.example"))
	require.Equal(t, 403, ws("http://"+host))
	require.Equal(t, 101, ws("https://shop.example"))
}

// TestCrossOriginHeaders: a page of a listed origin may ask first (a CORS preflight) and read
// the answers of the line's routes; a page of another origin, or any page asking for the admin
// API, gets no CORS header and its preflight 403 origin_not_allowed.
func TestCrossOriginHeaders(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), AllowedOrigins: "https://shop.example"})
	base := in.srv.URL
	require.Equal(t, 201, putEvent(t, base, "ev", `{"max_active":1}`).code)
	pre := func(origin, method, path string) resp {
		return callH(t, base, "OPTIONS", path, "", "", "Origin", origin, "Access-Control-Request-Method", method,
			"Access-Control-Request-Headers", "content-type,idempotency-key")
	}
	p := pre("https://shop.example", "POST", "/v1/events/ev/tickets")
	require.Equal(t, 204, p.code)
	require.Equal(t, "https://shop.example", p.header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "POST", p.header.Get("Access-Control-Allow-Methods"))
	require.Contains(t, p.header.Get("Access-Control-Allow-Headers"), "Idempotency-Key")
	require.Equal(t, "600", p.header.Get("Access-Control-Max-Age"))
	for _, refused := range []resp{
		pre("https://evil.example", "POST", "/v1/events/ev/tickets"),
		pre("https://shop.example", "PUT", "/v1/events/ev"), // the admin API
		pre("https://shop.example", "GET", "/metrics"),
		pre("https://shop.example", "GET", "/v1/events"),
	} {
		require.Equal(t, 403, refused.code)
		require.Equal(t, "origin_not_allowed", str(refused, "code"))
		require.Empty(t, refused.header.Get("Access-Control-Allow-Origin"))
	}
	p = pre("https://shop.example", "PATCH", "/v1/events/ev/tickets")
	require.Equal(t, 405, p.code)
	require.Empty(t, p.header.Get("Access-Control-Allow-Origin"))

	tk := callH(t, base, "POST", "/v1/events/ev/tickets", "", "", "Origin", "https://shop.example")
	require.Equal(t, 201, tk.code)
	require.Equal(t, "https://shop.example", tk.header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, tk.header.Get("Access-Control-Expose-Headers"), "Retry-After")
	require.Contains(t, tk.header.Values("Vary"), "Origin")
	st := callH(t, base, "GET", "/v1/events/ev/tickets/"+str(tk, "ticket_id"), "", "", "Origin", "https://shop.example")
	require.Equal(t, 200, st.code)
	require.Equal(t, "https://shop.example", st.header.Get("Access-Control-Allow-Origin"))
	refused := callH(t, base, "POST", "/v1/events/ev/tickets", "", "", "Origin", "https://evil.example")
	require.Contains(t, refused.header.Values("Vary"), "Origin", "the answer depends on the Origin, allowed or not")
	for _, a := range []resp{
		refused,
		callH(t, base, "GET", "/v1/events", adminKey, "", "Origin", "https://shop.example"),
		callH(t, base, "GET", "/metrics", adminKey, "", "Origin", "https://shop.example"),
		callH(t, base, "GET", "/admin", "", "", "Origin", "https://shop.example"),
		callH(t, base, "GET", "/assets/waitroom.css", "", "", "Origin", "https://shop.example"),
		call(t, base, "GET", "/v1/events/ev/tickets/"+str(tk, "ticket_id"), "", ""),
	} {
		require.Empty(t, a.header.Get("Access-Control-Allow-Origin"))
	}
}
