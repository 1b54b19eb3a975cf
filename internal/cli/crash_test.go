package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/servetest"
)

// call sends a JSON request (key: an admin key, or none) and returns the status and the
// decoded answer.
func call(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// TestEmbeddedCrashKeepsTheLine: the embedded `waitroom serve` is killed (SIGKILL: no snapshot
// of the line is saved) and started again on the same data directory. Every ticket handed out
// before still reads (200, never 404) and none moved back; a new join gets a number never
// handed out (docs/durability.md); the report after the sale counts the tickets given out, not
// the numbers the resume skipped (helper-82: 1,024 arrivals for an event nobody joined).
func TestEmbeddedCrashKeepsTheLine(t *testing.T) {
	data := filepath.Join(t.TempDir(), "waitroom.db")
	adminKey := base64.StdEncoding.EncodeToString([]byte("crash-test-admin-key-0123456789ab"))
	env := append(os.Environ(), envRunMain+"=1", "WAITROOM_ADMIN_KEY="+adminKey)
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--data", data, "--history-interval", "100ms")
		cmd.Env = env
		return cmd, servetest.Start(t, cmd, 30*time.Second)
	}

	cmd, base := start()
	if code, m := call(t, "PUT", base+"/v1/events/crash", adminKey, `{"max_active":1}`); code != 201 {
		t.Fatalf("PUT event: %d %v", code, m)
	}
	type ticket struct {
		id       string
		number   float64
		position float64
	}
	var tickets []ticket
	for range 6 {
		code, m := call(t, "POST", base+"/v1/events/crash/tickets", "", "")
		if code != 201 {
			t.Fatalf("join: %d %v", code, m)
		}
		tickets = append(tickets, ticket{m["ticket_id"].(string), m["number"].(float64), m["position"].(float64)})
	}
	// report waits until the report's last sample is at or after since, and returns its arrivals.
	report := func(base string, since time.Time) (arrivals float64) {
		t.Helper()
		eventually.NoError(t, 20*time.Second, "a sample in the report", func() error {
			code, m := call(t, "GET", base+"/v1/events/crash/report?format=json", adminKey, "")
			if code != 200 {
				t.Fatalf("report: %d %v", code, m)
			}
			to, _ := m["to"].(string)
			if at, err := time.Parse(time.RFC3339Nano, to); err != nil || at.Before(since) {
				return fmt.Errorf("the report's last sample is at %q, not after %v", to, since)
			}
			arrivals, _ = m["arrivals"].(float64)
			return nil
		})
		return arrivals
	}
	if n := report(base, time.Now()); n != 6 {
		t.Fatalf("arrivals before the crash: %v, want 6", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = cmd.Process.Wait()

	_, base = start()
	for i, tk := range tickets {
		code, m := call(t, "GET", base+"/v1/events/crash/tickets/"+tk.id, "", "")
		if code != 200 {
			t.Fatalf("ticket %d after the crash: %d %v", i+1, code, m)
		}
		if m["status"] == "QUEUED" && m["position"].(float64) > tk.position {
			t.Errorf("ticket %d moved back: position %v, was %v", i+1, m["position"], tk.position)
		}
	}
	code, m := call(t, "POST", base+"/v1/events/crash/tickets", "", "")
	if code != 201 {
		t.Fatalf("join after the crash: %d %v", code, m)
	}
	for _, tk := range tickets {
		if m["number"].(float64) <= tk.number {
			t.Fatalf("new number %v not above the old ones (%v)", m["number"], tk.number)
		}
	}
	if n := report(base, time.Now()); n != 7 {
		t.Fatalf("arrivals after the crash: %v, want 7 (6 before, 1 after; number %v)", n, m["number"])
	}
}

// TestEmbeddedCrashKeepsTheDraw: a pre-queue drawn at its opening, the embedded `waitroom
// serve` killed (SIGKILL) once before the opening and once after it. Before (helper-83,
// 7 December 2026), the second crash took the first's void numbers, which the opening had drawn
// at places nobody holds, for tickets: 1,000 and more waiting for a dozen people, real tickets
// moved back by hundreds of places. Now no ticket moves back and a join after both crashes
// waits behind the real tickets only (docs/draw.md, "Store loss").
func TestEmbeddedCrashKeepsTheDraw(t *testing.T) {
	data := filepath.Join(t.TempDir(), "waitroom.db")
	adminKey := base64.StdEncoding.EncodeToString([]byte("crash-test-admin-key-0123456789ab"))
	env := append(os.Environ(), envRunMain+"=1", "WAITROOM_ADMIN_KEY="+adminKey)
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--data", data)
		cmd.Env = env
		return cmd, servetest.Start(t, cmd, 30*time.Second)
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_, _ = cmd.Process.Wait()
	}
	join := func(base string) string {
		t.Helper()
		code, m := call(t, "POST", base+"/v1/events/pre/tickets", "", "")
		if code != 201 {
			t.Fatalf("join: %d %v", code, m)
		}
		return m["ticket_id"].(string)
	}

	cmd, base := start()
	opens := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if code, m := call(t, "PUT", base+"/v1/events/pre", adminKey, `{"max_active":1,"opens_at":"`+opens+`"}`); code != 201 {
		t.Fatalf("PUT event: %d %v", code, m)
	}
	var tickets []string
	for range 8 {
		tickets = append(tickets, join(base))
	}
	kill(cmd) // before the opening

	cmd, base = start()
	for i, id := range tickets {
		if code, m := call(t, "GET", base+"/v1/events/pre/tickets/"+id, "", ""); code != 200 || m["status"] != "QUEUED" {
			t.Fatalf("ticket %d after the first crash: %d %v", i+1, code, m)
		}
	}
	tickets = append(tickets, join(base), join(base))
	opened := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	if code, m := call(t, "PATCH", base+"/v1/events/pre", adminKey, `{"opens_at":"`+opened+`"}`); code != 200 {
		t.Fatalf("PATCH opens_at: %d %v", code, m)
	}
	before := map[string]float64{} // the position each waiting ticket read last before the second crash
	eventually.NoError(t, 20*time.Second, "the opening's draw", func() error {
		for i, id := range tickets {
			code, m := call(t, "GET", base+"/v1/events/pre/tickets/"+id, "", "")
			if code != 200 {
				t.Fatalf("ticket %d after the opening: %d %v", i+1, code, m)
			}
			switch m["status"] {
			case "QUEUED":
				if m["position"].(float64) == 0 {
					return fmt.Errorf("ticket %d is not placed yet", i+1)
				}
				before[id] = m["position"].(float64)
			case "ADMITTED":
			default:
				t.Fatalf("ticket %d after the opening: %v", i+1, m)
			}
		}
		return nil
	})
	for id, p := range before {
		if p > float64(len(tickets)) {
			t.Fatalf("ticket %s at position %v: only %d tickets are real", id, p, len(tickets))
		}
	}
	if code, m := call(t, "GET", base+"/v1/events/pre/draw", "", ""); code != 200 || m["status"] != "drawn" || m["n"].(float64) < float64(len(tickets)) {
		t.Fatalf("the draw: %d %v", code, m)
	}
	kill(cmd) // after the opening

	_, base = start()
	for i, id := range tickets {
		code, m := call(t, "GET", base+"/v1/events/pre/tickets/"+id, "", "")
		if code != 200 {
			t.Fatalf("ticket %d after the second crash: %d %v", i+1, code, m)
		}
		if p, ok := before[id]; ok && m["status"] == "QUEUED" && m["position"].(float64) > p {
			t.Errorf("ticket %d moved back: position %v, was %v", i+1, m["position"], p)
		}
	}
	code, m := call(t, "POST", base+"/v1/events/pre/tickets", "", "")
	if code != 201 || m["position"].(float64) > float64(len(tickets)+1) {
		t.Fatalf("a join after both crashes: %d %v (behind %d real tickets at most)", code, m, len(tickets))
	}
}
