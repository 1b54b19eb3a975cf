package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// rawConn is a client connection from a chosen loopback address speaking HTTP/1.1 by hand, so
// that a test knows which connection each request takes.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func rawFrom(t *testing.T, source, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, method, path, auth string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	req := method + " " + path + " HTTP/1.1\r\nHost: waitroom.test\r\nContent-Length: 0\r\n"
	if auth != "" {
		req += "Authorization: Bearer " + auth + "\r\n"
	}
	_, err := io.WriteString(c, req+"\r\n")
	require.NoError(t, err)
}

// answer reads the answer to the request sent last; an error when the server closed the
// connection instead.
func (c *rawConn) answer() (*http.Response, string, error) {
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, string(b), err
}

// do sends a request and reads its answer, which must come.
func (c *rawConn) do(t *testing.T, method, path, auth string) (int, string) {
	t.Helper()
	c.send(t, method, path, auth)
	res, body, err := c.answer()
	require.NoError(t, err, "%s %s", method, path)
	return res.StatusCode, body
}

// closedByServer reports whether the server closed c: it reads EOF or a reset within 5 s.
func (c *rawConn) closedByServer(t *testing.T) bool {
	t.Helper()
	return c.closedWithin(t, 5*time.Second)
}

// closedWithin reports whether the server closed c within d: it reads EOF or a reset.
func (c *rawConn) closedWithin(t *testing.T, d time.Duration) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	_, err := c.r.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	require.Error(t, err, "the server sent something unasked")
	return true
}

// slowShop is an origin whose GET /slow waits until released (a request in flight for as long
// as a test wants); every other path answers "the shop".
type slowShop struct {
	url     string
	arrived chan struct{}
	release func()
}

func newSlowShop(t *testing.T) *slowShop {
	t.Helper()
	rel, arrived := make(chan struct{}), make(chan struct{}, 64)
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-rel
		}
		_, _ = io.WriteString(w, "the shop")
	}))
	t.Cleanup(srv.Close) // after the instance's stop: the requests in flight are released first
	return &slowShop{url: srv.URL, arrived: arrived, release: func() { once.Do(func() { close(rel) }) }}
}

// hold sends GET /slow over c through the gate and waits until the shop has it: c is busy
// with a request in flight.
func (s *slowShop) hold(t *testing.T, c *rawConn) {
	t.Helper()
	c.send(t, "GET", "/slow", "")
	select {
	case <-s.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the shop")
	}
}

// startListening starts an instance that serves its API on a listener of its own (the
// instance's connection limits apply there, not on the test server of start) and, with a
// shop, the gate in front of it; it returns the API's and the gate's addresses.
func startListening(t *testing.T, cfg app.Config, shop *slowShop) (in *instance, api, gate string) {
	t.Helper()
	cfg.Listener = loopback(t)
	api = cfg.Listener.Addr().String()
	if shop != nil {
		f, err := gateway.Parse("conns.yaml", []byte("listen: 127.0.0.1:0\nsites:\n  - origin: "+shop.url+
			"\n    protect:\n      - event: none\n        paths: [/checkout]\n"))
		require.NoError(t, err)
		cfg.Gate, cfg.GateListener = &f, loopback(t)
		gate = cfg.GateListener.Addr().String()
	}
	in = start(t, cfg)
	if shop != nil {
		t.Cleanup(shop.release) // before the instance stops: its shutdown waits for them
	}
	return in, api, gate
}

