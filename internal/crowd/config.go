// Package crowd is the flash-crowd load generator behind `waitroom crowd`.
//
// It simulates many users arriving at one event of one or more waitroom instances, each user
// behaving like a well-mannered browser: join the line, poll the ticket at the pace the server
// asks for (poll_after_s), and, once admitted, stay for a while and leave. Everything it reports
// is measured from the client side: throughput and latency of joins and status polls, time to
// admission, errors, and two fairness checks that need no access to the server's internals:
//
//   - FIFO: the serving counter each response carries must never contradict the order of the
//     line (an ADMITTED ticket above its own serving, or a QUEUED ticket at or below a serving
//     that some earlier-completed response already reported);
//   - capacity: the number of users holding an admission at once never exceeds max_active.
//
// The targets are expected to be instances of one deployment sharing one line (one store): the
// FIFO check compares serving values across all of them.
//
// Each simulated user is a goroutine whose only state is its ticket id, number and a few
// timestamps; a shared semaphore bounds the HTTP requests in flight and one http.Client with a
// keep-alive pool sized for that bound carries them.
package crowd

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Config describes one load run. The zero value of a field means its default unless said
// otherwise; DefaultConfig returns the defaults spelled out.
type Config struct {
	// Targets are base URLs of waitroom instances (scheme and host, optionally a path prefix).
	// User i talks only to Targets[i % len(Targets)]. Required.
	Targets []string
	// Event is the event id. Required.
	Event string
	// Users is the number of simulated users. Required (>= 1; 0 with Bots: the bots alone, from
	// a process of their own, until the deadline or an interrupt).
	Users int
	// Rate is the number of joins started per second. 0 = as fast as Concurrency allows.
	Rate float64
	// Concurrency is the maximum number of HTTP requests in flight at once, across all users.
	// Defaults to 256.
	Concurrency int
	// Deadline is the time limit of the whole run (event setup included): at the deadline every
	// user stops where it is and the report is made. Defaults to 10m.
	Deadline time.Duration
	// Hold is how long an admitted user stays before leaving (DELETE). Defaults to 0.
	Hold time.Duration
	// AdminKey is the admin API key: needed to create the event and for Named joins.
	AdminKey string

	// Settings used only when the event does not exist yet and is created by the run.

	// MaxActive is the event's max_active. Defaults to 2000.
	MaxActive int64
	// AdmitRate is the event's admit_rate, admissions per second. 0 is passed on as is (the
	// server then bounds admissions by max_active only); DefaultConfig sets 2000.
	AdmitRate float64
	// SessionTTL is the event's session_ttl_s in seconds. Defaults to 300.
	SessionTTL int
	// ClaimTTL is the event's claim_ttl_s in seconds. Defaults to 60.
	ClaimTTL int

	// UserPrefix prefixes the user ids of Named joins ("<prefix>-<i>"). Defaults to a random
	// "crowd-xxxxxxxx", so that two runs never share users.
	UserPrefix string
	// Named makes users join server-to-server with the admin key and {"user_id": ...} instead
	// of anonymously.
	Named bool
	// Push makes queued users wait on their ticket's WebSocket instead of polling (falling
	// back to polling when the socket fails), and adds the push latency to the report.
	Push bool
	// PushSilence is how long a push socket may say nothing: after half of it without a
	// message the user pings, and when the pong does not come within the other half the
	// socket is dead and replaced (see push.go). Defaults to 5s.
	PushSilence time.Duration
	// Presolve has every user fetch and solve its challenge (an event with a proof-of-work
	// challenge) before the run starts, as a waiting-room page can while the person reads it,
	// so that the users press Join together with a solution in hand: their time to admission
	// counts from the join, and their solving does not compete for the CPU during the run. A
	// challenge refused at the join is solved again on the clock. Off: each user solves when it
	// joins, and the time counts from the start of its solving.
	Presolve bool
	// PollScale multiplies the poll_after_s the server asks for (the wait is never below 50 ms).
	// Only for experiments: a real crowd polls as told. Defaults to 1.
	PollScale float64
	// RequestTimeout bounds every HTTP request; a request that takes longer counts as a
	// transport error. Defaults to 30s.
	RequestTimeout time.Duration
	// Client carries all requests. Defaults to a client with a keep-alive pool sized for
	// Concurrency and the timeouts above (its idle connections are closed when Run returns).
	Client *http.Client

	// Book makes every admitted user hold 1-4 random seats and book them (see book.go), and
	// the report check oversold and double_booked.
	Book bool
	// Seats is the number of seats of the event when the run creates it with Book. Defaults
	// to 5000.
	Seats int

	// UserAddrs is the range of the users' source addresses: user i binds address i mod its
	// size (see addr.go), so that the server counts its limits per client on many clients as
	// for a real crowd. The zero Prefix lets the system choose (every user is then one client
	// to the server: an event the run creates lifts its limits per client). Not with Client.
	UserAddrs netip.Prefix
	// Bots are hostile clients run alongside the users (see bots.go). Zero: none.
	Bots BotConfig
	// HealthzProbe, when positive, GETs every target's /healthz this often during the run and
	// reports the latencies (see probe.go).
	HealthzProbe time.Duration
	// HealthzMax, when positive, makes a probe slower than this (or a failed one) a problem
	// of the run.
	HealthzMax time.Duration

	// Procs runs the users in this many processes (see procs.go): a process may open at most
	// so many files, and each user waiting on its WebSocket holds one. 0 or 1: this process.
	Procs int

	// retryBase is the first back-off after a failed request (doubling, capped at retryCap).
	// Defaults to 100 ms; tests shorten it.
	retryBase time.Duration
}

