package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/internal/httpjson"
)

// ErrShuttingDown is what Config.Ready returns from the drain on: /readyz answers 503
// shutting_down (not store_unavailable: the stores are fine, the instance is leaving).
var ErrShuttingDown = errors.New("shutting down")

// ReadyChecks names checks of /readyz: those GET /readyz?exclude=NAME leaves out, the
// parameter and names as Kubernetes' API server takes them (exclude=etcd), repeated for more
// than one. The names: "database" (PostgreSQL, or the embedded line's SQLite file) and "redis".
// A readiness probe that checks a store every instance shares takes every instance out of its
// balancer together when that store fails, so that the balancer answers in their place (its
// own page, which the waiting page cannot read) and they come back a probe period after the
// store; without the check they answer 503 store_unavailable with Retry-After themselves, and
// what needs no such store goes on (a waiting ticket's poll needs no PostgreSQL).
type ReadyChecks struct {
	Database, Redis bool
}

// ReadyExclusions reads the exclude parameters of r, a GET /readyz. Errors: an unknown name, or
// another parameter (400 invalid_query: a probe's typo would otherwise check more than it
// says).
func ReadyExclusions(r *http.Request) (ReadyChecks, *httpjson.Problem) {
	var skip ReadyChecks
	if r.URL.RawQuery == "" {
		return skip, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return skip, httpjson.NewProblem(400, "invalid_query", "the query string does not decode")
	}
	for name, values := range q {
		if name != "exclude" {
			return skip, httpjson.NewProblem(400, "invalid_query", "unknown parameter "+strconv.Quote(name)+": /readyz takes exclude=database and exclude=redis")
		}
		for _, v := range values {
			switch v {
			case "database":
				skip.Database = true
			case "redis":
				skip.Redis = true
			default:
				return skip, httpjson.NewProblem(400, "invalid_query", "exclude="+strconv.Quote(v)+": the checks are database and redis")
			}
		}
	}
	return skip, nil
}

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	skip, p := ReadyExclusions(r)
	if p != nil {
		httpjson.WriteProblem(w, p)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.cfg.Ready(ctx, skip); err != nil {
		code := "store_unavailable"
		if errors.Is(err, ErrShuttingDown) {
			code = "shutting_down"
		}
		httpjson.WriteProblem(w, httpjson.NewProblem(503, code, "not ready: "+err.Error()))
		return
	}
	httpjson.WriteJSON(w, 200, map[string]string{"status": "ready"})
}