// TestOneAddressCannotTakeTheInstance (issue 20 item 1): one address opening connection after
// connection with one request on each, kept open, holds no more than --max-conns-per-client of
// them — each new one closes its own longest idle one — and when all of its connections are
// busy (requests in flight at the gate: the count is one for every listener) one more is
// refused, closed without an answer. Another address and /healthz are served all along, and
// the requests in flight finish.
func TestOneAddressCannotTakeTheInstance(t *testing.T) {
	const perClient = 8
	shop := newSlowShop(t)
	in, api, gate := startListening(t, app.Config{DatabaseURL: sqltest.SQLite(t),
		Conns: connlimit.Config{MaxConnsPerClient: perClient}}, shop)

	var attack []*rawConn
	for i := range 3 * perClient {
		c := rawFrom(t, "127.0.0.77", api)
		code, _ := c.do(t, "GET", "/healthz", "")
		require.Equal(t, 200, code)
		attack = append(attack, c)
		// Wait until the server takes it for idle, as an attacker's next connection would
		// come after a while: each one then finds the one before idle.
		eventually.True(t, 5*time.Second, "the connection idle", func() bool { return in.Conns.Idle() == min(i+1, perClient) })
	}
	require.Equal(t, perClient, in.Conns.Open(), "the address holds its cap, no more")
	for i, c := range attack[:2*perClient] {
		require.True(t, c.closedByServer(t), "connection %d was closed for a newer one of its address", i)
	}
	require.Equal(t, float64(2*perClient), testutil.ToFloat64(in.Metrics.ConnsShed.WithLabelValues("api", "client")))
	code, _ := rawFrom(t, "127.0.0.78", api).do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code, "another address is served")

	// The same address keeps its connections busy: requests in flight at the gate, each new
	// connection taking the place of one of its idle ones at the API.
	var busy []*rawConn
	for range perClient {
		c := rawFrom(t, "127.0.0.77", gate)
		shop.hold(t, c)
		busy = append(busy, c)
	}
	for i, c := range attack[2*perClient:] {
		require.True(t, c.closedByServer(t), "idle connection %d made room for a busy one", i)
	}
	over := rawFrom(t, "127.0.0.77", api)
	over.send(t, "GET", "/healthz", "")
	_, _, err := over.answer()
	require.Error(t, err, "one connection more of the address is refused without an answer")
	require.Equal(t, 1.0, testutil.ToFloat64(in.Metrics.ConnsRefused.WithLabelValues("api", "client")))

	code, _ = rawFrom(t, "127.0.0.79", api).do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code, "/healthz from another address is served")
	code, body := rawFrom(t, "127.0.0.79", gate).do(t, "GET", "/static/a.css", "")
	require.Equal(t, 200, code, "so is the gate")
	require.Equal(t, "the shop", body)
	scrape := call(t, in.srv.URL, "GET", "/metrics", adminKey, "")
	require.Contains(t, scrape.raw, `waitroom_connections{listener="gate"} 9`)
	require.Contains(t, scrape.raw, `waitroom_connections_refused_total{listener="api",reason="client"} 1`)

	shop.release()
	for i, c := range busy {
		res, body, err := c.answer()
		require.NoError(t, err, "request in flight %d is not cut", i)
		require.Equal(t, 200, res.StatusCode)
		require.Equal(t, "the shop", body)
	}
}

