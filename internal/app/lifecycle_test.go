package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestEveryListenerDrains: when Run's ctx ends, /readyz fails at once while the API, the gate's
// listener and --metrics-addr all go on serving for the drain; a request in flight on each
// finishes; then every listener is closed and Run returns.
func TestEveryListenerDrains(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release // a request the shop takes its time over, across the drain
		}
		_, _ = io.WriteString(w, "the shop")
	}))
	t.Cleanup(origin.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	apiLn, gateLn, metricsLn := loopback(t), loopback(t), loopback(t)
	f, err := gateway.Parse("drain.yaml", []byte("listen: 127.0.0.1:0\nsites:\n  - origin: "+origin.URL+
		"\n    protect:\n      - event: none\n        paths: [/checkout]\n"))
	require.NoError(t, err)
	const drain = 1500 * time.Millisecond
	a, err := app.New(context.Background(), app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey,
		Listener: apiLn, Gate: &f, GateListener: gateLn, MetricsListener: metricsLn, Drain: drain, ShutdownGrace: 10 * time.Second})
	require.NoError(t, err)
	api, gate, metrics := "http://"+apiLn.Addr().String(), "http://"+gateLn.Addr().String(), "http://"+metricsLn.Addr().String()

	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	get := func(url string) int {
		res, err := http.Get(url)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	eventually.True(t, 10*time.Second, "serving", func() bool { return get(api+"/readyz") == 200 })
	require.Equal(t, 200, get(gate+"/static/a.css"), "the gate passes an unprotected path")
	require.Equal(t, 200, get(metrics+"/metrics"))

	slow := make(chan int, 1)
	go func() { slow <- get(gate + "/slow") }()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request did not reach the shop")
	}

	stop()
	began := time.Now()
	eventually.True(t, 5*time.Second, "/readyz fails at once", func() bool { return get(api+"/readyz") == 503 })
	res, err := http.Get(api + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Contains(t, string(body), `"code":"shutting_down"`, "the stores are fine: the instance is leaving")
	require.Equal(t, 200, get(api+"/healthz"), "the API serves through the drain")
	require.Equal(t, 200, get(gate+"/static/a.css"), "so does the gate's listener")
	require.Equal(t, 200, get(metrics+"/metrics"), "and --metrics-addr")
	require.Less(t, time.Since(began), drain, "those were answered within the drain")

	close(release)
	require.Equal(t, 200, <-slow, "a request in flight finishes")
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, u := range []string{api, gate, metrics} {
		_, err := http.Get(u + "/healthz")
		require.Error(t, err, "%s is closed after Stop", u)
	}
}

// TestStartOrderIsThePackageComment: the list New declares is the one internal/app's package
// comment gives, in its order, so that the comment cannot go stale.
func TestStartOrderIsThePackageComment(t *testing.T) {
	src, err := os.ReadFile("app.go")
	require.NoError(t, err)
	head, _, ok := strings.Cut(string(src), "\npackage app\n")
	require.True(t, ok)
	_, list, ok := strings.Cut(head, "What starts, in order (Start), and stops, in reverse (Stop):")
	require.True(t, ok, "the package comment lists the order")
	entry := regexp.MustCompile(`(?m)^//\t([a-z][a-z ]*[a-z])  +`)
	var names []string
	for _, m := range entry.FindAllStringSubmatch(list, -1) {
		names = append(names, m[1])
	}
	a, err := app.New(context.Background(), app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Stop(context.Background())) })
	require.Equal(t, names, a.Order())
}

// TestPprofOnTheMetricsListenerOnly: with Pprof, Go's profiles are served on the metrics
// listener, never on the API's; without it, nowhere. What the metrics listener has no route
// for is a problem, as on every listener (404 not_found; 405 method_not_allowed with Allow).
func TestPprofOnTheMetricsListenerOnly(t *testing.T) {
	for _, on := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), MetricsListener: ln, Pprof: on})
		get := func(u string) int {
			res, err := http.Get(u)
			require.NoError(t, err)
			res.Body.Close()
			return res.StatusCode
		}
		want := 404
		if on {
			want = 200
		}
		eventually.True(t, 10*time.Second, "the metrics listener", func() bool { return get("http://"+ln.Addr().String()+"/metrics") == 200 })
		require.Equal(t, want, get("http://"+ln.Addr().String()+"/debug/pprof/cmdline"), "pprof %v", on)
		require.Equal(t, 404, get(in.srv.URL+"/debug/pprof/cmdline"), "never on the API")
		for _, c := range []struct {
			method, path string
			code         int
			problem      string
		}{{"GET", "/healthz", 404, "not_found"}, {"GET", "/metrics/x", 404, "not_found"}, {"POST", "/metrics", 405, "method_not_allowed"},
			{"GET", "//metrics", 404, "not_found"}} {
			r := call(t, "http://"+ln.Addr().String(), c.method, c.path, "", "")
			require.Equal(t, c.code, r.code, r.raw)
			require.Equal(t, c.problem, str(r, "code"), r.raw)
			if c.code == 405 {
				require.Contains(t, r.header.Get("Allow"), "GET")
			}
		}
	}
}

// TestStopTakesOneGrace: the push hub and every listener share one ShutdownGrace, not one each.
// Each of the three listeners holds a connection whose request never finishes its headers
// (the server waits for it up to its ReadHeaderTimeout, 5 s); with a grace of 1 s, Stop returns
// in about 1 s, so that drain + grace (+ a margin for the loops and the save) is the whole
// stop the deployment files budget for (deploy/ checks them against it).
func TestStopTakesOneGrace(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(origin.Close)
	lns := []net.Listener{loopback(t), loopback(t), loopback(t)}
	f, err := gateway.Parse("grace.yaml", []byte("listen: 127.0.0.1:0\nsites:\n  - origin: "+origin.URL+
		"\n    protect:\n      - event: none\n        paths: [/checkout]\n"))
	require.NoError(t, err)
	const grace = time.Second
	a, err := app.New(context.Background(), app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey,
		Listener: lns[0], Gate: &f, GateListener: lns[1], MetricsListener: lns[2], ShutdownGrace: grace})
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	for _, ln := range lns {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: waitroom\r\n") // no blank line: never ends
		require.NoError(t, err)
	}
	eventually.True(t, 5*time.Second, "the three connections accepted", func() bool { return a.Conns.Open() == len(lns) })

	began := time.Now()
	err = a.Stop(context.Background())
	took := time.Since(began)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the requests that never came were cut off")
	t.Logf("Stop took %v with a grace of %v", took, grace)
	require.GreaterOrEqual(t, took, grace, "the listeners waited for their requests")
	// One per listener would be 3 s; the loops' stop and the save take the rest.
	require.Less(t, took, 2*grace, "one grace for all, not one per listener")
}
