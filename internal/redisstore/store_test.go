package redisstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"),
		// A cluster client that served a subscription (coupon wake-ups) may still be in the 5 s
		// back-off of a topology refresh when it is closed; the goroutine ends on its own.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// newBackends returns backends that each use a fresh key prefix, deleting their keys at
// cleanup.
func newBackends(c rueidis.Client) storetest.BackendFactory {
	return func(t *testing.T, now func() time.Time) store.Backend {
		b, err := redisstore.NewBackend(redisstore.Config{Client: c, Prefix: redistest.Prefix(t, c), Now: now})
		require.NoError(t, err)
		return b
	}
}

// newFactory is the line store of newBackends.
func newFactory(c rueidis.Client) storetest.Factory {
	f := newBackends(c)
	return func(t *testing.T, now func() time.Time) queue.Store { return f(t, now).Line }
}

func TestConformanceRedis(t *testing.T) {
	storetest.RunBackend(t, newBackends(redistest.Client(t)))
}

func TestConformanceRedisCluster(t *testing.T) {
	storetest.RunBackend(t, newBackends(redistest.Cluster(t)))
}

// TestVerifyDraw: 20,000 places told by the store, recomputed by waitroom verify-draw from
// the revealed seed, and the draw fair to early joiners (storetest.VerifyDraw). The Go side
// computes the places of the draw here (Redis's Lua has no AES), so this checks its wiring;
// the in-process store's test checks 100,000 (here 100,000 took 22 s under -race).
func TestVerifyDraw(t *testing.T) {
	storetest.VerifyDraw(t, newFactory(redistest.Client(t)), 20_000, 256)
}

func TestScriptCacheFlush(t *testing.T) {
	c := redistest.Client(t)
	s := newFactory(c)(t, nil)
	ctx := context.Background()
	_, err := s.PutEvent(ctx, storetest.LineConfig("flush", 1), 1)
	require.NoError(t, err)
	_, err = s.Join(ctx, queue.JoinParams{Event: "flush"})
	require.NoError(t, err)
	for _, node := range c.Nodes() {
		require.NoError(t, node.Do(ctx, node.B().ScriptFlush().Build()).Error())
	}
	tk, err := s.Join(ctx, queue.JoinParams{Event: "flush"})
	require.NoError(t, err)
	require.Equal(t, int64(2), tk.Number)
}

// TestPartialLossStartsClean: if Redis lost only the event's main hash (eviction), the line
// created again does not inherit the leftovers of the old one.
func TestPartialLossStartsClean(t *testing.T) {
	c, prefix, s := freshStore(t)
	ctx := context.Background()
	cfg := storetest.LineConfig("partial", 2)
	_, err := s.PutEvent(ctx, cfg, 1)
	require.NoError(t, err)
	for _, u := range []string{"", "", "", "carol-key-16byte"} {
		_, err := s.Join(ctx, queue.JoinParams{Event: "partial", UserKey: u})
		require.NoError(t, err)
	}
	require.NoError(t, s.Leave(ctx, queue.TicketRef{Event: "partial", Generation: 1, Number: 3}))
	require.NoError(t, c.Do(ctx, c.B().Del().Key(prefix+"{partial}").Build()).Error())

	_, err = s.PutEvent(ctx, cfg, 2)
	require.NoError(t, err)
	st, err := s.Stats(ctx, "partial")
	require.NoError(t, err)
	require.Equal(t, queue.Stats{Generation: 2, Rate: st.Rate, Now: st.Now}, st)
	a, err := s.Join(ctx, queue.JoinParams{Event: "partial"})
	require.NoError(t, err)
	carol, err := s.Join(ctx, queue.JoinParams{Event: "partial", UserKey: "carol-key-16byte"})
	require.NoError(t, err)
	require.Equal(t, int64(1), a.Number)
	require.Equal(t, int64(2), carol.Number, "carol gets a new ticket, not a stale number")
	require.Equal(t, queue.StatusAdmitted, carol.Status)
}

// TestNamedUsersInSmallBuckets: a named user's entries (its number by user key, and its user
// key by number for the usr claim) live in small hashes that stay listpacks, and deleting the
// event deletes them with the line.
func TestNamedUsersInSmallBuckets(t *testing.T) {
	c, prefix, s := freshStore(t)
	ctx := context.Background()
	_, err := s.PutEvent(ctx, storetest.LineConfig("named", 1), 3)
	require.NoError(t, err)
	for i := range 300 {
		_, err := s.Join(ctx, queue.JoinParams{Event: "named", UserKey: fmt.Sprintf("user-key-%07d", i)})
		require.NoError(t, err)
	}
	keys := scanKeys(t, c, prefix+"{named}:users:3:*")
	require.NotEmpty(t, keys)
	var fwd, rev int
	for _, k := range keys {
		enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(k).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, "listpack", enc, k)
		n, err := c.Do(ctx, c.B().Hlen().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		if strings.Contains(k, ":r") {
			rev += int(n)
		} else {
			fwd += int(n)
		}
	}
	require.Equal(t, 300, fwd, "one entry by user key per user")
	require.Equal(t, 300, rev, "one entry by number per user")
	all, err := s.UserKeys(ctx, "named")
	require.NoError(t, err)
	require.Subset(t, all, keys)

	require.NoError(t, s.DeleteEvent(ctx, "named"))
	require.Empty(t, scanKeys(t, c, prefix+"{named}*"), "nothing of the line is left")
}

