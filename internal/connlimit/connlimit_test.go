package connlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/eventually"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a test clock of the idle times.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// testServer serves HTTP on a Limiter's listener on 127.0.0.1: GET /block waits until
// release is closed, GET / answers "reserve" or "ordinary" (the connection's kind).
type testServer struct {
	lim     *Limiter
	addr    string
	arrived chan struct{}
	release chan struct{}
	once    sync.Once

	mu     sync.Mutex
	events []string // "refuse:<reason>", "shed:<reason>"
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	s := &testServer{arrived: make(chan struct{}, 100), release: make(chan struct{})}
	record := func(kind string) func(string, Reason) {
		return func(listener string, r Reason) {
			if listener != "test" {
				panic("listener " + listener)
			}
			s.mu.Lock()
			s.events = append(s.events, kind+":"+string(r))
			s.mu.Unlock()
		}
	}
	cfg.OnRefuse, cfg.OnShed = record("refuse"), record("shed")
	var err error
	s.lim, err = New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /block", func(w http.ResponseWriter, r *http.Request) {
		s.arrived <- struct{}{}
		<-s.release
		_, _ = io.WriteString(w, "done")
	})
	mux.HandleFunc("GET /hijack", func(w http.ResponseWriter, r *http.Request) {
		// A WebSocket, as far as the Limiter can tell: hijacked, held open until the test ends.
		nc, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		_, _ = io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
		go func() { <-s.release; _ = nc.Close() }()
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		// An SSE stream: marked as a push connection while it lasts.
		defer MarkPush(r.Context())()
		w.WriteHeader(200)
		_ = http.NewResponseController(w).Flush()
		s.arrived <- struct{}{}
		<-s.release
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if Serving(r.Context()) {
			_, _ = io.WriteString(w, "reserve")
			return
		}
		_, _ = io.WriteString(w, "ordinary")
	})
	srv := &http.Server{Handler: mux, ConnState: s.lim.ConnState, ConnContext: ConnContext,
		ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	served := make(chan struct{})
	go func() { _ = srv.Serve(s.lim.Listen(ln, "test")); close(served) }()
	t.Cleanup(func() {
		s.unblock()
		_ = srv.Close()
		<-served
	})
	return s
}

func (s *testServer) unblock() { s.once.Do(func() { close(s.release) }) }

func (s *testServer) eventsSoFar() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// idle returns the number of idle connections the Limiter knows, checking its list against its
// count under the one lock: read apart (the count after the lock was let go), a connection the
// server marked idle in between made them differ (a CI run failed so, at 0.61 s).
func (s *testServer) idle() int {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	n := 0
	for _, l := range []*idleList{&s.lim.idle, &s.lim.pidle} {
		for c := l.head; c != nil; c = c.link[linkAll].next {
			n++
		}
	}
	if n != s.lim.idle.n+s.lim.pidle.n {
		panic("the idle list and its count differ")
	}
	return n
}

// waitIdle waits until the Limiter knows n idle connections (the server marks a connection
// idle after its answer is sent, so a client can read the answer first).
func (s *testServer) waitIdle(t *testing.T, n int) {
	t.Helper()
	eventually.True(t, 5*time.Second, fmt.Sprintf("%d idle connections", n), func() bool { return s.idle() == n })
}

func (s *testServer) waitOpen(t *testing.T, n int) {
	t.Helper()
	eventually.True(t, 5*time.Second, fmt.Sprintf("%d open connections", n), func() bool { return s.lim.Open() == n })
}

// block sends GET /block on c and waits until its handler runs: c is then busy with a
// request in flight. The answer is read by done.
func (s *testServer) block(t *testing.T, c *tconn) {
	t.Helper()
	c.send(t, "/block")
	select {
	case <-s.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the blocking request did not arrive")
	}
}

// tconn is a client connection from a chosen loopback address.
type tconn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, s *testServer, src string) *tconn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &tconn{Conn: c, r: bufio.NewReader(c)}
}

func (c *tconn) send(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path)
	require.NoError(t, err)
}

// answer reads the answer to the request sent last: its body, or the error of a connection
// the server closed.
func (c *tconn) answer() (string, error) {
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return "", fmt.Errorf("status %d", res.StatusCode)
	}
	return string(b), err
}

// get sends GET path and reads the answer.
func (c *tconn) get(t *testing.T, path string) (string, error) {
	t.Helper()
	c.send(t, path)
	return c.answer()
}

