package app_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/syncbuf"
)

// clientFrom is an HTTP client whose connections come from source (a loopback address: all of
// 127.0.0.0/8 is local on Linux), so that the service sees another address.
func clientFrom(t *testing.T, source string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// withGate sets cfg's gate: a listener on a free loopback port proxying to origin, /checkout
// protected by event ev. It returns the gate's base URL.
func withGate(t *testing.T, cfg *app.Config, origin, ev string) string {
	t.Helper()
	f, err := gateway.Parse("gate.yaml", []byte("listen: 127.0.0.1:0\nsites:\n  - origin: "+origin+
		"\n    protect:\n      - event: "+ev+"\n        paths: [/checkout]\n"))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.Gate, cfg.GateListener = &f, ln
	return "http://" + ln.Addr().String()
}

// getFrom GETs url from the loopback address source (clientFrom) as an API client, with cookie
// (when not nil) and the header pairs, and returns the response, its body read and closed.
func getFrom(t *testing.T, source, url string, cookie *http.Cookie, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	res, err := clientFrom(t, source).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// gateCookieOf returns the gate's cookie of event ev that res sets (the test fails without one).
func gateCookieOf(t *testing.T, res *http.Response, ev string) *http.Cookie {
	t.Helper()
	for _, c := range res.Cookies() {
		if c.Name == gateway.CookieName(ev) {
			return c
		}
	}
	t.Fatalf("no %s cookie in the answer", gateway.CookieName(ev))
	return nil
}

// TestOneClientOneBucketAtEveryDoor: a person joining through the API, through the gate's
// reverse proxy and through its forward-auth check counts against one joins_per_client bucket
// — connecting directly, or behind a trusted proxy that writes X-Forwarded-For or Forwarded —
// because every door asks package clientaddr who the client is and package line whether it
// may join. The gate's join admitted at once shows in waitroom_time_in_queue_seconds like the
// API's, and the 429s of all three doors in the console's history. On both backends.
func TestOneClientOneBucketAtEveryDoor(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "the shop")
	}))
	t.Cleanup(origin.Close)
	for _, backend := range []string{"embedded", "redis"} {
		for _, door := range []struct {
			name   string
			header clientaddr.Header
			source string // the address the requests come from
			set    func(h http.Header, client string)
		}{
			{"direct", clientaddr.XForwardedFor, "127.0.0.50", func(http.Header, string) {}},
			{"x-forwarded-for", clientaddr.XForwardedFor, "127.0.0.1", func(h http.Header, c string) {
				h.Set("X-Forwarded-For", "6.6.6.6, "+c) // the left-most was written by the client
			}},
			{"forwarded", clientaddr.Forwarded, "127.0.0.1", func(h http.Header, c string) {
				h.Set("Forwarded", `for="`+c+`";proto=http`)
				h.Set("X-Forwarded-For", "6.6.6.7") // not the header the proxies write: ignored
			}},
		} {
			t.Run(backend+"/"+door.name, func(t *testing.T) {
				testOneBucket(t, backend, origin.URL, door.header, door.source, door.set)
			})
		}
	}
}

func testOneBucket(t *testing.T, backend, origin string, header clientaddr.Header, source string, set func(http.Header, string)) {
	const ev = "doors"
	cfg := backendConfig(t, backend)
	cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.ClientIPHeader = header
	cfg.HistoryInterval = 100 * time.Millisecond
	gate := withGate(t, &cfg, origin, ev)
	in := start(t, cfg)
	require.Equal(t, 201, putEvent(t, in.srv.URL, ev, `{"max_active":100,"limits":{"joins_per_client":3,"join_window_s":3600}}`).code)

	hc := clientFrom(t, source)
	do := func(method, url string, extra ...string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "application/json")
		set(req.Header, "198.51.100.7")
		for i := 0; i+1 < len(extra); i += 2 {
			req.Header.Set(extra[i], extra[i+1])
		}
		res, err := hc.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	api := func() int { return do("POST", in.srv.URL+"/v1/events/"+ev+"/tickets") }
	proxy := func() int { return do("GET", gate+"/checkout") } // no cookie: a new visitor each time
	check := func() int { return do("GET", in.srv.URL+"/v1/gate/check", "X-Original-URI", "/checkout") }

	require.Equal(t, 201, api(), "API join")
	require.Equal(t, 200, proxy(), "gate join, admitted at once and passed to the shop")
	require.Equal(t, 200, check(), "forward-auth join, admitted at once")
	require.Equal(t, 429, api(), "the bucket of 3 is empty, whichever door took it")
	require.Equal(t, 429, proxy())
	require.Equal(t, 429, check())

	// Another client still joins: the bucket is the client's, not the doors' or the proxy's.
	other := call(t, in.srv.URL, "POST", "/v1/events/"+ev+"/tickets", "", "")
	require.Equal(t, 201, other.code, "another address")

	require.Equal(t, 4.0, testutil.ToFloat64(in.Metrics.Admissions.WithLabelValues(ev, "join")))
	require.Equal(t, 4, timeInQueueCount(t, in.App, ev), "every admission at join observes its zero wait, the gate's included")

	eventually.True(t, 20*time.Second, "the three doors' 429s in the console's history", func() bool {
		h := call(t, in.srv.URL, "GET", "/v1/events/"+ev+"/history", adminKey, "")
		s := lastSample(h)
		return s != nil && s["rejected_total"] == 3.0
	})
}

