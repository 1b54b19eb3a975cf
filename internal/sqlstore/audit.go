package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// AdminKey is a named admin key as stored: its SHA-256 hash, never the key.
type AdminKey struct {
	Name      string
	KeyHash   string // hex SHA-256 of the key
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is live
}

// ErrExists is returned when a record with the same name exists already.
var ErrExists = errors.New("exists already")

// CreateAdminKey stores a new named key. Errors: ErrExists (the name is taken, even by a
// revoked key), or the database's.
func (db *DB) CreateAdminKey(ctx context.Context, name, keyHash string) (AdminKey, error) {
	k := AdminKey{Name: name, KeyHash: keyHash, CreatedAt: normTime(time.Now())}
	res, err := db.sql.ExecContext(ctx, db.rebind(`INSERT INTO admin_keys (name, key_hash, created_at) VALUES (?, ?, ?)
		ON CONFLICT DO NOTHING`), name, keyHash, db.timeArg(k.CreatedAt))
	if err != nil {
		return AdminKey{}, fmt.Errorf("sqlstore: CreateAdminKey: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return AdminKey{}, fmt.Errorf("%w: admin key %q", ErrExists, name)
	}
	return k, nil
}

// RevokeAdminKey revokes a named key (revoking a revoked key changes nothing). Errors:
// ErrNotFound, or the database's.
func (db *DB) RevokeAdminKey(ctx context.Context, name string) error {
	res, err := db.sql.ExecContext(ctx, db.rebind(`UPDATE admin_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE name = ?`),
		db.timeArg(time.Now()), name)
	if err != nil {
		return fmt.Errorf("sqlstore: RevokeAdminKey: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// AdminKeys lists every named key, live and revoked, by name.
func (db *DB) AdminKeys(ctx context.Context) ([]AdminKey, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT name, key_hash, created_at, revoked_at FROM admin_keys ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: AdminKeys: %w", err)
	}
	defer rows.Close()
	out := []AdminKey{}
	for rows.Next() {
		var k AdminKey
		if err := rows.Scan(&k.Name, &k.KeyHash, timeCol{&k.CreatedAt}, timeCol{&k.RevokedAt}); err != nil {
			return nil, fmt.Errorf("sqlstore: AdminKeys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

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

// AddAudit records an admin action and returns it with its id and time.
func (db *DB) AddAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	e.At = normTime(time.Now())
	err := db.sql.QueryRowContext(ctx, db.rebind(`INSERT INTO audit (at, admin, address, action, event_id, before, after)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		db.timeArg(e.At), e.Admin, e.Address, e.Action, nullString(e.EventID), nullString(e.Before), nullString(e.After)).Scan(&e.ID)
	if err != nil {
		return AuditEntry{}, fmt.Errorf("sqlstore: AddAudit: %w", err)
	}
	return e, nil
}

// Audit returns up to limit entries, newest first, with ids below beforeID (0: from the
// newest), of one event ("" = all).
func (db *DB) Audit(ctx context.Context, eventID string, beforeID int64, limit int) ([]AuditEntry, error) {
	q := `SELECT id, at, admin, address, action, event_id, before, after FROM audit WHERE (? = 0 OR id < ?)`
	args := []any{beforeID, beforeID}
	if eventID != "" {
		q += ` AND event_id = ?`
		args = append(args, eventID)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := db.sql.QueryContext(ctx, db.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: Audit: %w", err)
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var (
			e                 AuditEntry
			ev, before, after sql.NullString
		)
		if err := rows.Scan(&e.ID, timeCol{&e.At}, &e.Admin, &e.Address, &e.Action, &ev, &before, &after); err != nil {
			return nil, fmt.Errorf("sqlstore: Audit: %w", err)
		}
		e.EventID, e.Before, e.After = ev.String, before.String, after.String
		out = append(out, e)
	}
	return out, rows.Err()
}