// TestHealthAndAdminWhenConnectionsRunOut: with every connection below the reserve busy, the
// reserve still answers /healthz, /readyz and an admin call, and answers anything else 503
// too_many_connections with Retry-After, closing the connection; the requests in flight
// finish.
func TestHealthAndAdminWhenConnectionsRunOut(t *testing.T) {
	shop := newSlowShop(t)
	in, api, gate := startListening(t, app.Config{DatabaseURL: sqltest.SQLite(t),
		Conns: connlimit.Config{MaxConns: 20, Reserve: 4, MaxConnsPerClient: 4}}, shop)
	require.Equal(t, 201, putEvent(t, in.srv.URL, "full", `{"max_active":10}`).code)

	var busy []*rawConn
	for i := range 16 {
		c := rawFrom(t, fmt.Sprintf("127.0.0.%d", 100+i/4), gate)
		shop.hold(t, c)
		busy = append(busy, c)
	}
	code, _ := rawFrom(t, "127.0.0.110", api).do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code, "/healthz on the reserve")
	code, _ = rawFrom(t, "127.0.0.111", api).do(t, "GET", "/readyz", "")
	require.Equal(t, 200, code, "/readyz on the reserve")

	join := rawFrom(t, "127.0.0.112", api)
	join.send(t, "POST", "/v1/events/full/tickets", "")
	res, body, err := join.answer()
	require.NoError(t, err)
	require.Equal(t, 503, res.StatusCode, body)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	require.Equal(t, "5", res.Header.Get("Retry-After"), "the busy idle timeout: idle connections close within it")
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	require.Equal(t, "too_many_connections", p["code"])
	require.True(t, join.closedByServer(t), "the refused request's connection closes")
	require.Equal(t, 1.0, testutil.ToFloat64(in.Metrics.ConnsRefused.WithLabelValues("api", "reserve")))

	code, body = rawFrom(t, "127.0.0.113", api).do(t, "GET", "/v1/events", adminKey)
	require.Equal(t, 200, code, "an admin call on the reserve: %s", body)
	require.Contains(t, body, `"full"`)

	// A wrong key on the reserve is counted as at every door (an attack: uncounted, the
	// reserve's 503 to a wrong key and its service to the right one told them apart without
	// limit): past the limit of wrong keys a minute, the client is answered 429 whatever it
	// sends, the right key too; another client's right key is served.
	// One address's connections one after another: each is closed before the next is made, or
	// the address's cap of connections (MaxConnsPerClient) refuses the next.
	closed := func() {
		eventually.True(t, 5*time.Second, "the reserve's connection closed", func() bool { return in.Conns.Open() == len(busy) })
	}
	closed()
	for i := range httpapi.DefaultAdminFailures {
		code, body = rawFrom(t, "127.0.0.114", api).do(t, "GET", "/v1/events", fmt.Sprintf("wrong-key-%d", i))
		require.Equal(t, 503, code, "wrong key %d on the reserve: %s", i, body)
		closed()
	}
	code, body = rawFrom(t, "127.0.0.114", api).do(t, "GET", "/v1/events", adminKey)
	require.Equal(t, 429, code, "the right key after the limit of wrong ones: %s", body)
	require.Contains(t, body, `"code":"rate_limited"`)
	code, body = rawFrom(t, "127.0.0.115", api).do(t, "GET", "/v1/events", adminKey)
	require.Equal(t, 200, code, "another client's key: %s", body)
	closed()
	// A token of the line's (a JWT: a shop's back end checking admission tokens) is not an
	// admin key's guess: refused on the reserve, not counted, so its address keeps the admin API.
	for i := range httpapi.DefaultAdminFailures + 2 {
		code, body = rawFrom(t, "127.0.0.117", api).do(t, "GET", "/v1/events/full/admission", "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln")
		require.Equal(t, 503, code, "admission check %d on the reserve: %s", i, body)
		closed()
	}
	code, body = rawFrom(t, "127.0.0.117", api).do(t, "GET", "/v1/events", adminKey)
	require.Equal(t, 200, code, "the admin key after the line's tokens: %s", body)
	// A bearer on the gate's listener (where admin keys are not honoured) is not served there.
	code, body = rawFrom(t, "127.0.0.116", gate).do(t, "GET", "/v1/events", adminKey)
	require.Equal(t, 503, code, "an admin key on the gate's reserve: %s", body)

	shop.release()
	for i, c := range busy {
		res, _, err := c.answer()
		require.NoError(t, err, "request in flight %d is not cut", i)
		require.Equal(t, 200, res.StatusCode)
	}
}

