package crowd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testAdminKey = "test-admin-key"

// fake is a small waitroom implementing the HTTP contract the load generator codes against:
// one serving counter behind a mutex; a join is admitted at once when a slot is free and
// nobody waits ahead, else queued; a status call moves the line forward into free slots; a
// DELETE frees the slot. Knobs make it misbehave on purpose.
type fake struct {
	mu        sync.Mutex
	exists    bool
	maxActive int64
	admitRate float64
	puts      int

	last, serving, active int64
	tickets               []fakeTicket     // by number-1
	users                 map[string]int64 // named user -> number

	maxActiveObserved int64
	joinsBy           map[string]int // target label -> joins
	wrongTarget       int            // status/leave sent to another target than the join
	ticketRequests    int

	// knobs
	pollAfter  float64
	neverAdmit bool
	// admitAfter, with neverAdmit, lets admissions begin once that many have joined.
	admitAfter int64
	broken     brokenMode
	failEvery  int  // every n-th ticket request answers 500
	hangStatus bool // status requests never answer
	// down labels targets whose ticket requests all answer 503 store_unavailable; downLabel
	// goes down when downAfter tickets have been made (and the line starts admitting);
	// failedBy counts the 503s by target.
	down      map[string]bool
	downLabel string
	downAfter int
	failedBy  map[string]int
	// loseWhenPolled, when positive, makes the fake lose its line (as a store restarted empty)
	// once that many tickets have been polled: every ticket then answers 404, the next
	// failJoinsAfterLoss joins answer 503, and the line admits again. failJoins is the count
	// of joins still to refuse. keys counts the joins made per
	// Idempotency-Key.
	loseWhenPolled     int
	failJoinsAfterLoss int
	polled             int
	lost               bool
	failJoins          int
	// failJoinsRetryAfter is the Retry-After of the failJoins' 503s ("" = none).
	failJoinsRetryAfter string
	keys                map[string]int
	// notFoundFirstPoll answers 404 to the first poll of every ticket.
	notFoundFirstPoll bool
}

type brokenMode int

const (
	notBroken brokenMode = iota
	// QUEUED tickets report a serving above their own number: a later QUEUED answer for the
	// same number contradicts a serving the server already reported.
	brokenQueuedBelow
	// joins are admitted at once with a serving below their own number.
	brokenAdmittedAbove
)

type fakeTicket struct {
	status string
	left   bool
	label  string
	polls  int
}

func newFake(maxActive int64) *fake {
	return &fake{exists: true, maxActive: maxActive, admitRate: 1000, users: map[string]int64{}, joinsBy: map[string]int{},
		down: map[string]bool{}, failedBy: map[string]int{}, keys: map[string]int{}}
}

// serve starts an httptest server labelled label on f, closed at the end of the test.
func (f *fake) serve(t *testing.T, label string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/events/{id}", f.getEvent)
	mux.HandleFunc("PUT /v1/events/{id}", f.putEvent)
	mux.HandleFunc("POST /v1/events/{id}/tickets", func(w http.ResponseWriter, r *http.Request) { f.join(w, r, label) })
	mux.HandleFunc("GET /v1/events/{id}/tickets/{tid}", func(w http.ResponseWriter, r *http.Request) { f.status(w, r, label) })
	mux.HandleFunc("DELETE /v1/events/{id}/tickets/{tid}", func(w http.ResponseWriter, r *http.Request) { f.leave(w, r, label) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func writeProblem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": code, "code": code,
	})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fake) getEvent(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.exists {
		writeProblem(w, http.StatusNotFound, "event_not_found")
		return
	}
	writeJSONBody(w, http.StatusOK, map[string]any{
		"event_id": r.PathValue("id"), "name": r.PathValue("id"), "max_active": f.maxActive,
		"admit_rate": f.admitRate, "session_ttl_s": 300, "claim_ttl_s": 60, "opens_at": nil, "closes_at": nil,
		"waiting": f.last - f.serving, "active": f.active, "admitted_total": f.serving, "serving": f.serving,
	})
}

