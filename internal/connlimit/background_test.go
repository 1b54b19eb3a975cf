package connlimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/eventually"
)

// countingListener counts the 1-byte reads made on its connections (http.Server's background
// read is the only one).
type countingListener struct {
	net.Listener
	oneByte atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: nc, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	if len(p) == 1 {
		c.l.oneByte.Add(1)
	}
	return c.Conn.Read(p)
}

// bgServer serves h on a Limiter's listener over a countingListener; ConnContext as the app's.
func bgServer(t *testing.T, h http.HandlerFunc) (*countingListener, string) {
	t.Helper()
	lim, err := New(Config{})
	require.NoError(t, err)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cl := &countingListener{Listener: inner}
	srv := &http.Server{Handler: h, ConnState: lim.ConnState, ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lim.Listen(cl, "test")) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return cl, inner.Addr().String()
}

// waitDeferred waits until the background read of bg's connection waits deferred (it starts
// when the handler reads the request's body to its end).
// It runs in the server's handler, not the test's goroutine, so a timeout is reported with
// t.Error (FailNow may only be called from the test's goroutine) and false: the handler
// answers 500 and the test fails on that too.
func waitDeferred(t *testing.T, w http.ResponseWriter, bg *Conn) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); bg.bg.Load() != bgWaiting; time.Sleep(eventually.Interval) {
		if time.Now().After(deadline) {
			t.Error("timed out after 5s waiting for the background read to wait deferred")
			http.Error(w, "the background read did not defer", 500)
			return false
		}
	}
	return true
}

// ctxEnds waits up to 10 s for ctx to end; the error says what did not happen.
func ctxEnds(ctx context.Context, what string) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("the request's context did not end with its " + what)
	}
}

// responses returns a reader of c's answers in turn (10 s at most in all): each must be a 200,
// and it returns its body.
func responses(t *testing.T, c net.Conn) func() string {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	br := bufio.NewReader(c)
	return func() string {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode, string(b))
		return string(b)
	}
}

func post(body string) string {
	return fmt.Sprintf("POST / HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// TestDeferredBackgroundReadMakesNoRead: a handler that defers the background read is served
// without it (no 1-byte read reaches the network), the connection goes on serving keep-alive
// requests, and a request pipelined behind one is served too (the server's next read finds it).
func TestDeferredBackgroundReadMakesNoRead(t *testing.T) {
	cl, addr := bgServer(t, func(w http.ResponseWriter, r *http.Request) {
		bg := DeferBackgroundRead(r.Context())
		if bg == nil {
			http.Error(w, "no connlimit.Conn in the request's context", 500)
			return
		}
		defer bg.EndDeferredRead()
		b, _ := io.ReadAll(r.Body) // to its end: the background read starts, deferred
		if !waitDeferred(t, w, bg) {
			return
		}
		_, _ = io.WriteString(w, "got "+string(b))
	})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	read := responses(t, c)
	_, err = io.WriteString(c, post("one"))
	require.NoError(t, err)
	require.Equal(t, "got one", read())
	_, err = io.WriteString(c, post("two")+post("three")) // pipelined
	require.NoError(t, err)
	require.Equal(t, "got two", read())
	require.Equal(t, "got three", read())
	require.Zero(t, cl.oneByte.Load(), "the background reads reached the network")
}

// TestUndeferredReadSeesTheClientGo: a handler that needs its context to end with its client
// (a stream) undoes the deferral, and the client closing its connection cancels the request.
func TestUndeferredReadSeesTheClientGo(t *testing.T) {
	cancelled := make(chan error, 1)
	cl, addr := bgServer(t, func(w http.ResponseWriter, r *http.Request) {
		bg := DeferBackgroundRead(r.Context())
		defer bg.EndDeferredRead()
		_, _ = io.ReadAll(r.Body)
		if !waitDeferred(t, w, bg) {
			cancelled <- errors.New("not deferred")
			return
		}
		bg.UndeferBackgroundRead()
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		cancelled <- ctxEnds(r.Context(), "client")
	})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = io.WriteString(c, post("x"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode)
	require.NoError(t, c.Close())
	require.NoError(t, <-cancelled)
	require.Equal(t, int64(1), cl.oneByte.Load(), "the background read is made once undeferred")
}

// TestDeferredReadEndsWithTheConnection: a deferred background read ends when the connection
// is closed (shed, or the server's close), as a read in the kernel would: the request's
// context is cancelled.
func TestDeferredReadEndsWithTheConnection(t *testing.T) {
	cancelled := make(chan error, 1)
	_, addr := bgServer(t, func(w http.ResponseWriter, r *http.Request) {
		bg := DeferBackgroundRead(r.Context())
		defer bg.EndDeferredRead()
		_, _ = io.ReadAll(r.Body)
		if !waitDeferred(t, w, bg) {
			cancelled <- errors.New("not deferred")
			return
		}
		_ = bg.closeNet()
		cancelled <- ctxEnds(r.Context(), "connection")
	})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, post("x"))
	require.NoError(t, err)
	require.NoError(t, <-cancelled)
}

// TestHijackAfterDeferral: a handler that deferred the background read and hijacks the
// connection reads from it as from any connection, 1-byte reads included; so does one whose
// deferral no background read took.
func TestHijackAfterDeferral(t *testing.T) {
	for _, readBody := range []bool{true, false} {
		t.Run(fmt.Sprintf("body read %v", readBody), func(t *testing.T) {
			got := make(chan string, 1)
			_, addr := bgServer(t, func(w http.ResponseWriter, r *http.Request) {
				bg := DeferBackgroundRead(r.Context())
				defer bg.EndDeferredRead()
				if readBody {
					_, _ = io.ReadAll(r.Body)
					if !waitDeferred(t, w, bg) {
						got <- "not deferred"
						return
					}
				}
				nc, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					got <- err.Error()
					return
				}
				defer nc.Close()
				_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: test\r\n\r\n")
				_ = brw.Flush()
				_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				var b strings.Builder
				one := make([]byte, 1)
				for b.Len() < 4 {
					n, err := nc.Read(one)
					if err != nil {
						got <- err.Error()
						return
					}
					b.Write(one[:n])
				}
				got <- b.String()
			})
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = io.WriteString(c, post("x"))
			require.NoError(t, err)
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			require.Equal(t, 101, res.StatusCode)
			_, err = io.WriteString(c, "ping")
			require.NoError(t, err)
			select {
			case g := <-got:
				require.Equal(t, "ping", g)
			case <-time.After(10 * time.Second):
				t.Fatal("the hijacked connection's reads do not get its bytes")
			}
		})
	}
}

// TestDeferNeedsALimiterConn: a context without a Limiter's connection defers nothing.
func TestDeferNeedsALimiterConn(t *testing.T) {
	require.Nil(t, DeferBackgroundRead(context.Background()))
}

// deadlineConn records the read deadlines set on the socket.
type deadlineConn struct {
	net.Conn
	set chan<- time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	select {
	case c.set <- t:
	default:
	}
	return c.Conn.SetReadDeadline(t)
}

type deadlineListener struct {
	net.Listener
	set chan time.Time
}

func (l *deadlineListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: nc, set: l.set}, nil
}