// TestReserveIsNotHeldByBodies (an attack on issue 20's reserve): with every connection below
// the reserve busy, a request on the reserve that announces a body and never sends it is
// answered at once, not after the reserve's 5 s of reading (net/http reads an unread body
// before answering): a health check with a body is no health check (503), nor is a call under
// made-up credentials, with a body or without (a stream); an admin key's call with its body
// is served. Every answer on the reserve closes its connection at once (within a second, not
// at the end of the reserve's reading: net/http reads an unread body as it closes, too).
func TestReserveIsNotHeldByBodies(t *testing.T) {
	shop := newSlowShop(t)
	in, api, gate := startListening(t, app.Config{DatabaseURL: sqltest.SQLite(t),
		Conns: connlimit.Config{MaxConns: 20, Reserve: 4, MaxConnsPerClient: 4}}, shop)
	require.Equal(t, 201, putEvent(t, in.srv.URL, "full", `{"max_active":10}`).code)
	for i := range 16 {
		shop.hold(t, rawFrom(t, fmt.Sprintf("127.0.0.%d", 100+i/4), gate))
	}
	t.Cleanup(shop.release)
	// ask sends head (with a Content-Length of 100 and only body of it, when body is shorter)
	// on a reserve connection and reads the answer, which must come within 3 s.
	ask := func(source, head, body string) (*http.Response, *rawConn) {
		t.Helper()
		c := rawFrom(t, source, api)
		require.NoError(t, c.SetDeadline(time.Now().Add(3*time.Second)))
		_, err := io.WriteString(c, head+"Host: waitroom.test\r\nContent-Length: 100\r\n\r\n"+body)
		require.NoError(t, err)
		res, _, err := c.answer()
		require.NoError(t, err, "%q: an answer before the reserve's 5 s of reading", head)
		return res, c
	}
	res, c := ask("127.0.0.120", "GET /healthz HTTP/1.1\r\n", "")
	require.Equal(t, 503, res.StatusCode, "a health check with a body")
	require.True(t, c.closedWithin(t, time.Second))
	res, c = ask("127.0.0.121", "POST /v1/events/full/tickets HTTP/1.1\r\nAuthorization: Bearer made-up\r\n", "")
	require.Equal(t, 503, res.StatusCode, "a body under credentials that are no admin key")
	require.True(t, c.closedWithin(t, time.Second))
	// Nor a request without a body under made-up credentials: a stream, or a slow origin
	// behind the gate, would hold the connection as long.
	sse := rawFrom(t, "127.0.0.124", api)
	sse.send(t, "GET", "/v1/events/full/tickets/"+strings.Repeat("A", 38)+"/events", "made-up")
	res, _, err := sse.answer()
	require.NoError(t, err)
	require.Equal(t, 503, res.StatusCode, "a stream under credentials that are no admin key")
	require.True(t, sse.closedWithin(t, time.Second))
	res, c = ask("127.0.0.122", "PATCH /v1/events/full HTTP/1.1\r\nAuthorization: Bearer "+adminKey+"\r\nContent-Type: application/json\r\n",
		fmt.Sprintf("%-100s", `{"max_active":11}`))
	require.Equal(t, 200, res.StatusCode, "an admin call with its body")
	require.True(t, c.closedWithin(t, time.Second), "one request a connection of the reserve")
	code, _ := rawFrom(t, "127.0.0.123", api).do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code, "a health check")
}

// TestIdleTimeoutIsTheOperators: Config.IdleTimeout (--idle-timeout) closes a keep-alive
// connection idle that long on a quiet instance, in place of the fixed 120 s that a balancer
// keeping its idle connections to the instances for 600 s (Google's) could not be set under
// (helper-78).
func TestIdleTimeoutIsTheOperators(t *testing.T) {
	_, api, _ := startListening(t, app.Config{DatabaseURL: sqltest.SQLite(t), IdleTimeout: 300 * time.Millisecond}, nil)
	c := rawFrom(t, "127.0.0.71", api)
	code, body := c.do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code, body)
	require.True(t, c.closedWithin(t, 10*time.Second), "an idle connection outlived --idle-timeout")
}

// testClock is a clock a test moves by hand.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// TestWaitingUserKeepsOneConnection (issue 22 item 4, the connection half): a user who joined
// over a keep-alive connection and then opened its ticket's WebSocket holds two connections;
// once the instance is busy, the idle one is closed after 1 s (its client holds a push
// connection: sooner than --busy-idle-timeout) and the WebSocket goes on.
func TestWaitingUserKeepsOneConnection(t *testing.T) {
	clock := &testClock{}
	clock.ns.Store(time.Now().UnixNano())
	in, api, _ := startListening(t, app.Config{DatabaseURL: sqltest.SQLite(t),
		Conns: connlimit.Config{MaxConns: 100, BusyAt: 2, BusyIdleTimeout: 5 * time.Second, Now: clock.Now}}, nil)
	require.Equal(t, 201, putEvent(t, in.srv.URL, "line", `{"max_active":1}`).code)
	require.Equal(t, "ADMITTED", str(call(t, in.srv.URL, "POST", "/v1/events/line/tickets", "", ""), "status"))

	joined := rawFrom(t, "127.0.0.61", api)
	code, body := joined.do(t, "POST", "/v1/events/line/tickets", "")
	require.Equal(t, 201, code, body)
	var tk map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &tk))
	require.Equal(t, "QUEUED", tk["status"])

	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.61")}, Timeout: 5 * time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+api+"/v1/events/line/tickets/"+tk["ticket_id"].(string)+"/ws",
		&websocket.DialOptions{HTTPClient: hc})
	require.NoError(t, err)
	defer ws.CloseNow()
	_, msg, err := ws.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(msg), `"position"`)
	ctx = ws.CloseRead(ctx) // reads (and answers pings) from now on
	require.Equal(t, 2, in.Conns.Open(), "the join's connection and the WebSocket")
	eventually.True(t, 5*time.Second, "the join's connection idle", func() bool { return in.Conns.Idle() == 1 })

	// Files run short (BusyAt): the next accept closes what a pushing client left idle for 1 s.
	clock.ns.Add(int64(2 * time.Second))
	code, _ = rawFrom(t, "127.0.0.62", api).do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code)
	require.True(t, joined.closedByServer(t), "the idle keep-alive connection of the join is closed")
	require.Equal(t, 1.0, testutil.ToFloat64(in.Metrics.ConnsShed.WithLabelValues("api", "push")))
	require.Zero(t, testutil.ToFloat64(in.Metrics.ConnsShed.WithLabelValues("api", "busy")))
	require.NoError(t, ws.Ping(ctx), "the WebSocket goes on")
	require.Equal(t, 2, in.Conns.Open(), "the WebSocket and the new connection")
}

