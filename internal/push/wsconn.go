package push

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
)

// The WebSocket side of the hub is built for many idle connections per instance: after the
// handshake a connection keeps no buffers (github.com/gobwas/ws upgrades on the raw net.Conn
// and net/http's 8 KiB of bufio is dropped with the request) and one goroutine, its reader,
// blocked in the kernel's poller on a small stack. Writes are made by the hub's writers, a
// fixed pool shared by all connections: a connection with queued messages is scheduled once,
// and a writer frames whatever it has queued into the writer's own buffer and sends it in one
// write. A client whose socket does not take the bytes within writeStall is handed to a
// goroutine of its own for the rest of the write (bounded by WriteTimeout), so one slow client
// never holds up a writer.
//
// coder/websocket, used before and still used by our clients, keeps net/http's bufio reader
// and writer and needs a goroutine for its writes: ~25 KiB per connection measured against
// ~16 KiB targeted (docs/scaling.md).

// Close codes sent by the hub (RFC 6455 section 7.4; 1012 from the IANA registry).
const (
	closeNormal      = ws.StatusNormalClosure   // 1000: after a final status
	closeProtocol    = ws.StatusProtocolError   // 1002: the client broke the protocol
	closePolicy      = ws.StatusPolicyViolation // 1008: too slow to keep up
	closeTooBig      = ws.StatusMessageTooBig   // 1009: a message over maxClientMessage
	closeRestart     = ws.StatusCode(1012)      // service restart: reconnect
	closeHandshake   = 5 * time.Second          // how long a client has to answer our close frame
	writeStall       = 100 * time.Millisecond   // a pool writer's bound on one write
	writersPerCPU    = 2
	minWriters       = 4
	maxWriterBuffer  = 64 << 10 // a writer's buffer larger than this (bytes) is not kept
	wsUpgradeTimeout = 5 * time.Second
)

// wsConn is the WebSocket side of a conn, set once the handshake completed.
type wsConn struct {
	nc net.Conn

	wmu       sync.Mutex // serialises writes to nc
	closeSent bool       // guarded by wmu: our close frame went out; nothing follows it

	pong atomic.Pointer[chan struct{}] // closed by the reader at the next pong
}

// isWebSocketRequest reports whether r asks for a WebSocket upgrade (RFC 6455 section 4.1).
func isWebSocketRequest(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		headerHasToken(r.Header.Values("Connection"), "upgrade")
}

func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// sameOrigin reports whether a browser's Origin header, when there is one, names the host the
// request was sent to: another site's page may not open sockets on our tickets in its
// visitors' names (the check browsers leave to WebSocket servers, RFC 6455 section 10.2).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser
	}
	_, host, ok := strings.Cut(origin, "://")
	return ok && strings.EqualFold(host, r.Host)
}

// upgrade completes the handshake on w's connection and returns the raw connection and a
// reader for it that first yields any bytes the client sent right behind its request.
// On error the handshake's error response has been written and the connection closed.
func upgrade(w http.ResponseWriter, r *http.Request) (net.Conn, io.Reader, error) {
	u := ws.HTTPUpgrader{Timeout: wsUpgradeTimeout}
	nc, rw, _, err := u.Upgrade(r, w)
	if err != nil {
		if nc != nil {
			_ = nc.Close()
		}
		return nil, nil, err
	}
	var rd io.Reader = nc
	if n := rw.Reader.Buffered(); n > 0 {
		early, _ := rw.Reader.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(early)), nc)
	}
	return nc, rd, nil
}

// appendFrame appends an unmasked, final frame of op carrying payload to b.
func appendFrame(b []byte, op ws.OpCode, payload []byte) []byte {
	b = append(b, 0x80|byte(op))
	switch n := len(payload); {
	case n < 126:
		b = append(b, byte(n))
	case n <= 0xffff:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, payload...)
}

// appendClose appends a close frame with code and reason (at most 123 bytes) to b.
func appendClose(b []byte, code ws.StatusCode, reason string) []byte {
	return appendFrame(b, ws.OpClose, ws.NewCloseFrameBody(code, reason))
}

