// Package redisstore is the Store on Redis (standalone or Redis Cluster). Every check-then-act
// is one Lua script (lua/*.lua, embedded), called by EVALSHA with a transparent EVAL on
// NOSCRIPT; every key of an event shares the hash tag {event}.
//
// The client is rueidis: it pipelines concurrent commands onto shared connections
// automatically, so thousands of goroutines joining at once cost a few large writes instead
// of one round trip each — the join path's throughput is bounded by Redis, not by the client.
// The joins of one event that arrive while one of its join calls is in flight go together as
// one script call (batch.go), so Redis pays a call's fixed cost once per batch.
package redisstore

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
)

// Config configures a Store.
type Config struct {
	// Client is the Redis connection. Required.
	Client rueidis.Client
	// Prefix starts every key. Defaults to "wr:".
	Prefix string
	// Now stubs the store's clock (tests). Defaults to nil: scripts read Redis TIME, so all
	// instances share one clock.
	Now func() time.Time
	// PubSub is the client the notifier subscribes on. Defaults to Client; Open dials one of
	// its own, so that Redis dropping a slow subscriber never fails a command in flight.
	PubSub rueidis.Client
	Logger *slog.Logger // defaults to slog.Default()
	// Numbers keeps the lines' numbers durable (sqlstore.DB; docs/durability.md). Nil: numbers
	// are unbounded and a line that Redis loses starts again from 1 under a new generation.
	Numbers queue.Numbers
	// Dials counts the client's dials (Open sets it with the dialer of DialCounting): a line is
	// checked for a Redis restart or failover once per event after each new connection. Nil:
	// once per event.
	Dials *atomic.Uint64
	// OnResume, when set, is called with the event's id each time this instance resumes a line
	// that Redis lost (restarted empty, failed over to a replica behind it, evicted it), after
	// the warning "line resumed after a Redis loss" is logged: admitted sessions of the lost
	// copy may have ended (docs/durability.md). Only with Numbers.
	OnResume func(event string)
}

// Store is a queue.Store on Redis.
type Store struct {
	client rueidis.Client
	prefix string
	now    func() time.Time
	logger *slog.Logger
	dur    durable

	// keyCache holds saleKeys' slices by event id (lineKeys is their first 8): building the
	// keys cost an allocation each per call on the join and status paths. Bounded by
	// maxCachedEvents.
	keyCache  sync.Map // event id -> []string
	keyCached atomic.Int64
	// joinKeyCache is the same for joinKeys.
	joinKeyCache  sync.Map
	joinKeyCached atomic.Int64
	// draws holds the lines' draws (see draw.go).
	draws drawCache
	// joins groups the joins of each event into batched calls (see batch.go).
	joins batchers
}

// Keys returns the keys of event's line in the order the scripts take them as KEYS (see
// lua/common.lua). The bench command passes them to redis-benchmark.
func (s *Store) Keys(event string) []string { return s.keys(event) }

// maxCachedEvents bounds keyCache; events beyond it get their keys built per call.
const maxCachedEvents = 4096

// lineKeys is keys(event), cached. The slice is shared: callers must not modify it (its
// capacity is its length, so an append copies).
func (s *Store) lineKeys(event string) []string {
	k := s.allKeys(event)
	return k[:8:8]
}

// allKeys is saleKeys(event) and pollKey(event), cached: the line's keys and the sale's, for
// the line scripts that also release a ticket's hold (leave, admit, status), and the count of
// status.lua's poll limit. Shared like lineKeys'.
func (s *Store) allKeys(event string) []string {
	if k, ok := s.keyCache.Load(event); ok {
		return k.([]string)
	}
	k := append(s.saleKeys(event), s.pollKey(event))
	k = k[:len(k):len(k)]
	if s.keyCached.Load() < maxCachedEvents {
		if _, loaded := s.keyCache.LoadOrStore(event, k); !loaded {
			s.keyCached.Add(1)
		}
	}
	return k
}

var _ queue.Store = (*Store)(nil)

// New returns a Store on cfg.Client. Closing the Store does not close the client.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisstore: Config.Client is required")
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, "wr:")
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, errors.New("redisstore: prefix must not contain { or }")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Store{client: cfg.Client, prefix: cfg.Prefix, now: cfg.Now, logger: cfg.Logger,
		dur: durable{numbers: cfg.Numbers, dials: cfg.Dials, onResume: cfg.OnResume}}, nil
}

