// Package event holds an event's configuration, the one type every layer uses for it: the
// HTTP API decodes into it, SQL stores it, the registry syncs it, and the stores receive the
// parts they enforce (LineConfig for the line, Inventory for the sale). Every default and every
// range lives here, in WithDefaults and Validate; the errors of a stored configuration (not
// found, a version mismatch, a change that would drop what was sold) are in errors.go.
package event

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

// Defaults of fields left zero (WithDefaults).
const (
	DefaultSessionTTL    = 300 * time.Second
	DefaultClaimTTL      = 60 * time.Second
	DefaultMaxPerBooking = 4
	DefaultHoldTTL       = 300 * time.Second
	// DefaultSessionMax ends an admitted session this long after its admission whatever its
	// activity, so that nobody holds a slot for ever by polling (issue 12: slot squatting).
	DefaultSessionMax = 1800 * time.Second
)

// Limits of the configuration (Validate).
const (
	MaxName         = 200         // bytes
	MaxRedirectURL  = 2000        // bytes
	MaxPauseMessage = 500         // bytes
	MaxMaxActive    = 100_000_000 // admitted sessions at once
	MaxAdmitRate    = 1_000_000   // admissions per second
	MaxTTL          = 24 * time.Hour
	// MinClaimTTL: polls come at least a second apart and at most a third of the claim TTL
	// apart (see httpapi's poll_after_s), so 3 s is the least that lets a poller claim.
	MinClaimTTL      = 3 * time.Second
	MaxPerBookingCap = 100 // the largest max_per_booking
	// MaxSeats bounds an event's seat list, MaxCapacity its units for sale.
	MaxSeats    = 50_000
	MaxCapacity = 100_000_000
	// MaxMaxPerUser bounds max_per_user (units per user per event).
	MaxMaxPerUser = 1_000_000
)

// The orders of a pre-queue at the opening (prequeue_order; issue 12, docs/draw.md).
const (
	// OrderRandom draws the places of everyone who joined before opens_at (the default):
	// joining early gains nothing.
	OrderRandom = "random"
	// OrderArrival keeps the pre-queue in order of arrival (FIFO).
	OrderArrival = "arrival"
)

// Event is an event's configuration.
type Event struct {
	// ID is the event's key: ^[a-z0-9][a-z0-9_-]{0,63}$ (it becomes part of Redis keys inside
	// a hash tag, so no braces or other punctuation).
	ID   string
	Name string // at most MaxName bytes of printable UTF-8
	// MaxActive is the number of admitted sessions allowed at once (1..MaxMaxActive).
	MaxActive int64
	// AdmitRate is admissions per second (0 = bounded by MaxActive only).
	AdmitRate float64
	// SessionTTL is how long an admitted session lasts after its last activity (whole
	// seconds, 1 s..24 h). Defaults to DefaultSessionTTL.
	SessionTTL time.Duration
	// ClaimTTL is how long a ticket admitted by the processor has to fetch its admission
	// (whole seconds, MinClaimTTL..24 h). Defaults to DefaultClaimTTL.
	ClaimTTL time.Duration
	// OpensAt: before it, tickets join the pre-queue and nobody is admitted. Zero = open.
	OpensAt time.Time
	// ClosesAt: from it on, joins fail and waiting tickets read CLOSED. Zero = never.
	ClosesAt time.Time
	// RedirectURL is where an admitted person is sent ("" = none).
	RedirectURL string
	// Paused stops admissions (joins still queue); PauseMessage is what the waiting page says
	// meanwhile, in the operator's words (at most MaxPauseMessage bytes of printable UTF-8).
	Paused       bool
	PauseMessage string

	// The sale. Capacity is the number of units for sale (0 = not for sale); a seated event's
	// capacity is its number of seats.
	Capacity int64
	// Seats names the seats of a seated event (nil = general admission).
	Seats []string
	// SeatMap is the seat_map JSON the seats were expanded from ("" = none), kept to show it.
	SeatMap string
	// MaxPerBooking caps one hold (1..MaxPerBookingCap). Defaults to DefaultMaxPerBooking.
	MaxPerBooking int64
	// HoldTTL is how long a hold lasts (whole seconds, 1 s..24 h). Defaults to DefaultHoldTTL.
	HoldTTL time.Duration

	// Protection against bots (see Limits and docs/api.md).
	Limits Limits
	// IdentityRequired refuses anonymous joins: a join must name its user (an identity JWT, or
	// user_id with the admin key).
	IdentityRequired bool
	// MaxPerUser caps the units one user buys in this event across all their bookings
	// (0 = no cap, 1..MaxMaxPerUser). Enforced in the booking's SQL transaction.
	MaxPerUser int64
	// SessionMax ends an admitted session this long after its admission, whatever its activity
	// (whole seconds, 1 s..24 h). Defaults to
	// DefaultSessionMax.
	SessionMax time.Duration
	// Challenge is what a join must carry besides its body: a solved proof of work or a
	// captcha token (zero: nothing).
	Challenge Challenge

	// Page is what the waiting page shows of the event: title, message, logo, colours,
	// language (the zero Page: the plain page).
	Page Page

	// Auto is admission_mode "auto" (Auto.Enabled): the effective max_active and admit_rate
	// follow the origin's measured health within Auto's bounds (package autoadmit). The zero
	// Auto is admission_mode "fixed": MaxActive and AdmitRate as given.
	Auto Auto

	// PrequeueOrder is how the people who joined before OpensAt are ordered at the opening:
	// OrderRandom (drawn with DrawSeed) or OrderArrival. Defaults to OrderRandom. It counts until
	// the line's opening only: then the draw is made, or not, once (docs/draw.md).
	PrequeueOrder string
	// DrawSeed is the secret seed of the opening's draw (draw.SeedLen bytes), made by the SQL
	// store when the event is created (or first written without one) and kept for its life; its
	// commitment (draw.Commitment) is public before the opening, the seed after it. Never set
	// from a client.
	DrawSeed []byte

	// Version counts the configuration's changes: 1 when created, one more per update, set by
	// the SQL store in the writing transaction (never a clock). The line store keeps the
	// newest version it was given, so a slow writer never reverts a newer change.
	Version int64
	// CreatedAt and UpdatedAt are set by the SQL store (UTC, millisecond precision); for
	// people, not for ordering.
	CreatedAt, UpdatedAt time.Time
}

