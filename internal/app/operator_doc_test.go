package app_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestOperatorDay runs the shell blocks of docs/operator.md, in order, in one bash with BASE and
// KEY set, against a fresh instance: every copy-paste example an operator is given works
// (issue 21: the docs' examples must not go stale). Each block must exit 0 (its curl -f calls
// fail on any 4xx or 5xx; its tests check what they say).
func TestOperatorDay(t *testing.T) {
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	doc, err := os.ReadFile("../../docs/operator.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	require.GreaterOrEqual(t, len(blocks), 8, "the page's examples")
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, b := range blocks {
		script.WriteString("echo '--- block " + strconv.Itoa(i+1) + "' >&2\n" + b[1])
	}
	cmd := exec.Command(bash, "-c", script.String())
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "BASE="+in.srv.URL, "KEY="+adminKey)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docs/operator.md:\n%s", out)

	got := call(t, in.srv.URL, "GET", "/v1/events/spring-sale", adminKey, "")
	require.Equal(t, "closed", str(got, "state"))
	require.EqualValues(t, 300, num(got, "max_active"), "the If-Match write, not the stale one")
	ch, _ := got.body["challenge"].(map[string]any)
	require.Equal(t, "pow", ch["type"])
}