// NewBackend returns the backend on cfg.Client: the line, the sale and the coupon campaigns on
// one Store, and a Notifier that publishes on cfg.Client and subscribes on cfg.PubSub. Closing
// it closes nothing (the clients belong to the caller). Errors: those of New.
func NewBackend(cfg Config) (store.Backend, error) {
	s, err := New(cfg)
	if err != nil {
		return store.Backend{}, err
	}
	sub := cfg.PubSub
	if sub == nil {
		sub = cfg.Client
	}
	return store.Backend{
		Line: s, Sale: s, Coupons: s, Leases: s, History: s, Counters: s, Shares: s, Auto: s,
		Notifier: NewNotifier(cfg.Client, sub, s.prefix, cfg.Logger),
		Ping:     func(ctx context.Context) error { return cfg.Client.Do(ctx, cfg.Client.B().Ping().Build()).Error() },
	}, nil
}

// OpenConfig configures Open.
type OpenConfig struct {
	URL    string // see Dial; required
	Prefix string // key prefix; "" = "wr:"
	// Timeout bounds each connection attempt and each wait for a reply (see DialTimeout).
	// Defaults to DefaultTimeout.
	Timeout time.Duration
	Logger  *slog.Logger // defaults to slog.Default()
	// Numbers and OnResume: see Config.
	Numbers  queue.Numbers
	OnResume func(event string)
}

// Open dials cfg.URL (see Dial) twice, a client for commands and one for Pub/Sub
// subscriptions, checks that the server is recent enough (see CheckVersion), and returns the
// backend on them; its Close closes both clients. ctx bounds the version check. Errors: a
// malformed URL, a Redis that does not answer, or one too old (*VersionError).
func Open(ctx context.Context, cfg OpenConfig) (store.Backend, error) {
	dials := new(atomic.Uint64)
	cmd, err := DialCounting(cfg.URL, cfg.Timeout, dials)
	if err != nil {
		return store.Backend{}, err
	}
	if err := CheckVersion(ctx, cmd); err != nil {
		cmd.Close()
		return store.Backend{}, err
	}
	sub, err := DialTimeout(cfg.URL, cfg.Timeout)
	if err != nil {
		cmd.Close()
		return store.Backend{}, err
	}
	b, err := NewBackend(Config{Client: cmd, PubSub: sub, Prefix: cfg.Prefix, Logger: cfg.Logger, Numbers: cfg.Numbers, Dials: dials, OnResume: cfg.OnResume})
	if err != nil {
		cmd.Close()
		sub.Close()
		return store.Backend{}, err
	}
	b.Close = func() error {
		sub.Close()
		cmd.Close()
		return nil
	}
	return b, nil
}

// DefaultTimeout is Dial's bound on a connection attempt and on a wait for a reply.
const DefaultTimeout = 3 * time.Second

// Dial connects to Redis. url is a redis:// or rediss:// URL, a bare host:port (read as
// redis://host:port), a comma-separated list of host:port nodes or redis:// URLs (the nodes of a
// Redis Cluster), or redis+cluster://host:port[,host:port...]; cluster mode is detected from
// the server. Connections and replies are bounded by DefaultTimeout.
func Dial(url string) (rueidis.Client, error) { return DialTimeout(url, DefaultTimeout) }

// DialTimeout is Dial with its own bound (0 = DefaultTimeout): a connection attempt fails
// after timeout (the dialer's), and a connection on which a reply or a PING answer is
// awaited longer is closed, failing every call waiting on it (rueidis's ConnWriteTimeout), so
// a Redis that accepts and never answers cannot hold a caller without a context deadline.
func DialTimeout(url string, timeout time.Duration) (rueidis.Client, error) {
	return DialCounting(url, timeout, nil)
}

