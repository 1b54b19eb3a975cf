package push

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/wsframe"
)

// TestWebSocketRefusals: a request to the socket route that is not a handshake, or comes from
// another site's page, is a problem, and holds no place under MaxConns.
func TestWebSocketRefusals(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	_, id := join(t, n, "ev")
	url := n.srv.URL + "/v1/events/ev/tickets/" + id + "/ws"

	for _, tc := range []struct {
		name   string
		header http.Header
		status int
		code   string
	}{
		{"plain GET", nil, http.StatusUpgradeRequired, "websocket_required"},
		{"another site's page", handshake(map[string]string{"Origin": "https://elsewhere.example"}), http.StatusForbidden, "cross_origin"},
		{"another version", handshake(map[string]string{"Sec-Websocket-Version": "8"}), http.StatusUpgradeRequired, "websocket_version"},
		{"no version", handshake(map[string]string{"Sec-Websocket-Version": ""}), http.StatusUpgradeRequired, "websocket_version"},
		{"key not 16 bytes", handshake(map[string]string{"Sec-Websocket-Key": "c2hvcnQ="}), http.StatusBadRequest, "invalid_handshake"},
		{"key not base64", handshake(map[string]string{"Sec-Websocket-Key": "!!!!!!!!!!!!!!!!!!!!!!!!"}), http.StatusBadRequest, "invalid_handshake"},
		{"two origins", func() http.Header {
			h := handshake(nil)
			h["Origin"] = []string{n.srv.URL, "https://elsewhere.example"}
			return h
		}(), http.StatusForbidden, "cross_origin"},
	} {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		for k, v := range tc.header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, tc.name)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, tc.name)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), tc.name)
		var p struct{ Code, Title string }
		require.NoError(t, json.Unmarshal(body, &p), tc.name)
		require.Equal(t, tc.code, p.Code, tc.name)
		require.NotEmpty(t, p.Title, tc.name)
		if tc.code == "websocket_version" {
			require.Equal(t, "13", resp.Header.Get("Sec-WebSocket-Version"))
		}
	}
	// HEAD (which the GET route also matches) and HTTP/1.0 are not handshakes.
	for _, req := range []string{
		"HEAD /v1/events/ev/tickets/" + id + "/ws HTTP/1.1\r\nHost: x\r\n",
		"GET /v1/events/ev/tickets/" + id + "/ws HTTP/1.0\r\nHost: x\r\n",
	} {
		resp := rawRequest(t, n.srv.URL, req+"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, req)
	}
	// A handshake has no body: it would be read as frames.
	resp := rawRequest(t, n.srv.URL, "GET /v1/events/ev/tickets/"+id+"/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 5\r\n\r\nhello")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	// Upgrade and Connection are token lists, and may come as several lines.
	resp = rawRequest(t, n.srv.URL, "GET /v1/events/ev/tickets/"+id+"/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket, h2c\r\n"+
		"Connection: keep-alive\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	// The Connection header may come as several lines.
	resp = rawRequest(t, n.srv.URL, "GET /v1/events/ev/tickets/"+id+"/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"+
		"Connection: keep-alive\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	eventually.True(t, 5*time.Second, "the raw connections closed", func() bool { return n.hub.Counters().Conns == 0 })

	// The same page's origin is accepted.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(n.srv.URL, "ev", id), &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": {n.srv.URL}},
	})
	require.NoError(t, err)
	_ = c.CloseNow()
}

// TestHandshakeProblems: every handshake fault has its problem code and detail.
func TestHandshakeProblems(t *testing.T) {
	t.Parallel()
	for f := wsframe.NotHandshake; f <= wsframe.CrossOrigin; f++ {
		p, ok := handshakeProblems[f]
		require.True(t, ok, f.String())
		require.NotEmpty(t, p.code, f.String())
		require.NotEmpty(t, p.detail, f.String())
	}
}

// connOf returns the hub's connection of ticket id in event, nil when there is none.
func connOf(n *node, event, id string) *conn {
	r := n.hub.roomOf(event)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		for ; c != nil; c = c.next {
			if c.ticketID == id {
				return c
			}
		}
	}
	return nil
}