// ValidID reports whether id matches IDRule, ^[a-z0-9][a-z0-9_-]{0,63}$ (by hand: every request
// naming an event asks, and the regexp cost ~1 % of an instance's CPU a join; TestValidID holds
// the two to the same answers).
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 || id[0] == '_' || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// IDRule is the pattern of event ids, for messages.
const IDRule = "^[a-z0-9][a-z0-9_-]{0,63}$"

// WithDefaults returns a copy with zero fields set to their defaults, durations truncated to
// whole seconds, times to UTC milliseconds, and a seated event's zero capacity set to its
// number of seats. It is what SQL stores and what the stores are given.
func (e Event) WithDefaults() Event {
	e.SessionTTL = cmp.Or(e.SessionTTL, DefaultSessionTTL)
	e.ClaimTTL = cmp.Or(e.ClaimTTL, DefaultClaimTTL)
	e.MaxPerBooking = cmp.Or(e.MaxPerBooking, DefaultMaxPerBooking)
	e.HoldTTL = cmp.Or(e.HoldTTL, DefaultHoldTTL)
	e.SessionMax = cmp.Or(e.SessionMax, DefaultSessionMax)
	e.PrequeueOrder = cmp.Or(e.PrequeueOrder, OrderRandom)
	e.SessionMax = e.SessionMax.Truncate(time.Second)
	e.Limits = e.Limits.WithDefaults()
	e.Challenge = e.Challenge.WithDefaults()
	if e.Auto.Enabled {
		e.Auto = e.Auto.WithDefaults(e.ID, e.MaxActive)
	} else {
		e.Auto = Auto{}
	}
	e.SessionTTL = e.SessionTTL.Truncate(time.Second)
	e.ClaimTTL = e.ClaimTTL.Truncate(time.Second)
	e.HoldTTL = e.HoldTTL.Truncate(time.Second)
	e.OpensAt, e.ClosesAt = normTime(e.OpensAt), normTime(e.ClosesAt)
	if len(e.Seats) == 0 {
		e.Seats = nil
	}
	if e.Capacity == 0 && len(e.Seats) > 0 {
		e.Capacity = int64(len(e.Seats))
	}
	return e
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}

// Validate returns a descriptive error (naming the JSON field) for a configuration that cannot
// be enforced. Call it on WithDefaults' result.
func (e Event) Validate() error {
	if err := e.validateLine(); err != nil {
		return err
	}
	return e.validateSale()
}

