package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// rawAnswer sends raw on a new connection to addr and reads the one answer it gets before the
// server closes the connection.
func rawAnswer(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(rawBytes(t, addr, raw))), nil)
	require.NoError(t, err, "answer to %q", raw)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

// TestFramingErrorsAreProblems: a request whose HTTP framing does not parse, which Go's
// net/http answers itself before any handler, is answered as every other client mistake is:
// an RFC 9457 problem with a stable code, on each of the instance's listeners (the API, the
// gate's, --metrics-addr), and the connection closes. A handler's answers are untouched, a
// shop's page through the gate and what passes over a connection the gate hijacked for an
// upgrade too, even where they read like such an answer.
func TestFramingErrorsAreProblems(t *testing.T) {
	// net/http's own answer, as the shop's bytes.
	upgraded := "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/file" {
			at, _ := strconv.Atoi(r.URL.Query().Get("at"))
			_, _ = io.WriteString(w, fileAt(upgraded, at))
			return
		}
		if r.Header.Get("Upgrade") != "websocket" {
			_, _ = io.WriteString(w, "the shop")
			return
		}
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer nc.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.WriteString(nc, upgraded) // the upgraded protocol's bytes, whatever they read like
	})}
	originLn := loopback(t)
	go func() { _ = origin.Serve(originLn) }()
	t.Cleanup(func() { _ = origin.Close() })

	apiLn, gateLn, metricsLn := loopback(t), loopback(t), loopback(t)
	f, err := gateway.Parse("framing.yaml", []byte("listen: 127.0.0.1:0\nsites:\n  - origin: http://"+originLn.Addr().String()+
		"\n    protect:\n      - event: none\n        paths: [/checkout]\n"))
	require.NoError(t, err)
	a, err := app.New(context.Background(), app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey,
		Listener: apiLn, Gate: &f, GateListener: gateLn, MetricsListener: metricsLn, Drain: time.Millisecond, ShutdownGrace: 10 * time.Second})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-ran)
	})
	eventually.True(t, 10*time.Second, "serving", func() bool {
		res, err := http.Get("http://" + apiLn.Addr().String() + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})

	big := strings.Repeat("a", app.MaxHeaderBytes+4096)
	cases := []struct {
		name, raw, code string
		status          int
		detail          string // in the detail, when net/http gives a reason
	}{
		{"request line", "NOT HTTP AT ALL\r\n\r\n", "malformed_request", 400, ""},
		{"path escape", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request", 400, ""},
		{"control character in a header", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n", "malformed_request", 400, ""},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", "malformed_request", 400, "missing required Host header"},
		{"header block too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", "header_too_large", 431, ""},
		{"expectation", "GET / HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", "expectation_failed", 417, "100-continue"},
		{"transfer encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported_transfer_encoding", 501, ""},
		{"protocol", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", "unsupported_http_version", 505, ""},
		// Requests net/http passes to the handler: the answers are the listeners' one rule's.
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "unsupported_http_version", 505, "HTTP/2"},
		{"asterisk form", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", "malformed_request", 400, "OPTIONS only"},
	}
	for _, ln := range []net.Listener{apiLn, gateLn, metricsLn} {
		for _, tc := range cases {
			res, body := rawAnswer(t, ln.Addr().String(), tc.raw)
			require.Equal(t, tc.status, res.StatusCode, "%s at %s: %s", tc.name, ln.Addr(), body)
			require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), tc.name)
			require.True(t, res.Close, "%s: the connection closes", tc.name)
			var p map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &p), "%s: %s", tc.name, body)
			require.Equal(t, tc.code, p["code"], tc.name)
			require.Equal(t, float64(tc.status), p["status"], tc.name)
			require.Equal(t, "urn:waitroom:problem:"+tc.code, p["type"], tc.name)
			require.NotEmpty(t, p["title"], tc.name)
			require.Contains(t, p["detail"], tc.detail, tc.name)
		}
	}

	// The answers made before any handler are counted, by listener and code (the last two
	// cases were a handler's, in the request metrics).
	for _, ln := range []string{"api", "gate", "metrics"} {
		for code, n := range map[string]float64{"malformed_request": 4, "header_too_large": 1, "expectation_failed": 1,
			"unsupported_transfer_encoding": 1, "unsupported_http_version": 1} {
			require.Equal(t, n, testutil.ToFloat64(a.Metrics.MalformedRequests.WithLabelValues(ln, code)), "%s at %s", code, ln)
		}
	}

	// A handler's answers are its own: a 404 problem and the shop's page.
	res, body := rawAnswer(t, apiLn.Addr().String(), "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, 404, res.StatusCode)
	require.Contains(t, body, `"code":"not_found"`)
	res, body = rawAnswer(t, gateLn.Addr().String(), "GET /page HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, 200, res.StatusCode)
	require.Equal(t, "the shop", body)

	// A page of the shop whose bytes read like net/http's own answer where one of the gate's
	// Writes begins: sent as they are. The gate (httputil.ReverseProxy) flushes the answer's
	// header on its own; then net/http fills its 4 KiB buffer (a chunk's size line and the
	// page's first bytes) and writes the rest of the page straight to the connection.
	gateAddr := gateLn.Addr().String()
	file := func(at int) string {
		return "GET /file?at=" + strconv.Itoa(at) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	}
	raw := rawBytes(t, gateAddr, file(10000))
	h := strings.Index(raw, "\r\n\r\n") + 4
	size, _, ok := strings.Cut(raw[h:], "\r\n")
	require.True(t, ok && size == strconv.FormatInt(20000, 16), "the page is not one chunk: %q", raw[h:h+10])
	at := 4096 - len(size) - 2
	_, page := rawAnswer(t, gateAddr, file(at))
	require.True(t, page == fileAt(upgraded, at), "the shop's page changed on its way through the gate")

	// An upgrade through the gate: the origin's bytes after its 101 reach the client as sent.
	c, err := net.Dial("tcp", gateLn.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(c, "GET /socket HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	res, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, 101, res.StatusCode)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	require.Equal(t, upgraded, string(rest))
}

// fileAt is a 20,000-byte page with s at byte at.
func fileAt(s string, at int) string {
	return strings.Repeat(".", at) + s + strings.Repeat(".", 20000-at-len(s))
}

// rawBytes sends raw on a new connection to addr and returns all it reads until the server
// closes the connection.
func rawBytes(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	return string(b)
}
