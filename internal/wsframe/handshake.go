package wsframe

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gobwas/ws"
)

// upgradeTimeout bounds writing the handshake's response.
const upgradeTimeout = 5 * time.Second

// Fault is why a request is not a WebSocket opening handshake this server accepts.
type Fault uint8

// Faults found by CheckHandshake, in the order it checks them.
const (
	// NotHandshake: no "Upgrade: websocket" and "Connection: upgrade" (RFC 6455 section 4.1).
	NotHandshake Fault = iota + 1
	// NotGet: not an HTTP/1.1 GET without a body (a body would be read as the client's frames).
	NotGet
	// BadVersion: Sec-WebSocket-Version is not one field of 13 (RFC 6455 sections 4.4 and
	// 11.3.5).
	BadVersion
	// BadKey: Sec-WebSocket-Key is not one key of 16 bytes in base64 (RFC 6455 sections 4.1
	// and 11.3.1).
	BadKey
	// CrossOrigin: a browser's Origin header names another host than the request's.
	CrossOrigin
)

// Status returns the HTTP status to refuse a handshake with f: 426 for NotHandshake and
// BadVersion, 403 for CrossOrigin, 400 otherwise.
func (f Fault) Status() int {
	switch f {
	case NotHandshake, BadVersion:
		return http.StatusUpgradeRequired
	case CrossOrigin:
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

func (f Fault) String() string {
	switch f {
	case NotHandshake:
		return "not a WebSocket handshake"
	case NotGet:
		return "a WebSocket handshake is an HTTP/1.1 GET without a body"
	case BadVersion:
		return "not WebSocket version 13"
	case BadKey:
		return "Sec-WebSocket-Key is not one key of 16 bytes in base64"
	case CrossOrigin:
		return "the Origin header names another host"
	}
	return "unknown handshake fault"
}

// HandshakeError is the error CheckHandshake returns for a request it refuses.
type HandshakeError struct{ Fault Fault }

func (e *HandshakeError) Error() string { return "wsframe: " + e.Fault.String() }

// CheckHandshake checks r as a WebSocket opening handshake (RFC 6455 section 4.2.1) and returns
// nil when it may be upgraded, or a *HandshakeError naming the first fault found (see Fault;
// Fault.Status is the HTTP status to answer with). With the 426s it sets the response header
// that goes with them on w: "Upgrade: websocket" (RFC 9110 section 15.5.22) or
// "Sec-WebSocket-Version: 13" (RFC 6455 section 4.4). It writes nothing else and reads no state.
func CheckHandshake(w http.ResponseWriter, r *http.Request) error {
	return CheckHandshakeOrigin(w, r, nil)
}

// CheckHandshakeOrigin is CheckHandshake with the Origin judged by originAllowed (nil: the
// Origin, when there is one, must name the request's Host). A Host comparison does not stop
// DNS rebinding (the attacker's name is then both Origin and Host); an explicit list of
// origins does.
func CheckHandshakeOrigin(w http.ResponseWriter, r *http.Request, originAllowed func(*http.Request) bool) error {
	if originAllowed == nil {
		originAllowed = sameOrigin
	}
	f := handshakeFault(r, originAllowed)
	switch f {
	case 0:
		return nil
	case NotHandshake:
		w.Header().Set("Upgrade", "websocket")
	case BadVersion:
		w.Header().Set("Sec-WebSocket-Version", "13")
	}
	return &HandshakeError{Fault: f}
}

func handshakeFault(r *http.Request, originAllowed func(*http.Request) bool) Fault {
	switch {
	case !headerHasToken(r.Header.Values("Upgrade"), "websocket") || !headerHasToken(r.Header.Values("Connection"), "upgrade"):
		return NotHandshake
	case r.Method != http.MethodGet || !r.ProtoAtLeast(1, 1) || r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return NotGet
	case !oneValue(r.Header.Values("Sec-WebSocket-Version"), "13"):
		return BadVersion
	case !validKey(r.Header.Values("Sec-WebSocket-Key")):
		return BadKey
	case !originAllowed(r):
		return CrossOrigin
	}
	return 0
}

// oneValue reports whether values is the one value want: a field given twice is ambiguous
// ("13" and "8": which version the client speaks would be a guess), so it counts as another
// version (RFC 6455 section 11.3.5).
func oneValue(values []string, want string) bool {
	return len(values) == 1 && values[0] == want
}

// validKey reports whether a request's Sec-WebSocket-Key fields are one key of 16 bytes in
// base64 (RFC 6455 section 4.1; section 11.3.1: the field "MUST NOT appear more than once").
func validKey(values []string) bool {
	if len(values) != 1 {
		return false
	}
	key, err := base64.StdEncoding.DecodeString(values[0])
	return err == nil && len(key) == 16
}

// headerHasToken reports whether any of values, comma-separated token lists, holds token
// (case-insensitive).
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
// request was sent to: another site's page may not open sockets in its visitors' names (the
// check browsers leave to WebSocket servers, RFC 6455 section 10.2).
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

// Upgrade completes the handshake of r, which passed CheckHandshake, on w's connection (the
// response is written within 5 s) and returns the connection. Start its reader with
// Conn.ReadLoop; h is called as described on Handler. Zero fields of o take their defaults.
// Bytes the client sent right behind its request are read first. On error the handshake's
// error response has been written and the connection closed.
func Upgrade(w http.ResponseWriter, r *http.Request, h Handler, o Options) (*Conn, error) {
	// CheckHandshake read token lists in every Connection and Upgrade header; the library
	// reads the first header only and wants Upgrade to be exactly "websocket".
	r.Header.Set("Connection", strings.Join(r.Header.Values("Connection"), ", "))
	r.Header.Set("Upgrade", "websocket")
	u := ws.HTTPUpgrader{Timeout: upgradeTimeout}
	nc, rw, _, err := u.Upgrade(r, w)
	if err != nil {
		if nc != nil {
			_ = nc.Close()
		}
		return nil, err
	}
	var rd io.Reader = nc
	if n := rw.Reader.Buffered(); n > 0 {
		early, _ := rw.Reader.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(early)), nc)
	}
	return newConn(nc, rd, h, o.withDefaults()), nil
}