// closedByServer reports whether the server closed c (it reads EOF or a reset within 5 s).
func (c *tconn) closedByServer(t *testing.T) bool {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := c.r.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	require.Error(t, err, "the server sent something unasked")
	return true
}

// TestPerClientCap: a client holds at most MaxConnsPerClient connections; one over it, when
// all of its connections are busy, is closed at once without an answer, while another
// address is served; the requests in flight are not cut.
func TestPerClientCap(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 100, MaxConnsPerClient: 3})
	var held []*tconn
	for range 3 {
		c := dial(t, s, "127.0.0.77")
		s.block(t, c)
		held = append(held, c)
	}
	over := dial(t, s, "127.0.0.77")
	_, err := over.get(t, "/")
	require.Error(t, err, "the fourth connection of one address is refused")
	require.True(t, over.closedByServer(t))
	require.Equal(t, []string{"refuse:client"}, s.eventsSoFar())

	other := dial(t, s, "127.0.0.78")
	body, err := other.get(t, "/")
	require.NoError(t, err, "another address is served")
	require.Equal(t, "ordinary", body)

	s.unblock()
	for _, c := range held {
		body, err := c.answer()
		require.NoError(t, err, "a request in flight is not cut")
		require.Equal(t, "done", body)
	}
	require.Equal(t, []string{"refuse:client"}, s.eventsSoFar())
}

// TestClientAtCapShedsItsOwnIdle: a client at its cap whose connections are idle keep-alive
// ones gets its new connection, and its own longest idle one is closed; other clients' idle
// connections are not touched.
func TestClientAtCapShedsItsOwnIdle(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 100, MaxConnsPerClient: 3})
	bystander := dial(t, s, "127.0.0.78")
	_, err := bystander.get(t, "/")
	require.NoError(t, err)
	var mine []*tconn
	for range 3 {
		c := dial(t, s, "127.0.0.77")
		_, err := c.get(t, "/")
		require.NoError(t, err)
		mine = append(mine, c)
		s.waitIdle(t, 1+len(mine)) // in order: the first is the longest idle
	}
	fourth := dial(t, s, "127.0.0.77")
	body, err := fourth.get(t, "/")
	require.NoError(t, err)
	require.Equal(t, "ordinary", body)
	require.True(t, mine[0].closedByServer(t), "its longest idle connection made room")
	for _, c := range append(mine[1:], bystander) {
		_, err := c.get(t, "/")
		require.NoError(t, err, "the others still serve")
	}
	require.Equal(t, []string{"shed:client"}, s.eventsSoFar())
	s.waitOpen(t, 4)
}

// TestTrustedProxyCountsOnlyInTotal: a trusted proxy's connections are not capped per client
// (it carries many), but count in MaxConns.
func TestTrustedProxyCountsOnlyInTotal(t *testing.T) {
	proxy := netip.MustParseAddr("127.0.0.80")
	s := newTestServer(t, Config{MaxConns: 6, Reserve: -1, MaxConnsPerClient: 2,
		Trusted: func(a netip.Addr) bool { return a == proxy }})
	var held []*tconn
	for range 5 {
		c := dial(t, s, "127.0.0.80")
		s.block(t, c)
		held = append(held, c)
	}
	c := dial(t, s, "127.0.0.81")
	s.block(t, c)
	held = append(held, c)
	require.Empty(t, s.eventsSoFar(), "five connections of the proxy, over the cap per client, are served")

	over := dial(t, s, "127.0.0.80")
	_, err := over.get(t, "/")
	require.Error(t, err, "the seventh connection is over MaxConns")
	require.Equal(t, []string{"refuse:total"}, s.eventsSoFar())
	s.unblock()
	for _, c := range held {
		_, err := c.answer()
		require.NoError(t, err)
	}
}

