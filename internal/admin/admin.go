// Package admin holds the records of the admin API itself, kept in SQL (package sqlstore):
// named admin keys with their roles, and the audit trail of admin actions, with their sentinel
// errors and the rules of the records (roles' ranks, a key's lineage). They belong to no event,
// sale or campaign (the trail records actions on all of them and on keys), so they are not in
// event, sale or coupon; being a leaf, this package lets sqlstore return them without importing
// the services that use them (adminkey, httpapi).
package admin

import (
	"errors"
	"slices"
	"time"
)

// Root is the name of the deployment's own admin key (WAITROOM_ADMIN_KEY): all-powerful, never
// stored, never revoked through the API.
const Root = "root"

// Role is what an admin key may do. Roles are ranked: each may do what the ones below it may.
//
//	RoleReadOnly  reads: events, the audit trail, histories, instances, campaigns, metrics,
//	              any booking or entry
//	RoleOperator  also runs the sale: writes events (PUT, PATCH, close, extend, DELETE),
//	              cancels bookings, writes campaigns, joins and enters for a user (user_id)
//	RoleKeyAdmin  also lists, mints and revokes named keys: keys of its own role or below,
//	              and revokes only the keys it minted (directly or through keys it minted)
//	              and itself
//	RoleRoot      the deployment's own key: everything, any key
//
// RoleHealthReporter stands apart from the ranks: it may report an origin's health for
// admission mode auto (POST /v1/events/{event_id}/health) and nothing else, not even read, so
// that the key an origin or its gate middleware holds cannot run the sale; operators and above
// may report too. docs/api.md ("Admin keys, roles and the audit trail") has the table per route.
type Role string

// The roles. A named key has one of the first four; RoleRoot is the root key's alone.
const (
	RoleHealthReporter Role = "health_reporter"
	RoleReadOnly       Role = "read_only"
	RoleOperator       Role = "operator"
	RoleKeyAdmin       Role = "key_admin"
	RoleRoot           Role = "root"
)

// DefaultRole is the role of a key minted without one, and of the keys minted before roles
// existed (migration 00034): what such a key was used for — running events and the sale —
// without minting or revoking keys, which now needs a key admin.
const DefaultRole = RoleOperator

// rank orders the roles; 0 for an unknown one, which allows nothing.
func (r Role) rank() int {
	switch r {
	case RoleReadOnly:
		return 1
	case RoleOperator:
		return 2
	case RoleKeyAdmin:
		return 3
	case RoleRoot:
		return 4
	}
	return 0
}

// Allows reports whether a key of role r may do what needs role need (r ranks at least as
// high; what needs RoleHealthReporter, that role or an operator and above; a health reporter
// nothing else). An unknown role allows nothing.
func (r Role) Allows(need Role) bool {
	switch {
	case r == RoleHealthReporter:
		return need == RoleHealthReporter
	case need == RoleHealthReporter:
		need = RoleOperator
	}
	return r.rank() > 0 && r.rank() >= need.rank()
}

// Named reports whether r is a role a named key may have (not root, not unknown).
func (r Role) Named() bool { return r == RoleHealthReporter || (r.rank() > 0 && r != RoleRoot) }

// Key is a named admin key as stored: its SHA-256 hash, never the key.
type Key struct {
	Name      string
	KeyHash   string // hex SHA-256 of the key
	Role      Role
	CreatedBy string // the key that minted it: Root, a named key, or "" when unknown (minted before roles)
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is live
	Events    Scope     // the only events the key may act on, sorted; nil: every event
}

// MaxEvents is the most events a key's scope names (Key.Events).
const MaxEvents = 100

// Scope is what a key scoped to some events (Key.Events) may do, beyond its role: act on one
// of them, on a route that names it ({event_id}); every other call, one that names another
// event or none (the events' list, the audit trail, metrics, campaigns, the keys), is refused,
// so a key an origin or a tenant's gate middleware holds moves its own events and no other's.
// A nil scope allows every call its role allows.
type Scope []string

// Allows reports whether s allows a call on eventID ("": a call that names no event).
func (s Scope) Allows(eventID string) bool {
	return s == nil || (eventID != "" && slices.Contains(s, eventID))
}

// Within reports whether every event of t is in s: a key of scope s mints keys of scope t
// only then (a nil t, every event, is within a nil s alone).
func (s Scope) Within(t Scope) bool {
	if s == nil {
		return true
	}
	if t == nil {
		return false
	}
	for _, id := range t {
		if !slices.Contains(s, id) {
			return false
		}
	}
	return true
}

// Live reports whether the key is not revoked.
func (k Key) Live() bool { return k.RevokedAt.IsZero() }

// Lineage returns name and every key minted by it, directly or through keys it minted, among
// keys, sorted (name first). Names are never reused, so the minting links (Key.CreatedBy) form
// a forest: the walk ends. Root's lineage is every key.
func Lineage(keys []Key, name string) []string {
	children := map[string][]string{}
	for _, k := range keys {
		children[k.CreatedBy] = append(children[k.CreatedBy], k.Name)
	}
	out := []string{name}
	seen := map[string]bool{name: true}
	for i := 0; i < len(out); i++ {
		for _, c := range children[out[i]] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	if name == Root {
		for _, k := range keys {
			if !seen[k.Name] {
				out = append(out, k.Name)
			}
		}
	}
	slices.Sort(out[1:])
	return out
}

// Revocation is what a revocation did: the keys it revoked, and the live keys it could not
// reach because nothing records who minted them.
type Revocation struct {
	// Revoked are the keys revoked now, sorted: the key and the live keys minted by it,
	// directly or through keys it minted (none when they all were already).
	Revoked []string
	// Untraced are the live keys, sorted, whose minter is unknown (minted before roles, and the
	// audit trail does not name the minter: Key.CreatedBy ""). A revocation reaches them only
	// by their own name, so the caller is told they exist.
	Untraced []string
}

// Errors of the named keys.
var (
	// ErrKeyExists: the name is taken, also by a revoked key (names are not reused).
	ErrKeyExists = errors.New("admin key exists already")
	// ErrKeyNotFound: no key of that name.
	ErrKeyNotFound = errors.New("admin key not found")
	// ErrNotInLineage: a key admin revokes only the keys it minted (directly or through keys it
	// minted) and itself.
	ErrNotInLineage = errors.New("admin key minted by neither the revoker nor the keys it minted")
	// ErrActorRevoked: the key that asked to mint or revoke was revoked meanwhile (its request
	// was authenticated before the revocation committed).
	ErrActorRevoked = errors.New("the admin key making the call is revoked")
)

// AuditEntry is one admin action.
type AuditEntry struct {
	ID      int64
	At      time.Time
	Admin   string // the admin key's name ("root" for the deployment's own key)
	Address string // the client's address
	Action  string // e.g. "event.update", "event.close", "admin_key.create"
	EventID string // "" when the action concerns no event
	Before  string // JSON of the state before ("" when none)
	After   string // JSON of the state after ("" when none)
}