// DialCounting is DialTimeout counting the client's successful dials in dials (nil: none),
// for Config.Dials.
func DialCounting(url string, timeout time.Duration, dials *atomic.Uint64) (rueidis.Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var opt rueidis.ClientOption
	switch {
	case strings.HasPrefix(url, "redis+cluster://"):
		opt.InitAddress = strings.Split(strings.TrimPrefix(url, "redis+cluster://"), ",")
	case strings.Contains(url, ","):
		for _, part := range strings.Split(url, ",") {
			part = strings.TrimSpace(part)
			if strings.Contains(part, "://") {
				o, err := rueidis.ParseURL(part)
				if err != nil {
					return nil, fmt.Errorf("redis url %q: %w", part, err)
				}
				if opt.InitAddress == nil {
					opt = o
					continue
				}
				opt.InitAddress = append(opt.InitAddress, o.InitAddress...)
				continue
			}
			opt.InitAddress = append(opt.InitAddress, part)
		}
	default:
		if !strings.Contains(url, "://") {
			url = "redis://" + url // host:port, as redis-cli -h/-p and the list form take it
		}
		o, err := rueidis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w (give redis://host:port, rediss:// for TLS)", err)
		}
		opt = o
	}
	// Client-side caching is not used; RESP2 servers are fine too.
	opt.DisableCache = true
	// A Redis that stops answering fails the calls waiting on it within timeout (503 to
	// clients) instead of holding requests for rueidis's default 10 s; an address that does not
	// accept fails the dial as soon.
	opt.ConnWriteTimeout = timeout
	opt.Dialer.Timeout = timeout
	// Throughput: with many goroutines calling at once, rueidis's automatic pipelining writes
	// whatever is queued in one write; pausing the write loop up to 50 µs after each flush
	// lets more calls join each write. Measured with 512 goroutines joining one event on this
	// 2-core machine (200,000 joins): 170,000 write() calls without the pause, 35,000 with
	// 20 µs, 15,000 with 50 µs (and fewer, larger reads for Redis), the client's CPU per join
	// about halved; a call waits at most 50 µs more, and only when the pipe is busy.
	opt.MaxFlushDelay = 50 * time.Microsecond
	if dials != nil {
		opt.DialCtxFn = dialCounter(dials)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil && len(opt.InitAddress) > 1 && strings.Contains(err.Error(), "cluster support disabled") {
		err = fmt.Errorf("%w: a list of addresses names the nodes of a Redis Cluster, and %s is a standalone Redis: give it as redis://host:port", err, strings.Join(opt.InitAddress, ","))
	}
	return c, err
}

func (s *Store) nowArg() string {
	if s.now == nil {
		return "0"
	}
	return strconv.FormatInt(s.now().UnixMilli(), 10)
}

// flag is a boolean script argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func msOrZero(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// PutEvent implements queue.Store.
//
// With Config.Numbers, a new line takes its generation and numbers from there (the generation
// argument only says "create"), so a line that Redis lost comes back as it was (resume.lua).
func (s *Store) PutEvent(ctx context.Context, cfg queue.EventConfig, generation uint32) (uint32, error) {
	var extra, dv []string
	var was queue.LineRecord
	if generation != 0 && s.dur.numbers != nil {
		// An update first: the reservation is only for a line that is really new.
		gen, _, err := s.putEvent(ctx, cfg, 0, nil, nil)
		if !errors.Is(err, queue.ErrEventNotFound) {
			return gen, err
		}
		if generation, extra, dv, was, err = s.createArgs(ctx, cfg.ID, cfg.DrawSeed); err != nil {
			return 0, err
		}
		s.dur.checked.Delete(cfg.ID)
	}
	gen, created, err := s.putEvent(ctx, cfg, generation, extra, dv)
	if err == nil && created && was.SeqCeiling > 0 {
		// The event's line had numbers (its record is deleted with the event): Redis lost it.
		s.resumed(cfg.ID, "the event's line was gone (Redis restarted empty or evicted it)", was.SeqCeiling, was.ServingCeiling, 0)
	}
	return gen, err
}

// putEvent runs put_event.lua: the line's generation, and whether this call created the line.
// extra are its ARGV[13..19] (createArgs), dv its ARGV[21..] (the draw's void numbers).
func (s *Store) putEvent(ctx context.Context, cfg queue.EventConfig, generation uint32, extra, dv []string) (uint32, bool, error) {
	if cfg.Auto || len(dv) > 0 { // ARGV[20]: the line's limits are its controller's (lua/put_event.lua)
		extra = append(append(extra, make([]string, 7-len(extra))...), flag(cfg.Auto))
		extra = append(extra, dv...)
	}
	r := readReply(putEventScript.Exec(ctx, s.client, s.keys(cfg.ID), append([]string{
		s.nowArg(), strconv.FormatUint(uint64(generation), 10),
		strconv.FormatInt(cfg.MaxActive, 10), strconv.FormatFloat(cfg.AdmitRate, 'f', -1, 64),
		strconv.FormatInt(cfg.SessionTTL.Milliseconds(), 10), strconv.FormatInt(cfg.ClaimTTL.Milliseconds(), 10),
		msOrZero(cfg.OpensAt), msOrZero(cfg.ClosesAt), strconv.FormatInt(cfg.Version, 10), flag(cfg.Paused),
		strconv.FormatInt(cfg.SessionMax.Milliseconds(), 10), hex.EncodeToString(cfg.DrawSeed),
	}, extra...)).ToArray())
	gen := r.Code()
	if err := r.Err(); err != nil {
		return 0, false, fmt.Errorf("redisstore: put event: %w", err)
	}
	if gen < 0 {
		return 0, false, codeErr(cfg.ID, gen)
	}
	return uint32(gen), r.Int(1) == 1, nil
}

// DeleteEvent implements queue.Store.
//
// The named users' buckets (userKeys) go after the line's keys, by the generation and last
// number the line had: a new line made meanwhile has a generation, and buckets, of its own.
func (s *Store) DeleteEvent(ctx context.Context, event string) error {
	ev := s.lineKeys(event)[0]
	v, err := s.client.Do(ctx, s.client.B().Hmget().Key(ev).Field("gen", "seq").Build()).ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: delete event: %w", err)
	}
	sig, ctl := s.autoKeys(event) // admission mode auto's signals and controller (auto.go)
	cmd := s.client.B().Del().Key(append(s.joinKeys(event), s.pollKey(event), sig, ctl)...).Build()
	if err := s.client.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("redisstore: delete event: %w", err)
	}
	gen, err1 := v[0].AsInt64()
	seq, err2 := v[1].AsInt64()
	if err1 != nil || err2 != nil {
		return nil // no line (or none with numbers): no users
	}
	if err := s.unlinkAll(ctx, s.userKeys(event, uint32(gen), seq)); err != nil {
		return fmt.Errorf("redisstore: delete event: the users' buckets: %w", err)
	}
	return nil
}