// TestBusyShedsLongIdle: keep-alive connections idle for BusyIdleTimeout are closed once the
// instance is busy (BusyAt connections), not before; those idle for less, and a request in
// flight, are not.
func TestBusyShedsLongIdle(t *testing.T) {
	clk := newClock()
	s := newTestServer(t, Config{MaxConns: 100, BusyAt: 5, BusyIdleTimeout: 5 * time.Second, Now: clk.Now})
	active := dial(t, s, "127.0.0.77")
	s.block(t, active)
	var old []*tconn
	for i := range 3 {
		c := dial(t, s, fmt.Sprintf("127.0.0.%d", 78+i))
		_, err := c.get(t, "/")
		require.NoError(t, err)
		old = append(old, c)
	}
	s.waitIdle(t, 3)
	clk.Advance(6 * time.Second)
	for _, c := range old {
		_, err := c.get(t, "/")
		require.NoError(t, err, "4 connections, not busy: idle for 6 s is fine")
	}
	s.waitIdle(t, 3)
	clk.Advance(6 * time.Second)

	// The fifth connection makes the instance busy: the connections idle for 6 s are closed.
	recent := dial(t, s, "127.0.0.81")
	_, err := recent.get(t, "/")
	require.NoError(t, err)
	for _, c := range old {
		require.True(t, c.closedByServer(t), "idle for 6 s while busy: closed")
	}
	require.Equal(t, []string{"shed:busy", "shed:busy", "shed:busy"}, s.eventsSoFar())
	_, err = recent.get(t, "/")
	require.NoError(t, err, "idle for less than BusyIdleTimeout: kept")
	s.unblock()
	body, err := active.answer()
	require.NoError(t, err, "the request in flight is not cut")
	require.Equal(t, "done", body)
}

// TestBusyIdleTimeoutWithoutAccepts: while busy, an idle connection is closed
// BusyIdleTimeout after it went idle, with no accept to trigger it (the sweeper's timer).
func TestBusyIdleTimeoutWithoutAccepts(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 100, BusyAt: 2, BusyIdleTimeout: 300 * time.Millisecond})
	active := dial(t, s, "127.0.0.76")
	s.block(t, active) // busy all along: 2 connections with one of the others
	a, b := dial(t, s, "127.0.0.77"), dial(t, s, "127.0.0.78")
	start := time.Now()
	for _, c := range []*tconn{a, b} {
		_, err := c.get(t, "/")
		require.NoError(t, err)
	}
	require.True(t, a.closedByServer(t))
	require.True(t, b.closedByServer(t))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "not before the busy idle timeout")
	require.Equal(t, []string{"shed:busy", "shed:busy"}, s.eventsSoFar())
	s.waitOpen(t, 1)
	s.lim.mu.Lock()
	require.Nil(t, s.lim.sweeper, "nothing idle: the timer is stopped")
	s.lim.mu.Unlock()
	s.unblock()
	body, err := active.answer()
	require.NoError(t, err)
	require.Equal(t, "done", body)
}

// TestTotalCapIdleFirstThenReserve: at the ordinary cap the longest idle connection makes
// room; with none idle, new connections go to the reserve (a client holding at most its
// share of it); beyond MaxConns they are refused. Requests in flight are never cut, and a
// connection of the reserve reads no longer than ReserveTimeout.
func TestTotalCapIdleFirstThenReserve(t *testing.T) {
	// A clock that stands still: no connection grows old enough to be silent (see
	// TestSilentConnectionsMakeRoom), however slow the machine.
	clk := newClock()
	s := newTestServer(t, Config{MaxConns: 6, Reserve: 2, ReserveTimeout: 300 * time.Millisecond, Now: clk.Now})
	var busy []*tconn
	for i := range 2 {
		c := dial(t, s, fmt.Sprintf("127.0.0.%d", 70+i))
		s.block(t, c)
		busy = append(busy, c)
	}
	a, b := dial(t, s, "127.0.0.72"), dial(t, s, "127.0.0.73")
	for i, c := range []*tconn{a, b} {
		_, err := c.get(t, "/")
		require.NoError(t, err)
		s.waitIdle(t, i+1) // in order: a is the longest idle
	}
	// Four connections: the ordinary ones are all taken. Two new ones take the idle ones'
	// places, the longest idle first.
	c := dial(t, s, "127.0.0.74")
	body, err := c.get(t, "/")
	require.NoError(t, err)
	require.Equal(t, "ordinary", body)
	require.True(t, a.closedByServer(t))
	s.block(t, c) // busy from now on
	d := dial(t, s, "127.0.0.75")
	s.block(t, d)
	require.True(t, b.closedByServer(t))
	require.Equal(t, []string{"shed:total", "shed:total"}, s.eventsSoFar())

	// None idle: the reserve, one connection per client there.
	e := dial(t, s, "127.0.0.76")
	body, err = e.get(t, "/")
	require.NoError(t, err)
	require.Equal(t, "reserve", body)
	s.block(t, e) // busy too: not to be shed
	e2 := dial(t, s, "127.0.0.76")
	_, err = e2.get(t, "/")
	require.Error(t, err, "a client's share of the reserve is one connection here")
	f := dial(t, s, "127.0.0.77")
	s.waitOpen(t, 6) // f accepted, into the reserve, not asking anything
	g := dial(t, s, "127.0.0.78")
	_, err = g.get(t, "/")
	require.Error(t, err, "beyond MaxConns: refused")
	require.Equal(t, []string{"shed:total", "shed:total", "refuse:total", "refuse:total"}, s.eventsSoFar())

	// A connection of the reserve that sends nothing is closed after ReserveTimeout: the
	// reserve frees itself.
	start := time.Now()
	require.True(t, f.closedByServer(t))
	require.Less(t, time.Since(start), 4*time.Second)
	s.waitOpen(t, 5)
	h := dial(t, s, "127.0.0.79")
	body, err = h.get(t, "/")
	require.NoError(t, err)
	require.Equal(t, "reserve", body)

	s.unblock()
	for _, c := range append(busy, c, d, e) {
		body, err := c.answer()
		require.NoError(t, err, "requests in flight are not cut")
		require.Equal(t, "done", body)
	}
}

