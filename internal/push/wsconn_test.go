package push

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/sqlstore"
)

// TestWebSocketRefusals: a request to the socket route that is not a handshake, or comes from
// another site's page, is a problem, and holds no place under MaxConns.
func TestWebSocketRefusals(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{})[0]
	putEvent(t, n, sqlstore.Event{ID: "ev", MaxActive: 1})
	_, id := join(t, n, "ev")
	url := n.srv.URL + "/v1/events/ev/tickets/" + id + "/ws"

	for _, tc := range []struct {
		name   string
		header http.Header
		status int
		code   string
	}{
		{"plain GET", nil, http.StatusUpgradeRequired, "websocket_required"},
		{"another site's page", http.Header{
			"Upgrade": {"websocket"}, "Connection": {"keep-alive, Upgrade"}, "Sec-Websocket-Version": {"13"},
			"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Origin": {"https://elsewhere.example"},
		}, http.StatusForbidden, "cross_origin"},
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
		var p struct{ Code string }
		require.NoError(t, json.Unmarshal(body, &p), tc.name)
		require.Equal(t, tc.code, p.Code, tc.name)
	}
	require.Zero(t, n.hub.Counters().Conns)

	// The same page's origin is accepted.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(n.srv.URL, "ev", id), &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": {n.srv.URL}},
	})
	require.NoError(t, err)
	_ = c.CloseNow()
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

// closeCode skips data frames up to the server's close frame and returns its code.
func (c *rawWS) closeCode() ws.StatusCode {
	c.t.Helper()
	for {
		f := c.next()
		if f.Header.OpCode == ws.OpClose {
			code, _ := ws.ParseCloseFrameData(f.Payload)
			return code
		}
	}
}

// TestWebSocketProtocol: the server side of RFC 6455 as a client exercises it.
func TestWebSocketProtocol(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{})[0]
	putEvent(t, n, sqlstore.Event{ID: "ev", MaxActive: 1})
	join(t, n, "ev")
	ids := make([]string, 5)
	for i := range ids {
		_, ids[i] = join(t, n, "ev")
	}
	conn := func(id string) *conn {
		r := n.hub.roomOf("ev")
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

	t.Run("first message is one text frame", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[0])
		f := c.next()
		require.Equal(t, ws.OpText, f.Header.OpCode)
		require.True(t, f.Header.Fin)
		require.Contains(t, string(f.Payload), `"type":"position"`)
	})

	t.Run("ping is answered with its payload", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[1])
		c.next()
		c.write(ws.MaskFrame(ws.NewPingFrame([]byte("hello"))))
		f := c.next()
		require.Equal(t, ws.OpPong, f.Header.OpCode)
		require.Equal(t, "hello", string(f.Payload))
	})

	t.Run("fragmented message is assembled", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[2])
		c.next()
		c.write(ws.MaskFrame(ws.NewFrame(ws.OpText, false, []byte(`{"type":`))))
		c.write(ws.MaskFrame(ws.NewPingFrame(nil))) // a control frame between fragments
		c.write(ws.MaskFrame(ws.NewFrame(ws.OpContinuation, true, []byte(`"visible"}`))))
		require.Equal(t, ws.OpPong, c.next().Header.OpCode)
		eventually(t, 5*time.Second, "the page is visible", func() bool {
			cn := conn(ids[2])
			return cn != nil && cn.visible.Load()
		})
	})

	t.Run("unmasked frame is a protocol error", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[3])
		c.next()
		c.write(ws.NewTextFrame([]byte(`{"type":"visible"}`)))
		require.Equal(t, ws.StatusProtocolError, c.closeCode())
	})

	t.Run("oversized message closes with 1009", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[4])
		c.next()
		c.write(ws.MaskFrame(ws.NewTextFrame([]byte(`{"type":"` + strings.Repeat("x", 300) + `"}`))))
		require.Equal(t, ws.StatusMessageTooBig, c.closeCode())
	})

	t.Run("frames sent right behind the handshake are read", func(t *testing.T) {
		nc, err := net.Dial("tcp", strings.TrimPrefix(n.srv.URL, "http://"))
		require.NoError(t, err)
		defer nc.Close()
		var b bytes.Buffer
		b.WriteString("GET /v1/events/ev/tickets/" + ids[1] + "/ws HTTP/1.1\r\nHost: " + strings.TrimPrefix(n.srv.URL, "http://") +
			"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		require.NoError(t, ws.WriteFrame(&b, ws.MaskFrame(ws.NewPingFrame([]byte("early")))))
		_, err = nc.Write(b.Bytes()) // the request and a frame in one segment
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		for {
			f, err := ws.ReadFrame(br) //nolint:staticcheck // small frames
			require.NoError(t, err)
			if f.Header.OpCode == ws.OpPong {
				require.Equal(t, "early", string(f.Payload))
				break
			}
		}
	})

	t.Run("close with a code no endpoint may send is a protocol error", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[2])
		c.next()
		c.write(ws.MaskFrame(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusNoStatusRcvd, ""))))
		require.Equal(t, ws.StatusProtocolError, c.closeCode())
	})

	t.Run("close with a valid code is echoed", func(t *testing.T) {
		c := dialRaw(t, n.srv.URL, "ev", ids[3])
		c.next()
		c.write(ws.MaskFrame(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "tab closed"))))
		require.Equal(t, ws.StatusGoingAway, c.closeCode())
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
		eventually(t, 5*time.Second, "the connection unregistered", func() bool { return n.hub.Counters().Conns <= before })
	})
}
