package httpjson

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestEveryCodeHasATitle: every problem code written anywhere in the service (a string
// literal passed as the code of NewProblem, or the Code of a rule in a Table literal) has its
// title in the one table.
func TestEveryCodeHasATitle(t *testing.T) {
	fset := token.NewFileSet()
	seen, rules := 0, 0
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		check := func(lit *ast.BasicLit) {
			code, _ := strconv.Unquote(lit.Value)
			seen++
			if problemTitles[code] == "" {
				t.Errorf("%s: problem code %q has no title in problemTitles", fset.Position(lit.Pos()), code)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if table, ok := n.(*ast.CompositeLit); ok && isTable(table.Type) {
				for _, row := range table.Elts {
					if rule, ok := row.(*ast.CompositeLit); ok {
						for _, kv := range rule.Elts {
							if kv, ok := kv.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Code") {
								if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
									rules++
									check(lit)
								}
							}
						}
					}
				}
				return true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			name := ""
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			case *ast.Ident:
				name = fn.Name
			}
			if name != "NewProblem" {
				return true
			}
			if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				check(lit)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 || rules < 25 {
		t.Fatalf("found only %d problem codes, %d of them in tables: the walk is broken", seen, rules)
	}
}

// isTable reports a type expression naming Table (httpjson.Table, or Table in this package).
func isTable(x ast.Expr) bool {
	if sel, ok := x.(*ast.SelectorExpr); ok {
		return isIdent(sel.X, "httpjson") && sel.Sel.Name == "Table"
	}
	return isIdent(x, "Table")
}

func isIdent(x ast.Expr, name string) bool {
	id, ok := x.(*ast.Ident)
	return ok && id.Name == name
}

// TestRetryAfter: a problem's RetryAfter is the header and retry_after_s; a 503 without one
// keeps the Retry-After its writer set (the gate's "2" of a store that does not answer), and
// says "1" only when none was set.
func TestRetryAfter(t *testing.T) {
	write := func(p *Problem, preset string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		if preset != "" {
			w.Header().Set("Retry-After", preset)
		}
		WriteProblem(w, p)
		return w
	}
	p := NewProblem(503, "store_unavailable", "down")
	p.RetryAfter = 2500 * time.Millisecond
	w := write(p, "")
	if got := w.Header().Get("Retry-After"); got != "3" || !strings.Contains(w.Body.String(), `"retry_after_s":3`) {
		t.Fatalf("RetryAfter 2.5 s: header %q, body %s", got, w.Body)
	}
	if got := write(NewProblem(503, "store_unavailable", "down"), "2").Header().Get("Retry-After"); got != "2" {
		t.Fatalf("the writer's Retry-After was replaced: %q", got)
	}
	if got := write(NewProblem(503, "store_unavailable", "down"), "").Header().Get("Retry-After"); got != "1" {
		t.Fatalf("a 503 without one: %q", got)
	}
}