// TestSilentConnectionsMakeRoom: connections that never send a request — from as many
// addresses as an attacker has, each within its share of the reserve — keep out neither
// health checks nor joins: at the ordinary cap, connections silent for SilentGrace are closed,
// the oldest first, until the newcomer has an ordinary place (a black-box run of issue 20
// filled the reserve from 9 addresses; one with 150 silent sockets from 150 addresses kept
// every join on the reserve, answered 503, while they were closed one at a time); a
// connection silent for less is not.
func TestSilentConnectionsMakeRoom(t *testing.T) {
	clk := newClock()
	s := newTestServer(t, Config{MaxConns: 6, Reserve: 2, ReserveTimeout: time.Minute, Now: clk.Now})
	var silent []*tconn
	for i := range 6 { // four ordinary, two in the reserve: every place taken, none asks anything
		silent = append(silent, dial(t, s, fmt.Sprintf("127.0.0.%d", 90+i)))
		s.waitOpen(t, i+1)
	}
	young := dial(t, s, "127.0.0.96")
	_, err := young.get(t, "/")
	require.Error(t, err, "they have been silent for less than SilentGrace: refused")

	clk.Advance(SilentGrace)
	join := dial(t, s, "127.0.0.97")
	body, err := join.get(t, "/")
	require.NoError(t, err, "a join finds room")
	require.Equal(t, "ordinary", body, "an ordinary place, not the reserve (where a join is answered 503)")
	for i, c := range silent[:3] {
		require.True(t, c.closedByServer(t), "silent connection %d made room", i)
	}
	require.Equal(t, 4, s.lim.Open(), "the three oldest made room, no more: three silent and the join")
	require.Equal(t, []string{"refuse:total", "shed:silent", "shed:silent", "shed:silent"}, s.eventsSoFar())

}

// TestSilentClientCannotMakeRoom: a client holding silent connections cannot close others'
// (or its own) silent ones for its next connection, so an attacker with more silent sockets
// than places cannot keep every place younger than SilentGrace by reconnecting (10 addresses
// of 20 sockets against a cap of 150 did); a client without silent ones still makes room.
func TestSilentClientCannotMakeRoom(t *testing.T) {
	clk := newClock()
	s := newTestServer(t, Config{MaxConns: 6, Reserve: 2, ReserveTimeout: time.Minute, Now: clk.Now})
	var silent []*tconn
	for i := range 6 { // two addresses of an attacker (one reserve place each), every place
		silent = append(silent, dial(t, s, fmt.Sprintf("127.0.0.%d", 110+2*(i%2))))
		s.waitOpen(t, i+1)
	}
	clk.Advance(SilentGrace)
	again := dial(t, s, "127.0.0.110")
	_, err := again.get(t, "/")
	require.Error(t, err, "the attacker's next socket is refused: it may not close silent ones")
	require.Equal(t, 6, s.lim.Open(), "none of its old sockets was closed for it")
	join := dial(t, s, "127.0.0.111")
	body, err := join.get(t, "/")
	require.NoError(t, err, "a user without silent connections makes room")
	require.Equal(t, "ordinary", body)
	require.True(t, silent[0].closedByServer(t))
}

