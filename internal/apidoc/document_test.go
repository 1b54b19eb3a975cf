package apidoc_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/apidoc"
)

// repoRoot is the module's root, two levels above this package.
const repoRoot = "../.."

// methods are the operation keys of an OpenAPI path item that this API uses.
var methods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

// parsedDoc is the part of the document the tests walk: every operation's responses.
type parsedDoc struct {
	Paths map[string]map[string]json.RawMessage `json:"paths"`
}

func loadDoc(t testing.TB) parsedDoc {
	t.Helper()
	var d parsedDoc
	require.NoError(t, json.Unmarshal(apidoc.Document(), &d))
	return d
}

// docRoutes lists the document's operations as Go ServeMux patterns ("GET /v1/events/{event_id}").
func docRoutes(t testing.TB) []string {
	var out []string
	for p, item := range loadDoc(t).Paths {
		for m := range item {
			if slices.Contains(methods, m) {
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// routePattern is a ServeMux pattern with a method and a literal path: what the service
// registers. Strings with spaces or format verbs after the path (log and error messages) do
// not match.
var routePattern = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) /[A-Za-z0-9_.{}/-]*$`)

// serviceRoutes lists the route patterns the service registers, read from the source: every
// string literal in a non-test Go file of the module that is a method-and-path ServeMux
// pattern (the handlers register literals or constants holding them). Reading the source
// needs no change to the packages that mount routes, and finds a new route wherever it is
// added.
func serviceRoutes(t testing.TB) []string {
	t.Helper()
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err == nil && routePattern.MatchString(s) {
					seen[s] = true
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// problemCodes walks the document and returns the codes enumerated by each response's
// problem schema, and the ProblemCode enum.
func problemCodes(t testing.TB) (perResponse map[string]bool, enum []string) {
	t.Helper()
	var root any
	require.NoError(t, json.Unmarshal(apidoc.Document(), &root))
	perResponse = map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if pj, ok := x["application/problem+json"].(map[string]any); ok {
				b, _ := json.Marshal(pj)
				for _, m := range regexp.MustCompile(`"code":\{"enum":\[([^\]]*)\]`).FindAllStringSubmatch(string(b), -1) {
					var cs []string
					require.NoError(t, json.Unmarshal([]byte("["+m[1]+"]"), &cs))
					for _, c := range cs {
						perResponse[c] = true
					}
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(root)
	pc := root.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any)["ProblemCode"].(map[string]any)
	for _, c := range pc["enum"].([]any) {
		enum = append(enum, c.(string))
	}
	return perResponse, enum
}

// TestDocumentIsValid checks the document against the OpenAPI 3.1 specification's schema and
// that the validator builds a model from it.
func TestDocumentIsValid(t *testing.T) {
	doc, err := libopenapi.NewDocument(apidoc.Document())
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.GetVersion())
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	for _, e := range verrs {
		t.Errorf("document: %s: %s", e.Message, e.Reason)
	}
	require.True(t, ok)
}

// TestDocumentHasEveryRoute: every route the service registers is in the document, and the
// document describes no route the service lacks.
func TestDocumentHasEveryRoute(t *testing.T) {
	svc, doc := serviceRoutes(t), docRoutes(t)
	require.NotEmpty(t, svc)
	for _, r := range svc {
		if !slices.Contains(doc, r) {
			t.Errorf("route %q is registered by the service but not in openapi.json", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(svc, r) {
			t.Errorf("openapi.json describes %q, which the service does not register", r)
		}
	}
}

// TestProblemCodesAgree: the codes enumerated per response are exactly the ProblemCode enum.
func TestProblemCodesAgree(t *testing.T) {
	per, enum := problemCodes(t)
	for _, c := range enum {
		if !per[c] {
			t.Errorf("ProblemCode %q is answered by no response", c)
		}
	}
	for c := range per {
		if !slices.Contains(enum, c) {
			t.Errorf("code %q is answered but missing from ProblemCode", c)
		}
	}
}

// TestDocsAgree: docs/api.md names every route and problem code of the document, and every
// route and problem code it names is in the document.
func TestDocsAgree(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "api.md"))
	require.NoError(t, err)
	md := string(raw)
	routes := docRoutes(t)
	// Routes: "`GET /path`" in headings and text ("### `GET /v1/events/{event_id}`").
	mdRoutes := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) /[^`\\s]*)`").FindAllStringSubmatch(md, -1) {
		mdRoutes[m[1]] = true
	}
	for _, r := range routes {
		if !mdRoutes[r] {
			t.Errorf("docs/api.md does not mention `%s`", r)
		}
	}
	for r := range mdRoutes {
		if !slices.Contains(routes, r) {
			t.Errorf("docs/api.md mentions `%s`, which openapi.json does not describe", r)
		}
	}
	// Problem codes: the rows of the problem-code tables ("| `code` | 404 | when |").
	_, enum := problemCodes(t)
	mdCodes := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\d{3}) \\|").FindAllStringSubmatch(md, -1) {
		st, _ := strconv.Atoi(m[2])
		mdCodes[m[1]] = st
	}
	statusOf := codeStatuses(t)
	for _, c := range enum {
		st, ok := mdCodes[c]
		switch {
		case !ok:
			t.Errorf("docs/api.md has no problem-code table row for %q", c)
		case st != statusOf[c]:
			t.Errorf("docs/api.md gives %q status %d, openapi.json %d", c, st, statusOf[c])
		}
	}
	for c := range mdCodes {
		if !slices.Contains(enum, c) {
			t.Errorf("docs/api.md lists problem code %q, which openapi.json does not have", c)
		}
	}
	// Codes named in the prose with their status: "409 `hold_conflict`", "`503 store_unavailable`".
	prose := regexp.MustCompile("(?:\\b(\\d{3}) `([a-z_]+)`|`(\\d{3}) ([a-z_]+)`)")
	n := 0
	for _, m := range prose.FindAllStringSubmatch(md, -1) {
		st, code := m[1], m[2]
		if st == "" {
			st, code = m[3], m[4]
		}
		n++
		want, ok := statusOf[code]
		switch {
		case !ok:
			t.Errorf("docs/api.md names problem code %q (%s), which openapi.json does not have", code, st)
		case strconv.Itoa(want) != st:
			t.Errorf("docs/api.md names %s %q, openapi.json answers it with %d", st, code, want)
		}
	}
	require.Greater(t, n, 20, "the prose names problem codes with their statuses")
}

// codeStatuses maps each problem code to the HTTP status of the responses that enumerate it
// (and fails if one code is answered with two statuses).
func codeStatuses(t testing.TB) map[string]int {
	t.Helper()
	var root struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(apidoc.Document(), &root))
	out := map[string]int{}
	codeRe := regexp.MustCompile(`"code":\{"enum":\[([^\]]*)\]`)
	add := func(status string, resp json.RawMessage) {
		st, err := strconv.Atoi(status)
		if err != nil {
			return
		}
		var compact = new(strings.Builder)
		var v any
		require.NoError(t, json.Unmarshal(resp, &v))
		b, _ := json.Marshal(v)
		compact.Write(b)
		for _, m := range codeRe.FindAllStringSubmatch(compact.String(), -1) {
			var cs []string
			require.NoError(t, json.Unmarshal([]byte("["+m[1]+"]"), &cs))
			for _, c := range cs {
				if prev, ok := out[c]; ok && prev != st {
					t.Errorf("problem code %q is answered with %d and %d", c, prev, st)
				}
				out[c] = st
			}
		}
	}
	for _, item := range root.Paths {
		for m, raw := range item {
			if !slices.Contains(methods, m) {
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			for st, r := range op.Responses {
				add(st, r)
			}
		}
	}
	add("404", root.Components.Responses["NotFound"])
	add("405", root.Components.Responses["MethodNotAllowed"])
	add("400", root.Components.Responses["MalformedRequest"])
	add("431", root.Components.Responses["HeaderTooLarge"])
	add("501", root.Components.Responses["UnsupportedTransferEncoding"])
	add("505", root.Components.Responses["UnsupportedHTTPVersion"])
	add("417", root.Components.Responses["ExpectationFailed"])
	return out
}

// TestHandler: GET serves the document with its ETag; If-None-Match with it answers 304.
func TestHandler(t *testing.T) {
	h := apidoc.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Equal(t, apidoc.Document(), rec.Body.Bytes())
	etag := rec.Header().Get("ETag")
	require.Regexp(t, `^"[0-9a-f]{16}"$`, etag)

	req := httptest.NewRequest(http.MethodGet, "/openapi.json", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusNotModified, rec.Code)
	require.Empty(t, rec.Body.Bytes())

	req = httptest.NewRequest(http.MethodGet, "/openapi.json", nil)
	req.Header.Set("If-None-Match", `"0000"`)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
}
