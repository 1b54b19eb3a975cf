package push

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/admission"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/line"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/registry"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"),
		// rueidis closes the connections a cluster topology refresh replaced 5 s later.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	)
}

const (
	testAdminKey = "test-admin-key"
	testTokenKey = "test-token-key-0123456789"
)

// node is one instance, assembled here as internal/app would (app imports push, so push's
// tests cannot import app): the line's store and registry, the API, the push hub behind an
// httptest server, and the admission processor.
type node struct {
	Store      queue.Store
	Registry   *registry.Registry
	Tickets    *token.TicketIDs
	Admissions *token.Admissions
	Admitter   *admission.Admitter
	prefix     string         // the Redis key prefix; "" when embedded
	client     rueidis.Client // the Redis client; nil when embedded
	DB         *sqlstore.DB
	hub        *Hub
	lines      *line.Service
	srv        *httptest.Server
	// redisProxy is what the instance reaches Redis through (fleetOpts.redisProxy); nil when
	// it reaches it directly.
	redisProxy *faultproxy.Proxy
}

// channel is the Redis channel of event's push messages.
func (n *node) channel(event string) string {
	return redisstore.Channel(n.prefix, store.EventTopic(event))
}

// fleetOpts shapes a test fleet.
type fleetOpts struct {
	n        int  // instances; defaults to 1
	embedded bool // in-process line and SQLite (one instance)
	admitter bool // run the admission processors (else tests step the line themselves)
	hub      Config
	// line and storeError, when not nil, wrap the hub's Config.Store and Config.StoreError.
	line       func(Line) Line
	storeError func(func(http.ResponseWriter, error, string)) func(http.ResponseWriter, error, string)
	cluster    bool // Redis Cluster (TEST_REDIS_CLUSTER_URL) instead of TEST_REDIS_URL
	// redisProxy puts a TCP fault proxy between the instance (one) and TEST_REDIS_URL's Redis
	// (node.redisProxy), to take Redis away for real.
	redisProxy bool
	// durable keeps the lines' numbers in SQL (docs/durability.md); the registry then syncs
	// only at its start, so that the test writes the checkpoints (sqlstore.DB.Mark) itself.
	durable bool
	// onStep, if set, is added to every instance's admission hook (after the hub's).
	onStep func(event string, r queue.AdmitResult)
}

// startFleet starts o.n instances sharing one Redis key prefix and one database, each with a
// Redis client of its own (as separate processes would have). Everything is stopped in order
// at cleanup: hubs (clients told to reconnect), HTTP servers, loops, databases.
func startFleet(t testing.TB, o fleetOpts) []*node {
	t.Helper()
	if o.n == 0 {
		o.n = 1
	}
	var dbURL, prefix string
	var clients []rueidis.Client
	switch {
	case o.embedded, o.n == 1:
		dbURL = sqltest.SQLite(t)
	default:
		dbURL = sqltest.Postgres(t)
	}
	if !o.embedded {
		dial := redistest.Client
		if o.cluster {
			dial = redistest.Cluster
		}
		c := dial(t)
		prefix = redistest.Prefix(t, c)
		clients = append(clients, c)
		for i := 1; i < o.n; i++ {
			clients = append(clients, dial(t))
		}
	}
	var proxy *faultproxy.Proxy
	if o.redisProxy {
		require.True(t, o.n == 1 && !o.embedded && !o.cluster, "a proxy to the standalone Redis, for one instance")
		u, err := url.Parse(redistest.URL())
		require.NoError(t, err)
		proxy, err = faultproxy.New(u.Host)
		require.NoError(t, err)
		t.Cleanup(func() { _ = proxy.Close() })
		u.Host = proxy.Addr()
		clients[0], err = redisstore.Dial(u.String())
		require.NoError(t, err)
		t.Cleanup(clients[0].Close)
	}
	nodes := make([]*node, o.n)
	for i := range o.n {
		var c rueidis.Client
		if !o.embedded {
			c = clients[i]
		}
		nodes[i] = startNode(t, o, dbURL, c, prefix)
		nodes[i].redisProxy = proxy
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.hub.Stop(context.Background())
		}
		for _, n := range nodes {
			n.srv.Close()
		}
	})
	return nodes
}