// unlinkAll unlinks keys of one hash tag, 1,024 to a command.
func (s *Store) unlinkAll(ctx context.Context, keys []string) error {
	var cmds rueidis.Commands
	for len(keys) > 0 {
		n := min(len(keys), 1024)
		cmds = append(cmds, s.client.B().Unlink().Key(keys[:n]...).Build())
		keys = keys[n:]
	}
	for _, r := range s.client.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// UserKeys returns the keys of the named users' entries of event's line (present or not; the
// bench measures their memory). Errors: queue.ErrEventNotFound, Redis errors.
func (s *Store) UserKeys(ctx context.Context, event string) ([]string, error) {
	v, err := s.client.Do(ctx, s.client.B().Hmget().Key(s.lineKeys(event)[0]).Field("gen", "seq").Build()).ToArray()
	if err != nil {
		return nil, err
	}
	gen, err := v[0].AsInt64()
	if err != nil {
		return nil, queue.ErrEventNotFound
	}
	seq, _ := v[1].AsInt64()
	return s.userKeys(event, uint32(gen), seq), nil
}

// Stats implements queue.Store.
func (s *Store) Stats(ctx context.Context, event string) (queue.Stats, error) {
	r := readReply(statsScript.Exec(ctx, s.client, s.lineKeys(event), []string{s.nowArg()}).ToArray())
	return parseStats(event, r)
}

// View implements queue.Store: stats.lua with its view's values.
func (s *Store) View(ctx context.Context, p queue.ViewParams) (queue.View, error) {
	args := append(make([]string, 0, 6+2*len(p.Polls)), s.nowArg(), "1", strconv.Itoa(queue.ViewLeftMax))
	if len(p.Polls) > 0 && p.Limit > 0 && p.Window >= time.Millisecond {
		args = append(args, strconv.FormatUint(uint64(p.Generation), 10), strconv.FormatInt(p.Limit, 10),
			strconv.FormatInt(p.Window.Milliseconds(), 10))
		for _, c := range p.Polls {
			args = append(args, strconv.FormatInt(c.Number, 10), strconv.FormatInt(c.Count, 10))
		}
	}
	r := readReply(statsScript.Exec(ctx, s.client, s.allKeys(p.Event), args).ToArray())
	st, err := parseStats(p.Event, r)
	if err != nil {
		return queue.View{}, err
	}
	v := queue.View{Stats: st, Plain: r.Int(18) == 1, MaxActive: r.Int(19), AdmitRate: r.Float(20),
		OverFor: time.Duration(r.Int(22)) * time.Millisecond}
	nleft, nover := r.Int(21), int(r.Int(23))
	i := 24
	for ; i < 24+nover && r.Err() == nil; i++ {
		v.Over = append(v.Over, r.Int(i))
	}
	if nleft <= queue.ViewLeftMax {
		v.LeftAll = true
		for ; i < r.Len() && r.Err() == nil; i++ {
			if p := r.Int(i); p > st.Serving {
				v.Left = append(v.Left, p)
			}
		}
	}
	if err := r.Err(); err != nil {
		return queue.View{}, fmt.Errorf("redisstore: view: %w", err)
	}
	return v, nil
}

func parseStats(event string, r *reply) (queue.Stats, error) {
	if code := r.Code(); code < 0 && r.Len() == 1 && r.Err() == nil {
		return queue.Stats{}, codeErr(event, code)
	}
	st := queue.Stats{
		Generation: uint32(r.Int(0)), Waiting: r.Int(1), Active: r.Int(2), AdmittedTotal: r.Int(3), Serving: r.Int(4),
		LastNumber: r.Int(5), Rate: r.Float(6), Now: queue.FromMS(r.Int(7)), SoldOut: r.Int(8) == 1,
		DrawPending: r.Int(9) == 1, DrawN: r.Int(10), VoidFrom: r.Int(12), VoidTo: r.Int(13),
		LeftWaiting: r.Int(14), Unclaimed: r.Int(15), VoidLeft: r.Int(16),
	}
	seedHex, owed := r.Str(11), r.Str(17)
	if err := r.Err(); err != nil {
		return queue.Stats{}, fmt.Errorf("redisstore: stats: %w", err)
	}
	for _, f := range strings.Fields(owed) { // pql: numbers, each followed by a space
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return queue.Stats{}, fmt.Errorf("redisstore: stats: the owed queue: %w", err)
		}
		st.Owed = append(st.Owed, n)
	}
	if seedHex != "" {
		seed, err := hex.DecodeString(seedHex)
		if err != nil {
			return queue.Stats{}, fmt.Errorf("redisstore: stats: the draw's seed: %w", err)
		}
		st.DrawSeed = seed
	}
	return st, nil
}