// writeControl writes one control frame now (a pong, a ping, a close), unless our close frame
// already went out. A close frame makes the connection wait closeHandshake for the client's
// reply, after which the reader closes it.
func (w *wsConn) writeControl(op ws.OpCode, payload []byte, timeout time.Duration) error {
	frame := appendFrame(make([]byte, 0, 2+len(payload)), op, payload)
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closeSent {
		return net.ErrClosed
	}
	if op == ws.OpClose {
		w.closeSent = true
		_ = w.nc.SetReadDeadline(time.Now().Add(closeHandshake))
	}
	_ = w.nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := w.nc.Write(frame)
	return err
}

// wsRead reads the client's frames until the connection ends: visibility messages, pings
// (answered), pongs (waking a waiting ping) and the close handshake. Then it closes the
// connection and unregisters c.
func (h *Hub) wsRead(c *conn, w *wsConn, rd io.Reader) {
	defer h.unregister(c)
	defer w.nc.Close()
	var (
		hdrBuf [ws.MaxHeaderSize - 2]byte
		msg    [maxClientMessage]byte
		ctl    [ws.MaxControlFramePayloadSize]byte
		n      int // bytes of the data message being assembled
		text   bool
		state  = ws.StateServerSide
	)
	fail := func(code ws.StatusCode, reason string) {
		_ = w.writeControl(ws.OpClose, ws.NewCloseFrameBody(code, reason), h.cfg.WriteTimeout)
	}
	for {
		hd, err := ws.ReadHeaderBuffer(rd, hdrBuf[:])
		if err != nil {
			return
		}
		if err := ws.CheckHeader(hd, state); err != nil {
			fail(closeProtocol, err.Error())
			return
		}
		if hd.OpCode.IsControl() {
			p := ctl[:hd.Length]
			if _, err := io.ReadFull(rd, p); err != nil {
				return
			}
			ws.Cipher(p, hd.Mask, 0)
			switch hd.OpCode {
			case ws.OpPing:
				if w.writeControl(ws.OpPong, p, h.cfg.WriteTimeout) != nil {
					return
				}
			case ws.OpPong:
				if ch := w.pong.Swap(nil); ch != nil {
					close(*ch)
				}
			case ws.OpClose:
				// Answer with the client's code (RFC 6455 section 5.5.1) unless ours went out
				// first; either way the handshake is complete.
				code := ws.StatusNormalClosure
				switch {
				case len(p) == 1:
					code = closeProtocol
				case len(p) >= 2:
					var reason string
					code, reason = ws.ParseCloseFrameData(p)
					if ws.CheckCloseFrameData(code, reason) != nil {
						code = closeProtocol // a code no endpoint may send (1005, 1006, 1015, ...) or a reason that is not UTF-8
					}
				}
				_ = w.writeControl(ws.OpClose, ws.NewCloseFrameBody(code, ""), time.Second)
				return
			}
			continue
		}
		if hd.OpCode != ws.OpContinuation {
			n, text = 0, hd.OpCode == ws.OpText
		}
		if int64(n)+hd.Length > maxClientMessage {
			fail(closeTooBig, "messages are at most 256 bytes")
			return
		}
		p := msg[n : n+int(hd.Length)]
		if _, err := io.ReadFull(rd, p); err != nil {
			return
		}
		ws.Cipher(p, hd.Mask, 0)
		n += len(p)
		if !hd.Fin {
			state = state.Set(ws.StateFragmented)
			continue
		}
		state = state.Clear(ws.StateFragmented)
		if text {
			h.clientMessage(c, msg[:n])
		}
	}
}

// clientMessage handles one text message of a client: {"type":"visible"} or {"type":"hidden"}.
// Anything else is ignored.
func (h *Hub) clientMessage(c *conn, b []byte) {
	var m struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b, &m) != nil {
		return
	}
	switch m.Type {
	case "visible":
		if !c.visible.Swap(true) {
			c.renew.Store(true) // renew (or learn the fate of) an admitted session now
			h.kick()
		}
	case "hidden":
		c.visible.Store(false)
	}
}

