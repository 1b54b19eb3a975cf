package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

const dashboardPath = "grafana/waitroom.json"

// query is one PromQL expression of the dashboard and where it is.
type query struct{ where, expr string }

// dashboardQueries returns every PromQL expression of the dashboard: panel targets (in rows
// too) and label_values() variables.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	src, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var dash struct {
		UID        string
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
		Panels []panel
	}
	require.NoError(t, json.Unmarshal(src, &dash))
	require.Equal(t, "waitroom", dash.UID)
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q target %s", p.Title, tg.RefID)
				qs = append(qs, query{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	walk(dash.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_]\w*)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		require.NoError(t, json.Unmarshal(v.Query, &q), v.Name)
		m := labelValues.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: %s", v.Name, q.Query)
		// label_values(expr, label) is the series of expr grouped by label.
		qs = append(qs, query{"variable " + v.Name, "count by (" + m[2] + ") (" + m[1] + ")"})
	}
	require.Greater(t, len(qs), 20)
	return qs
}

type panel struct {
	Title   string
	Panels  []panel
	Targets []struct {
		Expr  string
		RefID string `json:"refId"`
	}
}

// grafanaVars stands in for Grafana's variables so that an expression parses as PromQL.
var grafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{?(\w+)\}?`)

func substituteVars(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasPrefix(v, "$__") {
			return "5m"
		}
		return ".*" // $job, $event: only ever inside =~ matchers
	})
}

// family is what a scrape says about one metric: its type and label names.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

// series returns the metric families a scraped name covers: a histogram's _bucket, _sum and
// _count, a summary's _sum and _count.
func lookupFamily(fams map[string]family, name string) (family, bool) {
	if f, ok := fams[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := fams[base]
		if !ok {
			continue
		}
		if f.typ == dto.MetricType_HISTOGRAM || (f.typ == dto.MetricType_SUMMARY && suffix != "_bucket") {
			if suffix == "_bucket" {
				l := map[string]bool{"le": true}
				for k := range f.labels {
					l[k] = true
				}
				f.labels = l
			}
			return f, true
		}
	}
	return family{}, false
}

// TestGrafanaDashboardMetricsExist parses every query of the dashboard and checks each metric
// it selects, each label it matches and each label it groups by against the /metrics of a
// running `waitroom serve` (the binary the Dockerfile's build line makes, embedded mode)
// after an event was created and joined.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	qs := dashboardQueries(t)
	bin := dockerBinary(t)
	base := startServe(t, bin)

	// Per-event series exist once an event has joins: one admitted, one queued. The admitted
	// session ends after 1 s without activity, which the processor counts
	// (waitroom_sessions_ended_total exists only from then on).
	call(t, "PUT", base+"/v1/events/concert", `{"name":"Concert","max_active":1,"session_ttl_s":1}`, 200, 201)
	call(t, "POST", base+"/v1/events/concert/tickets", "", 201)
	call(t, "POST", base+"/v1/events/concert/tickets", "", 201)

	// /healthz names the build the Dockerfile stamped.
	var health map[string]string
	require.NoError(t, json.Unmarshal(call(t, "GET", base+"/healthz", "", 200), &health))
	require.Equal(t, map[string]string{"status": "ok", "version": releaseVersion}, health)

	var mfs map[string]*dto.MetricFamily
	deadline := time.Now().Add(30 * time.Second)
	for {
		tp := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		mfs, err = tp.TextToMetricFamilies(strings.NewReader(string(call(t, "GET", base+"/metrics", "", 200))))
		require.NoError(t, err)
		if mfs["waitroom_sessions_ended_total"] != nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "no session ended within 30 s of a 1 s session_ttl_s")
		time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
	}
	fams := map[string]family{}
	for name, mf := range mfs {
		f := family{typ: mf.GetType(), labels: map[string]bool{"job": true, "instance": true}} // added by Prometheus
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				f.labels[l.GetName()] = true
			}
		}
		if mf.GetType() == dto.MetricType_SUMMARY {
			f.labels["quantile"] = true
		}
		fams[name] = f
	}
	bi := mfs["waitroom_build_info"]
	require.NotNil(t, bi, "waitroom_build_info is exported")
	require.Len(t, bi.GetMetric(), 1)
	for _, l := range bi.GetMetric()[0].GetLabel() {
		if l.GetName() == "version" {
			require.Equal(t, releaseVersion, l.GetValue())
		}
	}

	p := parser.NewParser(parser.Options{})
	used := map[string]bool{}
	for _, q := range qs {
		expr, err := p.ParseExpr(substituteVars(q.expr))
		require.NoError(t, err, "%s: %s", q.where, q.expr)
		// The labels available below each node: those of the metrics it selects.
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.VectorSelector:
				require.NotEmpty(t, n.Name, "%s: a selector without a metric name", q.where)
				f, ok := lookupFamily(fams, n.Name)
				require.True(t, ok, "%s: metric %s is not exported by waitroom serve", q.where, n.Name)
				used[n.Name] = true
				for _, m := range n.LabelMatchers {
					if m.Name != model.MetricNameLabel {
						require.True(t, f.labels[m.Name], "%s: %s has no label %q", q.where, n.Name, m.Name)
					}
				}
			case *parser.AggregateExpr:
				parser.Inspect(n.Expr, func(c parser.Node, _ []parser.Node) error {
					if vs, ok := c.(*parser.VectorSelector); ok {
						if f, ok := lookupFamily(fams, vs.Name); ok {
							for _, g := range n.Grouping {
								require.True(t, f.labels[g], "%s: groups %s by %q, a label it does not have", q.where, vs.Name, g)
							}
						}
					}
					return nil
				})
			}
			return nil
		})
	}
	// What the dashboard leaves out, for whoever adds a metric.
	var unused []string
	for name := range fams {
		if strings.HasPrefix(name, "waitroom_") && !used[name] && !used[name+"_bucket"] && !used[name+"_count"] {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	t.Logf("waitroom metrics no panel shows: %v", unused)
}

// startServe runs `bin serve` in embedded mode on a free loopback port with a data file in a
// temporary directory, and returns its base URL once /readyz answers. It is stopped with
// SIGTERM at the end of the test, which must make it exit 0.
func startServe(t *testing.T, bin string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "waitroom.db"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WAITROOM_") { // no scale-out settings from the caller
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "WAITROOM_ADMIN_KEY="+adminKey, "WAITROOM_TOKEN_KEY=deploy-test-token-key",
		"WAITROOM_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "waitroom serving" {
				select {
				case addr <- line.Addr:
				default:
				}
			}
			t.Logf("serve: %s", sc.Text())
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			require.NoError(t, err, "serve exits 0 on SIGTERM")
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("serve did not stop within 20 s of SIGTERM")
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-exited:
		exited <- err
		t.Fatalf("serve exited before serving: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not log that it serves within 60 s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
			}
		}
		require.True(t, time.Now().Before(deadline), "serve not ready within 30 s: %v", err)
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
}

const adminKey = "deploy-test-admin-key"

// call makes an HTTP call with the admin key and returns the body; the status must be one of want.
func call(t *testing.T, method, url, body string, want ...int) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, want, resp.StatusCode, "%s %s: %s", method, url, b)
	return b
}