// Join implements queue.Store.
func (s *Store) Join(ctx context.Context, p queue.JoinParams) (queue.Ticket, error) {
	limited := p.ClientKey != "" && p.JoinLimit > 0 && p.JoinWindow >= time.Millisecond &&
		p.JoinLimit <= queue.MaxJoinSpan/p.JoinWindow.Milliseconds()
	if p.CountOnly {
		if !limited {
			return queue.Ticket{}, nil // nothing to count
		}
		p = queue.JoinParams{Event: p.Event, ClientKey: p.ClientKey, JoinLimit: p.JoinLimit, JoinWindow: p.JoinWindow, CountOnly: true}
	}
	capped := p.ClientKey != "" && p.TicketLimit > 0
	// ARGV[1..11] (see lua/join.lua), or only ARGV[1..2] for a plain join.
	args := append(make([]string, 0, 11), s.nowArg(), p.UserKey)
	keys := s.joinKeys(p.Event)
	if !limited && !capped && p.IdempotencyKey == "" && !p.RetryOnly && p.ChallengeID == "" {
		// Neither a limit, an idempotency key nor a challenge: ARGV[3..11] absent, and only the
		// line's keys (join.lua touches no other). Every argument is a string Redis makes.
		keys = keys[:8:8]
	} else {
		args = append(args, "", "0", "0", p.IdempotencyKey, "", "", "", "", "")
		if limited || capped {
			args[2] = p.ClientKey
		}
		if limited {
			args[3], args[4] = strconv.FormatInt(p.JoinLimit, 10), strconv.FormatInt(p.JoinWindow.Milliseconds(), 10)
		}
		if capped {
			args[10] = strconv.FormatInt(p.TicketLimit, 10)
		}
		switch {
		case p.CountOnly:
			args[6] = "!"
		case p.RetryOnly:
			args[6] = "-"
		case p.ChallengeID != "":
			// The bucket of the minute in which the challenge's memory (expiry + grace) ends.
			b := p.ChallengeExpires.Add(queue.ChallengeGrace).UnixMilli()/challengeBucketMS + 1
			args[6] = strconv.FormatInt(b*challengeBucketMS, 10) + ":" + p.ChallengeID
			keys = append(keys[:len(keys):len(keys)], s.challengeKey(p.Event, b))
		}
	}
	// ARGV's trailing empty strings are left out: join.lua reads an absent one as '' (each
	// costs Redis a string to parse and a Lua string to make; most joins use none of 6..11).
	for len(args) > 2 && args[len(args)-1] == "" {
		args = args[:len(args)-1]
	}
	// full gives a plain join's repeat the whole of ARGV (empty: none of them).
	full := func() {
		for len(args) < 11 {
			args = append(args, "")
		}
	}
	if err := s.guard(ctx, p.Event); err != nil {
		return queue.Ticket{}, fmt.Errorf("redisstore: join: %w", err)
	}
	r := s.joinOnce(ctx, p.Event, keys, args)
	ceilings, draws := 0, 0
retry:
	for r.Err() == nil {
		switch r.Code() {
		case codeNeedCeiling:
			seq, srv := r.Int(1), r.Int(2)
			atOnce := r.Len() > 3 && r.Int(3) == 1
			if err := r.Err(); err != nil || ceilings == maxCeilingRetries {
				return queue.Ticket{}, fmt.Errorf("redisstore: join: no durable line numbers left after %d reservations (seq %d, serving %d) (%v)", ceilings, seq, srv, err)
			}
			ceilings++
			if err := s.raiseShared(ctx, p.Event, seq, srv); err != nil {
				return queue.Ticket{}, fmt.Errorf("redisstore: join: reserve line numbers: %w", err)
			}
			if full(); args[7] == "" {
				// The repeat has ARGV[8] '0': the join is counted against the client's limit
				// already (join.lua).
				args[7] = "0"
			}
			if atOnce && len(args) == 11 {
				// One reservation to be admitted at once, no more (ARGV[12]): other instances'
				// joins may take its slots and free them again while this one retries.
				args = append(args, "1")
			}
		case codeNeedPlace, codeDrawLeft:
			// The live ticket to give back is in the draw: its place, or the draw's leavers
			// scored first, and again (see draw.go). The repeat has ARGV[8]: its join is
			// counted already.
			if draws == drawAttempts {
				break retry
			}
			draws++
			var number int64
			if r.Code() == codeNeedPlace {
				number = r.Int(4)
			}
			ld, err := s.learnDraw(p.Event, r)
			if err == nil && number == 0 {
				err = s.scoreLeft(ctx, p.Event, ld)
			}
			if err != nil {
				return queue.Ticket{}, fmt.Errorf("redisstore: join: %w", err)
			}
			var place int64
			if ld.d != nil {
				place = ld.d.Place(number)
			}
			full()
			args[7], args[8], args[9] = strconv.FormatInt(number, 10), strconv.FormatInt(place, 10), strconv.FormatInt(ld.n, 10)
		default:
			break retry
		}
		r = readReply(joinScript.Exec(ctx, s.client, keys, args).ToArray())
	}
	if limited, err := rateLimited(r, "join"); limited {
		return queue.Ticket{}, err
	}
	if r.Code() == codeCounted && r.Err() == nil {
		return queue.Ticket{}, nil
	}
	t, err := parseTicket(p.Event, r)
	if err != nil && r.Err() != nil {
		return t, fmt.Errorf("redisstore: join: %w", err)
	}
	return t, err
}