// handshake returns a valid handshake's headers with the given ones changed ("" removes one).
func handshake(change map[string]string) http.Header {
	h := http.Header{
		"Upgrade": {"websocket"}, "Connection": {"keep-alive, Upgrade"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
	}
	for k, v := range change {
		if v == "" {
			delete(h, k)
		} else {
			h[k] = []string{v}
		}
	}
	return h
}

// rawRequest sends req as written on a new connection and reads the response's head; the
// connection is closed at cleanup.
func rawRequest(t *testing.T, base, req string) *http.Response {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	_, err = io.WriteString(nc, req)
	require.NoError(t, err)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	require.NoError(t, err)
	_ = nc.Close() // the body is not read (a HEAD's has none)
	return resp
}

// rawWS is a client that writes frames as given, to test how the server takes them.
type rawWS struct {
	t  *testing.T
	nc net.Conn
	rd io.Reader // nc, after what the handshake's reader buffered
}

func dialRaw(t *testing.T, base, event, ticketID string) *rawWS {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, br, _, err := ws.Dial(ctx, wsURL(base, event, ticketID))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawWS{t: t, nc: nc, rd: nc}
	if br != nil { // the server's first frame came with the handshake's response
		c.rd = io.MultiReader(br, nc)
	}
	return c
}

func (c *rawWS) write(f ws.Frame) {
	c.t.Helper()
	require.NoError(c.t, ws.WriteFrame(c.nc, f))
}

// next reads the next frame from the server (unmasked), within 5 s.
func (c *rawWS) next() ws.Frame {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	f, err := ws.ReadFrame(c.rd) //nolint:staticcheck // the server's frames here are small
	require.NoError(c.t, err)
	require.False(c.t, f.Header.Masked, "server frames are not masked")
	return f
}

// nextControl skips data frames (positions, stats) up to the next control frame.
func (c *rawWS) nextControl() ws.Frame {
	c.t.Helper()
	for {
		if f := c.next(); f.Header.OpCode.IsControl() {
			return f
		}
	}
}

// closeCode skips data frames up to the server's close frame and returns its code.
func (c *rawWS) closeCode() ws.StatusCode {
	c.t.Helper()
	for {
		if f := c.nextControl(); f.Header.OpCode == ws.OpClose {
			code, _ := ws.ParseCloseFrameData(f.Payload)
			return code
		}
	}
}

// TestWebSocketProtocol: the hub's side of RFC 6455 as a client exercises it: its messages
// are text frames, a client's messages reach it, and the reader's close frames (protocol
// errors, with push's 256-byte limit) go out through the hub's writers. The protocol itself
// (pings, fragments, close codes, the linger after an error) is tested in internal/wsframe.
func TestWebSocketProtocol(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	join(t, n, "ev")
	ids := make([]string, 4)
	for i := range ids {
		_, ids[i] = join(t, n, "ev")
	}

	t.Run("first message is one text frame", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[0])
		f := c.next()
		require.Equal(t, ws.OpText, f.Header.OpCode)
		require.True(t, f.Header.Fin)
		require.Contains(t, string(f.Payload), `"type":"position"`)
	})

	t.Run("a fragmented visible message makes the page visible", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[1])
		c.next()
		c.write(ws.MaskFrame(ws.NewFrame(ws.OpText, false, []byte(`{"type":`))))
		c.write(ws.MaskFrame(ws.NewPingFrame(nil))) // a control frame between fragments
		c.write(ws.MaskFrame(ws.NewFrame(ws.OpContinuation, true, []byte(`"visible"}`))))
		require.Equal(t, ws.OpPong, c.nextControl().Header.OpCode)
		eventually.True(t, 5*time.Second, "the page is visible", func() bool {
			cn := connOf(n, "ev", ids[1])
			return cn != nil && cn.visible.Load()
		})
	})

	t.Run("unmasked frame is a protocol error", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[2])
		c.next()
		c.write(ws.NewTextFrame([]byte(`{"type":"visible"}`)))
		require.Equal(t, ws.StatusProtocolError, c.closeCode())
	})

	t.Run("oversized message closes with 1009", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[3])
		c.next()
		c.write(ws.MaskFrame(ws.NewTextFrame([]byte(`{"type":"` + strings.Repeat("x", 300) + `"}`))))
		require.Equal(t, ws.StatusMessageTooBig, c.closeCode())
	})

	t.Run("client close is answered and frees the place", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		before := n.hub.Counters().Conns
		c, _, err := websocket.Dial(ctx, wsURL(n.srv.URL, "ev", ids[0]), nil)
		require.NoError(t, err)
		_, _, err = c.Read(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Close(websocket.StatusNormalClosure, "bye"), "the server answered the close")
		eventually.True(t, 5*time.Second, "the connection unregistered", func() bool { return n.hub.Counters().Conns <= before })
	})
}

