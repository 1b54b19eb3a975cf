package crowd

import (
	"strings"
	"testing"
	"time"
)

// TestBookUsersOnTwoInstances: --book users on two instances of one line buy a small seat map
// out: no seat oversold or booked twice (from the clients' bookings and the server's final
// seat map), the event sold out, no 5xx, and max_active_seen within max_active. (A user counts
// from its ADMITTED to sending its booking, which ends its session. Counted until the booking's
// answer, a user whose booking the server had committed could overlap the next one admitted
// into its slot: 2,001 of 2,000 in a loaded run of 20,000 users; this small run does not
// reproduce that timing, it checks the book mode end to end.)
func TestBookUsersOnTwoInstances(t *testing.T) {
	proxies := startScaleOut(t, 2)
	const users, seats = 80, 60
	cfg := testConfig(users, "http://"+proxies[0].Addr(), "http://"+proxies[1].Addr())
	cfg.Book, cfg.Seats = true, seats
	cfg.MaxActive, cfg.AdmitRate = 4, 1000
	cfg.PollScale = 1
	cfg.Deadline = time.Minute
	rep := run(t, cfg)
	if p := rep.Problems(); len(p) > 0 {
		t.Fatalf("problems: %s", strings.Join(p, "; "))
	}
	b := rep.Book
	if b == nil {
		t.Fatal("no book report")
	}
	if b.Oversold != 0 || b.DoubleBooked != 0 {
		t.Errorf("oversold %d double booked %d", b.Oversold, b.DoubleBooked)
	}
	if b.SeatsBooked != seats || b.ServerSold != seats || !b.ServerSoldOut {
		t.Errorf("booked %d seats, server sold %d (sold out %v), want all %d", b.SeatsBooked, b.ServerSold, b.ServerSoldOut, seats)
	}
	if rep.MaxActiveSeen < 1 || rep.MaxActiveSeen > cfg.MaxActive {
		t.Errorf("max_active_seen %d, max_active %d", rep.MaxActiveSeen, cfg.MaxActive)
	}
}
