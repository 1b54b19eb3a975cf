package httpjson

import (
	"net/http"
	"path"
)

// UncleanPath is the 404 not_found problem of a request whose path is not in its clean form
// (a "//", "/./" or "/../"; a trailing "/" is kept), nil for a clean one. net/http's mux would
// redirect such a path: an HTML 307 to the cleaned path, which a POST follows with its body.
// The waiting room's routes answer a problem instead, on the API's listener and the gate's
// alike: a path is matched as sent (the gate sends its origins cleaned paths, docs/gate.md).
func UncleanPath(r *http.Request) *Problem {
	p := r.URL.Path
	if p != "" && p[0] == '/' {
		c := path.Clean(p)
		if p[len(p)-1] == '/' && c != "/" {
			c += "/"
		}
		if c == p {
			return nil
		}
	}
	return NewProblem(http.StatusNotFound, "not_found", "no resource at "+r.URL.EscapedPath()+" (a path is matched as sent: no //, /./ or /../)")
}