// ticketCall runs a script on one ticket (ARGV: now, generation, number, then extra, then N and
// the ticket's place in the draw of N; see status.lua), again with the line's draw while it
// answers DRAW_MOVED (or, after scoring the draw's leavers, DRAW_LEFT). extra holds limits the
// script counts (status.lua's polls per ticket): a repeat sends them empty, counted already.
func (s *Store) ticketCall(ctx context.Context, script *rueidis.Lua, keys []string, ref queue.TicketRef, extra []string) *reply {
	args := make([]string, 0, 5+len(extra))
	for attempt := 1; ; attempt++ {
		nArg, placeArg := s.placeArgs(ref)
		args = append(args[:0], s.nowArg(), strconv.FormatUint(uint64(ref.Generation), 10), strconv.FormatInt(ref.Number, 10))
		for _, x := range extra {
			if attempt > 1 {
				x = ""
			}
			args = append(args, x)
		}
		r := readReply(script.Exec(ctx, s.client, keys, append(args, nArg, placeArg)).ToArray())
		code := r.Code()
		if (code != codeDrawMoved && code != codeDrawLeft) || r.Err() != nil || attempt == drawAttempts {
			return r
		}
		ld, err := s.learnDraw(ref.Event, r)
		if err == nil && code == codeDrawLeft {
			err = s.scoreLeft(ctx, ref.Event, ld)
		}
		if err != nil {
			return &reply{err: err}
		}
	}
}

// Status implements queue.Store.
func (s *Store) Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	return s.status(ctx, ref, []string{"", ""}, "status")
}

// Poll implements queue.Store: Status with the limit counted in the same script.
func (s *Store) Poll(ctx context.Context, p queue.PollParams) (queue.Ticket, error) {
	limit := []string{"", ""}
	if p.Limit > 0 && p.Window > 0 {
		limit = []string{strconv.FormatInt(p.Limit, 10), strconv.FormatInt(p.Window.Milliseconds(), 10)}
	}
	return s.status(ctx, p.Ref, limit, "poll")
}

