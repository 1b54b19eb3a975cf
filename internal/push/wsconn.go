package push

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/wsframe"
)

// The WebSocket side of the hub is built for many idle connections per instance: after the
// handshake a connection keeps no buffers and one goroutine, its reader, blocked in the
// kernel's poller on a small stack (internal/wsframe does the protocol: handshake, frames,
// close codes). The reader never writes. Everything a connection sends — messages, pongs,
// pings, its close frame — is written by the hub's writers, a fixed pool shared by all
// connections: a connection with something to send is scheduled once (conn.scheduled), and the
// writer that takes it frames what is pending into the writer's own buffer and sends it in one
// write. Holding the schedule is what makes a writer the connection's only writer, so no lock
// is held across I/O. A client whose socket does not take the bytes within writeStall is
// handed to a goroutine of its own for the rest of the write (bounded by WriteTimeout), so no
// client holds up a writer, however it behaves.
//
// coder/websocket, used before and still used by our clients, keeps net/http's bufio reader
// and writer and needs a goroutine for its writes: ~25 KiB per connection measured against
// ~16 KiB targeted (docs/scaling.md).

// The hub's writers.
const (
	writeStall      = 100 * time.Millisecond // a pool writer's bound on one write
	writersPerCPU   = 2
	minWriters      = 4
	maxWriterBuffer = 64 << 10 // a writer's buffer larger than this (bytes) is not kept
)

// handshakeProblems are the problems a refused WebSocket handshake is answered with, by fault
// (the status is the fault's).
var handshakeProblems = map[wsframe.Fault]struct{ code, detail string }{
	wsframe.NotHandshake: {"websocket_required", "this is a WebSocket endpoint: send a WebSocket handshake (Upgrade: websocket), or use the .../events stream or polling"},
	wsframe.NotGet:       {"invalid_handshake", "a WebSocket handshake is an HTTP/1.1 GET without a body"},
	wsframe.BadVersion:   {"websocket_version", "this server speaks WebSocket version 13 (RFC 6455)"},
	wsframe.BadKey:       {"invalid_handshake", "Sec-WebSocket-Key must be given once, 16 bytes in base64"},
	wsframe.CrossOrigin:  {"cross_origin", "the Origin header names a site that is not allowed (--allowed-origins)"},
}

// handshakeProblem checks r as a WebSocket opening handshake (wsframe.CheckHandshake) and
// returns the problem to answer with, or nil when it may be upgraded: 426 websocket_required
// (not a handshake), 426 websocket_version (not version 13), 400 invalid_handshake (not an
// HTTP/1.1 GET, or a key that is not 16 bytes in base64), 403 cross_origin. It sets the
// headers that go with the 426s. It reads no state: a refused handshake costs no store call.
func handshakeProblem(w http.ResponseWriter, r *http.Request, originAllowed func(*http.Request) bool) *httpjson.Problem {
	var herr *wsframe.HandshakeError
	if err := wsframe.CheckHandshakeOrigin(w, r, originAllowed); !errors.As(err, &herr) {
		return nil
	}
	p := handshakeProblems[herr.Fault]
	return httpjson.NewProblem(herr.Fault.Status(), p.code, p.detail)
}

// wsOptions are the hub's WebSocket connections' options.
func (h *Hub) wsOptions() wsframe.Options {
	return wsframe.Options{MaxMessage: maxClientMessage, CloseWait: h.cfg.WriteTimeout}
}

// Schedule is c's wsframe.Handler side: a control frame waits for a writer.
func (c *conn) Schedule() { c.hub.schedule(c) }

// Text is c's wsframe.Handler side: the client sent a text message.
func (c *conn) Text(msg []byte) { c.hub.clientMessage(c, msg) }

// wsServe takes over an upgraded connection: c's reader runs on a goroutine of its own, its
// writes on the hub's writers.
func (h *Hub) wsServe(c *conn, w *wsframe.Conn) {
	c.wsc.Store(w)
	go h.wsRead(c, w) // counted in wg by register, done by unregister
	h.schedule(c)     // the first message (or the close) queued before the upgrade
}

