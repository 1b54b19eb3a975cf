package challenge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// workerPath is the Web Worker solver, served by package web at /assets/pow-worker.js.
var workerPath = filepath.Join("..", "web", "assets", "pow-worker.js")

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "challenge.md"))
	require.NoError(t, err)
	return string(b)
}

// inCI reports whether CI asks for strict mode (set and not "false" or "0"), as
// sqltest.InCI does: then a missing Chromium fails the browser tests instead of skipping them.
func inCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if inCI() {
		t.Fatal("chromium is not installed (scripts/test.sh installs it unless WAITROOM_BROWSER_TESTS=0)")
	}
	t.Skip("chromium is not installed; run scripts/test.sh, or apt-get install chromium")
	return ""
}

// testPage runs the worker: run(challenge, ms) resolves with the worker's solved message and
// every progress message as JSON, or, when ms > 0, with the progress so far after ms
// milliseconds (the worker is then terminated).
const testPage = `<!doctype html><meta charset="utf-8"><title>pow</title><script>
window.run = (challenge, ms) => new Promise((resolve, reject) => {
  const w = new Worker('/pow-worker.js');
  const progress = [];
  const done = (v) => { w.terminate(); resolve(JSON.stringify(v)); };
  if (ms > 0) setTimeout(() => done({progress}), ms);
  w.onmessage = (e) => {
    const m = e.data;
    if (m.type === 'progress') progress.push(m);
    else if (m.type === 'solved') done({solution: m.solution, hashes: m.hashes, progress});
    else done({error: m.message, progress});
  };
  w.onerror = (e) => { w.terminate(); reject(new Error(e.message)); };
  w.postMessage({challenge});
});
</script>`

type workerResult struct {
	Solution string `json:"solution"`
	Hashes   int64  `json:"hashes"`
	Error    string `json:"error"`
	Progress []struct {
		Type     string  `json:"type"`
		Hashes   int64   `json:"hashes"`
		Estimate float64 `json:"estimate"`
		Rate     float64 `json:"rate"`
	} `json:"progress"`
}

// workerBrowser serves the test page and the worker, starts headless Chromium and returns a
// function that runs a challenge in it, and the browser's process id.
func workerBrowser(t *testing.T) (func(challenge string, ms int) workerResult, int) {
	t.Helper()
	exe := chromium(t)
	js, err := os.ReadFile(workerPath)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, testPage)
		case "/pow-worker.js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			_, _ = w.Write(js)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(bctx)) // starts the browser, which lives as long as bctx
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(srv.URL+"/")))
	pid := chromedp.FromContext(bctx).Browser.Process().Pid

	return func(challenge string, ms int) workerResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
		defer cancel()
		q, err := json.Marshal(challenge)
		require.NoError(t, err)
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](
			fmt.Sprintf("window.run(%s, %d)", q, ms), chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		var res workerResult
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		return res
	}, pid
}

// TestBrowserWorkerSolves: the Web Worker, in headless Chromium, solves challenges that the Go
// verifier accepts (a short one and one spanning three SHA-256 blocks), and reports an error
// for a string that is not a challenge.
func TestBrowserWorkerSolves(t *testing.T) {
	run, _ := workerBrowser(t)
	is := testIssuer(t)
	for _, ev := range []string{"concert", strings.Repeat("x", 64)} {
		c, err := is.Issue(Target{Event: ev, Difficulty: 14}, time.Now())
		require.NoError(t, err)
		res := run(c.String, 0)
		require.Empty(t, res.Error)
		require.Regexp(t, `^[0-9a-f]{16}$`, res.Solution)
		require.Positive(t, res.Hashes)
		_, err = is.Verify(c.String, res.Solution, Target{Event: ev}, time.Now())
		require.NoError(t, err, "the Go verifier accepts the worker's solution")
		require.GreaterOrEqual(t, zeroBits(c.String, res.Solution), 14)
		t.Logf("event %q: solved difficulty 14 in %d hashes", ev[:min(len(ev), 8)], res.Hashes)
	}
	res := run("not a challenge", 0)
	require.Equal(t, "not a waitroom challenge", res.Error)
}

// TestBrowserWorkerRate measures the worker's hash rate in headless Chromium: a challenge of
// MaxDifficulty (never solved in time) runs for 3 s, and the rate is taken both from the
// worker's own progress reports (wall clock) and from the CPU time Chromium's processes used
// meanwhile (what the rate would be on an idle core; the machine running the tests is often
// shared). docs/challenge.md quotes these figures.
func TestBrowserWorkerRate(t *testing.T) {
	run, pid := workerBrowser(t)
	c, err := testIssuer(t).Issue(Target{Event: "concert", Difficulty: MaxDifficulty}, time.Now())
	require.NoError(t, err)
	cpu0, err := treeCPU(pid)
	require.NoError(t, err)
	res := run(c.String, 3000)
	cpu, err := treeCPU(pid)
	require.NoError(t, err)
	cpu -= cpu0
	require.Empty(t, res.Solution)
	require.NotEmpty(t, res.Progress, "progress messages every quarter second")
	last := res.Progress[len(res.Progress)-1]
	require.Equal(t, float64(uint64(1)<<MaxDifficulty), last.Estimate)
	for i := 1; i < len(res.Progress); i++ {
		require.Greater(t, res.Progress[i].Hashes, res.Progress[i-1].Hashes)
	}
	perCPU := float64(last.Hashes) / cpu.Seconds()
	t.Logf("pow-worker.js in Chromium: %d hashes; wall-clock rate %.2f MH/s; per CPU-second of the browser's processes %.2f MH/s (%.2fs CPU)",
		last.Hashes, last.Rate/1e6, perCPU/1e6, cpu.Seconds())
	for _, d := range []int{16, 18, 20} {
		t.Logf("  difficulty %d: %.2f s expected here at the CPU rate", d, float64(uint64(1)<<d)/perCPU)
	}
}

// treeCPU is the CPU time (user + system) used so far by process pid and its descendants,
// from /proc (Linux; clock ticks at 100 Hz).
func treeCPU(pid int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the command name in parentheses (proc(5)): state ppid ... utime(14) stime(15).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		parent[p], ticks[p] = pp, ut+st
	}
	var total int64
	for p, tk := range ticks {
		for q := p; q > 1; q = parent[q] {
			if q == pid {
				total += tk
				break
			}
		}
	}
	return time.Duration(total) * 10 * time.Millisecond, nil
}
