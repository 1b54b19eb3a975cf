package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/redistest"
)

// TestStoreUnreachable: what New waits for (a store not reachable or not taking connections
// yet) and what it does not (a store that answers no).
func TestStoreUnreachable(t *testing.T) {
	// Redis's own error replies, as the client gets them (a script that answers with one).
	c := redistest.Client(t)
	redisErr := func(msg string) error {
		err := c.Do(context.Background(), c.B().Eval().
			Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build()).Error()
		if _, ok := rueidis.IsRedisErr(err); !ok {
			t.Fatalf("EVAL of an error reply: %v", err)
		}
		return fmt.Errorf("redis: %w", err)
	}
	cases := []struct {
		err  error
		wait bool
	}{
		{fmt.Errorf("redis: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{fmt.Errorf("redis: %w", &net.DNSError{Err: "no such host", Name: "redis", IsNotFound: true}), true},
		{fmt.Errorf("database: connect: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("redis: read: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("database: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("database: %w", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}), true},
		{fmt.Errorf("database: %w", &pgconn.PgError{Code: "08006"}), true},
		{fmt.Errorf("database: %w", &pgconn.PgError{Code: "53300", Message: "too many connections for role"}), true},
		{fmt.Errorf("database: %w", &pgconn.PgError{Code: "25006", Message: "cannot execute CREATE TABLE in a read-only transaction"}), true},
		{fmt.Errorf("database: %w", &pgconn.PgError{Code: "3D000", Message: `database "x" does not exist`}), false},
		{fmt.Errorf("database: %w", &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}), false},
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("MASTERDOWN Link with MASTER is down"), true},
		{redisErr("ERR max number of clients reached"), true},
		{redisErr("WRONGPASS invalid username-password pair"), false},
		{redisErr("ERR unknown command 'HELLO'"), false},
		{redisErr("NOSCRIPT No matching script"), false},
		{errors.New("redis: Redis 7.0 or later is needed"), false},
		{errors.New("token key: too short"), false},
	}
	for _, c := range cases {
		if got := storeUnreachable(c.err); got != c.wait {
			t.Errorf("storeUnreachable(%v) = %v, want %v", c.err, got, c.wait)
		}
	}
}
