package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/cmdflag"
)

const reconcileUsage = `Usage: waitroom reconcile [flags]

Rebuilds Redis's sold state of every event for sale from the database (the final arbiter): seats
sold there are sold in Redis (holds on them dropped), the sold counters are recomputed, the
sold-out flags follow. Every serve instance does this at start-up and whenever Redis lost an
inventory; run it after a Redis restore from an old backup, or any time, safely, while serving.

The same settings as serve's of the same names, from the same places (a config file of
serve's is read as is: the keys reconcile does not use are ignored).

`

// reconcile runs `waitroom reconcile`.
func reconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rows := settingsByName("redis", "database", "redis-prefix", "WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY")
	fs := cmdflag.New("reconcile", reconcileUsage)
	fs.Usage = func() { fmt.Fprint(fs.Output(), reconcileUsage); writeSettingsHelp(fs.Output(), rows) }
	sf := defineSettings(fs.FlagSet, rows)
	if err := fs.Parse(args, stdout); err != nil {
		return err
	}
	var c serveConfig
	if err := sf.load(&c, os.Getenv); err != nil {
		return err
	}
	if c.redisURL == "" || c.databaseURL == "" {
		return usagef("reconcile needs --redis and --database (the embedded deployment reconciles at every start)")
	}
	if c.adminKey == "" || c.tokenKey == "" {
		return usagef("set WAITROOM_ADMIN_KEY and WAITROOM_TOKEN_KEY as for serve")
	}
	a, err := app.New(ctx, app.Config{DatabaseURL: c.databaseURL, RedisURL: c.redisURL, RedisPrefix: c.prefix,
		AdminKey: c.adminKey, TokenKey: c.tokenKey, Logger: slog.New(slog.NewTextHandler(stderr, nil))})
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
