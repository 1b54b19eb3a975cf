package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
)

// CreateAdminKey stores a new named key. Errors: admin.ErrKeyExists (the name is taken, even by
// a revoked key: the primary key refuses it), or the database's.
func (db *DB) CreateAdminKey(ctx context.Context, name, keyHash string) (admin.Key, error) {
	k := admin.Key{Name: name, KeyHash: keyHash, CreatedAt: normTime(time.Now())}
	_, err := db.sql.ExecContext(ctx, db.rebind(`INSERT INTO admin_keys (name, key_hash, created_at) VALUES (?, ?, ?)`),
		name, keyHash, db.timeArg(k.CreatedAt))
	if err != nil {
		return admin.Key{}, fmt.Errorf("sqlstore: CreateAdminKey %q: %w", name, interpretError(err, keyRows))
	}
	return k, nil
}

// RevokeAdminKey revokes a named key (revoking a revoked key changes nothing). Errors:
// admin.ErrKeyNotFound, or the database's.
func (db *DB) RevokeAdminKey(ctx context.Context, name string) error {
	var revoked string
	err := db.sql.QueryRowContext(ctx, db.rebind(`UPDATE admin_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE name = ?
		RETURNING name`), db.timeArg(time.Now()), name).Scan(&revoked)
	if err != nil {
		return fmt.Errorf("sqlstore: RevokeAdminKey %q: %w", name, interpretError(err, keyRows))
	}
	return nil
}

// AdminKeys lists every named key, live and revoked, by name.
func (db *DB) AdminKeys(ctx context.Context) ([]admin.Key, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT name, key_hash, created_at, revoked_at FROM admin_keys ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: AdminKeys: %w", err)
	}
	defer rows.Close()
	out := []admin.Key{}
	for rows.Next() {
		var k admin.Key
		if err := rows.Scan(&k.Name, &k.KeyHash, timeCol{&k.CreatedAt}, timeCol{&k.RevokedAt}); err != nil {
			return nil, fmt.Errorf("sqlstore: AdminKeys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// AddAudit records an admin action and returns it with its id and time.
func (db *DB) AddAudit(ctx context.Context, e admin.AuditEntry) (admin.AuditEntry, error) {
	e.At = normTime(time.Now())
	err := db.sql.QueryRowContext(ctx, db.rebind(`INSERT INTO audit (at, admin, address, action, event_id, before, after)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		db.timeArg(e.At), e.Admin, e.Address, e.Action, nullString(e.EventID), nullString(e.Before), nullString(e.After)).Scan(&e.ID)
	if err != nil {
		return admin.AuditEntry{}, fmt.Errorf("sqlstore: AddAudit: %w", err)
	}
	return e, nil
}

// Audit returns up to limit entries, newest first, with ids below beforeID (0: from the
// newest), of one event ("" = all).
func (db *DB) Audit(ctx context.Context, eventID string, beforeID int64, limit int) ([]admin.AuditEntry, error) {
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
	out := []admin.AuditEntry{}
	for rows.Next() {
		var (
			e                 admin.AuditEntry
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
