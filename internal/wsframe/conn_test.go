package wsframe

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/stretchr/testify/require"
)

// peer is the smallest caller of a Conn: a writer goroutine of its own, woken by Schedule,
// and the text messages received.
type peer struct {
	c     *Conn
	wake  chan struct{} // capacity 1
	out   chan outFrame // frames for the writer, after the control frames
	texts chan string
	done  chan struct{} // closed when ReadLoop returned
}

type outFrame struct {
	b       []byte
	closing bool
}

func (p *peer) Schedule() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *peer) Text(msg []byte) { p.texts <- string(msg) }

// send has the writer write b (closing: b ends with a close frame).
func (p *peer) send(b []byte, closing bool) {
	p.out <- outFrame{b, closing}
	p.Schedule()
}

// writer writes what is due until the reader returns.
func (p *peer) writer() {
	var buf []byte
	for {
		select {
		case <-p.wake:
		case <-p.done:
			return
		}
		for !p.c.Closed() {
			var closing bool
			buf, closing = p.c.AppendControl(buf[:0])
			if !closing {
				select {
				case f := <-p.out:
					buf, closing = append(buf, f.b...), f.closing
				default:
				}
			}
			if len(buf) == 0 {
				break
			}
			if _, err := p.c.Write(buf, closing, 5*time.Second); err != nil {
				p.c.Abort()
			}
		}
	}
}

// serve starts a server upgrading every request with o; each connection's peer is sent on the
// returned channel. It returns the server's host:port.
func serve(t *testing.T, o Options) (string, <-chan *peer) {
	t.Helper()
	peers := make(chan *peer, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var herr *HandshakeError
		if err := CheckHandshake(w, r); errors.As(err, &herr) {
			http.Error(w, err.Error(), herr.Fault.Status())
			return
		}
		p := &peer{wake: make(chan struct{}, 1), out: make(chan outFrame, 16), texts: make(chan string, 16), done: make(chan struct{})}
		c, err := Upgrade(w, r, p, o)
		if err != nil {
			return
		}
		p.c = c
		go p.writer()
		go func() {
			defer close(p.done)
			c.ReadLoop()
		}()
		peers <- p
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), peers
}

// client is a raw WebSocket client that writes frames as given.
type client struct {
	t  *testing.T
	nc net.Conn
	rd io.Reader // nc, after what the handshake's reader buffered
	p  *peer     // the server's side
}

func dial(t *testing.T, addr string, peers <-chan *peer) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, br, _, err := ws.Dial(ctx, "ws://"+addr+"/ws")
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	c := &client{t: t, nc: nc, rd: nc}
	if br != nil {
		c.rd = io.MultiReader(br, nc)
	}
	select {
	case c.p = <-peers:
	case <-ctx.Done():
		t.Fatal("the server did not take the connection")
	}
	return c
}

func (c *client) write(f ws.Frame) {
	c.t.Helper()
	require.NoError(c.t, ws.WriteFrame(c.nc, f))
}

// next reads the server's next frame (unmasked), within 5 s.
func (c *client) next() ws.Frame {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	f, err := ws.ReadFrame(c.rd) //nolint:staticcheck // the server's frames here are small
	require.NoError(c.t, err)
	require.False(c.t, f.Header.Masked, "server frames are not masked")
	return f
}

// closeCode reads the server's close frame and returns its code.
func (c *client) closeCode() StatusCode {
	c.t.Helper()
	f := c.next()
	require.Equal(c.t, ws.OpClose, f.Header.OpCode)
	code, _ := ws.ParseCloseFrameData(f.Payload)
	return StatusCode(code)
}

