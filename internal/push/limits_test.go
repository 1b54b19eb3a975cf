package push

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/storetest"
)

// TestPushConnectionsPerClient: one client holds at most the event's push_per_client
// connections (429 rate_limited beyond), on one instance as on three sharing Redis, and gets
// its place back when one closes.
func TestPushConnectionsPerClient(t *testing.T) {
	t.Parallel()
	client := Config{ClientKey: func(*http.Request) string { return "198.51.100.1" }}
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		n := startFleet(t, fleetOpts{embedded: true, hub: client})[0]
		testPushConnectionsPerClient(t, []*node{n, n, n})
	})
	t.Run("three instances on Redis", func(t *testing.T) {
		t.Parallel()
		testPushConnectionsPerClient(t, startFleet(t, fleetOpts{n: 3, hub: client}))
	})
}

// testPushConnectionsPerClient opens 2 streams on nodes 0 and 1 with a limit of 4; the fifth,
// on node 2, is refused until one of the four closes.
func testPushConnectionsPerClient(t *testing.T, nodes []*node) {
	putEvent(t, nodes[0], event.Event{ID: "ev", MaxActive: 1, Limits: event.Limits{PushPerClient: 4}})
	for _, n := range nodes { // every instance knows the limit before the count starts
		_, err := n.Registry.Get(context.Background(), "ev")
		require.NoError(t, err)
	}
	var ids []string
	for range 5 {
		_, id := join(t, nodes[0], "ev")
		ids = append(ids, id)
	}
	first := openSSE(t, nodes[0].srv.URL, "ev", ids[0], "")
	openSSE(t, nodes[0].srv.URL, "ev", ids[1], "")
	openSSE(t, nodes[1].srv.URL, "ev", ids[2], "")
	openSSE(t, nodes[1].srv.URL, "ev", ids[3], "")
	fifth := func() int {
		resp, err := http.Get(nodes[2].srv.URL + "/v1/events/ev/tickets/" + ids[4] + "/events")
		require.NoError(t, err)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
		}
		return resp.StatusCode
	}
	require.Equal(t, http.StatusTooManyRequests, fifth(), "4 of 4 open, on other instances")

	_ = first.resp.Body.Close()
	eventually.True(t, 10*time.Second, "the closed stream's place to be free", func() bool {
		return fifth() == http.StatusOK
	})
}

// TestSSEHeadEnds: HEAD of a stream answers its headers and ends, holding no push connection:
// five HEADs from one client leave its push_per_client of 1 free for a GET; an id that does
// not verify is 404 as for GET.
func TestSSEHeadEnds(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{embedded: true, hub: Config{ClientKey: func(*http.Request) string { return "198.51.100.7" }}})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1, Limits: event.Limits{PushPerClient: 1}})
	_, id := join(t, n, "ev")
	c := &http.Client{Timeout: 5 * time.Second} // a HEAD that did not end would fail here
	for range 5 {
		resp, err := c.Head(n.srv.URL + "/v1/events/ev/tickets/" + id + "/events")
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	}
	resp, err := c.Head(n.srv.URL + "/v1/events/ev/tickets/x" + id + "/events")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	openSSE(t, n.srv.URL, "ev", id, "") // the client's one push connection is free

	// A ticket that left: 404 ticket_not_found, as GET answers (its store read).
	_, gone := join(t, n, "ev")
	req, _ := http.NewRequest(http.MethodDelete, n.srv.URL+"/v1/events/ev/tickets/"+gone, nil)
	resp, err = c.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, err = c.Head(n.srv.URL + "/v1/events/ev/tickets/" + gone + "/events")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// renewCounter is a store.Shares that counts the renewals.
type renewCounter struct {
	store.Shares
	renewals atomic.Int64
}

func (r *renewCounter) RenewShares(ctx context.Context, holder string, shares []store.Share, ttl time.Duration) error {
	r.renewals.Add(1)
	return r.Shares.RenewShares(ctx, holder, shares, ttl)
}

