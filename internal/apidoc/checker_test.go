package apidoc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/router"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/apidoc"
)

// checker is an http.RoundTripper that validates every request it sends and every response it
// receives against the OpenAPI document, and records which operations and problem codes were
// exercised. A request built to break the document's rules (a malformed body, a missing
// credential, an unknown route) is marked with outside: its validation must then fail, so the
// document describes the rule the service enforces.
type checker struct {
	t      testing.TB
	base   http.RoundTripper
	v      validator.Validator
	model  *v3.Document
	router router.Router
	schema schema_validation.SchemaValidator

	mu    sync.Mutex
	ops   map[string]bool // "GET /v1/events/{event_id}": answered with a response that validated
	codes map[string]bool // problem codes received
}

type outsideKey struct{}

// errNotClean is the route of a request whose path is not in its clean form ("//", "/./",
// "/../"): none.
var errNotClean = errors.New("the path is not in its clean form")

// outside marks ctx's request as deliberately outside the document (see checker).
func outside(ctx context.Context) context.Context { return context.WithValue(ctx, outsideKey{}, true) }

func newChecker(t testing.TB, base http.RoundTripper) *checker {
	t.Helper()
	doc, err := libopenapi.NewDocument(apidoc.Document())
	require.NoError(t, err)
	m, err := doc.BuildV3Model()
	require.NoError(t, err)
	v := validator.NewValidatorFromV3Model(&m.Model, config.WithFormatAssertions())
	return &checker{
		t: t, base: base, v: v, model: &m.Model,
		router: router.NewRouter(&m.Model, router.WithPathOnlyMatching()),
		schema: schema_validation.NewSchemaValidator(config.WithFormatAssertions()),
		ops:    map[string]bool{}, codes: map[string]bool{},
	}
}

func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  - %s: %s", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s (at %s, %s)", f.Reason, f.FieldPath, f.KeywordLocation)
		}
	}
	return b.String()
}

func (c *checker) RoundTrip(req *http.Request) (*http.Response, error) {
	t := c.t
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	name := req.Method + " " + req.URL.RequestURI()
	vr := req.Clone(req.Context())
	vr.Body = io.NopCloser(bytes.NewReader(body))
	ok, errs := c.v.ValidateHttpRequestSync(vr)
	// The document's paths are clean; the server matches a path as sent (a path not in its
	// clean form is no operation of it), where the validator's router may clean it first.
	clean := path.Clean(req.URL.Path) == strings.TrimSuffix(req.URL.Path, "/") || req.URL.Path == "/"
	ok = ok && clean
	wantOutside := req.Context().Value(outsideKey{}) != nil
	switch {
	case wantOutside && ok:
		t.Errorf("%s: the request was meant to break the document's rules, but it validates", name)
	case !wantOutside && !ok:
		t.Errorf("%s: the request does not validate against openapi.json:%s", name, describe(errs))
	}

	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	streaming := resp.StatusCode == http.StatusSwitchingProtocols || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var rbody []byte
	if !streaming {
		rbody, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	// A path whose item says x-waitroom-any-method answers every method as its GET (OpenAPI
	// lists only HTTP's standard methods; a forward-auth check is asked with the original
	// request's, a WebDAV PROPFIND say): such a request is validated as that GET.
	if _, listed := standardMethods[req.Method]; !listed && c.anyMethod(req.URL.Path) {
		req = req.Clone(req.Context())
		req.Method = http.MethodGet
	}
	route, rerr := c.router.FindRoute(req)
	if rerr == nil && !clean {
		rerr = errNotClean
	}
	if rerr != nil {
		c.checkUnrouted(name, req, resp, rbody, rerr)
	} else {
		vresp := *resp
		vresp.Body = http.NoBody
		if !streaming {
			vresp.Body = io.NopCloser(bytes.NewReader(rbody))
		}
		vreq := req.Clone(req.Context())
		vreq.Body = io.NopCloser(bytes.NewReader(body))
		if ok, errs := c.v.ValidateHttpResponse(vreq, &vresp); !ok {
			t.Errorf("%s: the %d response does not validate against openapi.json:%s\n  body: %.600s", name, resp.StatusCode, describe(errs), rbody)
		} else {
			c.mu.Lock()
			c.ops[req.Method+" "+route.Path] = true
			c.mu.Unlock()
		}
	}
	if isProblem(resp) {
		c.checkProblem(name, resp, rbody)
	}
	if !streaming {
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
	}
	return resp, nil
}

// standardMethods are the methods an OpenAPI path item can name.
var standardMethods = map[string]struct{}{"GET": {}, "PUT": {}, "POST": {}, "DELETE": {}, "OPTIONS": {}, "HEAD": {}, "PATCH": {}, "TRACE": {}}

// anyMethod reports whether the document's path item for p (literally: such paths take no
// parameters) has the extension x-waitroom-any-method: true.
func (c *checker) anyMethod(p string) bool {
	item, ok := c.model.Paths.PathItems.Get(p)
	if !ok || item.Extensions == nil {
		return false
	}
	n, ok := item.Extensions.Get("x-waitroom-any-method")
	return ok && n != nil && n.Value == "true"
}

func isProblem(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "application/problem+json"
}

// checkProblem checks what a schema cannot: the body's status is the response's, its type
// names its code; and records the code.
func (c *checker) checkProblem(name string, resp *http.Response, body []byte) {
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		c.t.Errorf("%s: problem body is not JSON: %v", name, err)
		return
	}
	if p.Status != resp.StatusCode || p.Type != "urn:waitroom:problem:"+p.Code {
		c.t.Errorf("%s: problem %s: status %d type %q in a %d response", name, p.Code, p.Status, p.Type, resp.StatusCode)
	}
	c.mu.Lock()
	c.codes[p.Code] = true
	c.mu.Unlock()
}

