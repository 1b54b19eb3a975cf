package push

import (
	"bytes"
	"encoding/base64"
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
	"unicode/utf8"

	"github.com/gobwas/ws"

	"github.com/waitroom/waitroom/internal/httpapi"
)

// The WebSocket side of the hub is built for many idle connections per instance: after the
// handshake a connection keeps no buffers (github.com/gobwas/ws upgrades on the raw net.Conn
// and net/http's 8 KiB of bufio is dropped with the request) and one goroutine, its reader,
// blocked in the kernel's poller on a small stack. The reader never writes. Everything a
// connection sends — messages, pongs, pings, its close frame — is written by the hub's
// writers, a fixed pool shared by all connections: a connection with something to send is
// scheduled once (conn.scheduled), and the writer that takes it frames what is pending into the
// writer's own buffer and sends it in one write. Holding the schedule is what makes a writer
// the connection's only writer, so no lock is held across I/O. A client whose socket does not
// take the bytes within writeStall is handed to a goroutine of its own for the rest of the
// write (bounded by WriteTimeout), so no client holds up a writer, however it behaves.
//
// coder/websocket, used before and still used by our clients, keeps net/http's bufio reader
// and writer and needs a goroutine for its writes: ~25 KiB per connection measured against
// ~16 KiB targeted (docs/scaling.md).

// Close codes sent by the hub (RFC 6455 section 7.4; 1012 from the IANA registry).
const (
	closeNormal      = ws.StatusNormalClosure           // 1000: after a final status
	closeProtocol    = ws.StatusProtocolError           // 1002: the client broke the protocol
	closeBadData     = ws.StatusInvalidFramePayloadData // 1007: a text message that is not UTF-8
	closePolicy      = ws.StatusPolicyViolation         // 1008: too slow to keep up
	closeTooBig      = ws.StatusMessageTooBig           // 1009: a message over maxClientMessage
	closeRestart     = ws.StatusCode(1012)              // service restart: reconnect
	closeHandshake   = 5 * time.Second                  // how long a client has to answer our close frame
	lingerBytes      = 64 << 10                         // what a closing reader discards at most, so the close is not reset
	writeStall       = 100 * time.Millisecond           // a pool writer's bound on one write
	writersPerCPU    = 2
	minWriters       = 4
	maxWriterBuffer  = 64 << 10 // a writer's buffer larger than this (bytes) is not kept
	wsUpgradeTimeout = 5 * time.Second
)

// wsConn is the WebSocket side of a conn, set once the handshake completed.
type wsConn struct {
	nc net.Conn

	// cmu guards the control frames waiting for a writer; it is never held across I/O.
	cmu         sync.Mutex
	pongDue     bool
	pongLen     int
	pongBuf     [ws.MaxControlFramePayloadSize]byte // the latest ping's payload (RFC 6455 5.5.3 allows answering only the latest)
	pingDue     bool
	closeDue    bool
	closeCode   ws.StatusCode
	closeReason string

	closed    atomic.Bool                   // our close frame is written, or writing failed: nothing more goes out
	closedc   chan struct{}                 // closed with closed
	pongWaitc atomic.Pointer[chan struct{}] // closed by the reader at the next pong
}

// markClosed records that nothing more is written to w.
func (w *wsConn) markClosed() {
	if w.closed.CompareAndSwap(false, true) {
		close(w.closedc)
	}
}

// controlDue reports whether a control frame waits for a writer.
func (w *wsConn) controlDue() bool {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	return w.pongDue || w.pingDue || w.closeDue
}

// isWebSocketRequest reports whether r asks for a WebSocket upgrade (RFC 6455 section 4.1).
func isWebSocketRequest(r *http.Request) bool {
	return headerHasToken(r.Header.Values("Upgrade"), "websocket") &&
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
	origins := r.Header.Values("Origin")
	switch len(origins) {
	case 0:
		return true // not a browser
	case 1:
		_, host, ok := strings.Cut(origins[0], "://")
		return ok && strings.EqualFold(host, r.Host)
	default:
		return false // a browser sends one
	}
}

// handshakeProblem checks r as a WebSocket opening handshake (RFC 6455 section 4.2.1) and
// returns the problem to answer with, or nil when it may be upgraded: 426 websocket_required
// (not a handshake), 426 websocket_version (not version 13), 400 invalid_handshake (not an
// HTTP/1.1 GET, or a key that is not 16 bytes in base64), 403 cross_origin. It sets the
// headers that go with the 426s. It reads no state: a refused handshake costs no store call.
func handshakeProblem(w http.ResponseWriter, r *http.Request) *httpapi.Problem {
	if !isWebSocketRequest(r) {
		w.Header().Set("Upgrade", "websocket")
		return httpapi.NewProblem(http.StatusUpgradeRequired, "websocket_required",
			"this is a WebSocket endpoint: send a WebSocket handshake (Upgrade: websocket), or use the .../events stream or polling")
	}
	if r.Method != http.MethodGet || !r.ProtoAtLeast(1, 1) || r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		// A body would be read as the client's first frames.
		return httpapi.NewProblem(http.StatusBadRequest, "invalid_handshake", "a WebSocket handshake is an HTTP/1.1 GET without a body")
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return httpapi.NewProblem(http.StatusUpgradeRequired, "websocket_version", "this server speaks WebSocket version 13 (RFC 6455)")
	}
	if key, err := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key")); err != nil || len(key) != 16 {
		return httpapi.NewProblem(http.StatusBadRequest, "invalid_handshake", "Sec-WebSocket-Key must be 16 bytes in base64")
	}
	if !sameOrigin(r) {
		return httpapi.NewProblem(http.StatusForbidden, "cross_origin", "the Origin header names another site than this host")
	}
	return nil
}