// TestPushSharesLiveWithTheirConnections: the hub renews its share of a client's connections
// while they are open, so that they still count after the share's ttl.
func TestPushSharesLiveWithTheirConnections(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock()
	// The streams' write deadlines come from the hub's clock: start it at the real time (it
	// only moves forward, so the deadlines stay ahead).
	clock.Advance(time.Since(clock.Now()).Truncate(time.Second))
	shares := &renewCounter{Shares: memstore.NewCounts(memstore.Config{Now: clock.Now})}
	n := startFleet(t, fleetOpts{embedded: true, hub: Config{Now: clock.Now, Shares: shares,
		ClientKey: func(*http.Request) string { return "198.51.100.1" }}})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1, Limits: event.Limits{PushPerClient: 2}})
	for range 2 {
		_, id := join(t, n, "ev")
		openSSE(t, n.srv.URL, "ev", id, "")
	}
	other := func() bool { // another instance's connection, with the same limit
		ok, err := shares.TakeShare(context.Background(), store.TakeParams{Key: store.CountKey{Scope: "ev", Name: "198.51.100.1"},
			Holder: "other", Limit: 2, TTL: time.Minute})
		require.NoError(t, err)
		return ok
	}
	require.False(t, other())
	before := shares.renewals.Load()
	clock.Advance(clientShareTTL/3 + time.Second)
	eventually.True(t, 10*time.Second, "a renewal", func() bool { return shares.renewals.Load() > before })
	clock.Advance(clientShareTTL - clientShareTTL/3) // past the first share's ttl, within the renewed one
	require.False(t, other(), "the open connections still count")
}

// TestSSEIDsPerConnection: a huge Last-Event-ID restarts that stream's ids at 1 and moves no
// other stream's ids.
func TestSSEIDsPerConnection(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{embedded: true})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	join(t, n, "ev")
	_, id := join(t, n, "ev")
	wrapped := openSSE(t, n.srv.URL, "ev", id, "18446744073709551615").nextEvent(t, 5*time.Second)
	require.Equal(t, "1", wrapped.id)
	resumed := openSSE(t, n.srv.URL, "ev", id, "41").nextEvent(t, 5*time.Second)
	require.Equal(t, "42", resumed.id)
	fresh := openSSE(t, n.srv.URL, "ev", id, "").nextEvent(t, 5*time.Second)
	got, err := strconv.ParseUint(fresh.id, 10, 64)
	require.NoError(t, err)
	require.Equal(t, uint64(1), got, "ids are per connection")
}

func TestDefaultMaxConnsFor(t *testing.T) {
	require.Equal(t, 16_000, DefaultMaxConnsFor(20_000))
	require.Equal(t, 1024-1024+1, DefaultMaxConnsFor(1024))
	require.Equal(t, 3072, DefaultMaxConnsFor(4096))
	require.Equal(t, DefaultMaxConns, DefaultMaxConnsFor(1<<20))
	require.Equal(t, DefaultMaxConns, DefaultMaxConnsFor(0))
	require.Greater(t, Config{}.WithDefaults().MaxConns, 0)
	if l := connlimit.OpenFileLimit(); l > 0 {
		require.Less(t, uint64(Config{}.WithDefaults().MaxConns), l, "the cap stays under the open-file limit")
	}
}

// TestConnectsCountAsPolls: opening a push connection reads the ticket and counts against the
// event's polls_per_ticket as a GET of it does, on one instance as across three sharing Redis:
// with a limit of 3, two connects (each closed again) and a poll use it up, and the next
// connect and the next poll are refused (429 rate_limited, Retry-After), so that connecting
// and closing in a loop is no way around the limit (helper-63).
func TestConnectsCountAsPolls(t *testing.T) {
	t.Parallel()
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		n := startFleet(t, fleetOpts{embedded: true})[0]
		testConnectsCountAsPolls(t, []*node{n, n, n})
	})
	t.Run("three instances on Redis", func(t *testing.T) {
		t.Parallel()
		testConnectsCountAsPolls(t, startFleet(t, fleetOpts{n: 3}))
	})
}