// freshStore returns the test Redis, a fresh key prefix on it and a store on that prefix.
func freshStore(t *testing.T) (rueidis.Client, string, *redisstore.Store) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix})
	require.NoError(t, err)
	return c, prefix, s
}

// scanKeys returns the keys matching pattern.
func scanKeys(t *testing.T, c rueidis.Client, pattern string) []string {
	t.Helper()
	var out []string
	cursor := uint64(0)
	for {
		e, err := c.Do(context.Background(), c.B().Scan().Cursor(cursor).Match(pattern).Count(10000).Build()).AsScanEntry()
		require.NoError(t, err)
		out = append(out, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

// TestUsedChallengeKeyExpires: used challenges are kept in one hash per minute under the
// event's hash tag, which Redis drops at the end of the minute after the challenge's expiry plus
// queue.ChallengeGrace (by Redis's clock, from the time left by the store's), so the memory goes
// without a sweep.
func TestUsedChallengeKeyExpires(t *testing.T) {
	c, prefix, s := freshStore(t)
	ctx := context.Background()
	_, err := s.PutEvent(ctx, storetest.LineConfig("pow", 2), 1)
	require.NoError(t, err)
	exp := time.Now().Add(2 * time.Minute)
	_, err = s.Join(ctx, queue.JoinParams{Event: "pow", ChallengeID: "0123456789abcdef0123456789abcdef", ChallengeExpires: exp})
	require.NoError(t, err)
	b := exp.Add(queue.ChallengeGrace).UnixMilli()/time.Minute.Milliseconds() + 1
	key := prefix + "{pow}:ch:" + strconv.FormatInt(b, 10)
	n, err := c.Do(ctx, c.B().Hexists().Key(key).Field("0123456789abcdef0123456789abcdef").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	ttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	least := (2*time.Minute + queue.ChallengeGrace).Milliseconds()
	require.True(t, ttl >= least-5000 && ttl <= least+time.Minute.Milliseconds(), "PTTL %d ms, want %d..%d", ttl, least, least+60000)
}

// TestTicketCountKeyExpiresAfterTheOpening: a client's tickets of the pre-queue are counted in
// {event}:tpc, whose expiry follows opens_at (set again when opens_at moves, once per opens_at,
// not per join), so that the counts go a minute after the opening without a sweep; deleting
// the event deletes it.
func TestTicketCountKeyExpiresAfterTheOpening(t *testing.T) {
	c, prefix, s := freshStore(t)
	ctx := context.Background()
	cfg := storetest.LineConfig("pre", 2)
	cfg.OpensAt = time.Now().Add(time.Hour)
	_, err := s.PutEvent(ctx, cfg, 1)
	require.NoError(t, err)
	join := func() {
		t.Helper()
		_, err := s.Join(ctx, queue.JoinParams{Event: "pre", ClientKey: "203.0.113.1", TicketLimit: 5})
		require.NoError(t, err)
	}
	key := prefix + "{pre}:tpc"
	pttl := func() int64 {
		t.Helper()
		ms, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		return ms
	}
	join()
	join()
	n, err := c.Do(ctx, c.B().Hget().Key(key).Field("203.0.113.1").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	least := (time.Hour + time.Minute).Milliseconds()
	require.InDelta(t, least, pttl(), 5000, "a minute past the opening")

	cfg.OpensAt, cfg.Version = time.Now().Add(2*time.Hour), cfg.Version+1
	_, err = s.PutEvent(ctx, cfg, 0)
	require.NoError(t, err)
	join()
	require.InDelta(t, least+time.Hour.Milliseconds(), pttl(), 5000, "opens_at moved: the expiry follows it")

	require.NoError(t, s.DeleteEvent(ctx, "pre"))
	require.Equal(t, int64(-2), pttl(), "deleted with the event")
}

// TestDialForms: the forms of a Redis address an operator gives (--redis, WAITROOM_REDIS_URL).
// A bare host:port is redis://host:port; a list of addresses names the nodes of a Redis
// Cluster, and against a standalone Redis its error says so.
func TestDialForms(t *testing.T) {
	u, err := url.Parse(redistest.URL())
	require.NoError(t, err)
	if u.User != nil || u.Path != "" && u.Path != "/" && u.Path != "/0" || u.Scheme != "redis" {
		t.Skip("TEST_REDIS_URL has a password, a database or TLS: the bare form cannot name it")
	}
	redistest.Client(t) // skips (or fails in CI) when there is no Redis
	c, err := redisstore.Dial(u.Host)
	require.NoError(t, err, "a bare host:port")
	require.NoError(t, c.Do(context.Background(), c.B().Ping().Build()).Error())
	c.Close()

	_, err = redisstore.Dial(u.Host + "," + u.Host) // a cluster node list against a standalone Redis
	require.ErrorContains(t, err, "names the nodes of a Redis Cluster")
	require.ErrorContains(t, err, "redis://host:port")
	_, err = redisstore.Dial("redis://[::1")
	require.ErrorContains(t, err, "give redis://host:port")
}
