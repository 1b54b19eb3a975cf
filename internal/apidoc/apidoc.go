// Package apidoc serves the OpenAPI 3.1 description of the whole HTTP API (openapi.json,
// embedded in the binary): every route, parameter, body, status, header, security scheme and
// stable problem code. The document is written by hand from the handlers; the package's tests
// replay real requests against `waitroom serve` and validate each request and response
// against it, fail when a registered route is missing from it or one of its operations went
// unexercised, and check that docs/api.md names the same routes and problem codes.
package apidoc

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"strconv"

	"github.com/waitroom/waitroom/internal/httpjson"
)

//go:embed openapi.json
var document []byte

// etag is the strong entity tag of the document: the first 8 bytes of its SHA-256, in hex.
var etag = func() string {
	sum := sha256.Sum256(document)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// Document returns the OpenAPI 3.1 document (JSON). The caller must not modify it.
func Document() []byte { return document }

// Handler serves the document as application/json (for GET /openapi.json), with an ETag;
// a request whose If-None-Match names it gets 304 Not Modified without a body.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("ETag", etag)
		h.Set("Cache-Control", "no-cache")
		if httpjson.NotModified(r, etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(document)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(document)
		}
	})
}
