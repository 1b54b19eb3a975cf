package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
)

// keyColumns are the columns scanKey reads, in its order.
const keyColumns = `name, key_hash, role, created_by, created_at, revoked_at, events`

func scanKey(row interface{ Scan(...any) error }) (admin.Key, error) {
	var (
		k      admin.Key
		role   string
		by     sql.NullString
		events sql.NullString
	)
	err := row.Scan(&k.Name, &k.KeyHash, &role, &by, timeCol{&k.CreatedAt}, timeCol{&k.RevokedAt}, &events)
	k.Role, k.CreatedBy = admin.Role(role), by.String
	if err == nil && events.Valid {
		// A JSON array of event ids (migration 00043); a key whose column does not read as one
		// is refused by its check rather than taken for a key of every event.
		if err = json.Unmarshal([]byte(events.String), &k.Events); err == nil && k.Events == nil {
			err = errors.New("sqlstore: an admin key's events are null in JSON")
		}
	}
	return k, err
}

// eventsArg is k's events as the column holds them: a JSON array, NULL for every event.
func eventsArg(s admin.Scope) any {
	if s == nil {
		return nil
	}
	b, _ := json.Marshal([]string(s)) // strings always encode
	return string(b)
}

// lockAdminKeys serialises the transactions that mint and revoke keys (the table is small and
// rarely written): a mint then sees its minter's revocation, and a revocation every key minted
// before it, so no key minted by a revoked key survives (a check-then-act in one atomic step).
// SQLite needs nothing: its transactions begin IMMEDIATE (the write lock) on one connection.
// PostgreSQL's SHARE ROW EXCLUSIVE conflicts with itself and with writes, not with reads, so
// the keys' checks (AdminKeyByHash) never wait on it.
func (db *DB) lockAdminKeys(ctx context.Context, tx *sql.Tx) error {
	if db.dialect != DialectPostgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `LOCK TABLE admin_keys IN SHARE ROW EXCLUSIVE MODE`)
	return err
}

// CreateAdminKey stores a new named key k (Name, KeyHash, Role, CreatedBy, Events; its
// CreatedAt is set) and returns it. A key minted by a named key (CreatedBy not admin.Root) is stored only
// while that key is live, in the same transaction. Errors: admin.ErrKeyExists (the name is
// taken, even by a revoked key: the primary key refuses it; or the hash is),
// admin.ErrActorRevoked (the minter is revoked or unknown), or the database's.
func (db *DB) CreateAdminKey(ctx context.Context, k admin.Key) (admin.Key, error) {
	k.CreatedAt, k.RevokedAt = normTime(time.Now()), time.Time{}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockAdminKeys(ctx, tx); err != nil {
			return err
		}
		if k.CreatedBy != admin.Root {
			minter, err := scanKey(tx.QueryRowContext(ctx, db.rebind(`SELECT `+keyColumns+` FROM admin_keys WHERE name = ?`), k.CreatedBy))
			switch {
			case errors.Is(err, sql.ErrNoRows) || (err == nil && !minter.Live()):
				return admin.ErrActorRevoked
			case err != nil:
				return err
			}
		}
		_, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO admin_keys (name, key_hash, role, created_by, created_at, events) VALUES (?, ?, ?, ?, ?, ?)`),
			k.Name, k.KeyHash, string(k.Role), k.CreatedBy, db.timeArg(k.CreatedAt), eventsArg(k.Events))
		return err
	})
	if err != nil {
		return admin.Key{}, fmt.Errorf("sqlstore: CreateAdminKey %q: %w", k.Name, interpretError(err, keyRows))
	}
	return k, nil
}

// RevokeAdminKey revokes the named key name and every live key minted by it, directly or
// through keys it minted (admin.Lineage), in one transaction, on behalf of the key by: root
// revokes any key; a named key only a key of its own lineage (itself included), and only while
// it is live itself. It returns the keys it revoked now and the live keys no minting link
// reaches (admin.Revocation). Errors: admin.ErrKeyNotFound, admin.ErrNotInLineage,
// admin.ErrActorRevoked, or the database's.
func (db *DB) RevokeAdminKey(ctx context.Context, name, by string) (admin.Revocation, error) {
	rv := admin.Revocation{Revoked: []string{}, Untraced: []string{}}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		if err := db.lockAdminKeys(ctx, tx); err != nil {
			return err
		}
		keys, err := adminKeys(ctx, tx)
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, k := range keys {
			live[k.Name] = k.Live()
		}
		if _, ok := live[name]; !ok {
			return admin.ErrKeyNotFound
		}
		if by != admin.Root {
			if !live[by] {
				return admin.ErrActorRevoked
			}
			if !slices.Contains(admin.Lineage(keys, by), name) {
				return admin.ErrNotInLineage
			}
		}
		for _, n := range admin.Lineage(keys, name) {
			if live[n] {
				rv.Revoked = append(rv.Revoked, n)
			}
		}
		slices.Sort(rv.Revoked)
		at := db.timeArg(time.Now())
		for _, n := range rv.Revoked {
			if _, err := tx.ExecContext(ctx, db.rebind(`UPDATE admin_keys SET revoked_at = ? WHERE name = ?`), at, n); err != nil {
				return err
			}
		}
		for _, k := range keys {
			if k.Live() && k.CreatedBy == "" && !slices.Contains(rv.Revoked, k.Name) {
				rv.Untraced = append(rv.Untraced, k.Name)
			}
		}
		return nil
	})
	if err != nil {
		return admin.Revocation{}, fmt.Errorf("sqlstore: RevokeAdminKey %q: %w", name, interpretError(err, keyRows))
	}
	return rv, nil
}

// AdminKeyByHash returns the named key whose hash is keyHash, live or revoked: the check of a
// named key on every admin request, so that a revocation holds on every instance as soon as it
// commits. One lookup of the unique index. Errors: admin.ErrKeyNotFound, or the database's.
func (db *DB) AdminKeyByHash(ctx context.Context, keyHash string) (admin.Key, error) {
	k, err := scanKey(db.sql.QueryRowContext(ctx, db.rebind(`SELECT `+keyColumns+` FROM admin_keys WHERE key_hash = ?`), keyHash))
	if err != nil {
		return admin.Key{}, fmt.Errorf("sqlstore: AdminKeyByHash: %w", interpretError(err, keyRows))
	}
	return k, nil
}

// AdminKeys lists every named key, live and revoked, by name.
func (db *DB) AdminKeys(ctx context.Context) ([]admin.Key, error) {
	keys, err := adminKeys(ctx, db.sql)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: AdminKeys: %w", err)
	}
	return keys, nil
}

// adminKeys lists every named key by name, through q (the pool or a transaction).
func adminKeys(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) ([]admin.Key, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+keyColumns+` FROM admin_keys ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []admin.Key{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
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
	// The id bound only when given: "? = 0" would make PostgreSQL type the parameter int4, and
	// an id past 2^31 - 1 fail to encode (a 503 for a client's number).
	q := `SELECT id, at, admin, address, action, event_id, before, after FROM audit WHERE TRUE`
	var args []any
	if beforeID > 0 {
		q += ` AND id < ?`
		args = append(args, beforeID)
	}
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