// checkUnrouted validates the answer to a request the document has no operation for: the
// NotFound (no such path) or MethodNotAllowed (no such method) response of components.
func (c *checker) checkUnrouted(name string, req *http.Request, resp *http.Response, body []byte, rerr error) {
	t := c.t
	if req.Context().Value(outsideKey{}) == nil {
		t.Errorf("%s: the document has no operation for this request (%v)", name, rerr)
	}
	component, status := "NotFound", http.StatusNotFound
	if errors.Is(rerr, router.ErrMethodNotAllowed) {
		component, status = "MethodNotAllowed", http.StatusMethodNotAllowed
	}
	r := c.model.Components.Responses.GetOrZero(component)
	require.NotNil(t, r, component)
	if resp.StatusCode != status || !isProblem(resp) {
		t.Errorf("%s: want the %s response (%d problem), got %d %s", name, component, status, resp.StatusCode, resp.Header.Get("Content-Type"))
		return
	}
	for h := r.Headers.First(); h != nil; h = h.Next() {
		if h.Value().Required && resp.Header.Get(h.Key()) == "" {
			t.Errorf("%s: the %s response lacks header %s", name, component, h.Key())
		}
	}
	var s *base.Schema = r.Content.GetOrZero("application/problem+json").Schema.Schema()
	if ok, errs := c.schema.ValidateSchemaBytes(s, body); !ok {
		t.Errorf("%s: the %s response body does not validate:%s", name, component, describe(errs))
		return
	}
	c.mu.Lock()
	c.ops[component] = true
	c.mu.Unlock()
}

// validatePush validates one push message (a JSON text) against components.schemas.PushMessage.
func (c *checker) validatePush(msg []byte) {
	s := c.model.Components.Schemas.GetOrZero("PushMessage").Schema()
	if ok, errs := c.schema.ValidateSchemaBytes(s, msg); !ok {
		c.t.Errorf("push message %s does not validate against PushMessage:%s", msg, describe(errs))
	}
}

// CloseIdleConnections closes the idle connections of the underlying transport (http.Client's
// CloseIdleConnections reaches it through this method).
func (c *checker) CloseIdleConnections() {
	if ci, ok := c.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
