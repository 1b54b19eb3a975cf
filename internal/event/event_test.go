package event

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
)

func TestETARate(t *testing.T) {
	for _, c := range []struct {
		name      string
		measured  float64
		maxActive int64
		ttl       time.Duration
		admitRate float64
		want      float64
	}{
		{"measured wins", 50, 100, 100 * time.Second, 0, 50},
		{"a stuck line still turns over within the session TTL", 1e-9, 100, 100 * time.Second, 0, 1},
		{"never above admit_rate", 500, 10_000, time.Second, 200, 200},
		{"no measurement yet, admit_rate caps the turnover", 0, 10_000, time.Second, 20, 20},
		{"no measurement yet: admit_rate", 0, 2, 300 * time.Second, 10, 10},
		{"the default TTL", 0, 300, 0, 0, 1},
	} {
		e := Event{ID: "e", MaxActive: c.maxActive, SessionTTL: c.ttl, AdmitRate: c.admitRate}.WithDefaults()
		if got := e.ETARate(c.measured); got != c.want {
			t.Errorf("%s: ETARate = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestETA(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	e := Event{ID: "e", MaxActive: 10, SessionTTL: 10 * time.Second}.WithDefaults() // turnover 1/s
	if got := e.ETA(30, 0, 2, now); got != 15 {
		t.Errorf("ETA(30 at 2/s) = %d, want 15", got)
	}
	if got := e.ETA(0, 0, 2, now); got != -1 {
		t.Errorf("ETA of position 0 = %d, want -1", got)
	}
	e.OpensAt = now.Add(90 * time.Second)
	if got := e.ETA(30, 0, 2, now); got != 105 {
		t.Errorf("ETA before opening = %d, want 15 + 90", got)
	}
	e.OpensAt, e.Paused = time.Time{}, true
	if got := e.ETA(30, 0, 2, now); got != -1 {
		t.Errorf("ETA of a paused line = %d, want -1: nobody can tell when it resumes", got)
	}
	// Until the room turns over (nothing measured) with admit_rate set, the free slots fill at
	// admit_rate and the rest wait for the turnover (helper-83: a room of 2 told 1 s for ~150 s).
	small := Event{ID: "e", MaxActive: 2, SessionTTL: 300 * time.Second, AdmitRate: 10}.WithDefaults()
	for _, c := range []struct {
		position, serving int64
		measured          float64
		want              int64
	}{
		{1, 2, 0, 150},    // the room is full: one slot each 150 s
		{3, 2, 0, 450},    //
		{1, 0, 0, 1},      // two free slots at 10/s
		{3, 0, 0, 151},    // 2 at 10/s, then one at the turnover
		{3, 2, 0.5, 6},    // measured: its pace, within admit_rate
		{3, 2, 1e-9, 450}, // a stuck line: the turnover
	} {
		if got := small.ETA(c.position, c.serving, c.measured, now); got != c.want {
			t.Errorf("room of 2 at admit_rate 10: ETA(position %d, serving %d, measured %v) = %d, want %d",
				c.position, c.serving, c.measured, got, c.want)
		}
	}
	big := Event{ID: "e", MaxActive: 1000, SessionTTL: 300 * time.Second, AdmitRate: 50}.WithDefaults()
	if got := big.ETA(1500, 0, 0, now); got != 170 {
		t.Errorf("room of 1,000 at 50/s: ETA(1,500) = %d, want 20 s for the free slots + 150 s for 500 at 3.33/s", got)
	}
	tiny := Event{ID: "e", MaxActive: 1, SessionTTL: 86400 * time.Second, AdmitRate: 1e-300}.WithDefaults()
	if got := tiny.ETA(1_000_000, 0, 0, now); got <= 0 || got > 1<<31 {
		t.Errorf("ETA at a tiny admit_rate = %d, want a bounded positive figure", got)
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "concert-2026_x": true, "0": true, "": false, "-a": false, "A": false,
		"a{b}": false, "a/b": false, string(make([]byte, 65)): false,
		"a234567890123456789012345678901234567890123456789012345678901234":  true,
		"a2345678901234567890123456789012345678901234567890123456789012345": false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
	// The hand-written check answers as IDRule's regexp does: every string of up to 3 bytes
	// over an alphabet of the classes' edges, and ids around the length limit.
	rule := regexp.MustCompile(IDRule)
	alphabet := []byte("az09_-A/.{\x00\xff ")
	var all func(prefix string, n int)
	all = func(prefix string, n int) {
		if got, want := ValidID(prefix), rule.MatchString(prefix); got != want {
			t.Errorf("ValidID(%q) = %v, the regexp %v", prefix, got, want)
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			all(prefix+string([]byte{c}), n-1)
		}
	}
	all("", 3)
	for _, n := range []int{62, 63, 64, 65, 66} {
		for _, id := range []string{"a" + strings.Repeat("b", n-1), "_" + strings.Repeat("b", n-1), strings.Repeat("b", n-1) + "A"} {
			if got, want := ValidID(id), rule.MatchString(id); got != want {
				t.Errorf("ValidID of %d bytes %q… = %v, the regexp %v", n, id[:3], got, want)
			}
		}
	}
}

func TestWithDefaults(t *testing.T) {
	e := Event{ID: "e", MaxActive: 1, Seats: []string{"A-1", "A-2"}, SessionTTL: 1500 * time.Millisecond}.WithDefaults()
	if e.SessionTTL != time.Second || e.ClaimTTL != DefaultClaimTTL || e.MaxPerBooking != DefaultMaxPerBooking ||
		e.HoldTTL != DefaultHoldTTL || e.Capacity != 2 {
		t.Fatalf("WithDefaults = %+v", e)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	base := Event{ID: "e", MaxActive: 1}
	for _, c := range []struct {
		mod  func(*Event)
		want string
	}{
		{func(e *Event) { e.ID = "Bad" }, "event id"},
		{func(e *Event) { e.MaxActive = 0 }, "max_active"},
		{func(e *Event) { e.MaxActive = MaxMaxActive + 1 }, "max_active"},
		{func(e *Event) { e.AdmitRate = -1 }, "admit_rate"},
		{func(e *Event) { e.SessionTTL = 2 * MaxTTL }, "session_ttl_s"},
		{func(e *Event) { e.ClaimTTL = 2 * time.Second }, "claim_ttl_s"},
		{func(e *Event) { e.Name = "a\x00b" }, "control characters"},
		{func(e *Event) { e.Name = strings.Repeat("x", MaxName+1) }, "name"},
		{func(e *Event) { e.OpensAt = time.Unix(100, 0); e.ClosesAt = time.Unix(50, 0) }, "closes_at"},
		{func(e *Event) { e.Capacity = MaxCapacity + 1 }, "capacity"},
		{func(e *Event) { e.Seats = []string{"A-1", "A-1"} }, "twice"},
		{func(e *Event) { e.Seats = []string{"A 1"} }, "seat"},
		{func(e *Event) { e.Seats = []string{"A-1"}; e.Capacity = 5 }, "capacity must equal"},
		{func(e *Event) { e.MaxPerBooking = MaxPerBookingCap + 1 }, "max_per_booking"},
		{func(e *Event) { e.HoldTTL = 2 * MaxTTL }, "hold_ttl_s"},
		{func(e *Event) { e.RedirectURL = "javascript:alert(1)" }, "redirect_url"},
		{func(e *Event) { e.RedirectURL = "/relative" }, "redirect_url"},
		{func(e *Event) { e.SessionMax = 2 * MaxTTL }, "session_max_s"},
		{func(e *Event) { e.MaxPerUser = -1 }, "max_per_user"},
		{func(e *Event) { e.Limits.JoinsPerClient = -1 }, "limits.joins_per_client"},
		{func(e *Event) { e.Limits.PushPerClient = MaxLimit + 1 }, "limits.push_per_client"},
		{func(e *Event) { e.Limits.JoinWindow = 2 * time.Hour }, "join_window_s"},
	} {
		e := base
		c.mod(&e)
		err := e.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %q", e, err, c.want)
		}
	}
}

func TestValidateAcceptsHTTPRedirectsAndDefaults(t *testing.T) {
	for _, u := range []string{"", "https://shop.example/x?y=1", "http://localhost:3000/"} {
		e := Event{ID: "e", MaxActive: 1, RedirectURL: u}.WithDefaults()
		if err := e.Validate(); err != nil {
			t.Errorf("Validate with redirect_url %q: %v", u, err)
		}
		if e.SessionMax != DefaultSessionMax || e.Limits.JoinsPerClient != DefaultJoinsPerClient ||
			e.Limits.JoinWindow != DefaultJoinWindow || e.Limits.PollsPerTicket != DefaultPollsPerTicket {
			t.Errorf("defaults not applied: %+v", e)
		}
	}
}

func TestSeatMapExpand(t *testing.T) {
	seats, err := SeatMap{Rows: []string{"A", "B"}, PerRow: 3}.Expand()
	if err != nil || strings.Join(seats, ",") != "A-01,A-02,A-03,B-01,B-02,B-03" {
		t.Fatalf("Expand = %v, %v", seats, err)
	}
	if _, err := (SeatMap{Rows: []string{"A"}, PerRow: 0}).Expand(); err == nil {
		t.Fatal("per_row 0 expanded")
	}
}

func TestChallengeValidate(t *testing.T) {
	ext := Challenge{Type: ChallengeExternal, SiteverifyURL: "https://captcha.example/siteverify", Secret: "s"}
	for _, c := range []struct {
		name string
		c    Challenge
		want string // a part of the error, "" = valid
	}{
		{"none", Challenge{}, ""},
		{"pow with the default difficulty", Challenge{Type: ChallengePow}, ""},
		{"pow 40", Challenge{Type: ChallengePow, Difficulty: 40}, ""},
		{"pow 41", Challenge{Type: ChallengePow, Difficulty: 41}, "challenge.difficulty"},
		{"pow -1", Challenge{Type: ChallengePow, Difficulty: -1}, "challenge.difficulty"},
		{"pow with a secret", Challenge{Type: ChallengePow, Secret: "s"}, "challenge.siteverify_url and challenge.secret"},
		{"external", ext, ""},
		{"external without a secret", Challenge{Type: ChallengeExternal, SiteverifyURL: ext.SiteverifyURL}, "challenge.secret"},
		{"external without a URL", Challenge{Type: ChallengeExternal, Secret: "s"}, "challenge.siteverify_url"},
		{"external to a relative URL", Challenge{Type: ChallengeExternal, SiteverifyURL: "/verify", Secret: "s"}, "challenge.siteverify_url"},
		{"external with a difficulty", Challenge{Type: ChallengeExternal, SiteverifyURL: ext.SiteverifyURL, Secret: "s", Difficulty: 3}, "challenge.difficulty"},
		{"no type", Challenge{Difficulty: 3}, "challenge.type is required"},
		{"unknown type", Challenge{Type: "captcha"}, "challenge.type must be"},
	} {
		err := c.c.WithDefaults().Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
	if d := (Challenge{Type: ChallengePow}).WithDefaults().Difficulty; d != DefaultChallengeDifficulty {
		t.Errorf("default difficulty %d", d)
	}
}

// TestEpochIsTheCommitmentsPrefix: an event's epoch, which its challenges are bound to, is the
// first 16 hex characters of its draw's public commitment (the bench reads it from there), ""
// without a seed, and another seed (the event created again) gives another epoch.
func TestEpochIsTheCommitmentsPrefix(t *testing.T) {
	seed := []byte(strings.Repeat("s", draw.SeedLen))
	e := Event{ID: "x", DrawSeed: seed}
	if got, want := e.Epoch(), draw.Commitment(seed)[:16]; got != want {
		t.Fatalf("Epoch() = %q, want %q", got, want)
	}
	if (Event{ID: "x"}).Epoch() != "" {
		t.Fatal("an event without a seed has no epoch")
	}
	again := Event{ID: "x", DrawSeed: []byte(strings.Repeat("t", draw.SeedLen))}
	if again.Epoch() == e.Epoch() {
		t.Fatal("a new seed, a new epoch")
	}
}