// TestPingFloodDoesNotStallOthers: clients that flood pings and never read leave their pongs
// stuck in full sockets; the shared writers must still serve everyone else at once. With a
// WriteTimeout of an hour, a writer blocked on such a socket would hold the victim's message
// far beyond the test's deadline; handed off after writeStall, it holds nobody.
func TestPingFloodDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{hub: Config{WriteTimeout: time.Hour}})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	join(t, n, "ev")
	attackers := 2 * max(minWriters, writersPerCPU*runtime.GOMAXPROCS(0))
	ids := make([]string, attackers)
	for i := range ids {
		_, ids[i] = join(t, n, "ev")
	}
	_, victimID := join(t, n, "ev")
	victim := dialWS(t, n.srv.URL, "ev", victimID)
	require.Equal(t, TypePosition, victim.next(t, 5*time.Second).Type)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range ids {
		flood(ctx, t, n, id)
	}
	eventually.True(t, 10*time.Second, "every attacker's pongs stalled", func() bool { return n.hub.Counters().Stalled >= int64(attackers) })

	// Everyone gets a message now: more attackers than writers, so the victim hears only if
	// no writer is stuck on an attacker's socket.
	msg := []byte(`{"type":"stats","ts":1,"waiting":42}`)
	r := n.hub.roomOf("ev")
	r.mu.Lock()
	for _, c := range r.conns {
		for ; c != nil; c = c.next {
			c.send(outMsg{data: msg})
		}
	}
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for victim.waitFor(t, TypeStats, time.Until(deadline)).Waiting != 42 { // skip the ticks' own stats
	}
}

// flood connects as ticket id with a small receive buffer and floods pings without reading,
// until ctx ends; the server's side of the socket gets a small send buffer, so that the pongs
// fill it soon. The connection is closed at cleanup.
func flood(ctx context.Context, t *testing.T, n *node, id string) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
		return errors.Join(err, serr)
	}}
	nc, _, _, err := ws.Dialer{NetDial: d.DialContext}.Dial(ctx, wsURL(n.srv.URL, "ev", id))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	var w *wsframe.Conn
	eventually.True(t, 5*time.Second, "the attacker registered", func() bool {
		if c := connOf(n, "ev", id); c != nil {
			w = c.wsc.Load()
		}
		return w != nil
	})
	require.NoError(t, w.NetConn().(*net.TCPConn).SetWriteBuffer(1024))
	ping := ws.MustCompileFrame(ws.MaskFrame(ws.NewPingFrame(bytes.Repeat([]byte("p"), 125))))
	burst := bytes.Repeat(ping, 64)
	go func() { // never reads
		for ctx.Err() == nil {
			if _, err := nc.Write(burst); err != nil {
				return
			}
		}
	}()
}

// TestConnectionsPerTicket: one ticket holds at most MaxConnsPerTicket push connections on an
// instance (WebSocket and SSE together); a closed one frees its place.
func TestConnectionsPerTicket(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{hub: Config{MaxConnsPerTicket: 2}})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	join(t, n, "ev")
	_, id := join(t, n, "ev")
	_, other := join(t, n, "ev")

	c1 := dialWS(t, n.srv.URL, "ev", id)
	c1.next(t, 5*time.Second)
	s := openSSE(t, n.srv.URL, "ev", id, "")
	s.nextEvent(t, 5*time.Second)
	for _, suffix := range []string{"/ws", "/events"} {
		resp, err := getPush(n.srv.URL + "/v1/events/ev/tickets/" + id + suffix)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, suffix)
		require.Contains(t, string(body), `"code":"too_many_ticket_connections"`)
	}
	dialWS(t, n.srv.URL, "ev", other).next(t, 5*time.Second) // other tickets are not affected

	c1.Close()
	eventually.True(t, 5*time.Second, "the closed connection's place freed", func() bool { return n.hub.Counters().Conns == 2 })
	dialWS(t, n.srv.URL, "ev", id).next(t, 5*time.Second)
}
