package httpjson

import (
	"bytes"
	"net/http"
	"strconv"
	"time"
)

// netHTTPErrorHeaders is what Go's net/http writes after the status line of the answers it
// makes itself, before any handler, to a request whose framing does not parse (net/http
// server.go, conn.serve: errorHeaders). A handler's answer never has it: http.Server writes a
// handler's fields sorted, with a Date.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// netHTTPExpectationFailed begins net/http's own answer to an Expect it does not know, which it
// makes before any handler, without a body (server.go, response.sendExpectationFailed): its
// Connection field, a Date and Content-Length 0 follow.
const netHTTPExpectationFailed = "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: "

// BrokenBody is the problem of a request whose body net/http could not read to its end: cut
// short (the connection closed before its Content-Length) or not validly chunked (RFC 9112
// section 7.1). 400 malformed_request, as for any other framing that does not parse: every door
// (the API's bodies, the gate's bodies on their way to the site) answers it alike. The caller
// ends the connection (Connection: close).
func BrokenBody() *Problem {
	return NewProblem(http.StatusBadRequest, "malformed_request",
		"the request's body is cut short or its chunked framing is not valid (RFC 9112 section 7.1)")
}

// FramingAnswer returns, for p one of the plain-text answers Go's net/http writes on its own
// to a request whose HTTP framing does not parse, the same answer as an RFC 9457 problem: 400
// malformed_request (a request line, a path escape, a header or a Host that is not valid; the
// detail is net/http's reason when it gives one), 431 header_too_large (a request line and header
// block over http.Server.MaxHeaderBytes and the 4 KiB net/http reads beyond it), 501 unsupported_transfer_encoding (a Transfer-Encoding other
// than chunked, RFC 9112 section 6.1) or 505 unsupported_http_version (a protocol other than
// HTTP/1.x); and, for its empty 417 to an Expect other than 100-continue, 417
// expectation_failed. It returns the answer and its problem's code, or false for anything
// else, p included when it is a handler's answer.
// p must be the whole of one Write (net/http writes each of these with one call), made while
// no handler answers on its connection (connlimit.Config.ServerAnswer shows it no other:
// the format checks here are a second guard); the answer closes the connection, as net/http's
// does.
func FramingAnswer(p []byte) (answer []byte, code string, ok bool) {
	const prefix = "HTTP/1.1 "
	if len(p) < len(prefix)+4 || !bytes.HasPrefix(p, []byte(prefix)) {
		return nil, "", false
	}
	if bytes.HasPrefix(p, []byte(netHTTPExpectationFailed)) && bytes.HasSuffix(p, []byte("\r\nContent-Length: 0\r\n\r\n")) &&
		len(p) < 160 {
		const code = "expectation_failed"
		return problemAnswer(http.StatusExpectationFailed, code,
			"an Expect other than 100-continue, which is the only expectation HTTP/1.1 defines (RFC 9110 section 10.1.1)"), code, true
	}
	end := bytes.IndexByte(p, '\n') - 1 // the status line's end
	if end < len(prefix)+4 || !bytes.HasPrefix(p[end:], []byte(netHTTPErrorHeaders)) {
		return nil, "", false // not right after the status line: a handler's answer
	}
	line := p[len(prefix):end] // "431 Request Header Fields Too Large", "400 Bad Request: missing required Host header"
	status, err := strconv.Atoi(string(line[:3]))
	if err != nil || line[3] != ' ' {
		return nil, "", false
	}
	var detail string
	switch status {
	case http.StatusBadRequest:
		code, detail = "malformed_request", "the request's HTTP framing does not parse: its request line, a path escape, a header or its Host is not valid (RFC 9112)"
		if _, why, ok := bytes.Cut(line, []byte(": ")); ok && len(why) > 0 {
			detail = "the request's HTTP framing does not parse: " + string(why)
		}
	case http.StatusRequestHeaderFieldsTooLarge:
		code, detail = "header_too_large", "the request's header block is larger than this server reads"
	case http.StatusNotImplemented:
		code, detail = "unsupported_transfer_encoding", "a Transfer-Encoding other than chunked (RFC 9112 section 6.1)"
	case http.StatusHTTPVersionNotSupported:
		code, detail = "unsupported_http_version", "a protocol other than HTTP/1.x on an HTTP/1 connection"
	default:
		return nil, "", false
	}
	return problemAnswer(status, code, detail), code, true
}

// problemAnswer is a whole HTTP/1.1 answer of the problem of code, closing the connection.
func problemAnswer(status int, code, detail string) []byte {
	b := NewProblem(status, code, detail).body(0)
	out := make([]byte, 0, 200+len(b))
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(status)...)
	out = append(out, "\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(b)), 10)
	out = append(out, "\r\nContent-Type: application/problem+json\r\nDate: "...)
	out = time.Now().UTC().AppendFormat(out, http.TimeFormat)
	out = append(out, "\r\n\r\n"...)
	return append(out, b...)
}
