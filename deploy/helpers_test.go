package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root, the service module's: the tests run in deploy/.
const repoRoot = ".."

var (
	envOnce  sync.Once
	envNames map[string]bool
	envErr   error
)

var envName = regexp.MustCompile(`^WAITROOM_[A-Z0-9_]+$`)

// waitroomEnv returns the environment variables waitroom reads: every "WAITROOM_…" string
// literal in the non-test sources of internal/cli, the only package that reads the environment,
// but those of otherEnv (other commands' and tests').
func waitroomEnv(t *testing.T) map[string]bool {
	t.Helper()
	envOnce.Do(func() {
		envNames = map[string]bool{}
		files, err := filepath.Glob(filepath.Join(repoRoot, "internal", "cli", "*.go"))
		if err != nil {
			envErr = err
			return
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				envErr = err
				return
			}
			ast.Inspect(file, func(n ast.Node) bool {
				// otherEnv lists the variables of other commands and of tests, which serve
				// does not read (it warns of the rest).
				if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && vs.Names[0].Name == "otherEnv" {
					return false
				}
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(s) {
						envNames[s] = true
					}
				}
				return true
			})
		}
	})
	require.NoError(t, envErr)
	// The table must be real: the variables the README names are in it.
	for _, n := range []string{"WAITROOM_ADDR", "WAITROOM_DATA", "WAITROOM_REDIS_URL", "WAITROOM_DATABASE_URL", "WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY"} {
		require.True(t, envNames[n], "%s not found in internal/cli", n)
	}
	return envNames
}

func itoa[I ~int32 | ~int | ~int64](i I) string { return strconv.FormatInt(int64(i), 10) }

// atoi is s as an int; anything else fails t.
func atoi(t testing.TB, s string) int {
	t.Helper()
	i, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// serviceDuration is the constant name of the service module's file (a path from the repository
// root), written there as "name = N * time.Second" (or Millisecond, Minute): the deploy files'
// timeouts are checked against the service's own.
func serviceDuration(t testing.TB, file, name string) time.Duration {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, file))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*=\s*(\d+)\s*\*\s*time\.(Millisecond|Second|Minute)\b`).FindSubmatch(src)
	require.NotNil(t, m, "%s = N * time.<unit> in %s", name, file)
	unit := map[string]time.Duration{"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute}[string(m[2])]
	return time.Duration(atoi(t, string(m[1]))) * unit
}
