package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/stretchr/testify/require"
)

// TestFleetShares: sockets are spread evenly over enough processes that none holds more than
// it may, and never fewer than two ("several" instances and client processes).
func TestFleetShares(t *testing.T) {
	require.Equal(t, []int{1000, 1000}, fleetShares(2000, 16_000))
	got := fleetShares(100_000, 16_000)
	require.Len(t, got, 7)
	sum := 0
	for _, n := range got {
		require.LessOrEqual(t, n, 16_000)
		require.GreaterOrEqual(t, n, 14_285)
		sum += n
	}
	require.Equal(t, 100_000, sum)
	require.Equal(t, []int{1, 0}, fleetShares(1, 10))
}

// TestHoldWebSockets drives a fleet client process's loop (bench --ws-hold) against a small
// WebSocket server: it opens every socket, says ready, and after the trigger reports which
// sockets heard their place move and when; a socket the server closes is not held, and one
// that never hears is not counted as reached.
func TestHoldWebSockets(t *testing.T) {
	var mu sync.Mutex
	moved := make(chan struct{})
	var conns []*websocket.Conn
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		ctx := r.Context()
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"position","ts":1,"position":5}`))
		select {
		case <-moved:
		case <-ctx.Done():
			return
		}
		switch r.URL.Path {
		case "/silent": // hears nothing more
		case "/gone":
			_ = c.Close(websocket.StatusGoingAway, "")
			return
		default:
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"stats","ts":2,"waiting":3}`))
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"position","ts":3,"position":4}`))
		}
		_, _, _ = c.Read(ctx) // until the client closes
	}))
	defer srv.Close()
	base := "ws" + strings.TrimPrefix(srv.URL, "http")

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- HoldWebSockets(context.Background(), inR, outW, time.Second); _ = outW.Close() }()
	lines := bufio.NewScanner(outR)
	_, err := fmt.Fprintf(inW, "%s/a\n%s/b\n%s/silent\n%s/gone\n%s/nobody:1\ngo\n", base, base, base, base, "ws://127.0.0.1:1")
	require.NoError(t, err)
	require.True(t, lines.Scan())
	require.Equal(t, "ready 4 1", lines.Text(), "four open, one refused")

	start := time.Now()
	_, err = fmt.Fprintf(inW, "trigger %d\n", start.UnixNano())
	require.NoError(t, err)
	require.True(t, lines.Scan())
	require.Equal(t, "armed", lines.Text(), "the line moves only once the client knows the trigger")
	close(moved)
	require.True(t, lines.Scan())
	var held, got int
	var p50, worst int64
	var first int64
	_, err = fmt.Sscanf(lines.Text(), "result %d %d %d %d %d", &held, &got, &p50, &worst, &first)
	require.NoError(t, err, lines.Text())
	require.Equal(t, 3, held, "the socket the server closed is not held")
	require.Equal(t, 2, got, "the silent socket and the closed one did not hear")
	require.Positive(t, worst)
	require.LessOrEqual(t, time.Duration(worst), time.Since(start))
	require.Positive(t, first)
	require.LessOrEqual(t, first, worst)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "it waited for the silent one until the limit")

	require.NoError(t, inW.Close())
	require.NoError(t, <-done)
}

// TestReadFleetSocket: the fleet clients' reader hands over each text message whole, fragments
// joined, answers a ping with a masked pong carrying its payload, and ends at a close frame.
func TestReadFleetSocket(t *testing.T) {
	srv, cli := net.Pipe()
	defer srv.Close()
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- readFleetSocket(bufio.NewReader(cli), cli, func(b []byte) { got = append(got, string(b)) })
	}()
	write := func(f ws.Frame) { require.NoError(t, ws.WriteFrame(srv, f)) }
	write(ws.NewTextFrame([]byte(`{"type":"position","ts":1,"position":4}`)))
	write(ws.NewPingFrame([]byte("hi")))
	pong, err := ws.ReadFrame(srv)
	require.NoError(t, err)
	require.Equal(t, ws.OpPong, pong.Header.OpCode)
	require.True(t, pong.Header.Masked, "a client's frames are masked (RFC 6455 5.3)")
	require.Equal(t, "hi", string(ws.UnmaskFrame(pong).Payload))
	write(ws.NewFrame(ws.OpText, false, []byte(`{"type":"adm`)))
	write(ws.NewFrame(ws.OpContinuation, true, []byte(`itted"}`)))
	write(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusNormalClosure, "")))
	require.ErrorIs(t, <-done, io.EOF)
	require.Equal(t, []string{`{"type":"position","ts":1,"position":4}`, `{"type":"admitted"}`}, got)
}

// TestMovedPlace: an update is a lower position than the socket's first, or an admission;
// the fast reading agrees with encoding/json's on the server's messages and on others.
func TestMovedPlace(t *testing.T) {
	for msg, want := range map[string]bool{
		`{"type":"position","ts":1,"position":4,"waiting":9,"eta_s":null}`: true,
		`{"type":"position","ts":1,"position":5,"waiting":9,"eta_s":2}`:    false,
		`{"type":"position","ts":1,"position":6}`:                          false,
		`{"type":"admitted","ts":1,"admission_token":"x"}`:                 true,
		`{"type":"stats","ts":1,"waiting":1}`:                              false,
		`{"type":"pong","ts":1}`:                                           false,
		`{"ts":1,"type":"position","position":3}`:                          true, // other key order: encoding/json
		`{"type":"position","position":-1}`:                                true,
		`{"type":"positions","position":1}`:                                false,
		`not json`:                                                         false,
	} {
		require.Equal(t, want, movedPlace([]byte(msg), 5), msg)
	}
}