// startNode assembles and starts one instance on the database at dbURL and Redis client c
// (nil: the in-process line).
func startNode(t testing.TB, o fleetOpts, dbURL string, c rueidis.Client, prefix string) *node {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := sqlstore.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var b store.Backend
	if c != nil {
		rc := redisstore.Config{Client: c, Prefix: prefix, Logger: log}
		if o.durable {
			rc.Numbers = db
		}
		b, err = redisstore.NewBackend(rc)
		require.NoError(t, err)
	} else {
		b, _ = memstore.NewBackend(memstore.Config{})
	}
	rcfg := registry.Config{DB: db, Store: b.Line, Logger: log}
	if o.durable {
		rcfg.SyncInterval = time.Hour
	}
	reg, err := registry.New(rcfg)
	require.NoError(t, err)
	keys, err := token.DeriveKeys(testTokenKey)
	require.NoError(t, err)
	n := &node{Store: b.Line, Registry: reg, Tickets: token.NewTicketIDs(keys.TicketMAC),
		Admissions: token.NewAdmissions(keys), prefix: prefix, client: c, DB: db}
	ids := func() []string {
		var out []string
		for _, e := range reg.List() {
			out = append(out, e.ID)
		}
		return out
	}
	admins, err := adminkey.New(adminkey.Config{DB: db, RootKey: testAdminKey})
	require.NoError(t, err)
	m := metrics.New(metrics.Config{Line: b.Line})
	lines, err := line.New(line.Config{Store: b.Line, Events: reg, Tickets: n.Tickets, Metrics: m, Logger: log,
		OnEnd: func(ref queue.TicketRef) { n.hub.Ended(ref) }}) // (as internal/app wires it)
	require.NoError(t, err)
	n.lines = lines
	api, err := httpapi.New(httpapi.Config{Registry: reg, Line: lines,
		Admissions: n.Admissions, Keys: admins, AuditTrail: db, Metrics: m, Logger: log})
	require.NoError(t, err)
	hc := o.hub
	hc.Store, hc.Events, hc.Tickets, hc.Admissions = lines, reg, n.Tickets, n.Admissions
	hc.Notifier, hc.StoreError, hc.Logger = b.Notifier, api.StoreError, log
	if o.line != nil {
		hc.Store = o.line(hc.Store)
	}
	if o.storeError != nil {
		hc.StoreError = o.storeError(hc.StoreError)
	}
	if hc.Shares == nil {
		hc.Shares = b.Shares
	}
	n.hub, err = New(hc)
	require.NoError(t, err)
	api.Handle(RouteWebSocket, http.HandlerFunc(n.hub.ServeWebSocket))
	api.Handle(RouteSSE, http.HandlerFunc(n.hub.ServeSSE))
	n.Admitter, err = admission.New(admission.Config{Store: b.Line, Events: ids, Logger: log, OnMissing: reg.Restore,
		OnStep: func(event string, r queue.AdmitResult) {
			n.hub.OnStep(event, r)
			if o.onStep != nil {
				o.onStep(event, r)
			}
		}})
	require.NoError(t, err)
	require.NoError(t, reg.Start(ctx))
	t.Cleanup(func() { _ = reg.Stop(context.Background()) })
	require.NoError(t, n.hub.Start(ctx))
	if o.admitter {
		n.Admitter.Start(ctx)
		t.Cleanup(func() { _ = n.Admitter.Stop(context.Background()) })
	}
	n.srv = httptest.NewServer(api)
	return n
}

// tWriter sends log lines to the test log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// putEvent creates or updates an event through the registry (SQL and the store).
func putEvent(t testing.TB, n *node, e event.Event) {
	t.Helper()
	if e.SessionTTL == 0 {
		e.SessionTTL = event.DefaultSessionTTL
	}
	if e.ClaimTTL == 0 {
		e.ClaimTTL = event.DefaultClaimTTL
	}
	_, _, err := n.Registry.Put(context.Background(), e, 0)
	require.NoError(t, err)
}

// join makes a ticket and returns it with its id.
func join(t testing.TB, n *node, event string) (queue.Ticket, string) {
	t.Helper()
	tk, err := n.Store.Join(context.Background(), queue.JoinParams{Event: event})
	require.NoError(t, err)
	return tk, n.Tickets.Encode(tk.TicketRef)
}