// TestCrowdingClientKeepsNoPlaceYoung: a client holding more than SilentCrowd silent
// connections keeps no SilentGrace for them: a newcomer without silent ones closes them however
// young, the oldest first, so that reconnects that keep every place younger than SilentGrace
// (an attack: 200 sockets from one address, each closed after 0.4 s and opened again, kept
// 22 of 30 joins out with 503 too_many_connections) keep no one out. A client within
// SilentCrowd keeps its grace (TestSilentConnectionsMakeRoom's young ones).
func TestCrowdingClientKeepsNoPlaceYoung(t *testing.T) {
	clk := newClock()
	s := newTestServer(t, Config{MaxConns: 10, Reserve: 2, ReserveTimeout: time.Minute, Now: clk.Now})
	var silent []*tconn
	for i := range 8 { // every ordinary place, from one address, none older than SilentGrace
		silent = append(silent, dial(t, s, "127.0.0.120"))
		s.waitOpen(t, i+1)
	}
	require.Greater(t, 8, SilentCrowd)
	join := dial(t, s, "127.0.0.121")
	body, err := join.get(t, "/")
	require.NoError(t, err, "a join finds room")
	require.Equal(t, "ordinary", body, "an ordinary place, not the reserve (where a join is answered 503)")
	require.True(t, silent[0].closedByServer(t), "the crowding client's oldest silent connection made room")
	require.Equal(t, []string{"shed:silent"}, s.eventsSoFar())
	// The crowding client itself makes no room: with the ordinary places full again, its next
	// connection goes to the reserve: none of its silent ones is closed for it.
	require.NoError(t, join.Close())
	s.waitOpen(t, 7)
	silent = append(silent, dial(t, s, "127.0.0.120"))
	s.waitOpen(t, 8)
	again := dial(t, s, "127.0.0.120")
	body, err = again.get(t, "/")
	require.NoError(t, err)
	require.Equal(t, "reserve", body)
	require.Equal(t, 9, s.lim.Open(), "eight silent ones and its reserve place: none closed for it")
	require.Equal(t, []string{"shed:silent"}, s.eventsSoFar())
}

// fakeListener hands out what its test sends: connections, or accept errors.
type fakeListener struct {
	ch     chan any
	closed chan struct{}
	once   sync.Once
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case v := <-f.ch:
		if err, ok := v.(error); ok {
			return nil, err
		}
		return v.(net.Conn), nil
	case <-f.closed:
		return nil, net.ErrClosed
	}
}
func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestOutOfFilesShedsIdle: when accept fails for want of files all the same (files taken
// elsewhere), the longest idle connections are closed, and the error is returned for the
// server to try again.
func TestOutOfFilesShedsIdle(t *testing.T) {
	var shed []Reason
	lim, err := New(Config{MaxConns: 1000, OnShed: func(_ string, r Reason) { shed = append(shed, r) }})
	require.NoError(t, err)
	f := &fakeListener{ch: make(chan any, 1), closed: make(chan struct{})}
	ln := lim.Listen(f, "fake")
	var peers []net.Conn
	var conns []net.Conn
	for range filesBatch + 2 {
		server, client := net.Pipe()
		peers = append(peers, client)
		f.ch <- server
		c, err := ln.Accept()
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns[:filesBatch+1] {
		lim.ConnState(c, http.StateIdle)
	}
	lim.ConnState(conns[filesBatch+1], http.StateActive)
	f.ch <- &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	_, err = ln.Accept()
	require.ErrorIs(t, err, syscall.EMFILE)
	require.Len(t, shed, filesBatch)
	require.Equal(t, ReasonFiles, shed[0])
	require.Equal(t, 2, lim.Open(), "the one idle the longest were closed, the rest kept")
	for i, p := range peers[:filesBatch] {
		_, err := p.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "connection %d closed", i)
	}
	for _, c := range conns {
		require.NoError(t, errors.Join(c.Close(), nil)) // a second close is harmless
	}
	require.Equal(t, 0, lim.Open())
	for _, p := range peers {
		_ = p.Close()
	}
	_ = ln.Close()
}

// TestCountsUnderConcurrency: many clients connecting, sending keep-alive requests and
// closing at once (run with -race): every place is given back, once.
func TestCountsUnderConcurrency(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 64, MaxConnsPerClient: 6, BusyAt: 8, BusyIdleTimeout: time.Millisecond})
	var wg sync.WaitGroup
	var served atomic.Int64
	for i := range 16 {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 90+i%4))}, Timeout: 5 * time.Second}
			for range 20 {
				c, err := d.Dial("tcp", s.addr)
				if err != nil {
					continue
				}
				tc := &tconn{Conn: c, r: bufio.NewReader(c)}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				for range 3 {
					if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
						break
					}
					if _, err := tc.answer(); err != nil {
						break // refused or shed: both are fine here
					}
					served.Add(1)
				}
				_ = c.Close()
			}
		})
	}
	wg.Wait()
	require.Positive(t, served.Load())
	s.waitOpen(t, 0)
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	require.Empty(t, s.lim.clients)
	require.Nil(t, s.lim.idle.head)
}

