package chaos

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/token"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

var ticketIDs = token.NewTicketIDs(bytes.Repeat([]byte{7}, 32))

// tid is a real ticket id of event "ev".
func tid(gen uint32, n int64) string {
	return ticketIDs.Encode(queue.TicketRef{Event: "ev", Generation: gen, Number: n})
}

func tx(kind string, sent, recv float64, code int, status string, gen uint32, n int64) Exchange {
	x := Exchange{Kind: kind, Sent: at(sent), Recv: at(recv), Code: code, Status: status}
	if n > 0 {
		x.TicketID, x.Generation, x.Number = tid(gen, n), gen, n
	}
	return x
}

// cleanScope is a scenario in which every invariant holds: two line users admitted in order
// (one by poll, one by push), one booking that SQL confirms, one coupon that SQL gives to its
// user, a 503 store_unavailable during the fault, a timeout to the frozen instance.
func cleanScope() Scope {
	return Scope{
		Event: "ev", Campaign: "cp", ClientTimeout: 8 * time.Second,
		Window: Window{On: at(10), Off: at(13), Recovered: at(14), Bound: 10 * time.Second, Stopped: 1},
		SQL: SQLFacts{Capacity: 10, InventorySold: 1, Bookings: map[string][]string{"b1": {"A-01"}},
			Stock: 5, IssuedColumn: 1, CouponRows: 1, Coupons: map[string]CouponOwner{"C1": {"cp", "u3"}}},
		Histories: []*History{
			{Client: "line-1", User: "u1", Event: "ev", Camp: "cp", Exchanges: []Exchange{
				tx("join", 1, 1.1, 201, stQueued, 1, 1),
				tx("status", 2, 2.1, 200, stAdmitted, 1, 1),
				{Kind: "hold", Sent: at(3), Recv: at(3.1), Code: 201},
				{Kind: "book", Sent: at(4), Recv: at(4.1), Code: 201, BookingID: "b1", Seats: []string{"A-01"}},
			}},
			{Client: "line-2", User: "u2", Event: "ev", Camp: "cp", Exchanges: []Exchange{
				tx("join", 1.2, 1.3, 201, stQueued, 1, 2),
				tx("status", 1.5, 1.6, 200, stQueued, 1, 2),
				{Kind: "status", Target: 0, Sent: at(11), Recv: at(11.2), Code: 503, Problem: "store_unavailable"},
				{Kind: "status", Target: 1, Sent: at(11.5), Failure: "timeout"},
				{Kind: "push", Recv: at(5), Code: 200, Status: stAdmitted, TicketID: tid(1, 2), Generation: 1, Number: 2},
				{Kind: "leave", Sent: at(6), Recv: at(6.1), Code: 204},
			}},
			{Client: "entrant-3", User: "u3", Event: "ev", Camp: "cp", Exchanges: []Exchange{
				{Kind: "entry", Sent: at(1), Recv: at(1.1), Code: 202, EntryStatus: "PENDING"},
				{Kind: "entry_status", Sent: at(2), Recv: at(2.1), Code: 200, EntryStatus: stIssued, CouponCode: "C1"},
				{Kind: "entry_status", Sent: at(20), Recv: at(20.1), Code: 200, EntryStatus: stIssued, CouponCode: "C1"},
			}},
			{Client: "sampler", Event: "ev", Camp: "cp", Exchanges: []Exchange{
				{Kind: "event", Sent: at(2), Recv: at(2.1), Code: 200, Active: 2, MaxActive: 2},
			}},
		},
	}
}

func verdicts(s Scope) map[string]Verdict {
	out := map[string]Verdict{}
	for _, inv := range Invariants {
		out[inv.Name] = inv.Check(s)
	}
	return out
}

func TestCleanScopeHolds(t *testing.T) {
	for name, v := range verdicts(cleanScope()) {
		if v.Count != 0 {
			t.Errorf("%s: %s on a clean history", name, v.Detail)
		}
	}
}

