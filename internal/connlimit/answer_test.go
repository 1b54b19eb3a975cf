package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServerAnswer: Config.ServerAnswer sees the Writes that start as a 4xx or 5xx answer
// while no handler answers, and may replace them (http.Server's own answer to a request that
// does not parse); never a 2xx answer's, a handler's (its body may begin like anything) or
// one on a connection http.Server handed over (a hijacked one's bytes are its new owner's).
// Once an answer is out, the connection's next may be http.Server's own again.
func TestServerAnswer(t *testing.T) {
	const own = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	const instead = "HTTP/1.1 400 Bad Request\r\nContent-Length: 7\r\nConnection: close\r\n\r\ninstead"
	var shown atomic.Int64
	lim, err := New(Config{ServerAnswer: func(listener string, p []byte) ([]byte, bool) {
		shown.Add(1)
		if listener != "test" {
			t.Errorf("shown as of listener %q, not test", listener)
		}
		if string(p) == own {
			return []byte(instead), true
		}
		return nil, false
	}})
	require.NoError(t, err)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{ConnState: lim.ConnState, ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Serving(r.Context())
			switch r.URL.Path {
			case "/body":
				// A body whose part written straight to the connection (bufio passes a Write
				// larger than its buffer through) begins as http.Server's own answer does.
				w.Header().Set("Content-Length", strconv.Itoa(len(own)+8192))
				_ = http.NewResponseController(w).Flush()
				_, _ = io.WriteString(w, own+strings.Repeat(".", 8192))
				return
			case "/hijack":
			default:
				_, _ = io.WriteString(w, "ok")
				return
			}
			nc, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer nc.Close()
			_, _ = io.WriteString(nc, own) // the new owner's bytes
		})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lim.Listen(inner, "test")) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	exchange := func(raw string) string {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(c, raw)
		require.NoError(t, err)
		b, err := io.ReadAll(bufio.NewReader(c))
		require.NoError(t, err)
		return string(b)
	}
	require.Equal(t, instead, exchange("NOT HTTP\r\n\r\n"), "http.Server's own answer is replaced")
	require.Equal(t, int64(1), shown.Load())
	ok := exchange("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.True(t, strings.HasPrefix(ok, "HTTP/1.1 200 OK\r\n"), ok)
	require.Equal(t, int64(1), shown.Load(), "a 2xx answer was shown")
	require.Equal(t, own, exchange("GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n"), "a hijacked connection's bytes changed")
	require.Equal(t, int64(1), shown.Load(), "a hijacked connection's Write was shown")
	body := exchange("GET /body HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	_, b, _ := strings.Cut(body, "\r\n\r\n")
	require.Equal(t, own+strings.Repeat(".", 8192), b, "a handler's body changed")
	require.Equal(t, int64(1), shown.Load(), "a handler's Write was shown")
	// Once the answer is out, the connection's next answer may be http.Server's own again.
	require.Equal(t, "ok"+instead, func() string {
		all := exchange("GET / HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP\r\n\r\n")
		_, rest, _ := strings.Cut(all, "\r\n\r\n")
		return rest
	}())
	require.Equal(t, int64(2), shown.Load())
}
