package push

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/internal/connlimit"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// Events is what the hub reads of the events (the registry).
type Events interface {
	// Cached returns an event from the cache, without I/O.
	Cached(id string) (event.Event, bool)
	// Get returns an event from the cache, else the database.
	Get(ctx context.Context, id string) (event.Event, error)
}

// Line is what the hub reads of the lines: line.Service, which restores a line the store lost
// (a queue.Store reads the store as it is).
type Line interface {
	// Status reads a ticket; for an admitted one it counts as activity.
	Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error)
	// Connect is Status for a connection opening on the ticket: the read counts against the
	// event's polls_per_ticket, and past it fails with a rate-limit error (429).
	Connect(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error)
	// Stats reads an event's counters.
	Stats(ctx context.Context, id string) (queue.Stats, error)
}

// Config configures a Hub. Zero fields take the defaults named on them.
type Config struct {
	Store      Line              // required: the line
	Events     Events            // required
	Tickets    *token.TicketIDs  // required
	Admissions *token.Admissions // required
	// Notifier carries admission batches and hints between instances (an event's topic).
	// Required.
	Notifier store.Notifier
	// StoreError writes the problem of a failed store call (the API's mapping). Required.
	StoreError func(w http.ResponseWriter, err error, event string)
	// MaxConns caps the push connections (WebSocket and SSE together) open on this instance;
	// beyond it a connect is answered 503 (code too_many_connections) and the page falls back
	// to polling. Defaults to DefaultMaxConnsFor(the process's open-file limit): a cap that
	// leaves room for every other connection, so /healthz, /readyz and admin calls still answer.
	MaxConns int
	// MaxConnsPerTicket caps the push connections of one ticket on this instance (a person's
	// tabs and devices); beyond it a connect is answered 429 (code
	// too_many_ticket_connections), so that one ticket cannot multiply its pings and session
	// renewals. Defaults to 8.
	MaxConnsPerTicket int
	// ClientKey names a request's client (package clientaddr) for the cap of push connections
	// per client: an event's limits.push_per_client connections of one client (beyond it 429
	// rate_limited). Nil: no cap per client.
	ClientKey func(r *http.Request) string
	// Shares count the connections per client and event of all the instances together (the
	// store's: store.Backend.Shares; see clients.go). Nil, or when they do not answer: this
	// instance's connections only.
	Shares store.Shares
	// OriginAllowed judges a WebSocket handshake's Origin (package origin). Nil: the Origin, if
	// any, must name the request's Host.
	OriginAllowed func(r *http.Request) bool
	// SendBuffer is the number of messages queued per connection. Positions, stats and
	// keep-alives are not queued beyond half of it (later ones supersede them); a connection
	// with no room left for an admission or final status is closed as a slow consumer instead
	// of holding up the others. Defaults to 16.
	SendBuffer int
	// WriteTimeout bounds one write to a client; a client that takes longer is dropped.
	// Defaults to 10 s.
	WriteTimeout time.Duration
	// OpenTimeout bounds the store calls of a stream's opening together (the client's share of
	// push_per_client, then the ticket's status), past which it is answered 503 as the API's
	// other requests are past the service's --store-timeout, which the app sets it to.
	// Defaults to 5 s.
	OpenTimeout time.Duration
	// Tick is how often the hub reads each event's counters (one Stats call per event with
	// local connections), sends positions, keeps connections alive and heals missed
	// admissions. Defaults to 500 ms.
	Tick time.Duration
	// ResyncGrace is how long an admission batch's message has to reach this instance: a
	// connection still waiting when the serving counter passed its number at least this long
	// ago is delivered by the resync instead (a lost or late message). Defaults to 1 s.
	ResyncGrace time.Duration
	// PositionInterval is the least time between two position messages to one connection
	// whose place changed. Defaults to 1 s.
	PositionInterval time.Duration
	// StatsInterval is the least time between two stats messages to one connection, and
	// between two position messages that only carry a new line length or ETA. Defaults to 5 s.
	StatsInterval time.Duration
	// PingInterval is the keep-alive period: a WebSocket ping, or an SSE comment line. An
	// admitted, visible WebSocket is pinged more often, every session_ttl/3, because each
	// answered ping is what renews its session. Defaults to 20 s.
	PingInterval time.Duration
	// PongTimeout closes a WebSocket whose ping is not answered within it. Defaults to 10 s.
	PongTimeout time.Duration
	// HeartbeatInterval is how often an SSE stream carries a "ping" event, which (unlike the
	// comment lines of PingInterval) its page sees: a page that hears nothing for a few of
	// them takes the stream for dead and connects again. It replaces the SSE keep-alive
	// comment. A WebSocket's page asks with its own {"type":"ping"} instead. Defaults to 5 s.
	HeartbeatInterval time.Duration
	// StoreConcurrency bounds this hub's store calls in flight (Status calls of deliveries,
	// heals and session renewals). Defaults to 256.
	StoreConcurrency int
	// RoomLinger is how long an event without local connections stays subscribed, so that a
	// page reloading does not unsubscribe and subscribe again. Defaults to 30 s.
	RoomLinger time.Duration
	// ShutdownGrace bounds how long Stop waits for the connections to close. Defaults to 6 s
	// (a WebSocket close handshake waits at most 5 s for the client).
	ShutdownGrace time.Duration
	// Now is the hub's clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxConns          = 50_000
	DefaultMaxConnsPerTicket = 8
	DefaultSendBuffer        = 16
	DefaultWriteTimeout      = 10 * time.Second
	DefaultTick              = 500 * time.Millisecond
	DefaultResyncGrace       = time.Second
	DefaultPositionInterval  = time.Second
	DefaultStatsInterval     = 5 * time.Second
	DefaultPingInterval      = 20 * time.Second
	DefaultPongTimeout       = 10 * time.Second
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultStoreConcurrency  = 256
	DefaultRoomLinger        = 30 * time.Second
	DefaultShutdownGrace     = 6 * time.Second
)