func hist(s *Scope, client string) *History {
	for _, h := range s.Histories {
		if h.Client == client {
			return h
		}
	}
	panic(client)
}

// TestCheckersFlagViolations feeds each checker a hand-made history with one violation: it must
// count it (and the other checkers' results are not asserted: one fault often breaks several).
func TestCheckersFlagViolations(t *testing.T) {
	cases := []struct {
		name, invariant string
		want            int
		break_          func(s *Scope)
	}{
		{"SQL sold beyond capacity", "oversold", 1, func(s *Scope) {
			s.SQL.Capacity = 1
			s.SQL.Bookings["b2"] = []string{"A-02"}
		}},
		{"inventory.sold beyond capacity", "oversold", 2, func(s *Scope) { s.SQL.InventorySold = 12 }},
		{"clients booked beyond capacity", "oversold", 1, func(s *Scope) {
			s.SQL.Capacity = 1
			s.SQL.Bookings = map[string][]string{}
			s.SQL.InventorySold = 0
			h := hist(s, "line-2")
			h.add(Exchange{Kind: "book", Code: 201, BookingID: "b2", Seats: []string{"A-02"}})
			h = hist(s, "line-1")
			h.Exchanges[3].Seats = []string{"A-01"}
		}},
		{"one seat booked to two clients", "double_booked", 2, func(s *Scope) {
			hist(s, "line-2").add(Exchange{Kind: "book", Code: 201, BookingID: "b2", Seats: []string{"A-01"}})
		}}, // the seat twice, and b2 is not in SQL
		{"a seat in two SQL bookings", "double_booked", 1, func(s *Scope) { s.SQL.Bookings["b9"] = []string{"A-01"} }},
		{"a booking answered but not in SQL", "double_booked", 1, func(s *Scope) { delete(s.SQL.Bookings, "b1") }},
		{"one code shown to two users", "dup_coupons", 1, func(s *Scope) {
			s.Histories = append(s.Histories, &History{Client: "entrant-4", User: "u4", Camp: "cp", Exchanges: []Exchange{
				{Kind: "entry", Code: 202, EntryStatus: stIssued, CouponCode: "C1"}}})
		}},
		{"one user shown two codes", "dup_coupons", 1, func(s *Scope) {
			hist(s, "entrant-3").add(Exchange{Kind: "entry_status", Code: 200, EntryStatus: stIssued, CouponCode: "C2"})
		}},
		{"a code twice in SQL", "dup_coupons", 1, func(s *Scope) { s.SQL.DupCodes = 1 }},
		{"more coupons in SQL than stock", "issued<=stock", 2, func(s *Scope) { s.SQL.CouponRows = 7 }},
		{"clients issued beyond stock", "issued<=stock", 1, func(s *Scope) {
			s.SQL.Stock, s.SQL.CouponRows, s.SQL.IssuedColumn = 0, 0, 0
		}},
		{"a code of another user", "coupon_owner", 1, func(s *Scope) { s.SQL.Coupons["C1"] = CouponOwner{"cp", "u9"} }},
		{"a code of another campaign", "coupon_owner", 1, func(s *Scope) { s.SQL.Coupons["C1"] = CouponOwner{"other", "u3"} }},
		{"a code not in SQL", "coupon_owner", 1, func(s *Scope) { delete(s.SQL.Coupons, "C1") }},
		{"active above max_active", "active<=max", 1, func(s *Scope) {
			hist(s, "sampler").add(Exchange{Kind: "event", Code: 200, Active: 3, MaxActive: 2})
		}},
		{"queued after a later number was admitted", "fifo", 1, func(s *Scope) {
			s.Histories = append(s.Histories, &History{Client: "line-5", User: "u5", Event: "ev", Exchanges: []Exchange{
				tx("join", 1.4, 1.45, 201, stQueued, 1, 3),
				tx("status", 1.7, 1.8, 200, stAdmitted, 1, 3), // #3 admitted while #2 still waits below
			}})
			hist(s, "line-2").add(tx("status", 1.9, 2.0, 200, stQueued, 1, 2))
		}},
		{"queued after a later number was pushed admitted", "fifo", 1, func(s *Scope) {
			s.Histories = append(s.Histories, &History{Client: "line-5", User: "u5", Event: "ev", Exchanges: []Exchange{
				{Kind: "push", Recv: at(1.55), Code: 200, Status: stAdmitted, TicketID: tid(1, 4), Generation: 1, Number: 4},
			}})
			hist(s, "line-2").add(tx("status", 1.56, 1.6, 200, stQueued, 1, 2))
		}},
		{"one ticket id for two users", "shared_ticket", 1, func(s *Scope) {
			s.Histories = append(s.Histories, &History{Client: "line-6", User: "u6", Event: "ev", Exchanges: []Exchange{
				tx("join", 1.4, 1.45, 201, stQueued, 1, 2)}})
		}},
		{"a waiting ticket 404 on a poll", "lost_tickets", 1, func(s *Scope) {
			h := hist(s, "line-2")
			h.Exchanges = h.Exchanges[:2]
			h.add(Exchange{Kind: "status", Code: 404, Problem: pTicketGone, Sent: at(12), Recv: at(12.1)})
		}},
		{"a waiting ticket told not_found by push", "lost_tickets", 1, func(s *Scope) {
			h := hist(s, "line-2")
			h.Exchanges = h.Exchanges[:2]
			h.add(Exchange{Kind: "push", Code: 404, Problem: pTicketGone, Status: "NOT_FOUND", Recv: at(12)})
		}},
		{"an admitted ticket 404 before its leave", "lost_tickets", 1, func(s *Scope) {
			h := hist(s, "line-1")
			h.Exchanges = h.Exchanges[:2]
			h.add(Exchange{Kind: "status", Code: 404, Problem: pTicketGone})
		}},
		{"a user still waiting at the end", "stuck", 1, func(s *Scope) {
			h := hist(s, "line-2")
			h.Exchanges = h.Exchanges[:2]
		}},
		{"an accepted entry 404", "lost_entries", 1, func(s *Scope) {
			hist(s, "entrant-3").add(Exchange{Kind: "entry_status", Code: 404, Problem: pEntryGone})
		}},
		{"a 500", "5xx", 1, func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Sent: at(11), Code: 500, Problem: "internal_error"})
		}},
		{"a 503 store_unavailable before the fault", "5xx", 1, func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Sent: at(9), Code: 503, Problem: "store_unavailable"})
		}},
		{"a 503 store_unavailable after recovery", "5xx", 1, func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Sent: at(15), Code: 503, Problem: "store_unavailable"})
		}},
		{"a 503 without store_unavailable", "5xx", 1, func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Sent: at(11), Code: 503})
		}},
		{"a timeout on a running instance", "unanswered", 1, func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "book", Target: 0, Sent: at(11), Failure: "timeout"})
		}},
		{"a timeout on the frozen instance after the fault", "unanswered", 1, func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Target: 1, Sent: at(13.5), Failure: "timeout"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := cleanScope()
			c.break_(&s)
			v := verdicts(s)[c.invariant]
			if v.Count != c.want {
				t.Fatalf("%s: count %d (%q), want %d", c.invariant, v.Count, v.Detail, c.want)
			}
			if v.Detail == "" || v.String() == "held" {
				t.Fatalf("%s: a violation without a description", c.invariant)
			}
		})
	}
}