// timeInQueueCount is the number of waits observed for event ev.
func timeInQueueCount(t *testing.T, a *app.App, ev string) int {
	t.Helper()
	ms, err := a.Metrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range ms {
		if mf.GetName() != "waitroom_time_in_queue_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" && l.GetValue() == ev {
					return int(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}

// TestAdmissionIsItsHolders (issue 20): an admitted visitor's cookie passed to other machines
// lets limits.addresses_per_admission addresses use it at once, not more: at the gate's
// proxy, at its forward-auth check and at the API's admission check (the gate middleware's,
// which names the visitor's address); one address too many takes its own place in line (the
// gate) or is refused (403 admission_shared). On both backends.
func TestAdmissionIsItsHolders(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "the shop")
	}))
	t.Cleanup(origin.Close)
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			const ev = "bound"
			cfg := backendConfig(t, backend)
			f, err := gateway.Parse("bound.yaml", []byte("listen: 127.0.0.1:0\nsites:\n  - origin: "+origin.URL+
				"\n    protect:\n      - event: "+ev+"\n        paths: [/checkout]\n"))
			require.NoError(t, err)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			cfg.Gate, cfg.GateListener = &f, ln
			in := start(t, cfg)
			gate := "http://" + ln.Addr().String()
			require.Equal(t, 201, putEvent(t, in.srv.URL, ev, `{"max_active":1,"limits":{"addresses_per_admission":2}}`).code)

			first := getFrom(t, "127.0.0.61", gate+"/checkout", nil)
			require.Equal(t, 200, first.StatusCode, "the holder is admitted at once")
			cookie := gateCookieOf(t, first, ev)
			require.Equal(t, 200, getFrom(t, "127.0.0.61", gate+"/checkout", cookie).StatusCode)
			require.Equal(t, 200, getFrom(t, "127.0.0.62", gate+"/checkout", cookie).StatusCode, "a second address (the phone on its carrier)")
			third := getFrom(t, "127.0.0.63", gate+"/checkout", cookie)
			require.Equal(t, 503, third.StatusCode, "a third address takes its own place, and waits (max_active 1)")
			check := getFrom(t, "127.0.0.64", in.srv.URL+"/v1/gate/check", cookie, "X-Original-URI", "/checkout")
			require.Equal(t, 401, check.StatusCode, "forward-auth: the same")
			require.Equal(t, 200, getFrom(t, "127.0.0.62", gate+"/checkout", cookie).StatusCode, "the two addresses in keep it")

			tok := cookie.Value
			online := func(client string) int {
				r := callH(t, in.srv.URL, "GET", "/v1/events/"+ev+"/admission?client="+client, tok, "")
				return r.code
			}
			require.Equal(t, 200, online("127.0.0.61"))
			require.Equal(t, 403, online("127.0.0.65"), "the API's admission check, naming a third address")
			require.Equal(t, 400, online("not-an-address"))
			require.Equal(t, 200, callH(t, in.srv.URL, "GET", "/v1/events/"+ev+"/admission", tok, "").code, "naming none")
		})
	}
}