// WithDefaults returns a copy with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConnsFor(connlimit.OpenFileLimit()))
	c.MaxConnsPerTicket = cmp.Or(c.MaxConnsPerTicket, DefaultMaxConnsPerTicket)
	c.SendBuffer = cmp.Or(c.SendBuffer, DefaultSendBuffer)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.OpenTimeout = cmp.Or(c.OpenTimeout, storeCallTimeout)
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	c.ResyncGrace = cmp.Or(c.ResyncGrace, DefaultResyncGrace)
	c.PositionInterval = cmp.Or(c.PositionInterval, DefaultPositionInterval)
	c.StatsInterval = cmp.Or(c.StatsInterval, DefaultStatsInterval)
	c.PingInterval = cmp.Or(c.PingInterval, DefaultPingInterval)
	c.PongTimeout = cmp.Or(c.PongTimeout, DefaultPongTimeout)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.StoreConcurrency = cmp.Or(c.StoreConcurrency, DefaultStoreConcurrency)
	c.RoomLinger = cmp.Or(c.RoomLinger, DefaultRoomLinger)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil || c.Events == nil || c.Tickets == nil || c.Admissions == nil || c.Notifier == nil || c.StoreError == nil:
		return errors.New("push: Config.Store, Events, Tickets, Admissions, Notifier and StoreError are required")
	case c.MaxConns < 1:
		return errors.New("push: MaxConns must be at least 1")
	case c.MaxConnsPerTicket < 1:
		return errors.New("push: MaxConnsPerTicket must be at least 1")
	case c.SendBuffer < 1:
		return errors.New("push: SendBuffer must be at least 1")
	case c.StoreConcurrency < 1:
		return errors.New("push: StoreConcurrency must be at least 1")
	case c.WriteTimeout < 0 || c.OpenTimeout < 0 || c.Tick < 0 || c.ResyncGrace < 0 || c.PositionInterval < 0 || c.StatsInterval < 0 ||
		c.PingInterval < 0 || c.PongTimeout < 0 || c.HeartbeatInterval < 0 || c.RoomLinger < 0 || c.ShutdownGrace < 0:
		return errors.New("push: durations must not be negative")
	}
	return nil
}
