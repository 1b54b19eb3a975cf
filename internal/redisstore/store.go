// Package redisstore is the Store on Redis (standalone or Redis Cluster). Every check-then-act
// is one Lua script (lua/*.lua, embedded), called by EVALSHA with a transparent EVAL on
// NOSCRIPT; every key of an event shares the hash tag {event}.
//
// The client is rueidis: it pipelines concurrent commands onto shared connections
// automatically, so thousands of goroutines joining at once cost a few large writes instead
// of one round trip each — the join path's throughput is bounded by Redis, not by the client.
package redisstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/queue"
)

//go:embed lua/*.lua
var luaFS embed.FS

// commonMark is the line of a script after which common.lua is inserted (default: before the
// script). What comes before it is the script's hot path, which uses none of the helpers and
// so does not pay for defining them when it returns early (see lua/common.lua).
const commonMark = "\n--@common\n"

// ScriptSource returns the text the store sends to Redis for lua/<name>.lua: common.lua
// inserted at the script's "--@common" line, or before the script. The bench command loads it
// into redis-benchmark to measure the rate at which Redis runs it.
func ScriptSource(name string) string {
	common, err := luaFS.ReadFile("lua/common.lua")
	if err != nil {
		panic(err)
	}
	body, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	if head, tail, ok := strings.Cut(string(body), commonMark); ok {
		return head + "\n" + string(common) + "\n" + tail
	}
	return string(common) + "\n" + string(body)
}

func loadScript(name string) *rueidis.Lua { return rueidis.NewLuaScript(ScriptSource(name)) }

var (
	joinScript     = loadScript("join")
	statusScript   = loadScript("status")
	leaveScript    = loadScript("leave")
	admitScript    = loadScript("admit")
	putEventScript = loadScript("put_event")
	statsScript    = loadScript("stats")
	soldOutScript  = loadScript("sold_out")
	completeScript = loadScript("complete")
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
}

// Store is a queue.Store on Redis.
type Store struct {
	client rueidis.Client
	prefix string
	now    func() time.Time

	// keyCache holds lineKeys' slices by event id: building the 8 keys cost 8 allocations per
	// call on the join and status paths. Bounded by maxCachedEvents.
	keyCache  sync.Map // event id -> []string
	keyCached atomic.Int64
}

// Keys returns the keys of event's line in the order the scripts take them as KEYS (see
// lua/common.lua). The bench command passes them to redis-benchmark.
func (s *Store) Keys(event string) []string { return s.keys(event) }

// maxCachedEvents bounds keyCache; events beyond it get their keys built per call.
const maxCachedEvents = 4096

// lineKeys is keys(event), cached. The slice is shared: callers must not modify it (its
// capacity is its length, so an append copies).
func (s *Store) lineKeys(event string) []string {
	if k, ok := s.keyCache.Load(event); ok {
		return k.([]string)
	}
	k := s.keys(event)
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
	if cfg.Prefix == "" {
		cfg.Prefix = "wr:"
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, errors.New("redisstore: prefix must not contain { or }")
	}
	return &Store{client: cfg.Client, prefix: cfg.Prefix, now: cfg.Now}, nil
}

// Dial connects to Redis. url is a redis:// or rediss:// URL, a comma-separated list of
// host:port nodes or redis:// URLs, or redis+cluster://host:port[,host:port...]; cluster mode
// is detected from the server.
func Dial(url string) (rueidis.Client, error) {
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
		o, err := rueidis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt = o
	}
	// Client-side caching is not used; RESP2 servers are fine too.
	opt.DisableCache = true
	// A Redis that stops answering fails the calls waiting on it within 3 s (503 to clients)
	// instead of holding requests for rueidis's default 10 s.
	opt.ConnWriteTimeout = 3 * time.Second
	// Throughput: with many goroutines calling at once, rueidis's automatic pipelining writes
	// whatever is queued in one write; pausing the write loop up to 50 µs after each flush
	// lets more calls join each write. Measured with 512 goroutines joining one event on this
	// 2-core machine (200,000 joins): 170,000 write() calls without the pause, 35,000 with
	// 20 µs, 15,000 with 50 µs (and fewer, larger reads for Redis), the client's CPU per join
	// about halved; a call waits at most 50 µs more, and only when the pipe is busy.
	opt.MaxFlushDelay = 50 * time.Microsecond
	return rueidis.NewClient(opt)
}