func TestDefaultMaxConnsFor(t *testing.T) {
	require.Equal(t, 18_000, DefaultMaxConnsFor(20_000))
	require.Equal(t, 512, DefaultMaxConnsFor(1024))
	require.Equal(t, 3584, DefaultMaxConnsFor(4096))
	require.Equal(t, 943_719, DefaultMaxConnsFor(1<<20))
	require.Equal(t, 1, DefaultMaxConnsFor(100))
	require.Equal(t, DefaultMaxConns, DefaultMaxConnsFor(0))
}

func TestConfigChecks(t *testing.T) {
	c := Config{MaxConns: 1000}.WithDefaults()
	require.Equal(t, DefaultReserve, c.Reserve)
	require.Equal(t, 500, c.BusyAt)
	require.Equal(t, DefaultMaxConnsPerClient, c.MaxConnsPerClient)
	require.Equal(t, 2, Config{MaxConns: 16}.WithDefaults().Reserve, "an eighth of a small cap")
	require.Equal(t, 0, Config{MaxConns: 16, Reserve: -1}.WithDefaults().Reserve)
	_, err := New(Config{MaxConns: 4, Reserve: 4})
	require.Error(t, err)
	_, err = New(Config{MaxConns: -1})
	require.Error(t, err)
}

// hijack opens a push connection (a hijacked one, as a WebSocket is) from src.
func (s *testServer) hijack(t *testing.T, src string) *tconn {
	t.Helper()
	c := dial(t, s, src)
	c.send(t, "/hijack")
	res, err := http.ReadResponse(c.r, nil)
	require.NoError(t, err)
	require.Equal(t, 101, res.StatusCode)
	return c
}

// TestPushingClientsIdleGoFirst (issue 22 item 4): a client that moved to a push connection
// (its page on the WebSocket) no longer uses the keep-alive connection its join came over.
// While busy that idle connection is closed after PushIdleTimeout, long before a polling
// client's (BusyIdleTimeout); at the cap it is shed before an older idle connection of a
// client that polls.
func TestPushingClientsIdleGoFirst(t *testing.T) {
	clk := newClock()
	s := newTestServer(t, Config{MaxConns: 100, BusyAt: 4, BusyIdleTimeout: 5 * time.Second, PushIdleTimeout: time.Second, Now: clk.Now})
	poller := dial(t, s, "127.0.0.92")
	_, err := poller.get(t, "/")
	require.NoError(t, err)
	joined := dial(t, s, "127.0.0.91")
	_, err = joined.get(t, "/")
	require.NoError(t, err)
	s.waitIdle(t, 2)
	require.Zero(t, s.lim.IdlePushing())

	ws := s.hijack(t, "127.0.0.91") // the page moves to its WebSocket: 3 connections
	require.Equal(t, 1, s.lim.IdlePushing(), "the join's idle connection is now a pushing client's")
	active := dial(t, s, "127.0.0.93")
	s.block(t, active) // 4: busy

	clk.Advance(2 * time.Second)
	probe := dial(t, s, "127.0.0.94")
	_, err = probe.get(t, "/")
	require.NoError(t, err)
	require.True(t, joined.closedByServer(t), "idle 2 s while its client pushes: closed")
	_, err = poller.get(t, "/")
	require.NoError(t, err, "a polling client's idle connection is kept (idle 2 s < BusyIdleTimeout)")
	require.Equal(t, []string{"shed:push"}, s.eventsSoFar())
	s.waitOpen(t, 4) // the poller, the push connection (never shed), the request in flight, the probe
	_ = ws
	s.unblock()
	_, err = active.answer()
	require.NoError(t, err)
}

