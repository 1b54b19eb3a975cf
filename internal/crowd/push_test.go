package crowd

import (
	"testing"
	"time"
)

// TestPushAgainstRealInstance runs --push users against an embedded instance with its push
// hub: every queued user is admitted by a push message, none polls.
func TestPushAgainstRealInstance(t *testing.T) {
	base := startInstance(t)

	const users = 300
	cfg := testConfig(users, base)
	cfg.Push = true
	cfg.MaxActive = 20
	cfg.AdmitRate = 1000
	// Sessions held a while, so that the 20 slots are full while 64 users join at once and
	// most of them wait: with sessions that end at once, every join can find a free slot and
	// nobody is left to be told by push (how many wait depends on the timing).
	cfg.Hold = 100 * time.Millisecond
	cfg.PollScale = 1 // a fallback would poll at the real pace and show in the time taken
	rep := run(t, cfg)
	if rep.Admitted != users || rep.Lost != 0 || len(rep.Problems()) != 0 {
		t.Fatalf("admitted %d lost %d problems %v errors %v", rep.Admitted, rep.Lost, rep.Problems(), rep.Errors)
	}
	if rep.PushLatencyMS == nil || rep.PushFallbacks != 0 || rep.PushAdmitted == 0 || rep.PushLatencyMS.Count != rep.PushAdmitted {
		t.Fatalf("push: latency %+v admitted %d fallbacks %d", rep.PushLatencyMS, rep.PushAdmitted, rep.PushFallbacks)
	}
	// Users admitted at join never wait; every other one was told by push: nobody polled.
	if rep.StatusLatencyMS.Count != 0 || rep.PushAdmitted < users/2 {
		t.Errorf("%d status polls (want none), %d admitted by push", rep.StatusLatencyMS.Count, rep.PushAdmitted)
	}
}

// TestPushFallsBackToPolling: against an instance without the WebSocket route, users poll
// and are admitted all the same; the failed upgrades are reported, not counted as 5xx.
func TestPushFallsBackToPolling(t *testing.T) {
	f := newFake(5)
	const users = 40
	cfg := testConfig(users, f.serve(t, "a"))
	cfg.Push = true
	rep := run(t, cfg)
	if rep.Admitted != users || rep.Lost != 0 || len(rep.Problems()) != 0 {
		t.Fatalf("admitted %d lost %d problems %v", rep.Admitted, rep.Lost, rep.Problems())
	}
	// Every user queued at join (the fake admits a few at once) tried the socket and polled.
	if rep.PushFallbacks == 0 || rep.Errors["push_404"] != rep.PushFallbacks || rep.PushAdmitted != 0 {
		t.Errorf("fallbacks %d errors %v push admitted %d", rep.PushFallbacks, rep.Errors, rep.PushAdmitted)
	}
}