// TestAdmissionNotSharedWhileRedisHangs: while Redis does not answer, an admitted visitor's
// cookie brought from a new address is not let through uncounted at the gate's proxy (nor at
// its forward-auth check): 503 store_unavailable with Retry-After, within the store timeout,
// and the origin is not reached; the address counted before Redis stopped keeps passing. Once
// Redis answers, the new address is counted and let through (addresses_per_admission 2).
// Before, the gate let every new address through while Redis was away (a cookie copied to
// many machines passed on all of them).
func TestAdmissionNotSharedWhileRedisHangs(t *testing.T) {
	var reached atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "the shop")
	}))
	t.Cleanup(origin.Close)
	const ev = "boundhang"
	rc := redistest.Client(t)
	rp, rURL := proxied(t, redistest.URL())
	cfg := app.Config{DatabaseURL: sqltest.Postgres(t), RedisURL: rURL, RedisPrefix: redistest.Prefix(t, rc), StoreTimeout: time.Second}
	gate := withGate(t, &cfg, origin.URL, ev)
	in := start(t, cfg)
	require.Equal(t, 201, putEvent(t, in.srv.URL, ev, `{"max_active":1,"limits":{"addresses_per_admission":2}}`).code)

	first := getFrom(t, "127.0.0.81", gate+"/checkout", nil)
	require.Equal(t, 200, first.StatusCode, "the holder is admitted at once")
	cookie := gateCookieOf(t, first, ev)

	rp.Hold()
	before := reached.Load()
	start := time.Now()
	other := getFrom(t, "127.0.0.82", gate+"/checkout", cookie)
	require.Equal(t, 503, other.StatusCode, "a new address while Redis hangs")
	require.NotEmpty(t, other.Header.Get("Retry-After"))
	require.Less(t, time.Since(start), 5*time.Second, "answered within the store timeout, not hung")
	check := getFrom(t, "127.0.0.82", in.srv.URL+"/v1/gate/check", cookie, "X-Original-URI", "/checkout")
	require.Equal(t, 503, check.StatusCode, "forward-auth: the same")
	require.Equal(t, before, reached.Load(), "the origin was not reached from the uncounted address")
	require.Equal(t, 200, getFrom(t, "127.0.0.81", gate+"/checkout", cookie).StatusCode, "the address counted before keeps passing")
	rp.Release()
	eventually.True(t, 15*time.Second, "the new address is counted once Redis answers", func() bool {
		return getFrom(t, "127.0.0.82", gate+"/checkout", cookie).StatusCode == 200
	})
}

// TestGateListenerIgnoresTheAdminKey: the gate's listener serves visitors; the admin key sent
// there is not read. On the API's listener it makes a named join that skips the challenge; on
// the gate's, the same request is a visitor's: user_id refused (401 admin_key_required), a join
// without a solved challenge refused (401 challenge_required).
func TestGateListenerIgnoresTheAdminKey(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "the shop")
	}))
	t.Cleanup(origin.Close)
	const ev = "pubkey"
	cfg := backendConfig(t, "embedded")
	gate := withGate(t, &cfg, origin.URL, ev)
	in := start(t, cfg)
	require.Equal(t, 201, putEvent(t, in.srv.URL, ev, `{"max_active":5,"challenge":{"type":"pow","difficulty":1}}`).code)

	api := callH(t, in.srv.URL, "POST", "/v1/events/"+ev+"/tickets", adminKey, `{"user_id":"u-1"}`)
	require.Equal(t, 201, api.code, "the API's listener: an admin join (%s)", api.raw)
	named := callH(t, gate, "POST", "/v1/events/"+ev+"/tickets", adminKey, `{"user_id":"u-2"}`)
	require.Equal(t, 401, named.code, named.raw)
	require.Equal(t, "admin_key_required", str(named, "code"), named.raw)
	anon := callH(t, gate, "POST", "/v1/events/"+ev+"/tickets", adminKey, "")
	require.Equal(t, 401, anon.code, anon.raw)
	require.Equal(t, "challenge_required", str(anon, "code"), anon.raw)
}

