package httpjson

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// TestFramingAnswer: each plain-text answer Go's net/http writes on its own (written here as
// net/http server.go writes it) becomes the problem of its code, a whole HTTP/1.1 answer that
// closes the connection; anything else is left alone.
func TestFramingAnswer(t *testing.T) {
	netHTTP := func(status, text string) []byte { // fmt.Fprintf(c.rwc, "HTTP/1.1 "+publicErr+errorHeaders+publicErr)
		return []byte("HTTP/1.1 " + status + netHTTPErrorHeaders + text)
	}
	for _, tc := range []struct {
		in     []byte
		status int
		code   string
		detail string
	}{
		{netHTTP("400 Bad Request", "400 Bad Request"), 400, "malformed_request", "does not parse: its request line"},
		{netHTTP("400 Bad Request: missing required Host header", "400 Bad Request: missing required Host header"), 400,
			"malformed_request", "does not parse: missing required Host header"},
		{netHTTP("431 Request Header Fields Too Large", "431 Request Header Fields Too Large"), 431, "header_too_large", "header block"},
		{[]byte(fmt.Sprintf("HTTP/1.1 %d %s%sUnsupported transfer encoding", 501, "Not Implemented", netHTTPErrorHeaders)), 501,
			"unsupported_transfer_encoding", "Transfer-Encoding"},
		{netHTTP("505 HTTP Version Not Supported: unsupported protocol version", "505 HTTP Version Not Supported: unsupported protocol version"),
			505, "unsupported_http_version", "HTTP/1.x"},
		{[]byte(netHTTPExpectationFailed + "Sun, 06 Dec 2026 19:00:00 GMT\r\nContent-Length: 0\r\n\r\n"), 417, "expectation_failed", "100-continue"},
	} {
		out, code, ok := FramingAnswer(tc.in)
		if !ok || code != tc.code {
			t.Fatalf("%q: recognised %v, as %q", tc.in, ok, code)
		}
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		body, _ := io.ReadAll(res.Body)
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		if _, err := http.ParseTime(res.Header.Get("Date")); err != nil {
			t.Errorf("%q: no Date: %v", out, err)
		}
		if res.StatusCode != tc.status || res.Header.Get("Content-Type") != "application/problem+json" || !res.Close ||
			p["code"] != tc.code || p["status"] != float64(tc.status) || p["title"] != problemTitles[tc.code] || p["title"] == "" ||
			!bytes.Contains([]byte(p["detail"].(string)), []byte(tc.detail)) || p["type"] != "urn:waitroom:problem:"+tc.code {
			t.Errorf("%q became %d %v %q", tc.in, res.StatusCode, res.Header, body)
		}
	}
	for _, in := range []string{
		// A handler's answers: fields sorted, with a Date.
		"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Sun, 06 Dec 2026 19:00:00 GMT\r\n\r\nno",
		"HTTP/1.1 404 Not Found\r\nContent-Type: application/problem+json\r\nDate: Sun, 06 Dec 2026 19:00:00 GMT\r\nContent-Length: 2\r\n\r\n{}",
		// A status net/http never answers on its own, in its format.
		"HTTP/1.1 404 Not Found" + netHTTPErrorHeaders + "404 Not Found",
		"HTTP/1.1 200 OK" + netHTTPErrorHeaders + "ok",
		// Not an answer, or cut short.
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain",
		"HTTP/1.1 4",
		"\x81\x05hello",
		"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
	} {
		if out, _, ok := FramingAnswer([]byte(in)); ok {
			t.Errorf("%q was rewritten as %q", in, out)
		}
	}
}