func (f *fake) putEvent(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testAdminKey {
		writeProblem(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	var body struct {
		Name      string  `json:"name"`
		MaxActive int64   `json:"max_active"`
		AdmitRate float64 `json:"admit_rate"`
		Session   int     `json:"session_ttl_s"`
		Claim     int     `json:"claim_ttl_s"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.MaxActive < 1 || body.Session < 1 || body.Claim < 1 {
		writeProblem(w, http.StatusBadRequest, "invalid_event")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts++
	f.maxActive, f.admitRate = body.MaxActive, body.AdmitRate
	status := http.StatusOK
	if !f.exists {
		f.exists, status = true, http.StatusCreated
	}
	writeJSONBody(w, status, map[string]any{"event_id": r.PathValue("id"), "max_active": f.maxActive})
}

// fail answers 503 to a ticket request on a target that is down, and 500 to every
// failEvery-th one; called with f.mu held.
func (f *fake) fail(w http.ResponseWriter, label string) bool {
	if f.down[label] {
		f.failedBy[label]++
		writeProblem(w, http.StatusServiceUnavailable, "store_unavailable")
		return true
	}
	f.ticketRequests++
	if f.failEvery > 0 && f.ticketRequests%f.failEvery == 0 {
		writeProblem(w, http.StatusInternalServerError, "internal")
		return true
	}
	return false
}

// advance admits the head of the line into free slots; called with f.mu held.
func (f *fake) advance() {
	for !f.neverAdmit && f.active < f.maxActive && f.serving < f.last {
		f.serving++
		if tk := &f.tickets[f.serving-1]; !tk.left {
			tk.status = "ADMITTED"
			f.active++
			f.maxActiveObserved = max(f.maxActiveObserved, f.active)
		}
	}
}

func (f *fake) ticketJSON(n int64) map[string]any {
	tk := f.tickets[n-1]
	serving := f.serving
	switch f.broken {
	case brokenQueuedBelow:
		serving = n + 1
	case brokenAdmittedAbove:
		serving = n - 1
	}
	pos := int64(0)
	if tk.status == "QUEUED" {
		pos = n - f.serving
	}
	return map[string]any{
		"ticket_id": "t" + strconv.FormatInt(n, 10), "event_id": "ev", "status": tk.status, "number": n,
		"position": pos, "waiting": f.last - f.serving, "serving": serving, "eta_s": 1,
		"poll_after_s": f.pollAfter, "admission_token": "", "admitted_until": nil,
	}
}

func (f *fake) join(w http.ResponseWriter, r *http.Request, label string) {
	var body struct {
		UserID string `json:"user_id"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeProblem(w, http.StatusBadRequest, "invalid_body")
			return
		}
		if body.UserID != "" && r.Header.Get("Authorization") != "Bearer "+testAdminKey {
			writeProblem(w, http.StatusUnauthorized, "unauthorized")
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail(w, label) {
		return
	}
	if f.failJoins > 0 {
		f.failJoins--
		if f.failJoinsRetryAfter != "" {
			w.Header().Set("Retry-After", f.failJoinsRetryAfter)
		}
		writeProblem(w, http.StatusServiceUnavailable, "store_unavailable")
		return
	}
	if n, ok := f.users[body.UserID]; ok && body.UserID != "" {
		writeJSONBody(w, http.StatusOK, f.ticketJSON(n))
		return
	}
	f.keys[r.Header.Get("Idempotency-Key")]++
	if f.downAfter > 0 && int(f.last)+1 == f.downAfter {
		f.down[f.downLabel], f.neverAdmit = true, false
	}
	f.last++
	n := f.last
	if f.admitAfter > 0 && n >= f.admitAfter {
		f.neverAdmit = false
	}
	f.tickets = append(f.tickets, fakeTicket{status: "QUEUED", label: label})
	f.joinsBy[label]++
	if body.UserID != "" {
		f.users[body.UserID] = n
	}
	switch f.broken {
	case brokenQueuedBelow:
	case brokenAdmittedAbove:
		f.serving = n
		f.tickets[n-1].status = "ADMITTED"
	default:
		f.advance()
	}
	writeJSONBody(w, http.StatusCreated, f.ticketJSON(n))
}

// lookup returns the number of the ticket named in the path, or 0; called with f.mu held.
func (f *fake) lookup(r *http.Request, label string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(r.PathValue("tid"), "t"), 10, 64)
	if err != nil || n < 1 || n > f.last || f.tickets[n-1].left {
		return 0
	}
	if f.tickets[n-1].label != label {
		f.wrongTarget++
	}
	return n
}

func (f *fake) status(w http.ResponseWriter, r *http.Request, label string) {
	if f.hangStatus {
		<-r.Context().Done() // until the client gives up
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail(w, label) {
		return
	}
	n := f.lookup(r, label)
	if n == 0 {
		writeProblem(w, http.StatusNotFound, "ticket_not_found")
		return
	}
	tk := &f.tickets[n-1]
	if tk.polls++; tk.polls == 1 {
		f.polled++
		if f.notFoundFirstPoll {
			writeProblem(w, http.StatusNotFound, "ticket_not_found")
			return
		}
	}
	if f.loseWhenPolled > 0 && f.polled == f.loseWhenPolled && !f.lost {
		f.lose()
		writeProblem(w, http.StatusNotFound, "ticket_not_found")
		return
	}
	switch f.broken {
	case brokenQueuedBelow:
		if tk.polls >= 2 {
			tk.status = "ADMITTED"
		}
	case brokenAdmittedAbove:
	default:
		f.advance()
	}
	writeJSONBody(w, http.StatusOK, f.ticketJSON(n))
}

// lose forgets the line as a store restarted empty would: every ticket so far answers 404,
// the next failJoins joins answer 503 while the store comes back, and the line admits again.
// Called with f.mu held.
func (f *fake) lose() {
	f.lost = true
	for i := range f.tickets {
		f.tickets[i].left = true
	}
	f.serving, f.active = f.last, 0
	f.users = map[string]int64{}
	f.neverAdmit = false
	f.failJoins = f.failJoinsAfterLoss
}

func (f *fake) leave(w http.ResponseWriter, r *http.Request, label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail(w, label) {
		return
	}
	n := f.lookup(r, label)
	if n == 0 {
		writeProblem(w, http.StatusNotFound, "ticket_not_found")
		return
	}
	tk := &f.tickets[n-1]
	tk.left = true
	if f.broken == notBroken {
		if tk.status == "ADMITTED" {
			f.active--
		}
		f.advance()
	}
	tk.status = "LEFT"
	w.WriteHeader(http.StatusNoContent)
}

// testConfig is a fast configuration for the fake: short back-offs, a minimal poll wait.
func testConfig(users int, targets ...string) Config {
	cfg := DefaultConfig()
	cfg.Targets = targets
	cfg.Event = "ev"
	cfg.Users = users
	cfg.Concurrency = 64
	cfg.Deadline = 30 * time.Second
	cfg.PollScale = 0.001
	cfg.AdminKey = testAdminKey
	cfg.retryBase = 5 * time.Millisecond
	return cfg
}

func run(t *testing.T, cfg Config) Report {
	t.Helper()
	var progress bytes.Buffer
	rep, err := Run(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("progress:\n%s", progress.String())
	var summary bytes.Buffer
	rep.writeSummary(&summary)
	t.Logf("summary:\n%s", summary.String())
	return rep
}

func (f *fake) snapshot() (puts int, maxActiveObserved, active int64, joinsBy map[string]int, wrongTarget int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	joins := map[string]int{}
	for k, v := range f.joinsBy {
		joins[k] = v
	}
	return f.puts, f.maxActiveObserved, f.active, joins, f.wrongTarget
}

func TestAllUsersAdmitted(t *testing.T) {
	f := newFake(0)
	f.exists = false // created by the run
	url := f.serve(t, "a")
	const users = 300
	cfg := testConfig(users, url)
	cfg.MaxActive = 50
	rep := run(t, cfg)

	if rep.Admitted != users || rep.Joined != users || rep.Left != users {
		t.Errorf("admitted %d joined %d left %d, want %d each", rep.Admitted, rep.Joined, rep.Left, users)
	}
	if rep.Lost != 0 || rep.Failed != 0 || rep.FIFOViolations != 0 || len(rep.Errors) != 0 || len(rep.Terminal) != 0 {
		t.Errorf("lost %d failed %d fifo %d errors %v terminal %v, want none", rep.Lost, rep.Failed, rep.FIFOViolations, rep.Errors, rep.Terminal)
	}
	if p := rep.Problems(); len(p) != 0 {
		t.Errorf("problems %v", p)
	}
	// Not that anyone polled: the fake admits at the join whenever fewer than 50 are in, and a
	// CI run had every user join, leave and free the slot before the next came (max active
	// seen 1, 0 polls). The tests of a smaller max_active need the polls to admit anyone.
	if rep.JoinLatencyMS.Count != users || rep.JoinsPerS <= 0 {
		t.Errorf("join latency count %d joins/s %f", rep.JoinLatencyMS.Count, rep.JoinsPerS)
	}
	if rep.MaxActive != 50 || rep.MaxActiveSeen < 1 || rep.MaxActiveSeen > 50 {
		t.Errorf("max_active %d max_active_seen %d", rep.MaxActive, rep.MaxActiveSeen)
	}
	// A join and a leave each, and the polls: how many users poll depends on how soon the fake
	// admits them (one admitted at its join polls not at all: a CI run saw 66 polls of 300).
	if want := int64(2*users) + rep.StatusLatencyMS.Count; rep.Requests != want {
		t.Errorf("requests %d, want %d (joins, leaves and %d polls)", rep.Requests, want, rep.StatusLatencyMS.Count)
	}
	if rep.DeadlineReached {
		t.Error("deadline reached")
	}
	puts, _, active, _, _ := f.snapshot()
	if puts != 1 || active != 0 {
		t.Errorf("fake: puts %d active %d, want 1 and 0", puts, active)
	}
}

func TestExistingEventIsNotClobbered(t *testing.T) {
	f := newFake(7)
	url := f.serve(t, "a")
	cfg := testConfig(50, url)
	cfg.AdminKey = "" // not needed for an existing event
	cfg.MaxActive = 999
	rep := run(t, cfg)
	if puts, _, _, _, _ := f.snapshot(); puts != 0 {
		t.Errorf("PUT %d times on an existing event", puts)
	}
	if rep.MaxActive != 7 || rep.Admitted != 50 {
		t.Errorf("max_active %d admitted %d, want 7 and 50", rep.MaxActive, rep.Admitted)
	}
}

func TestMissingEventWithoutAdminKey(t *testing.T) {
	f := newFake(7)
	f.exists = false
	cfg := testConfig(5, f.serve(t, "a"))
	cfg.AdminKey = ""
	if _, err := Run(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "admin key") {
		t.Fatalf("Run: %v, want an error about the admin key", err)
	}
}

func TestMaxActiveSeenWithinLimit(t *testing.T) {
	f := newFake(5)
	const users = 40
	cfg := testConfig(users, f.serve(t, "a"))
	cfg.Hold = 50 * time.Millisecond // long enough for the first admissions to overlap
	cfg.Concurrency = 32
	rep := run(t, cfg)
	_, observed, _, _, _ := f.snapshot()
	if rep.Admitted != users || rep.Lost != 0 || rep.Left != users {
		t.Errorf("admitted %d left %d lost %d", rep.Admitted, rep.Left, rep.Lost)
	}
	if rep.MaxActiveSeen < 2 || rep.MaxActiveSeen > 5 || rep.MaxActiveSeen > observed {
		t.Errorf("max_active_seen %d, fake max 5, fake observed %d", rep.MaxActiveSeen, observed)
	}
	if rep.MaxActive != 5 {
		t.Errorf("max_active %d, want 5", rep.MaxActive)
	}
	if rep.TimeToAdmissionS.Max <= 0 || rep.TimeToAdmissionS.P50 > rep.TimeToAdmissionS.Max {
		t.Errorf("time to admission %+v", rep.TimeToAdmissionS)
	}
}

func TestFIFOViolationsDetected(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode brokenMode
		kind string
	}{
		{"queued below serving", brokenQueuedBelow, "queued_at_or_below_serving_seen"},
		{"admitted above serving", brokenAdmittedAbove, "admitted_above_serving"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(1000)
			f.broken = tc.mode
			const users = 40
			jsonPath := filepath.Join(t.TempDir(), "report.json")
			var stdout, stderr bytes.Buffer
			err := Command(context.Background(), []string{
				"--target", f.serve(t, "a"), "--event", "ev", "--users", strconv.Itoa(users),
				"--poll-scale", "0.001", "--json", jsonPath,
			}, &stdout, &stderr)
			t.Logf("stdout:\n%s", stdout.String())
			if err == nil || !strings.Contains(err.Error(), "FIFO") {
				t.Fatalf("Command: %v, want an error naming FIFO violations", err)
			}
			rep := readReport(t, jsonPath)
			if rep.FIFOViolations < users {
				t.Errorf("fifo_violations %d, want >= %d", rep.FIFOViolations, users)
			}
			if len(rep.FIFOExamples) != maxFIFOExamples {
				t.Errorf("%d examples, want %d", len(rep.FIFOExamples), maxFIFOExamples)
			}
			for _, ex := range rep.FIFOExamples {
				if ex.Kind != tc.kind {
					t.Errorf("example %+v, want kind %s", ex, tc.kind)
				}
			}
			if rep.Admitted != users || rep.Lost != 0 {
				t.Errorf("admitted %d lost %d", rep.Admitted, rep.Lost)
			}
		})
	}
}

func TestServerErrorsCounted(t *testing.T) {
	f := newFake(50)
	f.failEvery = 7
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	err := Command(context.Background(), []string{
		"--target", f.serve(t, "a"), "--event", "ev", "--users", "200", "--concurrency", "32",
		"--poll-scale", "0.001", "--json", jsonPath,
	}, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err == nil || !strings.Contains(err.Error(), "5xx") {
		t.Fatalf("Command: %v, want an error naming 5xx answers", err)
	}
	rep := readReport(t, jsonPath)
	if rep.Errors["500"] == 0 || rep.ServerErrors() != rep.Errors["500"] {
		t.Errorf("errors %v, want 500s", rep.Errors)
	}
	// Joins and polls are retried, so nearly everyone still gets in; nobody is lost.
	if rep.Lost != 0 || rep.Admitted+rep.Failed != 200 || rep.Admitted < 190 {
		t.Errorf("lost %d admitted %d failed %d", rep.Lost, rep.Admitted, rep.Failed)
	}
	if rep.FIFOViolations != 0 {
		t.Errorf("fifo_violations %d", rep.FIFOViolations)
	}
}

func TestDeadlineHonoured(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(f *fake, cfg *Config)
	}{
		{"never admitted", func(f *fake, cfg *Config) { f.neverAdmit = true }},
		{"status hangs", func(f *fake, cfg *Config) { f.neverAdmit, f.hangStatus = true, true }},
		{"rate too low", func(f *fake, cfg *Config) { f.neverAdmit, cfg.Rate = true, 20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(1)
			f.neverAdmit = true
			cfg := testConfig(100, f.serve(t, "a"))
			cfg.Deadline = 300 * time.Millisecond
			tc.set(f, &cfg)
			start := time.Now()
			rep := run(t, cfg)
			if elapsed := time.Since(start); elapsed > cfg.Deadline+2*time.Second {
				t.Errorf("Run took %s with a deadline of %s", elapsed, cfg.Deadline)
			}
			if rep.Lost != 100 || rep.Admitted != 0 || !rep.DeadlineReached {
				t.Errorf("lost %d admitted %d deadline_reached %v, want 100, 0, true", rep.Lost, rep.Admitted, rep.DeadlineReached)
			}
			if len(rep.Errors) != 0 { // the deadline cutting requests short is not an error
				t.Errorf("errors %v", rep.Errors)
			}
		})
	}
}

func TestDeadlineFailsCommand(t *testing.T) {
	f := newFake(1)
	f.neverAdmit = true
	var stdout, stderr bytes.Buffer
	err := Command(context.Background(), []string{
		"--target", f.serve(t, "a"), "--event", "ev", "--users", "10", "--deadline", "200ms", "--poll-scale", "0.001",
	}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "10 users lost") {
		t.Fatalf("Command: %v, want 10 users lost", err)
	}
	if !strings.Contains(stdout.String(), "lost        10") {
		t.Errorf("summary:\n%s", stdout.String())
	}
}

func TestTwoTargets(t *testing.T) {
	f := newFake(10) // one line behind two instances
	a, b := f.serve(t, "a"), f.serve(t, "b")
	cfg := testConfig(100, a, b+"/")
	cfg.Named = true
	cfg.UserPrefix = "u"
	rep := run(t, cfg)
	_, _, _, joins, wrong := f.snapshot()
	if joins["a"] != 50 || joins["b"] != 50 {
		t.Errorf("joins per target %v, want 50 each", joins)
	}
	if wrong != 0 {
		t.Errorf("%d status/leave requests went to another target than the join", wrong)
	}
	if rep.Admitted != 100 || rep.Lost != 0 || rep.FIFOViolations != 0 || len(rep.Errors) != 0 {
		t.Errorf("admitted %d lost %d fifo %d errors %v", rep.Admitted, rep.Lost, rep.FIFOViolations, rep.Errors)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range 100 {
		if _, ok := f.users[fmt.Sprintf("u-%d", i)]; !ok {
			t.Errorf("named user u-%d never joined", i)
		}
	}
}

func TestNamedJoinIsIdempotent(t *testing.T) {
	// Two runs with the same prefix: the second gets the users' existing tickets back (200).
	f := newFake(1000)
	cfg := testConfig(20, f.serve(t, "a"))
	cfg.Named = true
	cfg.UserPrefix = "same"
	cfg.Hold = time.Hour // stay admitted...
	cfg.Deadline = 500 * time.Millisecond
	first := run(t, cfg)
	if first.Admitted != 20 {
		t.Fatalf("first run admitted %d", first.Admitted)
	}
	cfg.Hold = 0
	cfg.Deadline = 30 * time.Second
	second := run(t, cfg)
	if second.Admitted != 20 || second.Joined != 20 {
		t.Errorf("second run admitted %d joined %d", second.Admitted, second.Joined)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last != 20 {
		t.Errorf("%d tickets made, want 20", f.last)
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Command(context.Background(), []string{"--help"}, &stdout, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Command --help: %v, want flag.ErrHelp", err)
	}
	for _, name := range []string{"--target", "--event", "--users", "--rate", "--concurrency", "--deadline", "--json", "--hold",
		"--admin-key", "--max-active", "--admit-rate", "--session-ttl", "--claim-ttl", "--user-prefix", "--named", "--poll-scale", "--push"} {
		if !strings.Contains(stdout.String(), "  "+name) {
			t.Errorf("usage lacks %s:\n%s", name, stdout.String())
		}
	}
}

func TestBadArguments(t *testing.T) {
	t.Setenv("WAITROOM_ADMIN_KEY", "")
	for _, args := range [][]string{
		{"--event", "ev"},                        // no target
		{"--target", "http://x"},                 // no event
		{"--target", "ftp://x", "--event", "ev"}, // bad scheme
		{"--target", "http://x", "--event", "ev", "--users", "0"},
		{"--target", "http://x", "--event", "ev", "--named", "--admin-key", ""},
		{"--target", "http://x", "--event", "ev", "extra"},
		{"--nope"},
	} {
		var stdout, stderr bytes.Buffer
		var ue cmdflag.UsageError
		if err := Command(context.Background(), args, &stdout, &stderr); !errors.As(err, &ue) {
			t.Errorf("Command %q: %v, want a usage error", args, err)
		}
	}
}

func TestAdminKeyFromEnvironment(t *testing.T) {
	t.Setenv("WAITROOM_ADMIN_KEY", testAdminKey)
	f := newFake(0)
	f.exists = false
	var stdout, stderr bytes.Buffer
	err := Command(context.Background(), []string{
		"--target", f.serve(t, "a"), "--event", "ev", "--users", "30", "--max-active", "3", "--poll-scale", "0.001",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("Command: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `created event "ev"`) {
		t.Errorf("stderr does not say the event was created:\n%s", stderr.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.puts != 1 || f.maxActive != 3 {
		t.Errorf("puts %d max_active %d, want 1 and 3", f.puts, f.maxActive)
	}
}

func TestJSONReportShape(t *testing.T) {
	f := newFake(10)
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	if err := Command(context.Background(), []string{
		"--target", f.serve(t, "a"), "--event", "ev", "--users", "20", "--poll-scale", "0.001", "--json", jsonPath,
	}, &stdout, &stderr); err != nil {
		t.Fatalf("Command: %v", err)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"joins_per_s", "join_latency_ms", "status_latency_ms", "time_to_admission_s", "errors",
		"requests", "admitted", "terminal", "lost", "users", "duration_s", "fifo_violations", "fifo_examples",
		"max_active_seen", "max_active"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	lat, _ := m["join_latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p99", "p999", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("join_latency_ms lacks %q", k)
		}
	}
	if !bytes.Contains(b, []byte("\n  \"")) {
		t.Error("report is not indented")
	}
}

func readReport(t *testing.T, path string) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestProgressLine(t *testing.T) {
	r := newRunner(testConfig(10, "http://x").WithDefaults())
	r.start = time.Now()
	r.end = r.start.Add(1500 * time.Millisecond)
	r.joined.Store(8)
	r.admitted.Store(6)
	r.done.Store(5)
	var b bytes.Buffer
	writeProgress(&b, r, true, 120, true)
	if got := b.String(); !strings.HasPrefix(got, "\r[====================                    ]  50%     1.5s  joined 8/10  admitted 6  done 5  errors 0") ||
		!strings.HasSuffix(got, "\n") {
		t.Errorf("tty line %q", got)
	}
	b.Reset()
	writeProgress(&b, r, false, 0, true)
	if got := b.String(); got != "crowd:    1.5s  joined 8/10  admitted 6  done 5  errors 0\n" {
		t.Errorf("plain line %q", got)
	}
}

func TestTargetFlagRepeatsAndSplits(t *testing.T) {
	var l targetList
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&l, "target", "")
	if err := fs.Parse([]string{"--target", "http://a, http://b", "--target", "http://c", "--target", ","}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a", "http://b", "http://c"}; !slices.Equal(l, want) {
		t.Fatalf("targets %q, want %q", l, want)
	}
}

// TestSummaryWithoutPolls: a crowd whose users polled nothing (all on push) says so, instead of
// a line of zero latencies.
func TestSummaryWithoutPolls(t *testing.T) {
	var b strings.Builder
	Report{Users: 2, Joined: 2}.writeSummary(&b)
	if s := b.String(); !strings.Contains(s, "  status      no polls\n") || strings.Contains(s, "0 polls; latency") {
		t.Fatalf("summary:\n%s", s)
	}
}
