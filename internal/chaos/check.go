package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Window is one scenario's time line as the harness saw it.
type Window struct {
	// On and Off are when the fault was put on and taken off.
	On, Off time.Time
	// Recovered is the end of the first fully successful probe round after Off; zero when none
	// came within Bound.
	Recovered time.Time
	Bound     time.Duration
	// Stopped is the index of an instance the scenario froze (SIGSTOP) between On and Off, whose
	// requests may go unanswered then; -1 for none.
	Stopped int
}

// end is when 503 store_unavailable stops being excused: recovery, or the bound.
func (w Window) end() time.Time {
	if !w.Recovered.IsZero() {
		return w.Recovered
	}
	return w.Off.Add(w.Bound)
}

// SQLFacts are what the database holds for the scenario's event and campaign.
type SQLFacts struct {
	// Capacity and InventorySold are the sums of the event's inventory_slots capacity and sold.
	Capacity, InventorySold int64
	// Bookings maps each CONFIRMED booking id of the event to its seats.
	Bookings map[string][]string
	// Stock and IssuedColumn are campaigns.stock and campaigns.issued; CouponRows counts the
	// campaign's rows of coupons.
	Stock, IssuedColumn, CouponRows int64
	// Coupons maps every coupon code in the database (all campaigns) to its owner.
	Coupons map[string]CouponOwner
	// DupCodes counts codes held by more than one row.
	DupCodes int64
}

// CouponOwner is a coupons row's campaign and user.
type CouponOwner struct{ Campaign, User string }

// Verdict is one invariant's result: Count 0 means it held.
type Verdict struct {
	Count  int
	Detail string
}

func (v Verdict) String() string {
	if v.Count == 0 {
		return "held"
	}
	return v.Detail
}

// Invariants are the table's columns, in order; each checker reads the clients' histories, the
// window and the SQL facts of one scenario.
var Invariants = []struct {
	Name  string
	Check func(Scope) Verdict
}{
	{"oversold", checkOversold},
	{"double_booked", checkDoubleBooked},
	{"dup_coupons", checkDupCoupons},
	{"issued<=stock", checkIssued},
	{"coupon_owner", checkCouponOwner},
	{"active<=max", checkActive},
	{"fifo", checkFIFO},
	{"shared_ticket", checkSharedTickets},
	{"lost_tickets", checkLostTickets},
	{"lost_entries", checkLostEntries},
	{"stuck", checkStuck},
	{"5xx", check5xx},
	{"unanswered", checkUnanswered},
}

// Scope is the input of the checkers.
type Scope struct {
	Histories []*History
	Window    Window
	SQL       SQLFacts
	Event     string // the scenario's event
	Campaign  string // the scenario's campaign
	// ClientTimeout is the clients' request timeout (for the unanswered detail).
	ClientTimeout time.Duration
}

func answered2xx(x Exchange) bool { return x.Code/100 == 2 && x.Failure == "" }

func checkOversold(s Scope) Verdict {
	sqlSeats := 0
	for _, seats := range s.SQL.Bookings {
		sqlSeats += len(seats)
	}
	client := map[string]bool{}
	for _, h := range s.Histories {
		for _, x := range h.Exchanges {
			if x.Kind == "book" && answered2xx(x) {
				for _, seat := range x.Seats {
					client[seat] = true
				}
			}
		}
	}
	c := s.SQL.Capacity
	over := max(0, int64(sqlSeats)-c, s.SQL.InventorySold-c, int64(len(client))-c)
	if over == 0 {
		return Verdict{}
	}
	return Verdict{int(over), fmt.Sprintf("%d over capacity %d (sql seats %d, inventory.sold %d, clients %d)",
		over, c, sqlSeats, s.SQL.InventorySold, len(client))}
}

func checkDoubleBooked(s Scope) Verdict {
	var twiceSQL, twiceClients, notInSQL int
	bySeat := map[string]int{}
	for _, seats := range s.SQL.Bookings {
		for _, seat := range seats {
			bySeat[seat]++
		}
	}
	for _, n := range bySeat {
		if n > 1 {
			twiceSQL++
		}
	}
	owner := map[string]string{}
	seen := map[string]bool{}
	for _, h := range s.Histories {
		for _, x := range h.Exchanges {
			if x.Kind != "book" || !answered2xx(x) {
				continue
			}
			for _, seat := range x.Seats {
				if prev, ok := owner[seat]; ok && prev != x.BookingID {
					twiceClients++
				}
				owner[seat] = x.BookingID
			}
			if !seen[x.BookingID] {
				seen[x.BookingID] = true
				if _, ok := s.SQL.Bookings[x.BookingID]; !ok {
					notInSQL++
				}
			}
		}
	}
	n := twiceSQL + twiceClients + notInSQL
	if n == 0 {
		return Verdict{}
	}
	var parts []string
	if twiceSQL > 0 {
		parts = append(parts, fmt.Sprintf("%d seats in 2 SQL bookings", twiceSQL))
	}
	if twiceClients > 0 {
		parts = append(parts, fmt.Sprintf("%d seats booked to 2 clients", twiceClients))
	}
	if notInSQL > 0 {
		parts = append(parts, fmt.Sprintf("%d bookings answered but not confirmed in SQL", notInSQL))
	}
	return Verdict{n, strings.Join(parts, "; ")}
}

