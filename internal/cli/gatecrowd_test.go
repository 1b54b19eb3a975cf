package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/crowd"
	"github.com/waitroom/waitroom/internal/servetest"
)

// TestGateCrowdProcesses: `waitroom crowd --gate ... --procs 2` as a user runs it, against a
// `waitroom serve --gate` in front of a site: two processes of visitors, each with its share,
// every visitor let through and done, in order, their reports added up and the visitors
// inside counted together (crowd.RunGateProcs, which auto-experiment --crowd-procs runs too).
func TestGateCrowdProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/done" {
			w.Header().Set("Waitroom-Command", "complete")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer site.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gateAddr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	gateFile := filepath.Join(dir, "gate.yaml")
	yaml := fmt.Sprintf("listen: %s\nsites:\n  - origin: %s\n    protect:\n      - event: gc\n        paths: [\"/shop\", \"/done\"]\n", gateAddr, site.URL)
	if err := os.WriteFile(gateFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	const adminKey = "gate-crowd-admin-key-0123456789ab"
	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "waitroom.db"), "--gate", gateFile)
	cmd.Env = append(os.Environ(), envRunMain+"=1", "WAITROOM_ADMIN_KEY="+adminKey)
	api := servetest.Start(t, cmd, 30*time.Second)
	body := `{"name":"gc","max_active":5,"limits":{"joins_per_client":1000000000,"tickets_per_client":1000000000,"polls_per_ticket":1000000000}}`
	req, _ := http.NewRequest(http.MethodPut, api+"/v1/events/gc", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT event: %d", resp.StatusCode)
	}

	t.Setenv(envRunMain, "1") // for the crowd's processes; this one decided at its start
	report := filepath.Join(dir, "report.json")
	// run runs the crowd of 20 visitors in 2 processes with extra flags: its exit code, its
	// stderr and its report.
	run := func(extra ...string) (int, string, crowd.GateReport) {
		t.Helper()
		var stderr strings.Builder
		args := append([]string{"crowd", "--gate", "http://" + gateAddr, "--users", "20", "--procs", "2", "--gate-requests", "2",
			"--gate-think", "10ms", "--json", report}, extra...)
		code := Main(args, io.Discard, &stderr)
		b, err := os.ReadFile(report)
		if err != nil {
			t.Fatal(err)
		}
		var rep crowd.GateReport
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return code, stderr.String(), rep
	}
	code, stderr, rep := run("--deadline", "1m")
	if code != 0 {
		t.Fatalf("crowd exited %d: %s", code, stderr)
	}
	t.Logf("%+v", rep)
	if rep.Users != 20 || rep.Admitted != 20 || rep.Done != 20 || rep.OriginRequests != 40 || rep.OriginErrors != 0 {
		t.Fatalf("report %+v: want 20 visitors let through and done, 2 requests each", rep)
	}
	if rep.FIFOViolations != 0 || rep.Renumbered != 0 || rep.MaxInside < 1 || rep.MaxInside > 5 {
		t.Fatalf("report %+v: FIFO, places, or more inside at once than max_active (counted together by both processes)", rep)
	}

	// With the event's limit per client at 2 joins, the 20 visitors get through only as 16
	// clients (--user-addrs, shared out between the processes); from this machine's one
	// address all but 2 are refused (429), and the command fails. The bucket refills one join
	// every join_window_s / 2: with the default window (10 s) a third join passes 5 s after the
	// first two, inside the 5 s deadline of a process that started a moment after the other.
	req, _ = http.NewRequest(http.MethodPatch, api+"/v1/events/gc", strings.NewReader(`{"limits":{"joins_per_client":2,"join_window_s":3600}}`))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PATCH event: %d", resp.StatusCode)
	}
	if code, _, rep := run("--user-addrs", "127.0.3.0/28", "--deadline", "1m"); code != 0 || rep.Done != 20 || rep.Errors["429"] != 0 {
		t.Fatalf("with --user-addrs: exit %d, report %+v: want all 20 done, no 429", code, rep)
	}
	if code, _, rep := run("--deadline", "5s"); code == 0 || rep.Errors["429"] == 0 || rep.Done > 2 {
		t.Fatalf("from one address: exit %d, report %+v: want 429s, at most 2 done, a failure", code, rep)
	}
}