// ended waits up to 5 s for the server to close the connection.
func (c *client) ended() {
	c.t.Helper()
	require.NoError(c.t, c.nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := c.rd.Read(make([]byte, 1))
	require.ErrorIs(c.t, err, io.EOF)
	select {
	case <-c.p.done:
	case <-time.After(5 * time.Second):
		c.t.Fatal("the reader did not return")
	}
}

// text waits up to 5 s for the server's peer to receive a text message.
func (c *client) text() string {
	c.t.Helper()
	select {
	case s := <-c.p.texts:
		return s
	case <-time.After(5 * time.Second):
		c.t.Fatal("no text message reached the handler")
		return ""
	}
}

func masked(f ws.Frame) ws.Frame { return ws.MaskFrame(f) }

// TestProtocol: the server side of RFC 6455 as a client exercises it.
func TestProtocol(t *testing.T) {
	t.Parallel()
	// A close deadline of an hour: a reader that waited it out instead of stopping at the
	// client's close frame would outlast every test's 5 s.
	addr, peers := serve(t, Options{MaxMessage: 32, CloseTimeout: time.Hour})

	t.Run("server text frames", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.p.send(AppendText(nil, []byte("hello")), false)
		f := c.next()
		require.Equal(t, ws.OpText, f.Header.OpCode)
		require.True(t, f.Header.Fin)
		require.Equal(t, "hello", string(f.Payload))
	})

	t.Run("ping is answered with its payload", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.write(masked(ws.NewPingFrame([]byte("hello"))))
		f := c.next()
		require.Equal(t, ws.OpPong, f.Header.OpCode)
		require.Equal(t, "hello", string(f.Payload))
	})

	t.Run("Ping's channel closes at the pong", func(t *testing.T) {
		c := dial(t, addr, peers)
		pong := c.p.c.Ping()
		require.Equal(t, ws.OpPing, c.next().Header.OpCode)
		select {
		case <-pong:
			t.Fatal("woken before the pong")
		default:
		}
		c.write(masked(ws.NewPongFrame(nil)))
		select {
		case <-pong:
		case <-time.After(5 * time.Second):
			t.Fatal("the pong did not wake Ping's channel")
		}
	})

	t.Run("fragmented text is assembled; binary is dropped", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.write(masked(ws.NewBinaryFrame([]byte("binary"))))
		c.write(masked(ws.NewFrame(ws.OpText, false, []byte(`{"type":`))))
		c.write(masked(ws.NewPingFrame(nil))) // a control frame between fragments
		c.write(masked(ws.NewFrame(ws.OpContinuation, true, []byte(`"visible"}`))))
		require.Equal(t, ws.OpPong, c.next().Header.OpCode)
		require.Equal(t, `{"type":"visible"}`, c.text())
	})

	t.Run("a message of MaxMessage bytes is taken", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.write(masked(ws.NewFrame(ws.OpText, false, bytes.Repeat([]byte("a"), 16))))
		c.write(masked(ws.NewFrame(ws.OpContinuation, true, bytes.Repeat([]byte("b"), 16))))
		require.Equal(t, strings.Repeat("a", 16)+strings.Repeat("b", 16), c.text())
	})

	for _, tc := range []struct {
		name     string
		wire     []byte
		code     StatusCode
		cause    string
		unparsed bool // the stream no longer parses as frames
	}{
		{"unmasked frame", ws.MustCompileFrame(ws.NewTextFrame([]byte("x"))), StatusProtocolError, "", false},
		{"oversized message", ws.MustCompileFrame(masked(ws.NewTextFrame(bytes.Repeat([]byte("x"), 33)))), StatusTooBig, "messages are at most 32 bytes", false},
		{"oversized across fragments", append(ws.MustCompileFrame(masked(ws.NewFrame(ws.OpText, false, bytes.Repeat([]byte("x"), 20)))),
			ws.MustCompileFrame(masked(ws.NewFrame(ws.OpContinuation, true, bytes.Repeat([]byte("x"), 13))))...), StatusTooBig, "", false},
		{"text that is not UTF-8", ws.MustCompileFrame(masked(ws.NewTextFrame([]byte{'"', 0xff, 0xfe, '"'}))), StatusInvalidPayload, "text messages are UTF-8", false},
		{"a continuation with nothing to continue", ws.MustCompileFrame(masked(ws.NewFrame(ws.OpContinuation, true, []byte("x")))), StatusProtocolError, "", false},
		{"a new message inside a fragmented one", append(ws.MustCompileFrame(masked(ws.NewFrame(ws.OpText, false, []byte("x")))),
			ws.MustCompileFrame(masked(ws.NewTextFrame([]byte("y"))))...), StatusProtocolError, "", false},
		{"a fragmented ping", ws.MustCompileFrame(masked(ws.NewFrame(ws.OpPing, false, nil))), StatusProtocolError, "", false},
		{"a 64-bit length with its top bit set", []byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}, StatusProtocolError, "", true},
	} {
		t.Run(tc.name+" closes with "+strconv.Itoa(int(tc.code)), func(t *testing.T) {
			c := dial(t, addr, peers)
			_, err := c.nc.Write(tc.wire)
			require.NoError(t, err)
			f := c.next()
			require.Equal(t, ws.OpClose, f.Header.OpCode)
			code, reason := ws.ParseCloseFrameData(f.Payload)
			require.Equal(t, tc.code, StatusCode(code))
			if tc.cause != "" {
				require.Equal(t, tc.cause, reason)
			}
			if tc.unparsed {
				return // the server reads no frames any more: it drops 64 KiB or waits out CloseTimeout
			}
			// The client answers: the server stops lingering and closes at once.
			c.write(masked(ws.NewCloseFrame(ws.NewCloseFrameBody(code, ""))))
			c.ended()
		})
	}

	t.Run("close with a code no endpoint may send is a protocol error", func(t *testing.T) {
		for _, code := range []ws.StatusCode{ws.StatusNoStatusRcvd, ws.StatusAbnormalClosure, 999, 5000, 65535} {
			c := dial(t, addr, peers)
			c.write(masked(ws.NewCloseFrame(ws.NewCloseFrameBody(code, ""))))
			require.Equal(t, StatusProtocolError, c.closeCode(), "code %d", code)
			c.ended()
		}
	})

	t.Run("close with a valid code is echoed", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.write(masked(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusGoingAway, "tab closed"))))
		require.Equal(t, StatusCode(ws.StatusGoingAway), c.closeCode())
		c.ended()
	})

	t.Run("close without a code is answered 1000", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.write(masked(ws.NewCloseFrame(nil)))
		require.Equal(t, StatusNormal, c.closeCode())
		c.ended()
	})

	t.Run("the server's close is answered by the client", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.p.send(AppendClose(nil, StatusRestart, "restarting"), true)
		require.Equal(t, StatusRestart, c.closeCode())
		c.write(masked(ws.NewCloseFrame(ws.NewCloseFrameBody(1012, ""))))
		c.ended()
	})

	t.Run("Abort closes without a word", func(t *testing.T) {
		c := dial(t, addr, peers)
		c.p.c.Abort()
		require.True(t, c.p.c.Closed())
		c.ended()
	})

	t.Run("frames sent right behind the handshake are read", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer nc.Close()
		var b bytes.Buffer
		b.WriteString("GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket, h2c\r\nConnection: keep-alive\r\n" +
			"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		require.NoError(t, ws.WriteFrame(&b, masked(ws.NewPingFrame([]byte("early")))))
		_, err = nc.Write(b.Bytes()) // the request and a frame in one segment
		require.NoError(t, err)
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		f, err := ws.ReadFrame(br) //nolint:staticcheck // small frames
		require.NoError(t, err)
		require.Equal(t, ws.OpPong, f.Header.OpCode)
		require.Equal(t, "early", string(f.Payload))
		<-peers
	})
}