// shownCodes returns, per user of the scenario's campaign, the coupon codes its client was shown.
func shownCodes(s Scope) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, h := range s.Histories {
		if h.Camp != s.Campaign {
			continue
		}
		for _, x := range h.Exchanges {
			if (x.Kind == "entry" || x.Kind == "entry_status") && answered2xx(x) && x.CouponCode != "" {
				if out[h.User] == nil {
					out[h.User] = map[string]bool{}
				}
				out[h.User][x.CouponCode] = true
			}
		}
	}
	return out
}

func checkDupCoupons(s Scope) Verdict {
	users := map[string]map[string]bool{} // code -> users shown it
	twoCodes := 0
	for user, codes := range shownCodes(s) {
		if len(codes) > 1 {
			twoCodes++
		}
		for code := range codes {
			if users[code] == nil {
				users[code] = map[string]bool{}
			}
			users[code][user] = true
		}
	}
	sharedCode := 0
	for _, us := range users {
		if len(us) > 1 {
			sharedCode++
		}
	}
	n := int(s.SQL.DupCodes) + sharedCode + twoCodes
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d codes twice in SQL, %d codes shown to 2 users, %d users shown 2 codes",
		s.SQL.DupCodes, sharedCode, twoCodes)}
}

func checkIssued(s Scope) Verdict {
	issuedUsers := 0
	for _, codes := range shownCodes(s) {
		if len(codes) > 0 {
			issuedUsers++
		}
	}
	st := s.SQL.Stock
	over := max(0, s.SQL.CouponRows-st, s.SQL.IssuedColumn-st, int64(issuedUsers)-st)
	if over == 0 {
		return Verdict{}
	}
	return Verdict{int(over), fmt.Sprintf("%d over stock %d (sql rows %d, issued column %d, clients issued %d)",
		over, st, s.SQL.CouponRows, s.SQL.IssuedColumn, issuedUsers)}
}

func checkCouponOwner(s Scope) Verdict {
	var missing, foreign int
	for user, codes := range shownCodes(s) {
		for code := range codes {
			o, ok := s.SQL.Coupons[code]
			switch {
			case !ok:
				missing++
			case o.User != user || o.Campaign != s.Campaign:
				foreign++
			}
		}
	}
	if missing+foreign == 0 {
		return Verdict{}
	}
	return Verdict{missing + foreign, fmt.Sprintf("%d codes shown belong to another user, %d codes shown are not in SQL", foreign, missing)}
}

func checkActive(s Scope) Verdict {
	n := 0
	var worst, limit int64
	for _, h := range s.Histories {
		for _, x := range h.Exchanges {
			if x.Kind == "event" && x.Code == 200 && x.Failure == "" && x.MaxActive > 0 && x.Active > x.MaxActive {
				n++
				if x.Active > worst {
					worst, limit = x.Active, x.MaxActive
				}
			}
		}
	}
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d samples above max_active (worst %d > %d)", n, worst, limit)}
}

