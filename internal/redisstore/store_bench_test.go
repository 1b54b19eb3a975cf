package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/storetest"
)

// BenchmarkRedis runs the shared benchmarks (storetest.Bench) on the Redis of TEST_REDIS_URL
// (default the local one), each on a fresh key prefix deleted afterwards.
func BenchmarkRedis(b *testing.B) {
	storetest.Bench(b, newBenchFactory(benchClient(b, "TEST_REDIS_URL", "redis://127.0.0.1:6379")))
}

// BenchmarkRedisCluster runs them on the Redis Cluster of TEST_REDIS_CLUSTER_URL.
func BenchmarkRedisCluster(b *testing.B) {
	storetest.Bench(b, newBenchFactory(benchClient(b, "TEST_REDIS_CLUSTER_URL", "")))
}

// TestBenchSmoke runs each shared benchmark once on Redis, so that the test command keeps
// them working.
func TestBenchSmoke(t *testing.T) {
	storetest.BenchSmokeLine(t, newBenchFactory(benchClient(t, "TEST_REDIS_URL", "redis://127.0.0.1:6379")))
}

// benchClient is client (store_test.go) for benchmarks too: it skips when the server is not
// configured or unreachable, and fails in CI.
func benchClient(tb testing.TB, env, def string) rueidis.Client {
	tb.Helper()
	url := os.Getenv(env)
	if url == "" {
		url = def
	}
	if url == "" {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%s is not set", env)
		}
		tb.Skipf("%s is not set; scripts/test.sh sets it", env)
	}
	c, err := redisstore.Dial(url)
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("redis at %s: %v", url, err)
		}
		tb.Skipf("redis at %s: %v", url, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// BenchmarkRedisHistory runs the history store's benchmarks (storetest.HistoryBenchCases).
func BenchmarkRedisHistory(b *testing.B) {
	storetest.RunBench(b, storetest.HistoryBenchCases, newBenchHistory(benchClient(b, "TEST_REDIS_URL", "redis://127.0.0.1:6379")))
}

// TestBenchSmokeHistory runs each history benchmark once on Redis.
func TestBenchSmokeHistory(t *testing.T) {
	storetest.BenchSmoke(t, storetest.HistoryBenchCases, newBenchHistory(benchClient(t, "TEST_REDIS_URL", "redis://127.0.0.1:6379")))
}

// newBenchHistory is newBenchFactory's history store.
func newBenchHistory(c rueidis.Client) func(tb testing.TB) history.Store {
	f := newBenchFactory(c)
	return func(tb testing.TB) history.Store { return f(tb).(*redisstore.Store) }
}

// newBenchFactory returns stores on the Redis clock, each with a fresh key prefix whose keys
// are deleted at cleanup.
func newBenchFactory(c rueidis.Client) storetest.BenchFactory {
	return func(tb testing.TB) queue.Store {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		prefix := "wrbench:" + hex.EncodeToString(b) + ":"
		s, err := redisstore.New(redisstore.Config{Client: c, Prefix: prefix})
		require.NoError(tb, err)
		tb.Cleanup(func() { require.NoError(tb, redisstore.DeletePrefix(context.Background(), c, prefix)) })
		return s
	}
}