// schedule queues c for a writer unless it is queued or being written already.
func (h *Hub) schedule(c *conn) {
	if c.wsc.Load() == nil || !c.scheduled.CompareAndSwap(false, true) {
		return
	}
	select {
	case h.wq <- c: // holds MaxConns, and a connection is in it at most once
	default:
		// Only when connections that ended are still queued beside MaxConns live ones: write
		// this one on a goroutine of its own rather than wait.
		go h.flush(c, nil)
	}
}

// writer writes scheduled connections' messages until the hub's writers stop.
func (h *Hub) writer() {
	var buf []byte
	for {
		select {
		case <-h.wstop:
			return
		case c := <-h.wq:
			buf = h.flush(c, buf[:0])
			if cap(buf) > maxWriterBuffer {
				buf = nil
			}
		}
	}
}

// flush writes what c has queued (and, once c was killed, its close frame) until nothing is
// left, then unschedules it. A write that stalls is finished on a goroutine of its own.
// It returns buf for reuse.
func (h *Hub) flush(c *conn, buf []byte) []byte {
	w := c.wsc.Load()
	for {
		buf = buf[:0]
		closing, abort := false, false
	drain:
		for {
			select {
			case m := <-c.out:
				buf = appendFrame(buf, ws.OpText, m.data)
				if m.last {
					buf = appendClose(buf, closeNormal, "final status sent")
					closing = true
					break drain
				}
			default:
				break drain
			}
		}
		if !closing && c.dead() {
			switch c.reason {
			case reasonShutdown:
				buf = appendClose(buf, closeRestart, "server restarting; reconnect")
				closing = true
			case reasonSlow:
				buf = appendClose(buf, closePolicy, "too slow to keep up")
				closing = true
			default:
				abort = true // the connection failed or ended: close it without a word
			}
		}
		if abort {
			_ = w.nc.Close()
			return buf // stays scheduled: nothing more is written
		}
		if len(buf) > 0 {
			w.wmu.Lock()
			if w.closeSent {
				w.wmu.Unlock()
				return buf
			}
			if closing {
				w.closeSent = true
				_ = w.nc.SetReadDeadline(time.Now().Add(closeHandshake))
			}
			_ = w.nc.SetWriteDeadline(time.Now().Add(min(writeStall, h.cfg.WriteTimeout)))
			k, err := w.nc.Write(buf)
			if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				// The client's socket is full: the rest is written on a goroutine of its own,
				// holding wmu, with the whole WriteTimeout; c stays scheduled meanwhile.
				go h.finishStalled(c, w, bytes.Clone(buf[k:]), closing)
				return buf
			}
			w.wmu.Unlock()
			if err != nil {
				h.writeFailed(c, w, err)
				return buf
			}
			if closing {
				return buf // stays scheduled: nothing follows the close frame
			}
		}
		c.scheduled.Store(false)
		if (len(c.out) == 0 && !c.dead()) || !c.scheduled.CompareAndSwap(false, true) {
			return buf
		}
	}
}

// finishStalled writes rest, the part of a write that did not go out within writeStall, with
// w.wmu held by its caller, then goes on writing c's queue.
func (h *Hub) finishStalled(c *conn, w *wsConn, rest []byte, closing bool) {
	_ = w.nc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout - min(writeStall, h.cfg.WriteTimeout)))
	_, err := w.nc.Write(rest)
	w.wmu.Unlock()
	if err != nil {
		h.writeFailed(c, w, err)
		return
	}
	if !closing {
		h.flush(c, nil)
	}
}

// writeFailed ends c after a failed write: a timeout is a client too slow to take its
// messages; anything else means the connection is already gone and drops nobody.
func (h *Hub) writeFailed(c *conn, w *wsConn, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) && !c.dead() {
		h.droppedWrite.Add(1)
	}
	c.kill(reasonWrite)
	_ = w.nc.Close()
}

// wsServe takes over an upgraded connection: c's reader runs on a goroutine of its own, its
// writes on the hub's writers.
func (h *Hub) wsServe(c *conn, nc net.Conn, rd io.Reader) {
	w := &wsConn{nc: nc}
	c.room.mu.Lock()
	c.wsc.Store(w)
	c.room.mu.Unlock()
	go h.wsRead(c, w, rd) // counted in wg by register, done by unregister
	h.schedule(c)         // the first message (or the close) queued before the upgrade
}
