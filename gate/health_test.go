package gate_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/waitroom/waitroom/gate"
)

// TestHealthReportsReachTheController: with HealthKey, the middleware measures the admitted
// requests it passes and reports them to the waiting room (POST /v1/events/{id}/health), whose
// controller of an event in admission mode auto reads them: the site's load, its p95 and its
// errors (a 5xx after an informational answer too).
func TestHealthReportsReachTheController(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the waitroom binary")
	}
	const adminKey = "gate-health-admin-key-0123456789abcdef"
	base := startWaitroom(t, adminKey, "gate-health-token-key-0123456789abcdef")
	call(t, "PUT", base+"/v1/events/shop", adminKey,
		`{"max_active":10,"admission_mode":"auto","auto":{"target_p95_ms":200,"min_max_active":2,"max_max_active":10}}`, http.StatusCreated, nil)
	// Two admitted sessions: errors one session alone sees are not the origin's
	// (internal/originhealth), so both make the failing requests.
	var tokens []string
	for range 2 {
		var ticket struct {
			TicketID       string `json:"ticket_id"`
			Status         string `json:"status"`
			AdmissionToken string `json:"admission_token"`
		}
		call(t, "POST", base+"/v1/events/shop/tickets", "", "", http.StatusCreated, &ticket)
		for deadline := time.Now().Add(10 * time.Second); ticket.Status == "QUEUED"; { // admitted at admit_rate
			if time.Now().After(deadline) {
				t.Fatalf("not admitted within 10 s: %+v", ticket)
			}
			time.Sleep(50 * time.Millisecond) // a poll's pace, not a synchronisation
			call(t, "GET", base+"/v1/events/shop/tickets/"+ticket.TicketID, "", "", http.StatusOK, &ticket)
		}
		if ticket.Status != "ADMITTED" {
			t.Fatalf("join: %+v", ticket)
		}
		tokens = append(tokens, ticket.AdmissionToken)
	}
	// Reports every second (the default): each client's share is bounded within a report, and
	// one of 100 ms held the errors of one of the two sessions as often as of both.
	g, err := gate.New(gate.Config{WaitingRoomURL: base, EventID: "shop", HealthKey: adminKey,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	shop := httptest.NewServer(g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			// 103 Early Hints first: no answer yet, the 503 after it is (helper-77: counted
			// as the status, the 1xx hid the error).
			w.WriteHeader(http.StatusEarlyHints)
		}
		time.Sleep(30 * time.Millisecond) // the site's own latency, which the report carries
		if r.URL.Path == "/fail" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})))
	t.Cleanup(shop.Close)
	type state struct {
		State *struct {
			Load      float64 `json:"load"`
			P95MS     float64 `json:"p95_ms"`
			ErrorRate float64 `json:"error_rate"`
			Signal    string  `json:"signal"`
		} `json:"state"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		path := "/checkout"
		if i%8 >= 6 {
			path = "/fail"
		}
		if resp := get(t, http.DefaultClient, shop.URL+path, "application/json", withBearer(tokens[i%2])); resp.status/100 != 2 && resp.status != 503 {
			t.Fatalf("through the gate: %d %s", resp.status, resp.body)
		}
		if i%10 == 9 {
			var s state
			call(t, "GET", base+"/v1/events/shop/auto", adminKey, "", http.StatusOK, &s)
			if s.State != nil && s.State.Signal == "ok" && s.State.Load > 0 {
				if s.State.P95MS < 25 || s.State.P95MS > 1000 || s.State.ErrorRate < 0.1 || s.State.ErrorRate > 0.4 {
					t.Fatalf("the controller read p95 %.0f ms and error rate %.2f, want about 30 ms and 0.25", s.State.P95MS, s.State.ErrorRate)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no report reached the controller within 30 s")
		}
	}
}