// wsRead reads the client's frames until the connection ends (wsframe.Conn.ReadLoop: visibility
// messages, pings, pongs, the close handshake), then unregisters c.
func (h *Hub) wsRead(c *conn, w *wsframe.Conn) {
	defer h.unregister(c)
	w.ReadLoop()
}

// minRenewGap is the least time between two session renewals a page's "visible" can ask for:
// a client toggling visibility costs at most one ping and one store call per second.
const minRenewGap = time.Second

// clientMessage handles one text message of a client: {"type":"visible"}, {"type":"hidden"}
// or {"type":"ping"} (answered {"type":"pong"}). Anything else is ignored.
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
	case TypePing:
		// The page checks that the connection lives (it cannot see protocol pings). The pong
		// is droppable: a queue half full means messages are on their way to it anyway.
		r := c.room
		r.mu.Lock()
		c.send(outMsg{data: simpleMessage(TypePong, h.now()), droppable: true})
		r.mu.Unlock()
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
	for !w.Closed() { // once closed, c stays scheduled: nothing follows the close frame
		var closing, abort bool
		buf, closing, abort = h.frames(c, w, buf[:0])
		if abort {
			w.Abort() // the connection failed or ended: close it without a word
			return buf
		}
		if len(buf) > 0 && h.write(c, w, buf, closing) {
			return buf
		}
		c.scheduled.Store(false)
		if (len(c.out) == 0 && !c.dead() && !w.ControlDue()) || !c.scheduled.CompareAndSwap(false, true) {
			return buf
		}
	}
	return buf
}

// frames appends to buf what c has to send now: its control frames, its queued messages, and
// the close frame that follows a final status or ends a killed connection. closing reports a
// close frame at the end; abort a connection to close without one.
func (h *Hub) frames(c *conn, w *wsframe.Conn, buf []byte) (_ []byte, closing, abort bool) {
	buf, closing = w.AppendControl(buf)
	for !closing {
		select {
		case m := <-c.out:
			buf = wsframe.AppendText(buf, m.data)
			if m.last {
				buf = wsframe.AppendClose(buf, wsframe.StatusNormal, "final status sent")
				closing = true
			}
		default:
			if !c.dead() {
				return buf, false, false
			}
			switch c.reason {
			case reasonShutdown:
				return wsframe.AppendClose(buf, wsframe.StatusRestart, "server restarting; reconnect"), true, false
			case reasonSlow:
				return wsframe.AppendClose(buf, wsframe.StatusPolicy, "too slow to keep up"), true, false
			default:
				return buf, false, true
			}
		}
	}
	return buf, closing, false
}

// write writes buf to c within writeStall (bounded by WriteTimeout) and reports whether the
// caller is done with c: the close frame went out, the write failed, or it stalled and the
// rest is written on a goroutine of its own, which holds c's schedule from then on.
func (h *Hub) write(c *conn, w *wsframe.Conn, buf []byte, closing bool) bool {
	k, err := w.Write(buf, closing, min(writeStall, h.cfg.WriteTimeout))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The client's socket is full: the rest is written with the whole WriteTimeout.
		h.stalled.Add(1)
		go h.finishStalled(c, w, bytes.Clone(buf[k:]), closing)
		return true
	case err != nil:
		h.writeFailed(c, w, err)
		return true
	}
	return closing
}

// finishStalled writes rest, the part of a write that did not go out within writeStall, then
// goes on writing c's queue. The caller held c's schedule and passes it on.
func (h *Hub) finishStalled(c *conn, w *wsframe.Conn, rest []byte, closing bool) {
	if err := w.WriteRest(rest, closing, h.cfg.WriteTimeout-min(writeStall, h.cfg.WriteTimeout)); err != nil {
		h.writeFailed(c, w, err)
		return
	}
	if !closing {
		h.flush(c, nil)
	}
}

// writeFailed ends c after a failed write: a timeout is a client too slow to take its
// messages; anything else means the connection is already gone and drops nobody.
func (h *Hub) writeFailed(c *conn, w *wsframe.Conn, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) && !c.dead() {
		h.droppedWrite.Add(1)
	}
	c.kill(reasonWrite)
	w.Abort()
}
