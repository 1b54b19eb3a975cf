package sqlstore

import (
	"context"
	"fmt"
	"time"
)

// SettingOrInit atomically returns the value stored under name, or stores init under name and
// returns it when absent. Concurrent callers (goroutines, processes or replicas sharing the
// database) all get the same value: the first insert wins and the others read it. A stored
// value is never changed by this method.
//
// Errors: a database error (including ctx's).
func (db *DB) SettingOrInit(ctx context.Context, name, init string) (string, error) {
	_, err := db.sql.ExecContext(ctx,
		db.rebind(`INSERT INTO settings (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`),
		name, init, db.timeArg(time.Now()))
	if err != nil {
		return "", fmt.Errorf("sqlstore: SettingOrInit %q: %w", name, err)
	}
	// Settings are never deleted, so the row exists now, whoever inserted it.
	v, err := db.Setting(ctx, name)
	if err != nil {
		return "", fmt.Errorf("sqlstore: SettingOrInit %q: %w", name, err)
	}
	return v, nil
}

// Setting returns the value stored under name, or ErrNotFound.
func (db *DB) Setting(ctx context.Context, name string) (string, error) {
	var v string
	err := db.sql.QueryRowContext(ctx, db.rebind(`SELECT value FROM settings WHERE name = ?`), name).Scan(&v)
	if err != nil {
		return "", fmt.Errorf("sqlstore: Setting %q: %w", name, interpretError(err, recordRows))
	}
	return v, nil
}

// SaveSnapshot stores data under name, replacing any previous snapshot of that name. data may
// be empty (but is stored as an empty blob, not as "absent").
//
// Errors: a database error (including ctx's).
func (db *DB) SaveSnapshot(ctx context.Context, name string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	now := db.timeArg(time.Now())
	_, err := db.sql.ExecContext(ctx, db.rebind(`INSERT INTO snapshots (name, data, saved_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET data = excluded.data, saved_at = excluded.saved_at`),
		name, data, now)
	if err != nil {
		return fmt.Errorf("sqlstore: SaveSnapshot %q: %w", name, err)
	}
	return nil
}

// LoadSnapshot returns the snapshot stored under name (a non-nil slice, possibly empty), or
// ErrNotFound.
func (db *DB) LoadSnapshot(ctx context.Context, name string) ([]byte, error) {
	var data []byte
	err := db.sql.QueryRowContext(ctx, db.rebind(`SELECT data FROM snapshots WHERE name = ?`), name).Scan(&data)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: LoadSnapshot %q: %w", name, interpretError(err, recordRows))
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// DeleteSnapshot deletes the snapshot stored under name; deleting an absent snapshot is not an
// error.
//
// Errors: a database error (including ctx's).
func (db *DB) DeleteSnapshot(ctx context.Context, name string) error {
	if _, err := db.sql.ExecContext(ctx, db.rebind(`DELETE FROM snapshots WHERE name = ?`), name); err != nil {
		return fmt.Errorf("sqlstore: DeleteSnapshot %q: %w", name, err)
	}
	return nil
}
