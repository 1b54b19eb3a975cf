// Package app assembles one waitroom instance from its parts: the database, the store, the
// keys, the event registry, the admission processor and the HTTP API. The command line builds
// one from flags; tests build several on one Redis to act as a fleet.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/waitroom/waitroom/internal/registry"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/admission"
	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/issuance"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/metrics"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/token"
)

// Config configures an instance. Without RedisURL the line lives in memory (the embedded
// deployment) and is saved to the database on Close.
type Config struct {
	DatabaseURL string // a PostgreSQL URL, or a SQLite file path; required
	RedisURL    string // "" = in-process line
	RedisPrefix string // defaults to "wr:"
	// Redis is an existing client to use instead of dialling RedisURL (tests share one).
	Redis rueidis.Client
	// AdminKey and TokenKey: "" = generated once and kept in the database (embedded only).
	AdminKey string
	// TokenKey is the secret the token keys derive from; "new,old" also verifies old tokens.
	TokenKey string
	// IdentityKey (HS256 bytes) and IdentityPublicKey (Ed25519, PEM or base64): either enables
	// identity JWTs on joins.
	IdentityKey, IdentityPublicKey string
	Logger                         *slog.Logger
	// OnAdminKeyGenerated is called once with a newly generated admin key.
	OnAdminKeyGenerated func(key string)
}

// App is one running instance.
type App struct {
	DB         *sqlstore.DB
	Store      queue.Store
	Registry   *registry.Registry
	Admitter   *admission.Admitter
	API        *httpapi.API
	Metrics    *metrics.Metrics
	Admissions *token.Admissions
	Tickets    *token.TicketIDs
	AdminKey   string
	Log        *slog.Logger
	// The sale and coupon campaigns (see sale.go).
	Sales   *booking.Service
	Coupons *issuance.Service

	mem      *memstore.Store
	redis    rueidis.Client
	ownRedis bool
	onStep   []func(event string, r queue.AdmitResult)
	closers  []func()
}

// New opens the database and store and assembles the instance; Start runs its loops.
func New(ctx context.Context, cfg Config) (_ *App, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &App{Log: cfg.Logger}
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()
	if a.DB, err = sqlstore.Open(ctx, cfg.DatabaseURL); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	a.closers = append(a.closers, func() { _ = a.DB.Close() })
	embedded := cfg.RedisURL == "" && cfg.Redis == nil
	if a.AdminKey, err = storedKey(ctx, a.DB, "admin_key", cfg.AdminKey, cfg.OnAdminKeyGenerated); err != nil {
		return nil, err
	}
	if cfg.TokenKey, err = storedKey(ctx, a.DB, "token_key", cfg.TokenKey, nil); err != nil {
		return nil, err
	}

	if embedded {
		a.mem = memstore.New(memstore.Config{})
		a.Store = a.mem
		snap, err := a.DB.LoadSnapshot(ctx, "line")
		switch {
		case err == nil:
			if err := a.mem.Restore(snap); err != nil {
				return nil, fmt.Errorf("restore the saved line: %w", err)
			}
			// A snapshot is used once: after a crash an old one would give out numbers twice.
			if err := a.DB.DeleteSnapshot(ctx, "line"); err != nil {
				return nil, err
			}
			a.Log.Info("restored the line saved at the last shutdown")
		case errors.Is(err, sqlstore.ErrNotFound):
			if evs, lerr := a.DB.ListEvents(ctx); lerr == nil && len(evs) > 0 {
				a.Log.Warn("no saved line: the last stop was not graceful, so every event's line starts empty (old ticket ids are unknown)")
			}
		default:
			return nil, err
		}
	} else {
		a.redis = cfg.Redis
		if a.redis == nil {
			if a.redis, err = redisstore.Dial(cfg.RedisURL); err != nil {
				return nil, fmt.Errorf("redis: %w", err)
			}
			a.ownRedis = true
			a.closers = append(a.closers, a.redis.Close)
		}
		if a.Store, err = redisstore.New(redisstore.Config{Client: a.redis, Prefix: cfg.RedisPrefix}); err != nil {
			return nil, err
		}
	}

	var keys []token.Keys
	for _, s := range strings.Split(cfg.TokenKey, ",") {
		k, err := token.DeriveKeys(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("token key: %w", err)
		}
		keys = append(keys, k)
	}
	a.Admissions = token.NewAdmissions(keys[0], keys[1:]...)
	a.Tickets = token.NewTicketIDs(keys[0].TicketMAC)
	var identity *token.IdentityVerifier
	if cfg.IdentityKey != "" || cfg.IdentityPublicKey != "" {
		var pub []byte
		if cfg.IdentityPublicKey != "" {
			if pub, err = token.ParseEd25519PublicKey(cfg.IdentityPublicKey); err != nil {
				return nil, fmt.Errorf("identity public key: %w", err)
			}
		}
		var hk []byte
		if cfg.IdentityKey != "" {
			hk = []byte(cfg.IdentityKey)
		}
		if identity, err = token.NewIdentityVerifier(hk, pub); err != nil {
			return nil, err
		}
	}

	if a.Registry, err = registry.New(registry.Config{DB: a.DB, Store: a.Store, Logger: a.Log}); err != nil {
		return nil, err
	}
	a.Metrics = metrics.New(a.EventIDs, a.Store)
	if a.Admitter, err = admission.New(admission.Config{
		Store: a.Store, Events: a.EventIDs, Logger: a.Log, OnStep: a.step, OnMissing: a.Registry.Restore,
	}); err != nil {
		return nil, err
	}
	if a.API, err = httpapi.New(httpapi.Config{
		Registry: a.Registry, Store: a.Store, Tickets: a.Tickets, Admissions: a.Admissions, Identity: identity,
		AdminKey: a.AdminKey, Metrics: a.Metrics, Logger: a.Log, Ready: a.ready,
	}); err != nil {
		return nil, err
	}
	if err = a.newSale(identity); err != nil {
		return nil, err
	}
	return a, nil
}

