package httpjson

import (
	"net/http"
	"strings"
)

// NotModified reports whether a GET or HEAD of a representation whose entity tag is etag (with
// its quotes, "W/" for a weak one) is answered 304 Not Modified by the request's If-None-Match
// (RFC 9110 13.1.2): "*" matches any current representation, a list matches when one of its
// tags is etag by the weak comparison (13.1.2: the opaque tags alike, "W/" aside). Every
// If-None-Match line counts (a list may be split over several); a malformed list matches
// nothing past its first malformed entry.
func NotModified(r *http.Request, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for _, v := range r.Header.Values("If-None-Match") {
		for v != "" {
			v = strings.TrimLeft(v, " \t,")
			if v == "" {
				break
			}
			if v[0] == '*' {
				return true
			}
			v = strings.TrimPrefix(v, "W/")
			if v == "" || v[0] != '"' {
				break
			}
			end := strings.IndexByte(v[1:], '"')
			if end < 0 {
				break
			}
			if v[:end+2] == want {
				return true
			}
			v = v[end+2:]
		}
	}
	return false
}