// TestCheckersDoNotOverreach: what looks like a violation but is not.
func TestCheckersDoNotOverreach(t *testing.T) {
	cases := []struct {
		name, invariant string
		change          func(s *Scope)
	}{
		{"queued in a new generation after a line reset", "fifo", func(s *Scope) {
			s.Histories = append(s.Histories, &History{Client: "line-5", User: "u5", Event: "ev", Exchanges: []Exchange{
				tx("join", 20, 20.1, 201, stQueued, 2, 1)}}) // #1 of generation 2 after #2 of generation 1
		}},
		{"a 404 after the user's own leave", "lost_tickets", func(s *Scope) {
			hist(s, "line-2").add(Exchange{Kind: "status", Code: 404, Problem: pTicketGone})
		}},
		{"a 404 after a booking", "lost_tickets", func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Code: 404, Problem: pTicketGone})
		}},
		{"a 404 of an entry never accepted", "lost_entries", func(s *Scope) {
			s.Histories = append(s.Histories, &History{Client: "entrant-7", User: "u7", Camp: "cp", Exchanges: []Exchange{
				{Kind: "entry", Code: 503, Problem: "store_unavailable", Sent: at(11)},
				{Kind: "entry_status", Code: 404, Problem: pEntryGone}}})
		}},
		{"a cancelled request", "unanswered", func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "status", Failure: "cancelled"})
		}},
		{"a timed-out probe (its own short timeout)", "unanswered", func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "probe", Failure: "timeout", Sent: at(12)})
		}},
		{"a 503 shutting_down during the fault", "5xx", func(s *Scope) {
			hist(s, "line-1").add(Exchange{Kind: "push_open", Sent: at(12), Code: 503, Problem: "shutting_down"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := cleanScope()
			c.change(&s)
			if v := verdicts(s)[c.invariant]; v.Count != 0 {
				t.Fatalf("%s: %s", c.invariant, v.Detail)
			}
		})
	}
}

