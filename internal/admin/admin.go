// Package admin holds the records of the admin API itself, kept in SQL (package sqlstore):
// named admin keys and the audit trail of admin actions, with their sentinel errors. They
// belong to no event, sale or campaign (the trail records actions on all of them and on keys),
// so they are not in event, sale or coupon; being a leaf, this package lets sqlstore return
// them without importing the services that use them (adminkey, httpapi).
package admin

import (
	"errors"
	"time"
)

// Key is a named admin key as stored: its SHA-256 hash, never the key.
type Key struct {
	Name      string
	KeyHash   string // hex SHA-256 of the key
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is live
}

// Errors of the named keys.
var (
	// ErrKeyExists: the name is taken, also by a revoked key (names are not reused).
	ErrKeyExists = errors.New("admin key exists already")
	// ErrKeyNotFound: no key of that name.
	ErrKeyNotFound = errors.New("admin key not found")
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