// TestUntrustedForwardingIsNoticed (issue 21): requests that carry X-Forwarded-For from a peer
// not in --trusted-proxies — a load balancer missing from it, which makes the whole crowd one
// client for the limits — are said once in the log, counted on /metrics, and listed in the
// instances' warnings that the console shows, naming the peer and the setting.
func TestUntrustedForwardingIsNoticed(t *testing.T) {
	var logs syncbuf.Buffer
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), HistoryInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		require.Equal(t, 200, callH(t, in.srv.URL, "GET", "/healthz", "", "", "X-Forwarded-For", "198.51.100.7").code)
	}
	require.Equal(t, 3.0, testutil.ToFloat64(in.Metrics.UntrustedForwarded))
	require.Equal(t, 1, strings.Count(logs.String(), "not a trusted proxy"), "said once per peer:\n%s", logs.String())
	require.Contains(t, logs.String(), "peer=127.0.0.1")
	eventually.True(t, 10*time.Second, "the warning in /v1/instances", func() bool {
		ws := instanceWarnings(t, in.srv.URL)
		return len(ws) == 1 && strings.Contains(ws[0], "127.0.0.1") && strings.Contains(ws[0], "--trusted-proxies")
	})
}

// instanceWarnings returns the warnings of the one instance /v1/instances lists (nil while it
// lists another number).
func instanceWarnings(t *testing.T, base string) []string {
	r := call(t, base, "GET", "/v1/instances", adminKey, "")
	list, _ := r.body["instances"].([]any)
	if len(list) != 1 {
		return nil
	}
	ws, _ := list[0].(map[string]any)["warnings"].([]any)
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i], _ = w.(string)
	}
	return out
}

// TestRefusedOriginIsNoticed: browsers' joins refused for their Origin (a proxy that passes on
// the Host without the visitor's port refuses every page) are said in the log (a line a minute
// at most), naming the remedy, and listed in the warnings the console shows; an allowed join,
// and a cross-site read answered anyway, say nothing.
func TestRefusedOriginIsNoticed(t *testing.T) {
	var logs syncbuf.Buffer
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), HistoryInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Equal(t, 201, call(t, in.srv.URL, "PUT", "/v1/events/origins", adminKey, `{"name":"Origins","max_active":10}`).code)
	self := in.srv.URL // the page's own origin: Host is the listener's host:port
	require.Equal(t, 201, callH(t, in.srv.URL, "POST", "/v1/events/origins/tickets", "", "{}", "Origin", self).code)
	require.NotContains(t, logs.String(), "origin_not_allowed")
	otherPort := strings.TrimSuffix(self, ":"+strings.Split(self, ":")[2]) + ":8080" // as behind nginx's $host
	for range 3 {
		require.Equal(t, 403, callH(t, in.srv.URL, "POST", "/v1/events/origins/tickets", "", "{}", "Origin", otherPort).code)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "origin_not_allowed"), "said once per origin and host:\n%s", logs.String())
	require.Contains(t, logs.String(), "WAITROOM_ALLOWED_ORIGINS")

	// A cross-site read that is answered anyway (no CORS headers) is no refusal.
	before := logs.String()
	require.Equal(t, 200, callH(t, in.srv.URL, "GET", "/v1/events/origins", "", "", "Origin", "https://reader.example").code)
	require.Equal(t, before, logs.String())
	eventually.True(t, 10*time.Second, "the warning in /v1/instances", func() bool {
		ws := instanceWarnings(t, in.srv.URL)
		return len(ws) == 1 && strings.Contains(ws[0], otherPort) && strings.Contains(ws[0], "--allowed-origins")
	})
	// A page of another site joining with a JSON body asks first (a CORS preflight): its
	// refusal is the one the browser meets, and is noticed too.
	pre := callH(t, in.srv.URL, "OPTIONS", "/v1/events/origins/tickets", "", "", "Origin", "https://www.other.example",
		"Access-Control-Request-Method", "POST")
	require.Equal(t, 403, pre.code, pre.raw)
	eventually.True(t, 10*time.Second, "the preflight's refusal in the warnings", func() bool {
		ws := instanceWarnings(t, in.srv.URL)
		return len(ws) == 2 && strings.Contains(ws[1], "https://www.other.example")
	})
}