// TestAtTheCapPushingClientsIdleFirst: at the ordinary cap the idle connection of a client
// holding a push stream (here SSE, marked with MarkPush) makes room, though a polling
// client's idle connection is older; once the stream ends its client is no longer pushing.
func TestAtTheCapPushingClientsIdleFirst(t *testing.T) {
	clk := newClock() // stands still: nothing is silent, nothing expires
	s := newTestServer(t, Config{MaxConns: 5, Reserve: 1, BusyAt: 100, Now: clk.Now})
	older := dial(t, s, "127.0.0.95")
	_, err := older.get(t, "/")
	require.NoError(t, err)
	joined := dial(t, s, "127.0.0.96")
	_, err = joined.get(t, "/")
	require.NoError(t, err)
	s.waitIdle(t, 2)
	stream := dial(t, s, "127.0.0.96")
	stream.send(t, "/stream")
	select {
	case <-s.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not start")
	}
	require.Equal(t, 1, s.lim.IdlePushing())
	extra := dial(t, s, "127.0.0.97") // 4 = the ordinary cap
	_, err = extra.get(t, "/")
	require.NoError(t, err)

	next := dial(t, s, "127.0.0.98") // at the cap: one idle connection makes room
	body, err := next.get(t, "/")
	require.NoError(t, err)
	require.Equal(t, "ordinary", body)
	require.True(t, joined.closedByServer(t), "the pushing client's idle connection made room")
	_, err = older.get(t, "/")
	require.NoError(t, err, "the older idle connection of a polling client is kept")
	require.Equal(t, []string{"shed:total"}, s.eventsSoFar())

	s.unblock() // the stream ends
	res, err := http.ReadResponse(stream.r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	eventually.True(t, 5*time.Second, "the stream's client no longer pushes", func() bool {
		s.lim.mu.Lock()
		defer s.lim.mu.Unlock()
		cl := s.lim.clients["127.0.0.96"]
		return cl != nil && cl.pushing == 0
	})
}

// TestPushIdleTimeoutWithoutAccepts: while busy, the sweeper armed for a polling client's idle
// connection (BusyIdleTimeout away) is armed again sooner when a client starts pushing: its
// idle connection closes after PushIdleTimeout, with no accept to trigger it.
func TestPushIdleTimeoutWithoutAccepts(t *testing.T) {
	s := newTestServer(t, Config{MaxConns: 100, BusyAt: 2, BusyIdleTimeout: time.Minute, PushIdleTimeout: 200 * time.Millisecond})
	active := dial(t, s, "127.0.0.71")
	s.block(t, active)
	poller := dial(t, s, "127.0.0.72")
	_, err := poller.get(t, "/")
	require.NoError(t, err)
	joined := dial(t, s, "127.0.0.73")
	_, err = joined.get(t, "/")
	require.NoError(t, err)
	s.waitIdle(t, 2) // the sweeper waits a minute for the first of them
	start := time.Now()
	s.hijack(t, "127.0.0.73")
	require.True(t, joined.closedByServer(t))
	require.Less(t, time.Since(start), 3*time.Second, "closed after PushIdleTimeout, not BusyIdleTimeout")
	require.Equal(t, []string{"shed:push"}, s.eventsSoFar())
	_, err = poller.get(t, "/")
	require.NoError(t, err, "the polling client's idle connection is kept")
	s.unblock()
	_, err = active.answer()
	require.NoError(t, err)
}

// TestRawSocket: an accepted connection gives its TCP socket to a hijacked connection's writer
// (package wsframe writes WebSocket frames there without a deadline first), and is not a
// syscall.Conn, which would let the standard library send files past it.
func TestRawSocket(t *testing.T) {
	lim, err := New(Config{MaxConns: 10})
	require.NoError(t, err)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := lim.Listen(tl, "test")
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", tl.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	nc, err := ln.Accept()
	require.NoError(t, err)
	defer nc.Close()
	_, isSyscall := nc.(syscall.Conn)
	require.False(t, isSyscall)
	rs, ok := nc.(interface {
		RawSocket() (syscall.RawConn, error)
	})
	require.True(t, ok)
	rc, err := rs.RawSocket()
	require.NoError(t, err)
	var fd uintptr
	require.NoError(t, rc.Control(func(f uintptr) { fd = f }))
	require.Positive(t, fd)
}