// msg is a push message as a client sees it.
type msg struct {
	Type           string  `json:"type"`
	TS             int64   `json:"ts"`
	Position       int64   `json:"position"`
	Waiting        int64   `json:"waiting"`
	EtaS           *int64  `json:"eta_s"`
	AdmissionToken string  `json:"admission_token"`
	AdmittedUntil  string  `json:"admitted_until"`
	RedirectURL    *string `json:"redirect_url"`
	Number         int64   `json:"number"`
	Serving        int64   `json:"serving"`
	Active         int64   `json:"active"`

	id    string    // SSE id
	event string    // SSE event name ("" for messages)
	recv  time.Time // when the client read it
}

// wsClient is a WebSocket client that reads every message into a channel.
type wsClient struct {
	ws    *websocket.Conn
	msgs  chan msg
	done  chan struct{}
	err   error // why reading ended; valid after done
	close sync.Once
}

func wsURL(base, event, ticketID string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/events/" + event + "/tickets/" + ticketID + "/ws"
}

// getPush GETs a push route; for .../ws it sends a WebSocket handshake's headers, so that the
// answer is about the ticket and the limits, not the handshake.
func getPush(url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(url, "/ws") {
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	return http.DefaultClient.Do(req)
}

// dialWS connects and starts reading; the connection is closed at cleanup.
func dialWS(t testing.TB, base, event, ticketID string) *wsClient {
	t.Helper()
	c, err := tryDialWS(base, event, ticketID, nil)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func tryDialWS(base, event, ticketID string, hc *http.Client) (*wsClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, wsURL(base, event, ticketID), &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(1 << 20)
	c := &wsClient{ws: ws, msgs: make(chan msg, 4096), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(c.msgs)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				c.err = err
				return
			}
			m := msg{recv: time.Now()}
			if err := json.Unmarshal(b, &m); err != nil {
				c.err = err
				return
			}
			c.msgs <- m
		}
	}()
	return c, nil
}

// Close closes the connection and waits for the reader.
func (c *wsClient) Close() {
	c.close.Do(func() {
		_ = c.ws.CloseNow()
		<-c.done
	})
}

func (c *wsClient) send(t testing.TB, typ string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.ws.Write(ctx, websocket.MessageText, []byte(`{"type":"`+typ+`"}`)))
}

// next returns the next message, failing the test after timeout.
func (c *wsClient) next(t testing.TB, timeout time.Duration) msg {
	t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			t.Fatalf("connection ended: %v", c.err)
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
	}
	return msg{}
}

// waitFor skips messages until one of type typ, failing the test after timeout.
func (c *wsClient) waitFor(t testing.TB, typ string, timeout time.Duration) msg {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				t.Fatalf("connection ended before a %q message: %v", typ, c.err)
			}
			if m.Type == typ {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q message within %s", typ, timeout)
		}
	}
}

// sseStream is an open SSE response read event by event.
type sseStream struct {
	resp *http.Response
	rd   *bufio.Reader
}

func openSSE(t testing.TB, base, event, ticketID, lastEventID string) *sseStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/events/"+event+"/tickets/"+ticketID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sseStream{resp: resp, rd: bufio.NewReader(resp.Body)}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return s
}

// next reads the next event (comments are returned as Type "comment", heartbeats, events
// named "ping", as their data says: Type "ping"), or returns io.EOF when the stream ended.
func (s *sseStream) next() (msg, error) {
	var m msg
	var data string
	seen := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && !seen {
				return m, io.EOF
			}
			return m, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if !seen {
				continue
			}
			if data != "" {
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					return m, err
				}
			}
			m.recv = time.Now()
			return m, nil
		case strings.HasPrefix(line, ":"):
			return msg{Type: "comment"}, nil
		case strings.HasPrefix(line, "id: "):
			m.id, seen = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "event: "):
			m.event, seen = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			data, seen = strings.TrimPrefix(line, "data: "), true
		case strings.HasPrefix(line, "retry: "):
			seen = false
		}
	}
}

// nextEvent reads until a data event, skipping comments and heartbeats, with a deadline.
func (s *sseStream) nextEvent(t testing.TB, timeout time.Duration) msg {
	t.Helper()
	type res struct {
		m   msg
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			m, err := s.next()
			if err != nil || (m.Type != "comment" && m.Type != TypePing) {
				ch <- res{m, err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.m
	case <-time.After(timeout):
		_ = s.resp.Body.Close() // ends the reader
		<-ch
		t.Fatalf("no SSE event within %s", timeout)
	}
	return msg{}
}
