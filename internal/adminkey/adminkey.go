// Package adminkey holds who may call the admin API: the deployment's own key (named "root":
// WAITROOM_ADMIN_KEY, or generated on first start), all-powerful, and named keys that key
// admins mint and revoke at run time, each with a role (package admin: health_reporter,
// read_only, operator, key_admin). Named keys are kept in SQL as SHA-256 hashes only.
//
// A named key is looked up in SQL on every check (one lookup of a unique index per admin
// request that carries one), not in a copy each instance reloads: a revocation holds on every
// instance as soon as it commits, that is before the revoke is answered (issue 20, item 8: a
// revoked key worked for up to a second on the other instances, long enough to mint a
// successor). Revoking a key revokes the keys it minted, in the same transaction.
package adminkey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// Root is the name of the deployment's own admin key.
const Root = admin.Root

// NamePattern is the rule of a named key's name.
const NamePattern = `^[a-z0-9][a-z0-9_.-]{0,63}$`

var namePattern = regexp.MustCompile(NamePattern)

// secretPrefix starts every named key's secret; the rest is 32 random bytes in base64url
// without padding (43 characters).
const secretPrefix = "wr_"

// secretPattern is the shape of a named key: a bearer of another shape is no named key, and
// costs no lookup.
var secretPattern = regexp.MustCompile(`^wr_[A-Za-z0-9_-]{43}$`)

// Errors.
var (
	// ErrInvalidName is returned for a name that does not match NamePattern, or is "root".
	ErrInvalidName = errors.New("adminkey: a key name matches " + NamePattern + " and is not " + Root)
	// ErrRootKey is Revoke's refusal of the root key, which is the deployment's
	// (WAITROOM_ADMIN_KEY), not revoked here. It matches ErrInvalidName.
	ErrRootKey = fmt.Errorf("%w: the root key is the deployment's", ErrInvalidName)
	// ErrInvalidRole: a role that is not health_reporter, read_only, operator or key_admin.
	ErrInvalidRole = errors.New("adminkey: a named key's role is health_reporter, read_only, operator or key_admin")
	// ErrRoleAbove: a key admin mints keys of its own role or below.
	ErrRoleAbove = errors.New("adminkey: a key is minted with the minter's role or a lower one")
	// ErrInvalidEvents: a scope (the events a key may act on) that is empty, names more than
	// admin.MaxEvents events or one twice, or an id that is no event id (event.IDRule).
	ErrInvalidEvents = fmt.Errorf("adminkey: a key's events are 1 to %d distinct event ids", admin.MaxEvents)
	// ErrScopeAbove: a key scoped to some events mints keys of those events only.
	ErrScopeAbove = errors.New("adminkey: a key is minted for the minter's events or some of them")
	// ErrNoKey: the token is no live admin key (unknown, or revoked).
	ErrNoKey = errors.New("adminkey: not an admin key")
)

// Config configures Keys.
type Config struct {
	DB      *sqlstore.DB // required
	RootKey string       // required: the deployment's own key
}

// Keys checks admin keys. It is safe for concurrent use.
type Keys struct {
	cfg Config
}

// Actor is the holder of a checked key: its name (Root for the root key), role and the
// events it may act on (nil: every event; admin.Scope).
type Actor struct {
	Name   string
	Role   admin.Role
	Events admin.Scope
}

// New returns Keys.
func New(cfg Config) (*Keys, error) {
	if cfg.DB == nil || cfg.RootKey == "" {
		return nil, errors.New("adminkey: Config.DB and Config.RootKey are required")
	}
	return &Keys{cfg: cfg}, nil
}

