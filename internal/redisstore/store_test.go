package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"),
		// A cluster client that served a subscription (coupon wake-ups) may still be in the 5 s
		// back-off of a topology refresh when it is closed; the goroutine ends on its own.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// newFactory returns stores that each use a fresh key prefix, deleting their keys at cleanup.
func newFactory(c rueidis.Client) storetest.Factory {
	return func(t *testing.T, now func() time.Time) queue.Store {
		s, err := redisstore.New(redisstore.Config{Client: c, Prefix: redistest.Prefix(t, c), Now: now})
		require.NoError(t, err)
		return s
	}
}

func TestConformanceRedis(t *testing.T) {
	storetest.Run(t, newFactory(redistest.Client(t)))
}

func TestConformanceRedisCluster(t *testing.T) {
	storetest.Run(t, newFactory(redistest.Cluster(t)))
}

// newSaleFactory is newFactory for the sale suite: one Store serves the line and the sale.
func newSaleFactory(c rueidis.Client) storetest.SaleFactory {
	f := newFactory(c)
	return func(t *testing.T, now func() time.Time) (queue.Store, sale.Store) {
		s := f(t, now).(*redisstore.Store)
		return s, s
	}
}

func TestSaleConformanceRedis(t *testing.T) {
	storetest.RunSale(t, newSaleFactory(redistest.Client(t)))
}

func TestSaleConformanceRedisCluster(t *testing.T) {
	storetest.RunSale(t, newSaleFactory(redistest.Cluster(t)))
}

// TestScriptCacheFlush: a Redis that forgot its scripts (SCRIPT FLUSH, a restart) gets them
// again transparently: EVALSHA answers NOSCRIPT and the store falls back to EVAL.
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

func newCouponFactory(c rueidis.Client) storetest.CouponFactory {
	f := newFactory(c)
	return func(t *testing.T, now func() time.Time) coupon.Store { return f(t, now).(*redisstore.Store) }
}

func TestCouponConformanceRedis(t *testing.T) {
	storetest.RunCoupon(t, newCouponFactory(redistest.Client(t)))
}

func TestCouponConformanceRedisCluster(t *testing.T) {
	storetest.RunCoupon(t, newCouponFactory(redistest.Cluster(t)))
}

// TestPartialLossStartsClean: if Redis lost only the event's main hash (eviction), the line
// created again does not inherit the leftovers of the old one.
func TestPartialLossStartsClean(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix})
	require.NoError(t, err)
	ctx := context.Background()
	cfg := storetest.LineConfig("partial", 2)
	_, err = s.PutEvent(ctx, cfg, 1)
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