// OnStep adds a hook called after every admission step of this instance that admitted or
// ended sessions (push delivery). Call before Start.
func (a *App) OnStep(f func(event string, r queue.AdmitResult)) { a.onStep = append(a.onStep, f) }

func (a *App) step(id string, r queue.AdmitResult) {
	a.Metrics.Admissions.WithLabelValues(id, "processor").Add(float64(r.Admitted))
	a.Metrics.SessionsEnded.WithLabelValues(id).Add(float64(r.Expired))
	for _, f := range a.onStep {
		f(id, r)
	}
}

// EventIDs lists the ids of the known events.
func (a *App) EventIDs() []string {
	evs := a.Registry.List()
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

// Redis returns the Redis client, or nil for the embedded deployment.
func (a *App) Redis() rueidis.Client { return a.redis }

// Handler is the instance's HTTP handler.
func (a *App) Handler() http.Handler { return a.API }

func (a *App) ready(ctx context.Context) error {
	if err := a.DB.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if a.redis != nil {
		if err := a.redis.Do(ctx, a.redis.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	return nil
}

// Start loads the events and starts the loops (event sync, admission processor).
func (a *App) Start(ctx context.Context) error {
	if err := a.Registry.Start(ctx); err != nil {
		return fmt.Errorf("load events: %w", err)
	}
	a.Admitter.Start(ctx)
	if err := a.startSale(ctx); err != nil {
		return err
	}
	return nil
}

// Close stops the loops, saves the embedded line, and closes the pools. Call it after the HTTP
// server stopped accepting requests.
func (a *App) Close(ctx context.Context) error {
	a.stopSale()
	a.Admitter.Stop()
	a.Registry.Stop()
	var err error
	if a.mem != nil {
		var snap []byte
		if snap, err = a.mem.Snapshot(); err == nil {
			err = a.DB.SaveSnapshot(ctx, "line", snap)
		}
		if err != nil {
			err = fmt.Errorf("save the line: %w", err)
		} else {
			a.Log.Info("saved the line", "bytes", len(snap))
		}
	}
	a.closeAll()
	return err
}

func (a *App) closeAll() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// storedKey returns the key given, else the one stored under name, else a new one that it
// stores (calling shown with it, so it is printed once).
func storedKey(ctx context.Context, db *sqlstore.DB, name, given string, shown func(string)) (string, error) {
	if given != "" {
		return given, nil
	}
	fresh, err := token.GenerateSecret()
	if err != nil {
		return "", err
	}
	k, err := db.SettingOrInit(ctx, name, fresh)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if k == fresh && shown != nil {
		shown(k)
	}
	return k, nil
}