// TestPushCapFitsTheConnectionCap: the push hub's default cap leaves a ninth of the
// connection cap, and connections beyond its reserve, for everything else, at every
// open-file limit and every --max-conns; both stay under the limit. Push connections alone
// could once take every connection outside the reserve (--max-conns 576 or less, where the
// reserve, an eighth, is more than a ninth), and joins and polls were all refused.
func TestPushCapFitsTheConnectionCap(t *testing.T) {
	for _, limit := range []uint64{1024, 4096, 20_000, 65_536, 1 << 20} {
		conns := connlimit.DefaultMaxConnsFor(limit)
		reserve := connlimit.Config{MaxConns: conns}.WithDefaults().Reserve
		push := app.PushCap(conns, reserve)
		require.Less(t, uint64(conns), limit)
		require.LessOrEqual(t, push, conns-conns/9, "limit %d", limit)
		require.Less(t, push+reserve, conns, "limit %d", limit)
	}
	for conns := 2; conns <= 3000; conns++ {
		reserve := connlimit.Config{MaxConns: conns}.WithDefaults().Reserve
		push := app.PushCap(conns, reserve)
		require.LessOrEqual(t, push, conns-conns/9, "--max-conns %d", conns)
		require.Less(t, push+reserve, conns, "--max-conns %d: a connection beyond the reserve for joins", conns)
		require.GreaterOrEqual(t, push, 1)
	}
	require.Equal(t, 18_000, connlimit.DefaultMaxConnsFor(20_000))
	require.Equal(t, 16_000, app.PushCap(18_000, 64), "20,000 files: 16,000 push connections of 18,000")
	require.Equal(t, 1778, app.PushCap(2000, 64), "--max-conns 2000: push takes eight ninths")
	require.Equal(t, 123, app.PushCap(150, 18), "--max-conns 150: 9 beyond the reserve of 18 for joins and polls")
	require.Equal(t, 419, app.PushCap(connlimit.DefaultMaxConnsFor(1024), 64), "1,024 files: 512 connections, 419 of them push")
	require.Equal(t, 50_000, app.PushCap(connlimit.DefaultMaxConns, 64), "an unknown limit: push's own default")
}