// Hash is how a key is stored: the hex SHA-256 of its bytes. Admin keys are random (32 bytes
// from Create), so a plain hash suffices: no dictionary to guard against.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Check returns the holder of the admin key token is: the root key (compared in constant time,
// no database call, so it works while the database is down), or a live named key (looked up in
// SQL by its hash: revocations hold at once on every instance). Errors: ErrNoKey (no live key:
// a failed authentication), or the database's (the check could not be made: neither a success
// nor the client's failure).
func (k *Keys) Check(ctx context.Context, token string) (Actor, error) {
	if subtle.ConstantTimeCompare([]byte(token), []byte(k.cfg.RootKey)) == 1 {
		return Actor{Name: Root, Role: admin.RoleRoot}, nil
	}
	if !secretPattern.MatchString(token) {
		return Actor{}, ErrNoKey
	}
	// The lookup's timing reveals the hash's, not the key's.
	key, err := k.cfg.DB.AdminKeyByHash(ctx, Hash(token))
	switch {
	case errors.Is(err, admin.ErrKeyNotFound) || (err == nil && !key.Live()):
		return Actor{}, ErrNoKey
	case err != nil:
		return Actor{}, err
	case !key.Role.Named():
		return Actor{}, fmt.Errorf("adminkey: key %q has the unknown role %q", key.Name, key.Role)
	}
	return Actor{Name: key.Name, Role: key.Role, Events: key.Events}, nil
}

// Create mints a named key of role for by, acting on events only (nil: every event; kept
// sorted), and returns its secret (shown once: only its hash is kept). by may mint only roles
// it allows itself (a key admin: read_only, operator, key_admin; the root key any), and, when
// it is scoped, only keys of its own events or some of them. Who may call Create at all is the
// caller's rule (a key admin or root). Errors: ErrInvalidName, ErrInvalidRole,
// ErrInvalidEvents, ErrRoleAbove, ErrScopeAbove, admin.ErrKeyExists, admin.ErrActorRevoked (by
// was revoked meanwhile), or the database's.
func (k *Keys) Create(ctx context.Context, by Actor, name string, role admin.Role, events admin.Scope) (string, error) {
	if !namePattern.MatchString(name) || name == Root {
		return "", ErrInvalidName
	}
	if !role.Named() {
		return "", ErrInvalidRole
	}
	if events != nil {
		events = slices.Clone(events)
		slices.Sort(events)
		if len(events) == 0 || len(events) > admin.MaxEvents || len(slices.Compact(slices.Clone(events))) != len(events) {
			return "", ErrInvalidEvents
		}
		for _, id := range events {
			if !event.ValidID(id) {
				return "", ErrInvalidEvents
			}
		}
	}
	if !by.Role.Allows(role) {
		return "", ErrRoleAbove
	}
	if !by.Events.Within(events) {
		return "", ErrScopeAbove
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24+)
	secret := secretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	if _, err := k.cfg.DB.CreateAdminKey(ctx, admin.Key{Name: name, KeyHash: Hash(secret), Role: role, CreatedBy: by.Name, Events: events}); err != nil {
		return "", err
	}
	return secret, nil
}

// Revoke revokes the named key name for by, and with it every key it minted (directly or
// through keys it minted), in one transaction: they stop working on every instance when it
// commits. The root key revokes any; a named key only the keys of its own lineage (itself
// included). It returns the names revoked now, and the live keys whose minter is unknown
// (admin.Revocation.Untraced: minted before roles; no revocation reaches them but by name).
// Errors: ErrRootKey, ErrInvalidName (a name no key can have: Create's rule),
// admin.ErrKeyNotFound, admin.ErrNotInLineage, admin.ErrActorRevoked, or the database's.
func (k *Keys) Revoke(ctx context.Context, by Actor, name string) (admin.Revocation, error) {
	if name == Root {
		return admin.Revocation{}, ErrRootKey
	}
	if !namePattern.MatchString(name) {
		return admin.Revocation{}, ErrInvalidName
	}
	return k.cfg.DB.RevokeAdminKey(ctx, name, by.Name)
}

// List returns the named keys (hashes included, never secrets).
func (k *Keys) List(ctx context.Context) ([]admin.Key, error) { return k.cfg.DB.AdminKeys(ctx) }