// status runs status.lua with limit (ARGV[4..5]: polls per ticket and window, or empty).
func (s *Store) status(ctx context.Context, ref queue.TicketRef, limit []string, what string) (queue.Ticket, error) {
	if err := s.guard(ctx, ref.Event); err != nil {
		return queue.Ticket{}, fmt.Errorf("redisstore: %s: %w", what, err)
	}
	r := s.ticketCall(ctx, statusScript, s.allKeys(ref.Event), ref, limit)
	if limited, err := rateLimited(r, what); limited {
		return queue.Ticket{}, err
	}
	t, err := parseTicket(ref.Event, r)
	if err != nil && r.Err() != nil {
		return t, fmt.Errorf("redisstore: %s: %w", what, err)
	}
	return t, err
}

// rateLimited reads a {RATE_LIMITED, ms until a call passes [, 1: the cap of the pre-queue]}
// reply as a *queue.RateLimitedError; limited is false for any other reply.
func rateLimited(r *reply, what string) (limited bool, err error) {
	if r.Code() != codeRateLimited || r.Err() != nil {
		return false, nil
	}
	retry := r.Int(1)
	prequeue := r.Len() > 2 && r.Int(2) == 1
	if err := r.Err(); err != nil {
		return true, fmt.Errorf("redisstore: %s: %w", what, err)
	}
	return true, &queue.RateLimitedError{RetryAfter: time.Duration(retry) * time.Millisecond, Prequeue: prequeue}
}

// ticketCodeOnly runs a ticket script (ticketCall) whose reply is a code alone and maps it to
// an error.
func (s *Store) ticketCodeOnly(ctx context.Context, script *rueidis.Lua, keys []string, ref queue.TicketRef, what string) error {
	r := s.ticketCall(ctx, script, keys, ref, nil)
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: %s: %w", what, err)
	}
	return codeErr(ref.Event, code)
}

// Leave implements queue.Store.
func (s *Store) Leave(ctx context.Context, ref queue.TicketRef) error {
	if err := s.guard(ctx, ref.Event); err != nil {
		return fmt.Errorf("redisstore: leave: %w", err)
	}
	return s.ticketCodeOnly(ctx, leaveScript, s.allKeys(ref.Event), ref, "leave")
}

// Complete implements queue.Store.
func (s *Store) Complete(ctx context.Context, ref queue.TicketRef) error {
	if err := s.guard(ctx, ref.Event); err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	return s.ticketCodeOnly(ctx, completeScript, s.keys(ref.Event), ref, "complete")
}

// Admit implements queue.Store.
func (s *Store) Admit(ctx context.Context, event string, maxBatch int64) (queue.AdmitResult, error) {
	if err := s.guard(ctx, event); err != nil {
		return queue.AdmitResult{}, fmt.Errorf("redisstore: admit: %w", err)
	}
	exact := "0"
	if s.dur.numbers != nil {
		exact = "1"
	}
	args := []string{s.nowArg(), strconv.FormatInt(max(0, maxBatch), 10), exact}
	r := readReply(admitScript.Exec(ctx, s.client, s.allKeys(event), args).ToArray())
	var ended int64 // sessions ended by the call that answered NEED_CEILING
	draws := 0
	for r.Err() == nil && ((r.Code() == codeNeedCeiling && args[2] == "1") || (r.Code() == codeDrawLeft && draws == 0)) {
		if r.Code() == codeDrawLeft {
			// The opening's draw is made: score its leavers by place, then admit (see draw.go).
			draws++
			ld, err := s.learnDraw(event, r)
			if err == nil {
				err = s.scoreLeft(ctx, event, ld)
			}
			if err != nil {
				return queue.AdmitResult{}, fmt.Errorf("redisstore: admit: %w", err)
			}
		} else {
			// The step would pass the serving ceiling: it is raised in SQL first (to the step's
			// target and what the next step may admit, admit.lua), so that after a loss nobody
			// above it can have been told (pending.lua). Then the step admits up to the ceiling
			// it finds: once, since other instances' steps may have moved serving meanwhile,
			// and chasing them would cost a write each.
			seq, target := r.Int(1), r.Int(2)
			ended += r.Int(3)
			if err := s.raiseShared(ctx, event, seq, target); err != nil {
				return queue.AdmitResult{}, fmt.Errorf("redisstore: admit: reserve the serving ceiling: %w", err)
			}
			args[2] = "0"
		}
		r = readReply(admitScript.Exec(ctx, s.client, s.allKeys(event), args).ToArray())
	}
	code := r.Code()
	if code < 0 && r.Err() == nil {
		return queue.AdmitResult{}, codeErr(event, code)
	}
	res := queue.AdmitResult{Admitted: code, From: r.Int(1), To: r.Int(2), Expired: r.Int(3) + ended, Now: queue.FromMS(r.Int(4))}
	seq, sc, vc, ahead := r.Int(5), r.Int(6), r.Int(7), r.Int(9)
	if err := r.Err(); err != nil {
		return queue.AdmitResult{}, fmt.Errorf("redisstore: admit: %w", err)
	}
	s.topUp(event, seq, sc, vc, ahead)
	return res, nil
}

