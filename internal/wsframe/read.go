package wsframe

import (
	"errors"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// lingerBytes is what the reader discards at most after a protocol error, so that its close
// frame is not lost to a TCP reset for unread data (bytes).
const lingerBytes = 64 << 10

// ReadLoop reads the client's frames until the connection ends: text messages (to the
// Handler's Text; binary ones are dropped), pings (a pong is queued), pongs (waking Ping) and
// the close handshake (the client's code is answered, RFC 6455 section 5.5.1). A client that
// breaks the protocol is sent a close frame — 1002 for a malformed frame, 1009 for a message
// over MaxMessage, 1007 for text that is not UTF-8 — and what it sends next is read and
// dropped up to its own close frame (at most 64 KiB, within CloseTimeout). Then ReadLoop closes
// the connection and returns. It never writes: its close frames go out through Schedule.
func (c *Conn) ReadLoop() {
	defer c.nc.Close()
	r := &reader{c: c, msg: make([]byte, c.opts.MaxMessage), state: ws.StateServerSide}
	for r.frame() {
	}
}

// reader is ReadLoop's state: its buffers and the data message being assembled.
type reader struct {
	c     *Conn
	hdr   [ws.MaxHeaderSize - 2]byte
	ctl   [ws.MaxControlFramePayloadSize]byte
	msg   []byte // MaxMessage bytes
	n     int    // bytes of the data message being assembled
	text  bool   // the message being assembled is text
	state ws.State
}

// frame reads and handles one frame; it reports whether to read on.
func (r *reader) frame() bool {
	hd, err := ws.ReadHeaderBuffer(r.c.rd, r.hdr[:])
	if err != nil {
		if errors.Is(err, ws.ErrHeaderLengthMSB) || errors.Is(err, ws.ErrHeaderLengthUnexpected) {
			r.fail(StatusProtocolError, err.Error(), -1)
		}
		return false
	}
	r.c.heard.Store(time.Now().UnixNano())
	if err := ws.CheckHeader(hd, r.state); err != nil {
		r.fail(StatusProtocolError, err.Error(), hd.Length)
		return false
	}
	if hd.OpCode.IsControl() {
		return r.control(hd)
	}
	return r.data(hd)
}

// control handles a control frame (at most 125 bytes, unfragmented: CheckHeader saw to it).
func (r *reader) control(hd ws.Header) bool {
	p := r.ctl[:hd.Length]
	if _, err := io.ReadFull(r.c.rd, p); err != nil {
		return false
	}
	ws.Cipher(p, hd.Mask, 0)
	switch hd.OpCode {
	case ws.OpPing:
		r.c.queuePong(p)
	case ws.OpPong:
		r.c.pongArrived()
	case ws.OpClose:
		// Answer with the client's code unless our close frame went out first; either way the
		// handshake is then complete.
		if !r.c.Closed() {
			r.c.closeAndWait(closeReply(p), "")
		}
		return false
	}
	return true
}

// data reads a data frame into the message being assembled and hands a complete text message
// to the Handler.
func (r *reader) data(hd ws.Header) bool {
	if hd.OpCode != ws.OpContinuation {
		r.n, r.text = 0, hd.OpCode == ws.OpText
	}
	if int64(r.n)+hd.Length > int64(len(r.msg)) {
		r.fail(StatusTooBig, "messages are at most "+strconv.Itoa(len(r.msg))+" bytes", hd.Length)
		return false
	}
	p := r.msg[r.n : r.n+int(hd.Length)]
	if _, err := io.ReadFull(r.c.rd, p); err != nil {
		return false
	}
	ws.Cipher(p, hd.Mask, 0)
	r.n += len(p)
	if !hd.Fin {
		r.state = r.state.Set(ws.StateFragmented)
		return true
	}
	r.state = r.state.Clear(ws.StateFragmented)
	if !r.text {
		return true
	}
	if !utf8.Valid(r.msg[:r.n]) {
		r.fail(StatusInvalidPayload, "text messages are UTF-8", 0)
		return false
	}
	r.c.h.Text(r.msg[:r.n])
	return true
}

// fail closes the connection with code after a client's mistake: the close frame goes out
// first, then what the client still sends is dropped (see linger) within CloseTimeout. unread
// is what is left of the offending frame's payload, -1 when the stream no longer parses as
// frames.
func (r *reader) fail(code StatusCode, reason string, unread int64) {
	r.c.closeAndWait(code, reason)
	_ = r.c.nc.SetReadDeadline(time.Now().Add(r.c.opts.CloseTimeout))
	linger(r.c.rd, r.hdr[:], unread)
}

// linger reads and drops what a client sends after a protocol error, so that the server's
// close frame is not lost to a TCP reset for unread data: the rest of the offending frame
// (unread bytes), then whole frames up to and including the client's close frame, at most
// lingerBytes in all. A stream that does not parse as frames (unread < 0) is dropped up to the
// same bound. hdr is a buffer for frame headers (ws.MaxHeaderSize-2 bytes). It returns at the
// first read error.
func linger(rd io.Reader, hdr []byte, unread int64) {
	if unread < 0 || unread > lingerBytes {
		_, _ = io.CopyN(io.Discard, rd, lingerBytes)
		return
	}
	if _, err := io.CopyN(io.Discard, rd, unread); err != nil {
		return
	}
	for left := int64(lingerBytes) - unread; left > 0; {
		hd, err := ws.ReadHeaderBuffer(rd, hdr)
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