// TestTokenKeyMismatchIsNoticed: an instance started with another WAITROOM_TOKEN_KEY on the same
// Redis and database answers the others' tickets 404 (a visitor behind the load balancer loses
// their place). Each instance names, in its warnings (/v1/instances, the console) and once in
// its log, the live instances that do not hold its signing key; an instance in the first round
// of a rotation ("old,new": it signs with the shared key and holds a new one) is not one.
func TestTokenKeyMismatchIsNoticed(t *testing.T) {
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	db := sqltest.Postgres(t)
	const other = "another-token-key-0123456789abcdef"
	var logs syncbuf.Buffer
	cfg := func(key string, log bool) app.Config {
		c := app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, HistoryInterval: 100 * time.Millisecond, TokenKey: key}
		if log {
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}
		return c
	}
	a := start(t, cfg(tokenKey, true))
	rotating := start(t, cfg(tokenKey+",a-new-token-key-0123456789abcdef", false))
	wrong := start(t, cfg(other, false))

	// The mistake itself: a ticket of a is unknown to the instance with the other key.
	require.Equal(t, 201, putEvent(t, a.srv.URL, "keys", `{"max_active":1}`).code)
	call(t, a.srv.URL, "POST", "/v1/events/keys/tickets", "", "") // takes the slot
	tk := call(t, a.srv.URL, "POST", "/v1/events/keys/tickets", "", "")
	require.Equal(t, 201, tk.code, tk.raw)
	path := "/v1/events/keys/tickets/" + str(tk, "ticket_id")
	require.Equal(t, 200, call(t, rotating.srv.URL, "GET", path, "", "").code)
	require.Equal(t, 404, call(t, wrong.srv.URL, "GET", path, "", "").code)

	// self returns what base says of itself in /v1/instances: its id, warnings and keys.
	self := func(base string) (id string, warnings, keys []string) {
		r := call(t, base, "GET", "/v1/instances", adminKey, "")
		list, _ := r.body["instances"].([]any)
		for _, v := range list {
			m := v.(map[string]any)
			if m["self"] != true {
				continue
			}
			id, _ = m["instance_id"].(string)
			for _, w := range m["warnings"].([]any) {
				warnings = append(warnings, w.(string))
			}
			for _, k := range m["token_keys"].([]any) {
				keys = append(keys, k.(string))
			}
		}
		return id, warnings, keys
	}
	wrongID, _, wrongKeys := self(wrong.srv.URL)
	rotatingID, _, rotatingKeys := self(rotating.srv.URL)
	_, _, aKeys := self(a.srv.URL)
	require.Len(t, aKeys, 1)
	require.Equal(t, []string{aKeys[0], rotatingKeys[1]}, rotatingKeys, "the signing key's first")
	require.NotContains(t, wrongKeys, aKeys[0])

	// names reports whether ws has exactly one line per id in ids, and each names the key.
	names := func(ws []string, ids ...string) bool {
		if len(ws) != len(ids) {
			return false
		}
		for i, id := range ids {
			if !strings.Contains(ws[i], id) || !strings.Contains(ws[i], "WAITROOM_TOKEN_KEY") {
				return false
			}
		}
		return true
	}
	eventually.True(t, 15*time.Second, "each instance names those that cannot read what it makes", func() bool {
		_, wa, _ := self(a.srv.URL)
		_, wr, _ := self(rotating.srv.URL)
		_, ww, _ := self(wrong.srv.URL)
		return names(wa, wrongID) && names(wr, wrongID) && len(ww) == 2 && strings.Contains(strings.Join(ww, "\n"), rotatingID)
	})
	require.Equal(t, 1, strings.Count(logs.String(), "does not hold this instance's token key"), "said once per peer:\n%s", logs.String())
	require.Contains(t, logs.String(), "instance="+wrongID)
}

// TestGateEventMissing: a gate file that protects a path with an event that does not exist is
// the operator's mistake, not a store outage: the gate's listener and its forward-auth check
// answer 503 waiting_room_not_set_up (with Retry-After) naming the event, and the log says it.
func TestGateEventMissing(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the origin was reached: %s", r.URL)
	}))
	t.Cleanup(origin.Close)
	var logs syncbuf.Buffer
	cfg := backendConfig(t, "embedded")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	gate := withGate(t, &cfg, origin.URL, "ghost")
	in := start(t, cfg)
	for _, r := range []resp{
		callH(t, gate, "GET", "/checkout", "", "", "Accept", "application/json"),
		callH(t, in.srv.URL, "GET", "/v1/gate/check", "", "", "X-Original-URI", "/checkout"),
	} {
		require.Equal(t, 503, r.code, r.raw)
		require.Equal(t, "waiting_room_not_set_up", str(r, "code"), r.raw)
		require.Contains(t, str(r, "detail"), "ghost")
		require.NotEmpty(t, r.header.Get("Retry-After"))
	}
	require.Contains(t, logs.String(), "protects paths with an event that does not exist")
}