// TestBodyDeadline: SetBodyDeadline reaches the socket only when the body is read from it (the
// background read deferred, as the API defers it; one made would take the deadline too, as it
// would with the deadline set at once). A
// body that came with its header is read without it, and a deadline left unused (here one
// already past) does not outlive its request: the next request on the connection is served.
// A body that stops short of its length is cut off at the deadline.
func TestBodyDeadline(t *testing.T) {
	by := time.Now().Add(-time.Second) // as good as any to find among the deadlines set
	lim, err := New(Config{})
	require.NoError(t, err)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dl := &deadlineListener{Listener: inner, set: make(chan time.Time, 1000)}
	srv := &http.Server{ConnState: lim.ConnState, ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// As the API's handlers: the background read deferred, so that only the body's
			// reads can reach the socket.
			bg := DeferBackgroundRead(r.Context())
			if bg == nil || !SetBodyDeadline(r.Context(), by) {
				http.Error(w, "no connlimit.Conn in the request's context", 500)
				return
			}
			defer bg.EndDeferredRead()
			b, err := io.ReadAll(r.Body)
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				_, _ = io.WriteString(w, "cut off")
			case err != nil:
				http.Error(w, err.Error(), 500)
			default:
				_, _ = io.WriteString(w, "got "+string(b))
			}
		})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lim.Listen(dl, "test")) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	c, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	read := responses(t, c)
	bodySet := func() bool {
		for {
			select {
			case d := <-dl.set:
				if d.Equal(by) {
					return true
				}
			default:
				return false
			}
		}
	}
	_, err = io.WriteString(c, post("one"))
	require.NoError(t, err)
	require.Equal(t, "got one", read())
	_, err = io.WriteString(c, post("two"))
	require.NoError(t, err)
	require.Equal(t, "got two", read(), "the first request's unused deadline outlived it")
	require.False(t, bodySet(), "a body that came with its header set the socket's deadline")

	_, err = io.WriteString(c, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nabc")
	require.NoError(t, err)
	require.Equal(t, "cut off", read())
	require.True(t, bodySet(), "a body read from the socket had no deadline")
}
