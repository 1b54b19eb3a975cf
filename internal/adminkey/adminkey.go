// Package adminkey holds who may call the admin API: the deployment's own key (named "root":
// WAITROOM_ADMIN_KEY, or generated on first start) and named keys that admins create and
// revoke at run time. Named keys are kept in SQL as SHA-256 hashes only; every instance
// reloads them every second, so a key created or revoked on one instance holds on all within
// a second, without a restart.
package adminkey

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// Root is the name of the deployment's own admin key.
const Root = "root"

// NamePattern is the rule of a named key's name.
const NamePattern = `^[a-z0-9][a-z0-9_.-]{0,63}$`

var namePattern = regexp.MustCompile(NamePattern)

// ErrInvalidName is returned for a name that does not match NamePattern, or is "root".
var ErrInvalidName = errors.New("adminkey: a key name matches " + NamePattern + " and is not " + Root)

// ErrRootKey is Revoke's refusal of the root key, which is the deployment's
// (WAITROOM_ADMIN_KEY), not revoked here. It matches ErrInvalidName.
var ErrRootKey = fmt.Errorf("%w: the root key is the deployment's", ErrInvalidName)

// Config configures Keys.
type Config struct {
	DB      *sqlstore.DB // required
	RootKey string       // required: the deployment's own key
	// Interval is how often the named keys are reloaded from SQL. Defaults to 1 s.
	Interval time.Duration
	Logger   *slog.Logger // defaults to slog.Default()
}

// Keys checks admin keys. It is safe for concurrent use.
type Keys struct {
	cfg  Config
	mu   sync.RWMutex
	live map[string]string // key hash -> name, live keys only
	loop loop.Loop
}

// New returns Keys; Start loads the named keys and keeps them fresh.
func New(cfg Config) (*Keys, error) {
	if cfg.DB == nil || cfg.RootKey == "" {
		return nil, errors.New("adminkey: Config.DB and Config.RootKey are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Keys{cfg: cfg, live: map[string]string{}}, nil
}

// Hash is how a key is stored: the hex SHA-256 of its bytes. Admin keys are random (32 bytes
// from Create), so a plain hash suffices: no dictionary to guard against.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Check returns the name of the admin key token is, and whether it is one.
func (k *Keys) Check(token string) (name string, ok bool) {
	if subtle.ConstantTimeCompare([]byte(token), []byte(k.cfg.RootKey)) == 1 {
		return Root, true
	}
	h := Hash(token) // the lookup's timing reveals the hash's, not the key's
	k.mu.RLock()
	name, ok = k.live[h]
	k.mu.RUnlock()
	return name, ok
}

// Create makes a named key and returns its secret (shown once: only its hash is kept).
// Errors: ErrInvalidName, admin.ErrKeyExists, or the database's.
func (k *Keys) Create(ctx context.Context, name string) (string, error) {
	if !namePattern.MatchString(name) || name == Root {
		return "", ErrInvalidName
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24+)
	secret := "wr_" + base64.RawURLEncoding.EncodeToString(b[:])
	h := Hash(secret)
	if _, err := k.cfg.DB.CreateAdminKey(ctx, name, h); err != nil {
		return "", err
	}
	k.mu.Lock()
	k.live[h] = name
	k.mu.Unlock()
	return secret, nil
}

// Revoke revokes a named key: at once here, within Interval on the other instances.
// Errors: ErrRootKey, admin.ErrKeyNotFound, or the database's.
func (k *Keys) Revoke(ctx context.Context, name string) error {
	if name == Root {
		return ErrRootKey
	}
	if err := k.cfg.DB.RevokeAdminKey(ctx, name); err != nil {
		return err
	}
	k.mu.Lock()
	for h, n := range k.live {
		if n == name {
			delete(k.live, h)
		}
	}
	k.mu.Unlock()
	return nil
}

// List returns the named keys (hashes included, never secrets).
func (k *Keys) List(ctx context.Context) ([]admin.Key, error) { return k.cfg.DB.AdminKeys(ctx) }

// Reload reads the live named keys from SQL.
func (k *Keys) Reload(ctx context.Context) error {
	all, err := k.cfg.DB.AdminKeys(ctx)
	if err != nil {
		return fmt.Errorf("admin keys: %w", err)
	}
	live := make(map[string]string, len(all))
	for _, key := range all {
		if key.RevokedAt.IsZero() {
			live[key.KeyHash] = key.Name
		}
	}
	k.mu.Lock()
	k.live = live
	k.mu.Unlock()
	return nil
}

// Start loads the named keys, then reloads them every Interval until Stop or ctx ends.
func (k *Keys) Start(ctx context.Context) error {
	if err := k.Reload(ctx); err != nil {
		return err
	}
	k.loop.Start(ctx, "admin keys sync", k.cfg.Interval, k.cfg.Logger, k.Reload)
	return nil
}

// Stop ends the reload loop. Safe before Start and more than once.
func (k *Keys) Stop(context.Context) error {
	k.loop.Stop()
	return nil
}