func (e Event) validateLine() error {
	switch {
	case !ValidID(e.ID):
		return fmt.Errorf("event id %q does not match %s", e.ID, IDRule)
	case len(e.Name) > MaxName:
		return fmt.Errorf("name must be at most %d bytes", MaxName)
	case len(e.RedirectURL) > MaxRedirectURL:
		return fmt.Errorf("redirect_url must be at most %d bytes", MaxRedirectURL)
	case len(e.PauseMessage) > MaxPauseMessage:
		return fmt.Errorf("pause_message must be at most %d bytes", MaxPauseMessage)
	case !ValidText(e.Name) || !ValidText(e.RedirectURL) || !ValidText(e.PauseMessage):
		return errors.New("name, redirect_url and pause_message must be UTF-8 text without control characters")
	case e.RedirectURL != "" && !httpURL(e.RedirectURL):
		return errors.New("redirect_url must be an absolute http or https URL")
	case e.SessionMax < time.Second || e.SessionMax > MaxTTL:
		return errors.New("session_max_s must be between 1 and 86400")
	case e.MaxActive < 1:
		return errors.New("max_active must be at least 1")
	case e.MaxActive > MaxMaxActive:
		return fmt.Errorf("max_active must be at most %d", MaxMaxActive)
	case math.IsNaN(e.AdmitRate) || e.AdmitRate < 0 || e.AdmitRate > MaxAdmitRate:
		return fmt.Errorf("admit_rate must be between 0 and %d per second", MaxAdmitRate)
	case e.SessionTTL < time.Second || e.SessionTTL > MaxTTL:
		return errors.New("session_ttl_s must be between 1 and 86400")
	case e.ClaimTTL < MinClaimTTL || e.ClaimTTL > MaxTTL:
		return errors.New("claim_ttl_s must be between 3 and 86400")
	case !e.OpensAt.IsZero() && !ValidTime(e.OpensAt):
		return errors.New("opens_at must be between the years 1970 and 9999")
	case !e.ClosesAt.IsZero() && !ValidTime(e.ClosesAt):
		return errors.New("closes_at must be between the years 1970 and 9999")
	case !e.OpensAt.IsZero() && !e.ClosesAt.IsZero() && !e.ClosesAt.After(e.OpensAt):
		return errors.New("closes_at must be after opens_at")
	case e.PrequeueOrder != OrderRandom && e.PrequeueOrder != OrderArrival:
		return errors.New(`prequeue_order must be "random" or "arrival"`)
	case e.DrawSeed != nil && len(e.DrawSeed) != draw.SeedLen:
		return fmt.Errorf("the draw seed must be %d bytes", draw.SeedLen)
	}
	if err := e.Page.Validate(); err != nil {
		return err
	}
	if err := e.Challenge.Validate(); err != nil {
		return err
	}
	if e.Auto.Enabled {
		if err := e.Auto.Validate(); err != nil {
			return err
		}
	}
	return e.Limits.Validate()
}

func (e Event) validateSale() error {
	switch {
	case e.MaxPerBooking < 1 || e.MaxPerBooking > MaxPerBookingCap:
		return fmt.Errorf("max_per_booking must be between 1 and %d", MaxPerBookingCap)
	case e.HoldTTL < time.Second || e.HoldTTL > MaxTTL:
		return errors.New("hold_ttl_s must be between 1 and 86400")
	case e.Capacity < 0 || e.Capacity > MaxCapacity:
		return fmt.Errorf("capacity must be between 1 and %d", MaxCapacity)
	case len(e.Seats) > MaxSeats:
		return fmt.Errorf("at most %d seats", MaxSeats)
	case e.MaxPerUser < 0 || e.MaxPerUser > MaxMaxPerUser:
		return fmt.Errorf("max_per_user must be between 1 and %d, or left out", MaxMaxPerUser)
	case len(e.Seats) > 0 && e.Capacity != int64(len(e.Seats)):
		return fmt.Errorf("capacity must equal the number of seats (%d), or be left out", len(e.Seats))
	}
	seen := make(map[string]bool, len(e.Seats))
	for _, s := range e.Seats {
		if !sale.ValidSeat(s) {
			return fmt.Errorf("seat %q must match %s", s, sale.SeatRule)
		}
		if seen[s] {
			return fmt.Errorf("seat %q is listed twice", s)
		}
		seen[s] = true
	}
	return nil
}

// ValidText reports whether s is UTF-8 without control characters (NUL included): what a
// name, id or key from a client must be before it reaches SQL (PostgreSQL text cannot hold
// NUL) or a log.
func ValidText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// httpURL reports whether s is an absolute http or https URL with a host (no javascript:,
// data: or relative URLs: redirect_url is followed by the page).
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// ForSale reports whether the event sells anything.
func (e Event) ForSale() bool { return e.Capacity > 0 }