func (s *Store) nowArg() string {
	if s.now == nil {
		return "0"
	}
	return strconv.FormatInt(s.now().UnixMilli(), 10)
}

func msOrZero(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// PutEvent implements queue.Store.
func (s *Store) PutEvent(ctx context.Context, cfg queue.EventConfig, generation uint32) (uint32, error) {
	gen, err := putEventScript.Exec(ctx, s.client, s.keys(cfg.ID), []string{
		s.nowArg(), strconv.FormatUint(uint64(generation), 10),
		strconv.FormatInt(cfg.MaxActive, 10), strconv.FormatFloat(cfg.AdmitRate, 'f', -1, 64),
		strconv.FormatInt(cfg.SessionTTL.Milliseconds(), 10), strconv.FormatInt(cfg.ClaimTTL.Milliseconds(), 10),
		msOrZero(cfg.OpensAt), msOrZero(cfg.ClosesAt), strconv.FormatInt(cfg.Version, 10),
	}).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: put event: %w", err)
	}
	if gen < 0 {
		return 0, fmt.Errorf("%w: %s", queue.ErrEventNotFound, cfg.ID)
	}
	return uint32(gen), nil
}

// DeleteEvent implements queue.Store.
func (s *Store) DeleteEvent(ctx context.Context, event string) error {
	cmd := s.client.B().Del().Key(s.keys(event)...).Build()
	if err := s.client.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("redisstore: delete event: %w", err)
	}
	return nil
}

// Stats implements queue.Store.
func (s *Store) Stats(ctx context.Context, event string) (queue.Stats, error) {
	v, err := statsScript.Exec(ctx, s.client, s.lineKeys(event), []string{s.nowArg()}).ToArray()
	if err != nil {
		return queue.Stats{}, fmt.Errorf("redisstore: stats: %w", err)
	}
	if code, _ := v[0].AsInt64(); code == -1 && len(v) == 1 {
		return queue.Stats{}, fmt.Errorf("%w: %s", queue.ErrEventNotFound, event)
	}
	var st queue.Stats
	gen, _ := v[0].AsInt64()
	st.Generation = uint32(gen)
	st.Waiting, _ = v[1].AsInt64()
	st.Active, _ = v[2].AsInt64()
	st.AdmittedTotal, _ = v[3].AsInt64()
	st.Serving, _ = v[4].AsInt64()
	st.LastNumber, _ = v[5].AsInt64()
	st.Rate, _ = v[6].AsFloat64()
	now, _ := v[7].AsInt64()
	st.Now = queue.FromMS(now)
	so, _ := v[8].AsInt64()
	st.SoldOut = so == 1
	return st, nil
}

// Join implements queue.Store.
func (s *Store) Join(ctx context.Context, p queue.JoinParams) (queue.Ticket, error) {
	v, err := joinScript.Exec(ctx, s.client, s.lineKeys(p.Event), []string{s.nowArg(), p.UserKey}).ToArray()
	if err != nil {
		return queue.Ticket{}, fmt.Errorf("redisstore: join: %w", err)
	}
	return parseTicket(p.Event, v)
}

// Status implements queue.Store.
func (s *Store) Status(ctx context.Context, ref queue.TicketRef) (queue.Ticket, error) {
	v, err := statusScript.Exec(ctx, s.client, s.lineKeys(ref.Event), []string{
		s.nowArg(), strconv.FormatUint(uint64(ref.Generation), 10), strconv.FormatInt(ref.Number, 10),
	}).ToArray()
	if err != nil {
		return queue.Ticket{}, fmt.Errorf("redisstore: status: %w", err)
	}
	return parseTicket(ref.Event, v)
}

// Leave implements queue.Store.
func (s *Store) Leave(ctx context.Context, ref queue.TicketRef) error {
	v, err := leaveScript.Exec(ctx, s.client, s.lineKeys(ref.Event), []string{
		s.nowArg(), strconv.FormatUint(uint64(ref.Generation), 10), strconv.FormatInt(ref.Number, 10),
	}).ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: leave: %w", err)
	}
	code, _ := v[0].AsInt64()
	return codeErr(ref.Event, code)
}

