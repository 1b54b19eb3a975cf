// Package wsframe is server-side WebSocket framing (RFC 6455) for many idle connections: the
// opening handshake's checks and the upgrade, the reading and checking of a client's frames,
// the building of the server's frames, and the control frames (pong, ping, close) waiting to be
// written. It leaves when and by whom a connection is written to its caller.
//
// A connection keeps no I/O buffers after the handshake: Upgrade (github.com/gobwas/ws) works on
// the raw net.Conn and net/http's 8 KiB of bufio is dropped with the request. What it keeps is
// its Conn (256 bytes) and its reader, one goroutine running Conn.ReadLoop, blocked in the
// kernel's poller on a small stack, with the frame it reads in a few hundred bytes (a header, a
// control payload, Options.MaxMessage). The reader never writes. Everything the server sends is framed by the caller's writers with
// AppendControl, AppendText and AppendClose into the writer's own buffer and sent with
// Conn.Write: when a control frame waits, the Conn calls its Handler's Schedule and the caller
// has one writer (never two at once) take the connection. No lock is held across I/O.
package wsframe

import (
	"github.com/gobwas/ws"
)

// StatusCode is a close code (RFC 6455 section 7.4).
type StatusCode uint16

// Close codes sent by a server (RFC 6455 section 7.4.1; 1012 from the IANA registry).
const (
	StatusNormal         StatusCode = 1000 // the purpose of the connection is fulfilled
	StatusProtocolError  StatusCode = 1002 // the client broke the protocol
	StatusInvalidPayload StatusCode = 1007 // a text message that is not UTF-8
	StatusPolicy         StatusCode = 1008 // a policy violation (e.g. too slow to keep up)
	StatusTooBig         StatusCode = 1009 // a message over Options.MaxMessage
	StatusRestart        StatusCode = 1012 // service restart: reconnect
)

// MaxCloseReason is the longest reason a close frame carries, in bytes (125 bytes of control
// payload less the 2-byte code; RFC 6455 section 5.5).
const MaxCloseReason = ws.MaxControlFramePayloadSize - 2

// AppendText appends to b an unmasked, final text frame carrying payload (UTF-8) and returns
// the extended slice.
func AppendText(b, payload []byte) []byte { return appendFrame(b, ws.OpText, payload) }

// AppendClose appends to b a close frame with code and reason (at most MaxCloseReason bytes)
// and returns the extended slice.
func AppendClose(b []byte, code StatusCode, reason string) []byte {
	return appendFrame(b, ws.OpClose, ws.NewCloseFrameBody(ws.StatusCode(code), reason))
}

// appendFrame appends an unmasked, final frame of op carrying payload to b (RFC 6455 section
// 5.2: 7-bit, 16-bit or 64-bit payload length).
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

// closeReply returns the code with which to answer a client's close frame whose payload is p
// (RFC 6455 section 5.5.1): the client's own code, 1000 when it sent none, 1002 for a
// one-byte payload, a code no endpoint may send (1005, 1006, 1015, codes below 1000 or above
// 4999, section 7.4) or a reason that is not UTF-8.
func closeReply(p []byte) StatusCode {
	switch len(p) {
	case 0:
		return StatusNormal
	case 1:
		return StatusProtocolError
	}
	code, reason := ws.ParseCloseFrameData(p)
	if ws.CheckCloseFrameData(code, reason) != nil || code >= 5000 { // codes end at 4999 (RFC 6455 7.4.2)
		return StatusProtocolError
	}
	return StatusCode(code)
}