// Defaults of Config.
const (
	DefaultConcurrency    = 256
	DefaultDeadline       = 10 * time.Minute
	DefaultMaxActive      = 2000
	DefaultAdmitRate      = 2000
	DefaultSessionTTL     = 300
	DefaultClaimTTL       = 60
	DefaultPollScale      = 1.0
	DefaultRequestTimeout = 30 * time.Second
	// DefaultPushSilence: the server pings every 20 s and tells a far-back place at most every
	// 5 s, so a socket of a line standing still says nothing for longer than 5 s; asking after
	// 2.5 s, as this did before, cost the fleet a ping and a pong per waiting user every few
	// seconds, and under load the pongs came late and healthy sockets were replaced (issue 22).
	DefaultPushSilence = 20 * time.Second

	minPollWait      = 50 * time.Millisecond
	maxPollWait      = time.Hour
	defaultRetryBase = 100 * time.Millisecond
	retryCap         = 2 * time.Second
	pushRetryCap     = 30 * time.Second // the longest wait before a new socket after failed ones
	// goneAfter is how many 404s in a row (each from the next instance) make a ticket gone.
	goneAfter     = 2
	leaveAttempts = 3
)

// DefaultConfig returns a Config with every default filled in (Targets, Event and Users still
// to be set).
func DefaultConfig() Config {
	return Config{
		Concurrency:    DefaultConcurrency,
		Deadline:       DefaultDeadline,
		MaxActive:      DefaultMaxActive,
		AdmitRate:      DefaultAdmitRate,
		SessionTTL:     DefaultSessionTTL,
		ClaimTTL:       DefaultClaimTTL,
		PollScale:      DefaultPollScale,
		RequestTimeout: DefaultRequestTimeout,
		PushSilence:    DefaultPushSilence,
	}
}

// WithDefaults returns a copy with zero fields set to their defaults (AdmitRate excepted) and
// the targets normalised (no trailing slash).
func (c Config) WithDefaults() Config {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Deadline = cmp.Or(c.Deadline, DefaultDeadline)
	c.MaxActive = cmp.Or(c.MaxActive, DefaultMaxActive)
	c.SessionTTL = cmp.Or(c.SessionTTL, DefaultSessionTTL)
	c.ClaimTTL = cmp.Or(c.ClaimTTL, DefaultClaimTTL)
	c.PollScale = cmp.Or(c.PollScale, DefaultPollScale)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.PushSilence = cmp.Or(c.PushSilence, DefaultPushSilence)
	c.UserPrefix = cmp.Or(c.UserPrefix, randomPrefix())
	c.Bots = c.Bots.withDefaults()
	c.retryBase = cmp.Or(c.retryBase, defaultRetryBase)
	targets := make([]string, 0, len(c.Targets))
	for _, t := range c.Targets {
		if t = strings.TrimRight(strings.TrimSpace(t), "/"); t != "" {
			targets = append(targets, t)
		}
	}
	c.Targets = targets
	return c
}

func (c Config) validate() error {
	if len(c.Targets) == 0 {
		return errors.New("at least one target is required (--target URL[,URL...])")
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil {
			return fmt.Errorf("target %q: %w", t, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("target %q: want an http:// or https:// base URL", t)
		}
	}
	switch {
	case c.Event == "":
		return errors.New("an event id is required (--event ID)")
	case c.Users < 0 || (c.Users == 0 && c.Bots.N == 0):
		return errors.New("users must be at least 1 (0 only with bots)")
	case c.Rate < 0:
		return errors.New("rate must not be negative")
	case c.Concurrency < 1:
		return errors.New("concurrency must be at least 1")
	case c.Deadline < 0:
		return errors.New("deadline must not be negative")
	case c.Hold < 0:
		return errors.New("hold must not be negative")
	case c.PollScale < 0:
		return errors.New("poll-scale must not be negative")
	case c.RequestTimeout < 0:
		return errors.New("request-timeout must not be negative")
	case c.PushSilence < 0 || (c.PushSilence > 0 && c.PushSilence < 2*time.Millisecond):
		return errors.New("push-silence must be at least 2ms")
	case c.Named && c.AdminKey == "":
		return errors.New("named joins need the admin key (--admin-key or WAITROOM_ADMIN_KEY)")
	case c.UserAddrs.IsValid() && c.Client != nil:
		return errors.New("user source addresses need the run's own clients (no Client)")
	case c.Procs < 0:
		return errors.New("procs must not be negative")
	case c.HealthzProbe < 0 || c.HealthzMax < 0:
		return errors.New("healthz-probe and healthz-max must not be negative")
	}
	return c.Bots.validate()
}

func randomPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "crowd-" + hex.EncodeToString(b[:])
}
