package crowd

import (
	"net/http"
	"strings"
	"testing"
)

// TestUsersSolveChallenges: against a real instance, an event with a proof-of-work challenge
// is run unchanged: every user fetches a challenge, solves it as the page does and joins with
// it (one each: every join made a ticket, none was refused), and is admitted. An event that
// takes up a challenge during a run is met the same way: the join refused 401
// challenge_required fetches one and goes on.
func TestUsersSolveChallenges(t *testing.T) {
	base := startInstance(t)
	const users = 40

	putTestEvent(t, base, "pow", `{"max_active":10,"admit_rate":100,"challenge":{"type":"pow","difficulty":8}}`)
	cfg := testConfig(users, base)
	cfg.Event = "pow"
	rep := run(t, cfg)
	if rep.Admitted != users || rep.Failed != 0 || rep.Lost != 0 || len(rep.Errors) != 0 {
		t.Fatalf("admitted %d failed %d lost %d errors %v", rep.Admitted, rep.Failed, rep.Lost, rep.Errors)
	}
	if rep.ChallengesSolved != users || rep.SolveMS == nil || rep.SolveMS.Count != users {
		t.Errorf("%d challenges solved (%+v), want one per user", rep.ChallengesSolved, rep.SolveMS)
	}

	// The event had no challenge when the run read it: the users learn it from the 401.
	putTestEvent(t, base, "late", `{"max_active":10,"admit_rate":100}`)
	cfg.Event = "late"
	r := newRunner(cfg)
	if err := r.setup(t.Context(), new(strings.Builder)); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPatch, base+"/v1/events/late", strings.NewReader(`{"challenge":{"type":"pow","difficulty":6}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	drain(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH: %d", resp.StatusCode)
	}
	if r.pow {
		t.Fatal("the runner read the challenge at setup")
	}
	c := &call{ctx: t.Context(), user: 1, done: make(chan struct{}, 1)}
	go r.worker()
	defer close(r.calls)
	tk, _, out, ok := r.join(c)
	if !ok || tk.TicketID == "" {
		t.Fatalf("join: outcome %d", out)
	}
	if r.solveTime.latency().Count != 1 || r.errors["401"] != 1 {
		t.Errorf("solved %d, errors %v: want one 401 and one solve", r.solveTime.latency().Count, r.errors)
	}
}

// TestUsersPresolve: with Presolve every user solves its challenge before the start and joins
// with it: each user solved exactly one (none again on the clock), all before the start, and
// every user is admitted.
func TestUsersPresolve(t *testing.T) {
	base := startInstance(t)
	const users = 30
	putTestEvent(t, base, "presolve", `{"max_active":10,"admit_rate":100,"challenge":{"type":"pow","difficulty":8}}`)
	cfg := testConfig(users, base)
	cfg.Event = "presolve"
	cfg.Presolve = true
	rep := run(t, cfg)
	if rep.Admitted != users || rep.Failed != 0 || rep.Lost != 0 || len(rep.Errors) != 0 {
		t.Fatalf("admitted %d failed %d lost %d errors %v", rep.Admitted, rep.Failed, rep.Lost, rep.Errors)
	}
	if rep.ChallengesSolved != users || rep.Presolved != users {
		t.Errorf("%d challenges solved, %d before the start: want %d, all before", rep.ChallengesSolved, rep.Presolved, users)
	}
}