// LineConfig is the part of the event the line store enforces: the draw's seed only with
// prequeue_order random.
func (e Event) LineConfig() queue.EventConfig {
	c := queue.EventConfig{
		ID: e.ID, MaxActive: e.MaxActive, AdmitRate: e.AdmitRate,
		SessionTTL: e.SessionTTL, ClaimTTL: e.ClaimTTL, OpensAt: e.OpensAt, ClosesAt: e.ClosesAt,
		Paused: e.Paused, SessionMax: e.SessionMax, Version: e.Version,
	}
	if e.Auto.Enabled {
		// A new line starts at the safe end of the bounds; the controller's limits, once set
		// (queue.Store's SetControl), are kept by later configurations (EventConfig.Auto).
		c.Auto = true
		c.MaxActive = e.Auto.MinMaxActive
		c.AdmitRate = e.Auto.StartRate()
	}
	if e.PrequeueOrder != OrderArrival {
		c.DrawSeed = e.DrawSeed
	}
	return c
}

// Inventory is the part of the event the sale store enforces.
func (e Event) Inventory() sale.Inventory {
	return sale.Inventory{Event: e.ID, Capacity: e.Capacity, Seats: e.Seats, MaxPerBooking: e.MaxPerBooking,
		HoldTTL: e.HoldTTL, Version: e.Version, Epoch: e.Epoch()}
}

// Epoch names this life of the event: the first 8 bytes of SHA-256 of its DrawSeed (made once
// per creation by the SQL store), as 16 lower-case hex characters; "" without a seed. It tells
// a store that an event deleted and created again starts its versions over.
func (e Event) Epoch() string {
	if len(e.DrawSeed) == 0 {
		return ""
	}
	h := sha256.Sum256(e.DrawSeed)
	return hex.EncodeToString(h[:8])
}

// State is where the event stands at now: "pre_queue" before opens_at, "closed" from
// closes_at on, "paused" while paused, else "open".
func (e Event) State(now time.Time) string {
	switch {
	case !e.ClosesAt.IsZero() && !now.Before(e.ClosesAt):
		return "closed"
	case !e.OpensAt.IsZero() && now.Before(e.OpensAt):
		return "pre_queue"
	case e.Paused:
		return "paused"
	}
	return "open"
}

// SeatMap is "seat_map": {"rows": ["A","B"], "per_row": 20}, which expands to A-01 … B-20.
type SeatMap struct {
	Rows   []string `json:"rows"`
	PerRow int      `json:"per_row"`
}

var rowPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,8}$`)

// Expand lists the seats of the map: row "-" number, the number zero-padded to at least 2
// digits. Errors: a malformed map (the message names the field).
func (m SeatMap) Expand() ([]string, error) {
	switch {
	case len(m.Rows) == 0 || len(m.Rows) > 1000:
		return nil, errors.New("seat_map.rows must list 1 to 1000 rows")
	case m.PerRow < 1 || m.PerRow > 1000:
		return nil, errors.New("seat_map.per_row must be between 1 and 1000")
	case len(m.Rows)*m.PerRow > MaxSeats:
		return nil, fmt.Errorf("seat_map gives more than %d seats", MaxSeats)
	}
	width := max(2, len(strconv.Itoa(m.PerRow)))
	seats := make([]string, 0, len(m.Rows)*m.PerRow)
	for _, r := range m.Rows {
		if !rowPattern.MatchString(r) {
			return nil, fmt.Errorf("seat_map row %q must match ^[A-Za-z0-9]{1,8}$", r)
		}
		for i := 1; i <= m.PerRow; i++ {
			seats = append(seats, fmt.Sprintf("%s-%0*d", r, width, i))
		}
	}
	return seats, nil
}

// JSON is the seat map as stored in Event.SeatMap.
func (m SeatMap) JSON() string {
	b, _ := json.Marshal(m) // a struct of strings and an int cannot fail
	return string(b)
}

// ValidTime reports whether t may be a date of the API (an event's opens_at or closes_at, a
// campaign's opens_at): a time in the years 1970 to 9999, which Unix milliseconds hold and RFC
// 3339 writes. A date the client gives is held to it as given: 0001-01-01T00:00:00Z, Go's zero
// time, is refused like any other year before 1970, not taken for "no date".
func ValidTime(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1970 && y <= 9999
}