// upgrade completes the handshake on w's connection and returns the raw connection and a
// reader for it that first yields any bytes the client sent right behind its request.
// On error the handshake's error response has been written and the connection closed.
func upgrade(w http.ResponseWriter, r *http.Request) (net.Conn, io.Reader, error) {
	// handshakeProblem read token lists in every Connection and Upgrade header; the library
	// reads the first header only and wants Upgrade to be exactly "websocket".
	r.Header.Set("Connection", strings.Join(r.Header.Values("Connection"), ", "))
	r.Header.Set("Upgrade", "websocket")
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

// sendPong has a writer answer a ping with payload (the latest ping's payload wins).
func (h *Hub) sendPong(c *conn, w *wsConn, payload []byte) {
	w.cmu.Lock()
	w.pongLen = copy(w.pongBuf[:], payload)
	w.pongDue = true
	w.cmu.Unlock()
	h.schedule(c)
}

// sendPing has a writer send a ping.
func (h *Hub) sendPing(c *conn, w *wsConn) {
	w.cmu.Lock()
	w.pingDue = true
	w.cmu.Unlock()
	h.schedule(c)
}

// sendClose has a writer send a close frame with code and reason, ahead of any queued message,
// unless one was asked for already; it returns when the frame is written or the connection
// failed, or after WriteTimeout.
func (h *Hub) sendClose(c *conn, w *wsConn, code ws.StatusCode, reason string) {
	w.cmu.Lock()
	if !w.closeDue {
		w.closeDue, w.closeCode, w.closeReason = true, code, reason
	}
	w.cmu.Unlock()
	h.schedule(c)
	t := time.NewTimer(h.cfg.WriteTimeout)
	defer t.Stop()
	select {
	case <-w.closedc:
	case <-t.C:
	}
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
	// fail closes the connection with code after a client's mistake: the close frame goes out
	// first, then what the client still sends is read and dropped (up to closeHandshake and
	// lingerBytes) so that the close is not lost to a TCP reset for unread data.
	// unread is what is left of the offending frame's payload, -1 when the stream no longer
	// parses as frames.
	fail := func(code ws.StatusCode, reason string, unread int64) {
		h.sendClose(c, w, code, reason)
		_ = w.nc.SetReadDeadline(time.Now().Add(closeHandshake))
		if unread < 0 || unread > lingerBytes {
			_, _ = io.CopyN(io.Discard, rd, lingerBytes)
			return
		}
		if _, err := io.CopyN(io.Discard, rd, unread); err != nil {
			return
		}
		// Frames are still parsed, to stop at the client's close frame; a stream that no
		// longer parses is dropped up to the same bound.
		for left := int64(lingerBytes) - unread; left > 0; {
			hd, err := ws.ReadHeaderBuffer(rd, hdrBuf[:])
			if err != nil || hd.Length > left {
				_, _ = io.CopyN(io.Discard, rd, left)
				return
			}
			if _, err := io.CopyN(io.Discard, rd, hd.Length); err != nil || hd.OpCode == ws.OpClose {
				return
			}
			left -= hd.Length + 2
		}
	}
	for {
		hd, err := ws.ReadHeaderBuffer(rd, hdrBuf[:])
		if err != nil {
			if errors.Is(err, ws.ErrHeaderLengthMSB) || errors.Is(err, ws.ErrHeaderLengthUnexpected) {
				fail(closeProtocol, err.Error(), -1)
			}
			return
		}
		if err := ws.CheckHeader(hd, state); err != nil {
			fail(closeProtocol, err.Error(), hd.Length)
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
				h.sendPong(c, w, p)
			case ws.OpPong:
				if ch := w.pongWaitc.Swap(nil); ch != nil {
					close(*ch)
				}
			case ws.OpClose:
				// Answer with the client's code (RFC 6455 section 5.5.1) unless ours went out
				// first; either way the handshake is then complete.
				code := ws.StatusNormalClosure
				switch {
				case len(p) == 1:
					code = closeProtocol
				case len(p) >= 2:
					var reason string
					code, reason = ws.ParseCloseFrameData(p)
					if ws.CheckCloseFrameData(code, reason) != nil || code >= 5000 { // codes end at 4999 (RFC 6455 7.4.2)
						code = closeProtocol // a code no endpoint may send (1005, 1006, 1015, ...) or a reason that is not UTF-8
					}
				}
				if !w.closed.Load() {
					h.sendClose(c, w, code, "")
				}
				return
			}
			continue
		}
		if hd.OpCode != ws.OpContinuation {
			n, text = 0, hd.OpCode == ws.OpText
		}
		if int64(n)+hd.Length > maxClientMessage {
			fail(closeTooBig, "messages are at most 256 bytes", hd.Length)
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
			if !utf8.Valid(msg[:n]) {
				fail(closeBadData, "text messages are UTF-8", 0)
				return
			}
			h.clientMessage(c, msg[:n])
		}
	}
}