// Admit implements queue.Store.
func (s *Store) Admit(ctx context.Context, event string, maxBatch int64) (queue.AdmitResult, error) {
	v, err := admitScript.Exec(ctx, s.client, s.lineKeys(event), []string{s.nowArg(), strconv.FormatInt(max(0, maxBatch), 10)}).ToArray()
	if err != nil {
		return queue.AdmitResult{}, fmt.Errorf("redisstore: admit: %w", err)
	}
	code, _ := v[0].AsInt64()
	if code < 0 {
		return queue.AdmitResult{}, codeErr(event, code)
	}
	var r queue.AdmitResult
	r.Admitted = code
	r.From, _ = v[1].AsInt64()
	r.To, _ = v[2].AsInt64()
	r.Expired, _ = v[3].AsInt64()
	now, _ := v[4].AsInt64()
	r.Now = queue.FromMS(now)
	return r, nil
}

// SetSoldOut implements queue.Store.
func (s *Store) SetSoldOut(ctx context.Context, event string, soldOut bool) (int64, error) {
	flag := "0"
	if soldOut {
		flag = "1"
	}
	n, err := soldOutScript.Exec(ctx, s.client, s.keys(event), []string{s.nowArg(), flag}).ToArray()
	if err != nil {
		return 0, fmt.Errorf("redisstore: sold out: %w", err)
	}
	code, _ := n[0].AsInt64()
	if code < 0 {
		return 0, codeErr(event, code)
	}
	return code, nil
}

// Complete implements queue.Store.
func (s *Store) Complete(ctx context.Context, ref queue.TicketRef) error {
	v, err := completeScript.Exec(ctx, s.client, s.keys(ref.Event), []string{
		s.nowArg(), strconv.FormatUint(uint64(ref.Generation), 10), strconv.FormatInt(ref.Number, 10),
	}).ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	code, _ := v[0].AsInt64()
	return codeErr(ref.Event, code)
}

// Close implements queue.Store. The client belongs to the caller.
func (s *Store) Close() error { return nil }

// codeErr maps the scripts' negative return codes to the queue package's sentinel errors.
func codeErr(event string, code int64) error {
	switch code {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("%w: %s", queue.ErrEventNotFound, event)
	case -2:
		return queue.ErrTicketNotFound
	case -3:
		return queue.ErrEventClosed
	case -4:
		return queue.ErrSoldOut
	case -5:
		return queue.ErrNotAdmitted
	}
	return fmt.Errorf("redisstore: unexpected script code %d", code)
}

var statusCodes = [...]queue.Status{1: queue.StatusQueued, 2: queue.StatusAdmitted, 3: queue.StatusExpired,
	4: queue.StatusClosed, 5: queue.StatusSoldOut, 6: queue.StatusCompleted}

// parseTicket reads the ticket shape of lua/common.lua's reply().
func parseTicket(event string, v []rueidis.RedisMessage) (queue.Ticket, error) {
	code, err := v[0].AsInt64()
	if err != nil {
		return queue.Ticket{}, fmt.Errorf("redisstore: bad reply: %w", err)
	}
	if code <= 0 {
		return queue.Ticket{}, codeErr(event, code)
	}
	if int(code) >= len(statusCodes) || len(v) < 10 {
		return queue.Ticket{}, fmt.Errorf("redisstore: bad reply: status %d", code)
	}
	t := queue.Ticket{Status: statusCodes[code]}
	t.Event = event
	t.Number, _ = v[1].AsInt64()
	t.Position, _ = v[2].AsInt64()
	t.Waiting, _ = v[3].AsInt64()
	t.Serving, _ = v[4].AsInt64()
	if until, _ := v[5].AsInt64(); until > 0 {
		t.AdmittedUntil = queue.FromMS(until)
	}
	t.Rate, _ = v[6].AsFloat64()
	now, _ := v[7].AsInt64()
	t.Now = queue.FromMS(now)
	gen, _ := v[8].AsInt64()
	t.Generation = uint32(gen)
	created, _ := v[9].AsInt64()
	t.Created = created == 1
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