// TestAtThePushCapTheInstanceStillServes (issue 22 item 4): waiting users each join over a
// keep-alive connection of their own address and then move to their ticket's WebSocket,
// keeping the join's connection open as a browser does: two connections per person. The
// instance holds its whole push cap of them all the same, because the idle connections of
// clients holding a push connection are shed first (at the cap, and after 1 s while busy):
// /healthz answers, an older idle connection of a polling user is kept and serves its next
// poll, and one user more than the cap is refused its WebSocket with 503
// too_many_connections and a Retry-After of 10-30 s, keeping its place.
func TestAtThePushCapTheInstanceStillServes(t *testing.T) {
	const maxConns = 45 // a push cap of 40 (eight ninths), 2 in reserve
	in, api, _ := startListening(t, app.Config{DatabaseURL: sqltest.SQLite(t),
		Conns: connlimit.Config{MaxConns: maxConns, Reserve: 2, BusyIdleTimeout: time.Minute}}, nil)
	pushCap := app.PushCap(maxConns, 2)
	require.Equal(t, 40, pushCap)
	require.Equal(t, 201, putEvent(t, in.srv.URL, "line", `{"max_active":1,"limits":{"push_per_client":1000}}`).code)
	require.Equal(t, "ADMITTED", str(call(t, in.srv.URL, "POST", "/v1/events/line/tickets", "", ""), "status"))

	joinFrom := func(addr string) (*rawConn, string) {
		c := rawFrom(t, addr, api)
		code, body := c.do(t, "POST", "/v1/events/line/tickets", "")
		require.Equal(t, 201, code, body)
		var tk map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &tk))
		require.Equal(t, "QUEUED", tk["status"])
		return c, tk["ticket_id"].(string)
	}
	wsFrom := func(ctx context.Context, addr, id string) (*websocket.Conn, *http.Response, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 5 * time.Second}
		hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
		return websocket.Dial(ctx, "ws://"+api+"/v1/events/line/tickets/"+id+"/ws", &websocket.DialOptions{HTTPClient: hc})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	poller, pollerID := joinFrom("127.0.3.1") // polls: its idle connection is the oldest of all
	var sockets []*websocket.Conn
	for i := range pushCap {
		addr := fmt.Sprintf("127.0.2.%d", i+1)
		_, id := joinFrom(addr) // kept open by the test, as a browser keeps it
		ws, _, err := wsFrom(ctx, addr, id)
		require.NoError(t, err, "user %d's WebSocket", i)
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		require.Contains(t, string(msg), `"position"`)
		sockets = append(sockets, ws)
		t.Cleanup(func() { _ = ws.CloseNow() })
	}
	require.LessOrEqual(t, in.Conns.Open(), maxConns)
	shed := testutil.ToFloat64(in.Metrics.ConnsShed.WithLabelValues("api", "push")) +
		testutil.ToFloat64(in.Metrics.ConnsShed.WithLabelValues("api", "total"))
	require.GreaterOrEqual(t, shed, float64(pushCap+1-(maxConns-2-pushCap)), "joins' idle connections shed to make room")

	code, _ := rawFrom(t, "127.0.3.2", api).do(t, "GET", "/healthz", "")
	require.Equal(t, 200, code, "/healthz with the push cap full")
	code, body := poller.do(t, "GET", "/v1/events/line/tickets/"+pollerID, "")
	require.Equal(t, 200, code, "the polling user's older idle connection was kept: %s", body)

	_, id := joinFrom("127.0.3.3")
	_, res, err := wsFrom(ctx, "127.0.3.3", id)
	require.Error(t, err, "one more than the push cap")
	require.Equal(t, 503, res.StatusCode)
	secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, secs >= 10 && secs <= 30, "Retry-After %d: spread over 10-30 s", secs)
	tk := call(t, in.srv.URL, "GET", "/v1/events/line/tickets/"+id, "", "")
	require.Equal(t, "QUEUED", str(tk, "status"), "the refused user keeps its place")

	for i, ws := range sockets {
		pctx := ws.CloseRead(ctx)
		require.NoError(t, ws.Ping(pctx), "WebSocket %d goes on", i)
	}
}

// TestLeaveEndsTheTicketsStream: the line tells the push hub of a ticket that left through the
// API (line.Config.OnEnd, wired in New): its WebSocket hears not_found, not its old place,
// and is closed.
func TestLeaveEndsTheTicketsStream(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	require.Equal(t, 201, putEvent(t, in.srv.URL, "line", `{"max_active":1}`).code)
	require.Equal(t, "ADMITTED", str(call(t, in.srv.URL, "POST", "/v1/events/line/tickets", "", ""), "status"))
	tk := call(t, in.srv.URL, "POST", "/v1/events/line/tickets", "", "")
	require.Equal(t, "QUEUED", str(tk, "status"))
	id := str(tk, "ticket_id")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(in.srv.URL, "http")+"/v1/events/line/tickets/"+id+"/ws", nil)
	require.NoError(t, err)
	defer ws.CloseNow()
	_, msg, err := ws.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(msg), `"position"`)

	require.Equal(t, 204, call(t, in.srv.URL, "DELETE", "/v1/events/line/tickets/"+id, "", "").code)
	for {
		_, msg, err = ws.Read(ctx)
		require.NoError(t, err, "the stream ended without not_found")
		if strings.Contains(string(msg), `"not_found"`) {
			break
		}
		require.Contains(t, string(msg), `"position"`)
	}
	_, _, err = ws.Read(ctx)
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), "closed after the final status: %v", err)
}
