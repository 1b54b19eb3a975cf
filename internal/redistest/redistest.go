// Package redistest gives tests a Redis: a client for TEST_REDIS_URL (or the cluster of
// TEST_REDIS_CLUSTER_URL) and a fresh key prefix whose keys are deleted when the test ends, so
// tests share one Redis without ever flushing data they did not create.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// DefaultURL is used when TEST_REDIS_URL is unset.
const DefaultURL = "redis://127.0.0.1:6379"

// URL is TEST_REDIS_URL, or DefaultURL when it is unset: the standalone Redis of the tests,
// for a test that starts the service on it.
func URL() string {
	if url := strings.TrimSpace(os.Getenv("TEST_REDIS_URL")); url != "" {
		return url
	}
	return DefaultURL
}

// Client connects to the standalone Redis of TEST_REDIS_URL (default DefaultURL) and closes
// the client at cleanup. An unreachable Redis skips the test, or fails it when CI is set.
func Client(t testing.TB) rueidis.Client {
	t.Helper()
	return dial(t, URL())
}

// Cluster connects to the Redis Cluster of TEST_REDIS_CLUSTER_URL (scripts/redis-cluster.sh
// starts one); unset, the test is skipped, or fails when CI is set.
func Cluster(t testing.TB) rueidis.Client {
	t.Helper()
	url := os.Getenv("TEST_REDIS_CLUSTER_URL")
	if url == "" {
		if sqltest.InCI() {
			t.Fatal("TEST_REDIS_CLUSTER_URL is not set")
		}
		t.Skip("TEST_REDIS_CLUSTER_URL is not set; scripts/test.sh sets it")
	}
	return dial(t, url)
}

func dial(t testing.TB, url string) rueidis.Client {
	t.Helper()
	c, err := redisstore.Dial(url)
	if err != nil {
		if sqltest.InCI() {
			t.Fatalf("redis at %s: %v", url, err)
		}
		t.Skipf("redis at %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Prefix returns a fresh key prefix ("wrtest:<12 hex>:") and deletes every key under it, on
// every node, when the test ends.
func Prefix(t testing.TB, c rueidis.Client) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "wrtest:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		if err := redisstore.DeletePrefix(context.Background(), c, prefix); err != nil {
			t.Logf("redistest: deleting %s*: %v", prefix, err)
		}
	})
	return prefix
}