// TestCloseTimeout: a client that does not answer the server's close frame is closed after
// CloseTimeout.
func TestCloseTimeout(t *testing.T) {
	t.Parallel()
	addr, peers := serve(t, Options{CloseTimeout: 50 * time.Millisecond})
	c := dial(t, addr, peers)
	c.p.send(AppendClose(nil, StatusPolicy, "too slow"), true)
	require.Equal(t, StatusPolicy, c.closeCode())
	c.ended() // within 5 s; without the deadline the reader would wait for the client forever
}

// TestWriteWithoutDeadlineFirst: a write to a socket with room goes out at once, without a
// deadline, even after one set before has passed; a socket that fills takes the rest within
// the write's timeout (a partial write and os.ErrDeadlineExceeded when its reader stalls),
// and once it drains the next writes go out again.
func TestWriteWithoutDeadlineFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
	}()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer peer.Close()
	nc := <-accepted
	defer nc.Close()
	c := newConn(nc, nc, nil, Options{})
	require.NotNil(t, c.rc, "a TCP connection's socket is found")
	require.NotNil(t, newConn(rawSocket{nc}, nc, nil, Options{}).rc, "a wrapper that gives its socket (connlimit.Conn)")
	require.Nil(t, newConn(plainWrapper{nc}, nc, nil, Options{}).rc, "a wrapper that does not: its Write")
	require.Nil(t, newConn(tls.Server(nc, &tls.Config{}), nc, nil, Options{}).rc, "TLS changes the bytes: never its socket")

	require.NoError(t, nc.SetWriteDeadline(time.Now().Add(-time.Second))) // the handshake's, passed
	n, err := c.Write([]byte("hello"), false, time.Second)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	got := make([]byte, 5)
	_, err = io.ReadFull(peer, got)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))

	big := make([]byte, 64<<20) // more than both sockets' buffers hold
	n, err = c.Write(big, false, 200*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nobody reads: the rest waits for the timeout")
	require.Positive(t, n)
	require.Less(t, n, len(big))
	drained := make(chan error, 1)
	go func() { _, err := io.CopyN(io.Discard, peer, int64(n)); drained <- err }()
	require.NoError(t, <-drained)
	n, err = c.Write([]byte("again"), false, time.Second)
	require.NoError(t, err, "the drained socket takes the next write")
	require.Equal(t, 5, n)
	_, err = io.ReadFull(peer, got)
	require.NoError(t, err)
	require.Equal(t, "again", string(got))
}

// plainWrapper wraps a connection without saying how its bytes reach the socket.
type plainWrapper struct{ net.Conn }

// rawSocket wraps a connection and gives its socket, as connlimit.Conn does.
type rawSocket struct{ net.Conn }

func (r rawSocket) RawSocket() (syscall.RawConn, error) {
	return r.Conn.(syscall.Conn).SyscallConn()
}