func TestWindowEndWithoutRecovery(t *testing.T) {
	s := cleanScope()
	s.Window.Recovered = time.Time{}
	hist(&s, "line-1").add(Exchange{Kind: "status", Sent: at(22), Code: 503, Problem: "store_unavailable"})
	if v := check5xx(s); v.Count != 0 { // Off 13 + Bound 10 = 23
		t.Fatalf("a 503 within the recovery bound of an unrecovered fault: %s", v.Detail)
	}
	hist(&s, "line-1").add(Exchange{Kind: "status", Sent: at(24), Code: 503, Problem: "store_unavailable"})
	if v := check5xx(s); v.Count != 1 {
		t.Fatalf("a 503 past the bound: count %d", v.Count)
	}
}

func TestTicketRefMatchesToken(t *testing.T) {
	for _, ref := range []queue.TicketRef{{Event: "ev", Generation: 0, Number: 1}, {Event: "ev", Generation: 4294967295, Number: 1 << 40}} {
		g, n, ok := ticketRef(ticketIDs.Encode(ref))
		if !ok || g != ref.Generation || n != ref.Number {
			t.Fatalf("ticketRef(%v) = %d, %d, %v", ref, g, n, ok)
		}
	}
	if _, _, ok := ticketRef("not-a-ticket"); ok {
		t.Fatal("a bad id decoded")
	}
}

func TestWriteTable(t *testing.T) {
	held := make([]Verdict, len(Invariants))
	broken := make([]Verdict, len(Invariants))
	broken[8] = Verdict{16, "16 tickets 404 after 201 (16 waiting, 0 admitted)"}
	rows := []Row{
		{Scenario: "script-flush", Verdicts: held, Recovered: true, Recovery: 120 * time.Millisecond, Bound: 15 * time.Second},
		{Scenario: "redis-restart-empty", Verdicts: broken, Recovered: true, Recovery: 1500 * time.Millisecond, Bound: 15 * time.Second},
		{Scenario: "pg-hang", Verdicts: held, Recovered: false, Bound: 15 * time.Second},
		{Scenario: "sigterm", Err: "taking the fault off: boom", Bound: 15 * time.Second},
	}
	var b strings.Builder
	WriteTable(&b, rows)
	out := b.String()
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "scenario") || !strings.Contains(lines[0], "lost_tickets") || !strings.HasSuffix(strings.TrimSpace(lines[0]), "recovery") {
		t.Fatalf("header: %q", lines[0])
	}
	want := []string{
		"script-flush", "0.1s",
		"FAIL 16", "1.5s",
		"NOT within 15s",
		"redis-restart-empty / lost_tickets: 16 tickets 404 after 201",
		"pg-hang / recovery: no fully successful round",
		"sigterm: did not run: taking the fault off: boom",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	if got := strings.Count(lines[1], "held"); got != len(Invariants) {
		t.Errorf("script-flush row has %d held cells, want %d: %q", got, len(Invariants), lines[1])
	}
	if rows[0].Failed() || !rows[1].Failed() || !rows[2].Failed() || !rows[3].Failed() {
		t.Error("Failed() disagrees with the rows")
	}
}

