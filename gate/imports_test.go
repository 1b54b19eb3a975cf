package gate_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package (and its example program) light to import from outside the
// module: nothing beyond the standard library, golang-jwt and, for the package (not the
// example, which a site copies), internal/clientaddr, the waiting room's one rule of who the
// client is (the standard library only), internal/pathrule, its one rule of which paths are
// protected (the standard library and golang.org/x/text's Unicode forms), and
// internal/originhealth, its one rule of how much each session counts in an origin's health
// (the standard library only). Go lets a package
// import its own module's internal packages, whoever imports it.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "examples", "gate", "main.go"))
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			switch {
			case !strings.Contains(first, "."): // the standard library
			case path == "github.com/golang-jwt/jwt/v5", path == "github.com/waitroom/waitroom/gate":
			case (path == "github.com/waitroom/waitroom/internal/clientaddr" || path == "github.com/waitroom/waitroom/internal/pathrule" ||
				path == "github.com/waitroom/waitroom/internal/originhealth") && filepath.Dir(f) == ".":
			default:
				t.Errorf("%s imports %s: only the standard library, golang-jwt, package gate and (the package's) internal/clientaddr, internal/pathrule and internal/originhealth are allowed", f, path)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d files, want the package's and the example's", checked)
	}
}