// SetSoldOut implements queue.Store.
func (s *Store) SetSoldOut(ctx context.Context, event string, soldOut bool) (int64, error) {
	r := readReply(soldOutScript.Exec(ctx, s.client, s.keys(event), []string{s.nowArg(), flag(soldOut)}).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return 0, fmt.Errorf("redisstore: sold out: %w", err)
	}
	if code < 0 {
		return 0, codeErr(event, code)
	}
	return code, nil
}

// Extend implements queue.Store.
func (s *Store) Extend(ctx context.Context, event string, d time.Duration) (int64, error) {
	r := readReply(extendScript.Exec(ctx, s.client, s.lineKeys(event), []string{s.nowArg(), strconv.FormatInt(d.Milliseconds(), 10)}).ToArray())
	n := r.Code()
	if err := r.Err(); err != nil {
		return 0, fmt.Errorf("redisstore: extend: %w", err)
	}
	if n < 0 {
		return 0, codeErr(event, n)
	}
	return n, nil
}

// Lease implements store.Leases.
func (s *Store) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	r := readReply(leaseScript.Exec(ctx, s.client, []string{s.leaseKey(name)},
		[]string{s.nowArg(), holder, strconv.FormatInt(ttl.Milliseconds(), 10)}).ToArray())
	held := r.Code() == 1
	if err := r.Err(); err != nil {
		return false, fmt.Errorf("redisstore: lease: %w", err)
	}
	return held, nil
}

// statusCodes are the ticket statuses by the code of lua/common.lua's ticket_status.
var statusCodes = [...]queue.Status{1: queue.StatusQueued, 2: queue.StatusAdmitted, 3: queue.StatusExpired,
	4: queue.StatusClosed, 5: queue.StatusSoldOut, 6: queue.StatusCompleted}

// parseTicket reads the ticket shape of lua/common.lua's reply().
func parseTicket(event string, r *reply) (queue.Ticket, error) {
	code := r.Code()
	if code <= 0 && r.Err() == nil {
		return queue.Ticket{}, codeErr(event, code)
	}
	if code >= int64(len(statusCodes)) {
		return queue.Ticket{}, fmt.Errorf("%w: status %d", errShortReply, code)
	}
	t := queue.Ticket{
		TicketRef: queue.TicketRef{Event: event, Number: r.Int(1), Generation: uint32(r.Int(8))},
		Position:  r.Int(2), Waiting: r.Int(3), Serving: r.Int(4), Rate: r.Float(6), Now: queue.FromMS(r.Int(7)),
		Created: r.Int(9) == 1, Place: r.Int(10),
	}
	if code > 0 {
		t.Status = statusCodes[code]
	}
	if until := r.Int(5); until > 0 {
		t.AdmittedUntil = queue.FromMS(until)
	}
	if r.Len() > 11 {
		t.UserKey = r.Str(11)
	}
	if err := r.Err(); err != nil {
		return queue.Ticket{}, err
	}
	return t, nil
}

// DeletePrefix deletes every key under prefix, on every master of a cluster (SCAN, then DEL
// per key so that a cluster routes each to its slot). Tests and benchmarks clean up with it.
func DeletePrefix(ctx context.Context, c rueidis.Client, prefix string) error {
	if strings.ContainsAny(prefix, "*?[]\\") || prefix == "" {
		return fmt.Errorf("redisstore: refusing to delete under prefix %q", prefix)
	}
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				break // replicas or unreachable nodes hold nothing of ours
			}
			if len(e.Elements) > 0 {
				cmds := make(rueidis.Commands, 0, len(e.Elements))
				for _, k := range e.Elements {
					cmds = append(cmds, c.B().Unlink().Key(k).Build())
				}
				for _, r := range c.DoMulti(ctx, cmds...) {
					if err := r.Error(); err != nil {
						return fmt.Errorf("redisstore: delete %s*: %w", prefix, err)
					}
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}
