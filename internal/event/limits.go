package event

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Limits are an event's limits per client (issue 12): a client is an address (an IPv6 /64),
// see package clientaddr. The defaults and their reasoning are in docs/api.md ("Limits").
type Limits struct {
	// JoinsPerClient is the size of one client's bucket of joins, refilled at JoinsPerClient per
	// JoinWindow (0 = the default; there is no "off": set it high): a client may join
	// JoinsPerClient times at once, then once per JoinWindow / JoinsPerClient, and at most
	// JoinsPerClient x (1 + T / JoinWindow) times in any span T (queue.JoinParams.ClientKey).
	// Checked inside the store's join step, so it holds across instances. Joins made with the
	// admin key are not counted.
	JoinsPerClient int64
	// JoinWindow is the time in which a client's bucket refills JoinsPerClient joins (whole
	// seconds, 1 s..1 h).
	JoinWindow time.Duration
	// TicketsPerClient caps the tickets one client may take in the event's pre-queue (joins
	// before opens_at that make a ticket; a ticket that left still counts): the bucket refills
	// for as long as the pre-queue lasts, and the opening's draw spreads a pile of tickets over
	// the whole line. Counted in the store's join step, so it holds across instances
	// (queue.JoinParams.TicketLimit). From the opening on the line is first come, first served
	// and the bucket alone limits joins. Joins made with the admin key are not counted.
	TicketsPerClient int64
	// PushPerClient caps one client's open push connections (WebSocket and SSE) to the event,
	// counted in the store's shares, so it holds across instances (package push).
	PushPerClient int64
	// PollsPerTicket is the number of status reads one ticket may make in one PollWindow.
	// Checked inside the store's status step, so it holds across instances.
	PollsPerTicket int64
	// PollWindow is the window of PollsPerTicket (whole seconds, 1 s..1 h).
	PollWindow time.Duration
	// AddressesPerAdmission caps the client addresses (IPv6 by /64) that may use one admission
	// at once, each counting for two minutes after its last request with it (line.Bind),
	// counted in the store's shares, so it holds across instances: an admitted visitor's cookie
	// or token shared with many machines lets a few of them in, not all.
	AddressesPerAdmission int64
}

// Defaults of Limits (see docs/api.md for the reasoning).
const (
	// DefaultJoinsPerClient per DefaultJoinWindow: 50 at once, then 5 a second (300 a minute),
	// so 300 people behind one carrier NAT who all press Join at once are all in within 50 s
	// (the page retries after Retry-After), and a bot on one address gets 50 tickets, then 5 a
	// second, instead of thousands a second.
	DefaultJoinsPerClient = 50
	DefaultJoinWindow     = 10 * time.Second
	// DefaultTicketsPerClient: as many tickets of the pre-queue as the bucket gives at once.
	// How many people stand behind one address does not grow with the pre-queue's length, so
	// neither does what the address may take: an hour of pre-queue gave one address ~18,000
	// tickets at 5 a second (issue 20), now 50. Beyond 50 people behind one address, the others
	// join at the opening, at the head of those who come after it (docs/api.md, "Limits").
	DefaultTicketsPerClient = 50
	// DefaultPushPerClient: 500 live pages behind one address, a few per person of a large NAT.
	DefaultPushPerClient = 500
	// DefaultPollsPerTicket: poll_after_s is at least 1 s, so a page asks at most 10 times in
	// 10 s; 30 leaves room for reloads and a second tab.
	DefaultPollsPerTicket = 30
	DefaultPollWindow     = 10 * time.Second
	// DefaultAddressesPerAdmission: a person's phone on Wi-Fi and on its carrier, and a laptop;
	// one address behind a NAT however many share it.
	DefaultAddressesPerAdmission = 3

	MaxLimit       = 1_000_000_000
	MaxLimitWindow = time.Hour
)

// WithDefaults returns a copy with zero fields set to their defaults and windows truncated to
// whole seconds.
func (l Limits) WithDefaults() Limits {
	l.JoinsPerClient = cmp.Or(l.JoinsPerClient, DefaultJoinsPerClient)
	l.JoinWindow = cmp.Or(l.JoinWindow, DefaultJoinWindow)
	l.TicketsPerClient = cmp.Or(l.TicketsPerClient, DefaultTicketsPerClient)
	l.PushPerClient = cmp.Or(l.PushPerClient, DefaultPushPerClient)
	l.PollsPerTicket = cmp.Or(l.PollsPerTicket, DefaultPollsPerTicket)
	l.PollWindow = cmp.Or(l.PollWindow, DefaultPollWindow)
	l.AddressesPerAdmission = cmp.Or(l.AddressesPerAdmission, DefaultAddressesPerAdmission)
	l.JoinWindow = l.JoinWindow.Truncate(time.Second)
	l.PollWindow = l.PollWindow.Truncate(time.Second)
	return l
}

// Validate names the first field out of range (JSON names under "limits").
func (l Limits) Validate() error {
	for _, c := range []struct {
		v     int64
		field string
	}{{l.JoinsPerClient, "joins_per_client"}, {l.TicketsPerClient, "tickets_per_client"}, {l.PushPerClient, "push_per_client"},
		{l.PollsPerTicket, "polls_per_ticket"}, {l.AddressesPerAdmission, "addresses_per_admission"}} {
		if c.v < 1 || c.v > MaxLimit {
			return fmt.Errorf("limits.%s must be between 1 and %d", c.field, MaxLimit)
		}
	}
	if l.JoinWindow < time.Second || l.JoinWindow > MaxLimitWindow || l.PollWindow < time.Second || l.PollWindow > MaxLimitWindow {
		return errors.New("limits.join_window_s and limits.poll_window_s must be between 1 and 3600")
	}
	return nil
}