// TestProxyScenarios runs the on and off steps of the scenarios that work through the fault
// proxies, from the scenario table, against TCP echo servers standing in for Redis and
// PostgreSQL, and checks that each fault is what its name says and is gone after off (and
// after heal).
func TestProxyScenarios(t *testing.T) {
	redisAddr, redisGot := echoServer(t)
	pgAddr, pgGot := echoServer(t)
	rp, err := faultproxy.New(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	pp, err := faultproxy.New(pgAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()
	e := &Env{redisProxy: rp, pgProxy: pp}
	ctx := context.Background()
	step := func(name string, on bool) {
		t.Helper()
		for _, s := range scenarios {
			if s.name == name {
				f := s.off
				if on {
					f = s.on
				}
				if err := f(ctx, e); err != nil {
					t.Fatalf("%s on=%v: %v", name, on, err)
				}
				return
			}
		}
		t.Fatalf("no scenario %s", name)
	}
	dial := func(addr string) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	roundTrip := func(c net.Conn, msg string, within time.Duration) (string, error) {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	reached := func(got <-chan string, want string) {
		t.Helper()
		select {
		case s := <-got:
			if s != want {
				t.Fatalf("the server got %q, want %q", s, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q did not reach the server", want)
		}
	}
	redis := dial(rp.Addr())
	if s, err := roundTrip(redis, "a", 5*time.Second); err != nil || s != "a" {
		t.Fatalf("plain: %q %v", s, err)
	}
	reached(redisGot, "a")

	// redis-latency-500ms: the request arrives at once, the answer 500 ms later.
	step("redis-latency-500ms", true)
	start := time.Now()
	if s, err := roundTrip(redis, "b", 5*time.Second); err != nil || s != "b" {
		t.Fatalf("latency: %q %v", s, err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("latency 500 ms: answered in %s", d)
	}
	reached(redisGot, "b")
	step("redis-latency-500ms", false)
	// redis-latency-3s, taken off while an answer waits: it comes at once.
	step("redis-latency-3s", true)
	if _, err := roundTrip(redis, "c", 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("latency 3 s: answered within 500 ms (%v)", err)
	}
	reached(redisGot, "c")
	step("redis-latency-3s", false)
	_ = redis.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 8)
	if n, err := redis.Read(buf); err != nil || string(buf[:n]) != "c" {
		t.Fatalf("latency off: %q %v", buf[:n], err)
	}

	// pg-hang: the request reaches the server, the answer is held until off.
	pg := dial(pp.Addr())
	step("pg-hang", true)
	if _, err := roundTrip(pg, "d", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("hang: the answer came through (%v)", err)
	}
	reached(pgGot, "d")
	step("pg-hang", false)
	_ = pg.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := pg.Read(buf); err != nil || string(buf[:n]) != "d" {
		t.Fatalf("hang off: %q %v", buf[:n], err)
	}

	// pg-cut: the connection is closed and new ones are refused; off listens again.
	step("pg-cut", true)
	_ = pg.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := pg.Read(buf); err == nil || isTimeout(err) {
		t.Fatalf("cut: the connection is still open (%v)", err)
	}
	if c, err := net.Dial("tcp", pp.Addr()); err == nil {
		c.Close()
		t.Fatal("cut: a new connection was accepted")
	}
	step("pg-cut", false)
	pg = dial(pp.Addr())
	if s, err := roundTrip(pg, "e", 5*time.Second); err != nil || s != "e" {
		t.Fatalf("cut off: %q %v", s, err)
	}
	reached(pgGot, "e")

	// heal, after faults whose off step never ran: all gone.
	step("redis-latency-3s", true)
	step("pg-hang", true)
	step("pg-cut", true)
	if err := e.healProxies(); err != nil {
		t.Fatal(err)
	}
	redis, pg = dial(rp.Addr()), dial(pp.Addr())
	for _, c := range []net.Conn{redis, pg} {
		if s, err := roundTrip(c, "f", time.Second); err != nil || s != "f" {
			t.Fatalf("healed: %q %v", s, err)
		}
	}
}

// echoServer echoes every read and reports what it received.
func echoServer(t *testing.T) (string, <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan string, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got <- string(buf[:n])
					_, _ = c.Write(buf[:n])
				}
			}()
		}
	}()
	return l.Addr().String(), got
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// envBinary is a prebuilt waitroom binary for TestRealScenario (default: built by the test).
const envBinary = "WAITROOM_CHAOS_BINARY"

// TestRealScenario runs the quick SCRIPT FLUSH scenario against 3 real serve processes, its own
// redis-server and database, and checks that the clients did the work the checkers need, that
// every invariant held (the service survives SCRIPT FLUSH today), and that everything started
// is gone afterwards.
func TestRealScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, a database and three serve processes")
	}
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		skipOrFail(t, "redis-server is not installed (scripts/services.sh ensure_redis_binaries)")
	}
	pgURL := sqltest.PostgresServerURL()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if c, err := pgx.Connect(ctx, pgURL); err != nil {
		skipOrFail(t, "PostgreSQL unreachable: "+err.Error())
	} else {
		c.Close(ctx)
	}
	bin := os.Getenv(envBinary)
	if bin == "" {
		bin = buildBinary(t)
	}
	e, err := StartEnv(ctx, EnvConfig{Binary: bin, RedisServer: redisServer, PostgresURL: pgURL, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close) // also on failure; Close is idempotent
	redisAddr, dbName, targets := e.redis.addr(), e.dbName, e.Targets()

	cfg := ShortConfig()
	cfg.LineUsers, cfg.Entrants, cfg.Drain, cfg.Log = 20, 20, 10*time.Second, testLog{t}
	var sc []scenario
	for _, s := range scenarios {
		if s.name == "script-flush" {
			sc = append(sc, s)
		}
	}
	rows, err := runOn(ctx, e, cfg, sc)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteTable(&b, rows)
	t.Logf("\n%s", b.String())
	r := rows[0]
	if r.Err != "" {
		t.Fatal(r.Err)
	}
	a := r.Activity
	t.Logf("activity: %s", a)
	if a.Joined < cfg.LineUsers || a.Admitted == 0 || a.Booked == 0 || a.Entered < cfg.Entrants || a.Issued == 0 || a.Samples == 0 {
		t.Fatalf("the clients did too little for the checkers to mean anything: %s", a)
	}
	if r.Failed() {
		t.Fatalf("script-flush broke an invariant or did not recover:\n%s", b.String())
	}

	e.Close()
	if redisPing(redisAddr) {
		t.Error("redis-server still answers after Close")
	}
	for _, tg := range targets {
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(tg, "http://"), time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Close", tg)
		}
	}
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, dbName).Scan(&n); err != nil || n != 0 {
		t.Errorf("database %s: %d left (%v)", dbName, n, err)
	}
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if sqltest.InCI() {
		t.Fatal(why)
	}
	t.Skip(why)
}

// buildBinary builds cmd/waitroom into the test's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "waitroom")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/waitroom/waitroom/cmd/waitroom")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testLog{}
