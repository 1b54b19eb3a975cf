package redisstore_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/redistest"
)

func TestCheckServer(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		err        string // substring; "" = accepted
	}{
		{"7.0 standalone", "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", ""},
		{"6.2 standalone", "redis_version:6.2.0\r\nredis_mode:standalone\r\n", ""},
		{"6.0 standalone", "redis_version:6.0.16\r\nredis_mode:standalone\r\n",
			"redis 6.0.16 (standalone) is too old: waitroom needs Redis >= 6.2.0 for BITFIELD_RO"},
		{"6.2 cluster", "redis_version:6.2.14\r\nredis_mode:cluster\r\n",
			"redis 6.2.14 (cluster) is too old: waitroom needs Redis >= 7.0.0 for sharded Pub/Sub"},
		{"7.2 cluster", "redis_version:7.2.4\r\nredis_mode:cluster\r\n", ""},
		{"two parts", "redis_version:8.0\n", ""},
		{"5 sentinel", "redis_version:5.0.7\nredis_mode:sentinel\n", "needs Redis >= 6.2.0"},
		{"no version", "# Server\r\nredis_mode:standalone\r\n", "no redis_version"},
		{"garbage", "redis_version:seven\r\n", "unreadable redis_version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := redisstore.CheckServer(tc.info)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("CheckServer: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("CheckServer = %v, want an error containing %q", err, tc.err)
			}
		})
	}
	var ve *redisstore.VersionError
	if err := redisstore.CheckServer("redis_version:6.0.0\n"); !errors.As(err, &ve) || ve.Have != (redisstore.Version{Major: 6}) {
		t.Fatalf("CheckServer(6.0.0) = %v, want a *VersionError with Have 6.0.0", err)
	}
}

// The running test server passes, and Open checks it before returning.
func TestOpenChecksVersion(t *testing.T) {
	c := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := redisstore.CheckVersion(ctx, c); err != nil {
		t.Fatalf("CheckVersion on the test server: %v", err)
	}
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		url = redistest.DefaultURL
	}
	b, err := redisstore.Open(ctx, redisstore.OpenConfig{URL: url, Prefix: redistest.Prefix(t, c), Timeout: time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	_ = b.Close()
}
