package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/waitroom/waitroom/internal/app"
)

const reconcileUsage = `Usage: waitroom reconcile [flags]

Rebuilds Redis's sold state of every event for sale from the database (the final arbiter): seats
sold there are sold in Redis (holds on them dropped), the sold counters are recomputed, the
sold-out flags follow. Every serve instance does this at start-up and whenever Redis lost an
inventory; run it after a Redis restore from an old backup, or any time, safely, while serving.

Environment (flags win over it): WAITROOM_REDIS_URL, WAITROOM_DATABASE_URL, WAITROOM_REDIS_PREFIX,
WAITROOM_ADMIN_KEY, WAITROOM_TOKEN_KEY (as for serve).

Flags:
`

// reconcile runs `waitroom reconcile`.
func reconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, reconcileUsage); fs.PrintDefaults() }
	redisURL := fs.String("redis", envOr("WAITROOM_REDIS_URL", ""), "Redis URL (as for serve)")
	dbURL := fs.String("database", envOr("WAITROOM_DATABASE_URL", ""), "PostgreSQL URL (postgres://...)")
	prefix := fs.String("redis-prefix", envOr("WAITROOM_REDIS_PREFIX", "wr:"), "prefix of every Redis key")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *redisURL == "" || *dbURL == "" {
		return usagef("reconcile needs --redis and --database (the embedded deployment reconciles at every start)")
	}
	adminKey, tokenKey := envOr("WAITROOM_ADMIN_KEY", ""), envOr("WAITROOM_TOKEN_KEY", "")
	if adminKey == "" || tokenKey == "" {
		return usagef("set WAITROOM_ADMIN_KEY and WAITROOM_TOKEN_KEY as for serve")
	}
	a, err := app.New(ctx, app.Config{DatabaseURL: *dbURL, RedisURL: *redisURL, RedisPrefix: *prefix,
		AdminKey: adminKey, TokenKey: tokenKey, Logger: slog.New(slog.NewTextHandler(stderr, nil))})
	if err != nil {
		return err
	}
	defer func() { _ = a.Stop(context.Background()) }()
	if err := a.Registry.Sync(ctx); err != nil {
		return fmt.Errorf("load events: %w", err)
	}
	counts, err := a.Sales.ReconcileAll(ctx)
	ids := make([]string, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := counts[id]
		fmt.Fprintf(stdout, "%s: capacity %d, sold %d, held %d, sold out %v\n", id, c.Capacity, c.Sold, c.Held, c.SoldOut)
	}
	fmt.Fprintf(stdout, "reconciled %d event(s)\n", len(counts))
	return err
}