func testConnectsCountAsPolls(t *testing.T, nodes []*node) {
	putEvent(t, nodes[0], event.Event{ID: "ev", MaxActive: 1, Limits: event.Limits{PollsPerTicket: 3, PollWindow: time.Hour}})
	for _, n := range nodes { // every instance knows the limit before the count starts
		_, err := n.Registry.Get(context.Background(), "ev")
		require.NoError(t, err)
	}
	join(t, nodes[0], "ev") // admitted: the ticket below waits, first in line
	_, id := join(t, nodes[0], "ev")
	get := func(n *node, path string) *http.Response {
		t.Helper()
		resp, err := http.Get(n.srv.URL + "/v1/events/ev/tickets/" + id + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp
	}
	for _, n := range nodes[:2] {
		s := openSSE(t, n.srv.URL, "ev", id, "")
		require.Equal(t, http.StatusOK, s.resp.StatusCode)
		_ = s.resp.Body.Close()
	}
	require.Equal(t, http.StatusOK, get(nodes[2], "").StatusCode, "the third read")
	for _, path := range []string{"/events", ""} {
		resp := get(nodes[0], path)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the fourth read, %q", path)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
	}
}

// TestClientGoneDuringOpenIsNoStoreFailure: a client that goes away while its stream's opening
// waits on the store (a WebSocket or SSE request ends with its client) is answered nothing and
// counted nowhere: not a store failure (Config.StoreError logs it, counts it and answers 503,
// which the access log, the metrics and the event's history show), and its connection and its
// share of push_per_client are given back (helper-69: a burst of aborted handshakes looked
// like a store outage). A store call that fails otherwise is still one.
func TestClientGoneDuringOpenIsNoStoreFailure(t *testing.T) {
	sl := &switchLine{waiting: make(chan struct{}, 4)}
	var failures atomic.Int64
	n := startFleet(t, fleetOpts{embedded: true, hub: Config{ClientKey: func(*http.Request) string { return "198.51.100.2" }},
		line: func(l Line) Line { sl.Line = l; return sl },
		storeError: func(f func(http.ResponseWriter, error, string)) func(http.ResponseWriter, error, string) {
			return func(w http.ResponseWriter, err error, ev string) { failures.Add(1); f(w, err, ev) }
		}})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1, Limits: event.Limits{PushPerClient: 1}})
	_, id := join(t, n, "ev")
	sl.mode.Store(connectHangs)
	for _, path := range []string{"/ws", "/events"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", n.srv.URL+"/v1/events/ev/tickets/"+id+path, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		<-sl.waiting // the opening waits on the store
		cancel()     // and its client goes away
		require.Error(t, <-done)
		// The client saw its request end at once; the server gives the connection and its
		// share back when it sees the client gone. Until then the next opening would be
		// refused for the client's one connection (429) before the store is asked.
		eventually.True(t, 10*time.Second, "the opening given up", func() bool { return n.hub.conns.Load() == 0 })
	}
	eventually.True(t, 10*time.Second, "both openings given up", func() bool { return n.hub.conns.Load() == 0 })
	require.Zero(t, failures.Load(), "a client gone counted as a store failure")

	// The client's one push connection is its own again, and a store that fails is a failure.
	sl.mode.Store(connectPasses)
	dialWS(t, n.srv.URL, "ev", id).Close()
	// The server sees the close after the client: until then the client's one connection is
	// held, and an opening would be refused for it (429) before the store is asked.
	eventually.True(t, 10*time.Second, "the WebSocket given up", func() bool { return n.hub.conns.Load() == 0 })
	sl.mode.Store(connectFails)
	resp, err := http.Get(n.srv.URL + "/v1/events/ev/tickets/" + id + "/events")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
	require.EqualValues(t, 1, failures.Load())
}

// switchLine is a line whose Connect passes, waits for its context to end (saying so on
// waiting), or fails as an unreachable store does, as mode says.
type switchLine struct {
	Line
	mode    atomic.Int32
	waiting chan struct{}
}

const (
	connectPasses = iota
	connectHangs
	connectFails
)

func (s *switchLine) Connect(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	switch s.mode.Load() {
	case connectHangs:
		s.waiting <- struct{}{}
		<-ctx.Done()
		return queue.Ticket{}, ctx.Err()
	case connectFails:
		return queue.Ticket{}, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	return s.Line.Connect(ctx, ref)
}

// TestOpeningBoundedByOpenTimeout: a stream's opening asks the store twice (the client's share
// of push_per_client, then the ticket's status); with a store that hangs, both share one
// deadline, OpenTimeout (the service's --store-timeout), and the opening is answered 503 then,
// as the API's other requests are (helper-75: ~7 s during a Redis hang, against 2 s for the
// rest, when each call had a 5 s bound of its own).
func TestOpeningBoundedByOpenTimeout(t *testing.T) {
	sl := &switchLine{waiting: make(chan struct{}, 16)}
	n := startFleet(t, fleetOpts{embedded: true, hub: Config{ClientKey: func(*http.Request) string { return "198.51.100.3" },
		Shares: hangingShares{}, OpenTimeout: 300 * time.Millisecond},
		line: func(l Line) Line { sl.Line = l; return sl }})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	_, id := join(t, n, "ev")
	sl.mode.Store(connectHangs)
	for _, path := range []string{"/events", "/ws"} {
		req, _ := http.NewRequest("GET", n.srv.URL+"/v1/events/ev/tickets/"+id+path, nil)
		if path == "/ws" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		took := time.Since(start)
		require.Equal(t, 503, resp.StatusCode, path)
		// Two calls of 300 ms each would be 600 ms; one of the old 5 s bound, 5 s.
		require.Less(t, took, 550*time.Millisecond, "%s: the opening's calls share one deadline", path)
	}
}

// hangingShares is a store's count of shares that does not answer until its call's context ends.
type hangingShares struct{}

func (hangingShares) TakeShare(ctx context.Context, _ store.TakeParams) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}
func (hangingShares) GiveShare(ctx context.Context, _ store.CountKey, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}
func (hangingShares) RenewShares(ctx context.Context, _ string, _ []store.Share, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}