// checkFIFO counts tickets that a client saw still QUEUED in an answer to a request sent after
// another client had received ADMITTED for a later number of the same line generation.
func checkFIFO(s Scope) Verdict {
	type adm struct {
		at     time.Time
		number int64
	}
	type wait struct {
		sent   time.Time
		number int64
		ticket string
	}
	admitted := map[uint32][]adm{}
	waiting := map[uint32][]wait{}
	for _, h := range s.Histories {
		if h.Event != s.Event {
			continue
		}
		for _, x := range h.Exchanges {
			if x.TicketID == "" || x.Number == 0 {
				continue
			}
			switch {
			case x.Kind == "push" && x.Status == stAdmitted,
				(x.Kind == "join" || x.Kind == "status") && answered2xx(x) && x.Status == stAdmitted:
				admitted[x.Generation] = append(admitted[x.Generation], adm{x.Recv, x.Number})
			case (x.Kind == "join" || x.Kind == "status") && answered2xx(x) && x.Status == stQueued:
				waiting[x.Generation] = append(waiting[x.Generation], wait{x.Sent, x.Number, x.TicketID})
			}
		}
	}
	inverted := map[string]bool{}
	example := ""
	for gen, as := range admitted {
		sort.Slice(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
		best := make([]int64, len(as)) // best[i] = highest number admitted up to as[i]
		for i, a := range as {
			best[i] = a.number
			if i > 0 {
				best[i] = max(best[i], best[i-1])
			}
		}
		for _, w := range waiting[gen] {
			i := sort.Search(len(as), func(i int) bool { return !as[i].at.Before(w.sent) }) - 1
			if i >= 0 && best[i] > w.number && !inverted[w.ticket] {
				inverted[w.ticket] = true
				if example == "" {
					example = fmt.Sprintf("#%d queued after #%d was admitted", w.number, best[i])
				}
			}
		}
	}
	if len(inverted) == 0 {
		return Verdict{}
	}
	return Verdict{len(inverted), fmt.Sprintf("%d tickets passed over (e.g. %s)", len(inverted), example)}
}

// checkSharedTickets counts ticket ids that joins of two different users were answered with.
func checkSharedTickets(s Scope) Verdict {
	users := map[string]map[string]bool{}
	for _, h := range s.Histories {
		for _, x := range h.Exchanges {
			if x.Kind == "join" && answered2xx(x) && x.TicketID != "" {
				if users[x.TicketID] == nil {
					users[x.TicketID] = map[string]bool{}
				}
				users[x.TicketID][h.User] = true
			}
		}
	}
	n := 0
	for _, us := range users {
		if len(us) > 1 {
			n++
		}
	}
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d ticket ids given to 2+ users", n)}
}

// checkLostTickets counts tickets answered 200/201 at join that later got 404 ticket_not_found
// (a status poll, or a not_found push message) while their client still held them waiting or
// admitted (not after its own leave, a booking, or a final status).
func checkLostTickets(s Scope) Verdict {
	var queued, admitted int
	for _, h := range s.Histories {
		if h.Event != s.Event {
			continue
		}
		live := ""
		for _, x := range h.Exchanges {
			switch x.Kind {
			case "join", "status":
				if answered2xx(x) {
					live = ""
					if x.Status == stQueued || x.Status == stAdmitted {
						live = x.Status
					}
				} else if x.Code == 404 && x.Problem == pTicketGone && live != "" {
					if live == stQueued {
						queued++
					} else {
						admitted++
					}
					live = ""
				}
			case "push":
				switch {
				case x.Status == stAdmitted:
					live = stAdmitted
				case x.Code == 404 && live != "":
					if live == stQueued {
						queued++
					} else {
						admitted++
					}
					live = ""
				default:
					live = ""
				}
			case "leave", "book":
				live = ""
			}
		}
	}
	if queued+admitted == 0 {
		return Verdict{}
	}
	return Verdict{queued + admitted, fmt.Sprintf("%d tickets 404 after 201 (%d waiting, %d admitted)", queued+admitted, queued, admitted)}
}

// checkLostEntries counts coupon entries answered 2xx that later got 404 entry_not_found.
func checkLostEntries(s Scope) Verdict {
	n := 0
	for _, h := range s.Histories {
		if h.Camp != s.Campaign {
			continue
		}
		accepted := false
		for _, x := range h.Exchanges {
			switch {
			case (x.Kind == "entry" || x.Kind == "entry_status") && answered2xx(x):
				accepted = true
			case x.Kind == "entry_status" && x.Code == 404 && x.Problem == pEntryGone && accepted:
				n++
				accepted = false
			}
		}
	}
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d entries 404 after 202", n)}
}

// checkStuck counts line users still waiting (their last ticket answer QUEUED) when the run
// stopped them: the drain bound leaves the line time to move at the pace max_active allows, so
// a user still waiting then is a line that stalled.
func checkStuck(s Scope) Verdict {
	n := 0
	for _, h := range s.Histories {
		if h.Event != s.Event {
			continue
		}
		last := ""
		for _, x := range h.Exchanges {
			if (x.Kind == "join" || x.Kind == "status") && answered2xx(x) || x.Kind == "push" {
				last = x.Status
			}
		}
		if last == stQueued {
			n++
		}
	}
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d line users still waiting when stopped (the line stalled)", n)}
}

// excused503 are the 503 problem codes the API documents for an outage or a restart.
var excused503 = map[string]bool{"store_unavailable": true, "sale_restoring": true, "shutting_down": true}

func check5xx(s Scope) Verdict {
	counts := map[string]int{}
	n := 0
	for _, h := range s.Histories {
		for _, x := range h.Exchanges {
			if x.Code < 500 {
				continue
			}
			at := x.Sent
			if at.IsZero() {
				at = x.Recv
			}
			inFault := !at.Before(s.Window.On) && at.Before(s.Window.end())
			if x.Code == 503 && excused503[x.Problem] && inFault {
				continue
			}
			key := fmt.Sprintf("%d %s", x.Code, x.Problem)
			if !inFault {
				key += " outside the fault"
			}
			counts[key]++
			n++
		}
	}
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d: %s", n, summarize(counts))}
}

func checkUnanswered(s Scope) Verdict {
	counts := map[string]int{}
	n := 0
	w := s.Window
	for _, h := range s.Histories {
		for _, x := range h.Exchanges {
			if x.Failure != "timeout" || x.Kind == "probe" {
				continue
			}
			if x.Target == w.Stopped && !x.Sent.Before(w.On) && x.Sent.Before(w.Off) {
				continue // the instance was frozen: nobody could answer
			}
			counts[x.Kind]++
			n++
		}
	}
	if n == 0 {
		return Verdict{}
	}
	return Verdict{n, fmt.Sprintf("%d requests without an answer in %s (%s)", n, s.ClientTimeout, summarize(counts))}
}

// summarize writes "a ×3, b ×1", most frequent first.
func summarize(counts map[string]int) string {
	keys := slices.Collect(maps.Keys(counts))
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