// TestPagePlaceBehindForwardAuth: behind a forward-auth proxy the page's calls reach the API's
// listener, and a visitor sent to the page (another site's form posted to a protected path),
// who joins there, is given the gate's cookie for that ticket, so that the check honours that
// place on return to the path instead of joining the visitor again at the back of the line
// (the gate's listener has done so since helper-63; forward auth had not). A read of a ticket
// fills an empty cookie; an operator's join, and an event the gate file does not protect, get
// none.
func TestPagePlaceBehindForwardAuth(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			const ev, other = "fwdpage", "unguarded"
			cfg := backendConfig(t, backend)
			f, err := gateway.Parse("gate.yaml", []byte("trusted_proxies: [127.0.0.1]\nsites:\n  - protect:\n      - event: "+ev+
				"\n        paths: [/checkout]\n")) // forward auth only: no listen
			require.NoError(t, err)
			cfg.Gate = &f
			in := start(t, cfg)
			require.Equal(t, 201, putEvent(t, in.srv.URL, ev, `{"max_active":1}`).code)
			require.Equal(t, 201, putEvent(t, in.srv.URL, other, `{"max_active":1}`).code)
			check := func(c *http.Cookie, h ...string) *http.Response {
				return getFrom(t, "127.0.0.1", in.srv.URL+"/v1/gate/check", c, append([]string{"X-Original-URI", "/checkout"}, h...)...)
			}
			// Another site's form posted to /checkout: the page, no place and no cookie.
			res := check(nil, "X-Forwarded-Method", "POST", "Origin", "https://other.example", "Sec-Fetch-Site", "cross-site",
				"Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document")
			require.Equal(t, 401, res.StatusCode)
			require.Empty(t, res.Header.Get("X-Waitroom-Ticket"))
			require.Empty(t, res.Cookies())

			// The page's join, passed by the proxy to the API's listener: its ticket, admitted at
			// once, in the gate's cookie.
			join := callH(t, in.srv.URL, "POST", "/v1/events/"+ev+"/tickets", "", "", "Sec-Fetch-Site", "same-origin")
			require.Equal(t, 201, join.code, join.raw)
			ticket := str(join, "ticket_id")
			res = &http.Response{Header: join.header}
			c := gateCookieOf(t, res, ev)
			require.Equal(t, ticket, c.Value)
			require.True(t, c.HttpOnly)

			// Back on /checkout with it: that place, admitted, not a second one (which would
			// wait behind it for the one slot).
			res = check(c)
			require.Equal(t, 200, res.StatusCode)
			require.Equal(t, ticket, res.Header.Get("X-Waitroom-Ticket"))
			require.Equal(t, "1", res.Header.Get("X-Waitroom-Number"))

			// A read of the ticket fills an empty cookie, and sets nothing when the cookie holds
			// that ticket already. Another site's link to the read (cross-site) sets none: it
			// would plant a ticket of that site's choosing in the visitor's cookie.
			read := callH(t, in.srv.URL, "GET", "/v1/events/"+ev+"/tickets/"+ticket, "", "")
			require.Equal(t, 200, read.code, read.raw)
			require.Equal(t, ticket, gateCookieOf(t, &http.Response{Header: read.header}, ev).Value)
			for _, h := range [][]string{
				{"Cookie", c.Name + "=" + c.Value},
				{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"},
			} {
				read = callH(t, in.srv.URL, "GET", "/v1/events/"+ev+"/tickets/"+ticket, "", "", h...)
				require.Equal(t, 200, read.code, read.raw)
				require.Empty(t, read.header.Values("Set-Cookie"), "%v", h)
			}

			// An operator's join, and a join of an event the gate does not protect: no cookie.
			for _, r := range []resp{
				callH(t, in.srv.URL, "POST", "/v1/events/"+ev+"/tickets", adminKey, `{"user_id":"u-1"}`),
				callH(t, in.srv.URL, "POST", "/v1/events/"+other+"/tickets", "", ""),
			} {
				require.Equal(t, 201, r.code, r.raw)
				require.Empty(t, r.header.Values("Set-Cookie"), r.raw)
			}
		})
	}
}