// minRenewGap is the least time between two session renewals a page's "visible" can ask for:
// a client toggling visibility costs at most one ping and one store call per second.
const minRenewGap = time.Second

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
		if c.visible.Swap(true) {
			return
		}
		// An admitted page that comes back renews (or learns the fate of) its session now;
		// a waiting one needs nothing before the next tick.
		r := c.room
		r.mu.Lock()
		renew := c.state == stateAdmitted && h.now().Sub(c.renewedAt) >= minRenewGap
		r.mu.Unlock()
		if renew && !c.renew.Swap(true) {
			h.kickRoom(r)
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
			for { // what was scheduled before the stop (close frames, say) still goes out
				select {
				case c := <-h.wq:
					buf = h.flush(c, buf[:0])
				default:
					return
				}
			}
		case c := <-h.wq:
			buf = h.flush(c, buf[:0])
			if cap(buf) > maxWriterBuffer {
				buf = nil
			}
		}
	}
}

// flush writes what c has pending — control frames first, then its queued messages, then
// (once c was killed, or after a final status) its close frame — until nothing is left, then
// unschedules it. The caller holds c's schedule, so it is c's only writer. A write that stalls
// is finished on a goroutine of its own. It returns buf for reuse.
func (h *Hub) flush(c *conn, buf []byte) []byte {
	w := c.wsc.Load()
	for {
		if w.closed.Load() {
			return buf // stays scheduled: nothing follows the close frame
		}
		buf = buf[:0]
		closing, abort := false, false
		w.cmu.Lock()
		if w.pongDue {
			buf = appendFrame(buf, ws.OpPong, w.pongBuf[:w.pongLen])
			w.pongDue = false
		}
		if w.pingDue {
			buf = appendFrame(buf, ws.OpPing, nil)
			w.pingDue = false
		}
		if w.closeDue {
			buf = appendClose(buf, w.closeCode, w.closeReason)
			closing = true
		}
		w.cmu.Unlock()
	drain:
		for !closing {
			select {
			case m := <-c.out:
				buf = appendFrame(buf, ws.OpText, m.data)
				if m.last {
					buf = appendClose(buf, closeNormal, "final status sent")
					closing = true
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
			w.markClosed()
			_ = w.nc.Close()
			return buf
		}
		if len(buf) > 0 {
			if closing {
				// The client has closeHandshake to answer; the reader then closes.
				_ = w.nc.SetReadDeadline(time.Now().Add(closeHandshake))
			}
			_ = w.nc.SetWriteDeadline(time.Now().Add(min(writeStall, h.cfg.WriteTimeout)))
			k, err := w.nc.Write(buf)
			if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				// The client's socket is full: the rest is written on a goroutine of its own,
				// with the whole WriteTimeout; c stays scheduled meanwhile.
				h.stalled.Add(1)
				go h.finishStalled(c, w, bytes.Clone(buf[k:]), closing)
				return buf
			}
			if err != nil {
				h.writeFailed(c, w, err)
				return buf
			}
			if closing {
				w.markClosed()
				return buf
			}
		}
		c.scheduled.Store(false)
		if (len(c.out) == 0 && !c.dead() && !w.controlDue()) || !c.scheduled.CompareAndSwap(false, true) {
			return buf
		}
	}
}

// finishStalled writes rest, the part of a write that did not go out within writeStall, then
// goes on writing c's queue. The caller held c's schedule and passes it on.
func (h *Hub) finishStalled(c *conn, w *wsConn, rest []byte, closing bool) {
	_ = w.nc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout - min(writeStall, h.cfg.WriteTimeout)))
	if _, err := w.nc.Write(rest); err != nil {
		h.writeFailed(c, w, err)
		return
	}
	if closing {
		w.markClosed()
		return
	}
	h.flush(c, nil)
}

// writeFailed ends c after a failed write: a timeout is a client too slow to take its
// messages; anything else means the connection is already gone and drops nobody.
func (h *Hub) writeFailed(c *conn, w *wsConn, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) && !c.dead() {
		h.droppedWrite.Add(1)
	}
	c.kill(reasonWrite)
	w.markClosed()
	_ = w.nc.Close()
}

// wsServe takes over an upgraded connection: c's reader runs on a goroutine of its own, its
// writes on the hub's writers.
func (h *Hub) wsServe(c *conn, nc net.Conn, rd io.Reader) {
	w := &wsConn{nc: nc, closedc: make(chan struct{})}
	c.wsc.Store(w)
	go h.wsRead(c, w, rd) // counted in wg by register, done by unregister
	h.schedule(c)         // the first message (or the close) queued before the upgrade
}
