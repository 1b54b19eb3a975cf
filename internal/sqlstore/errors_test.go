package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestInterpretError feeds interpretError the errors the drivers really return, on PostgreSQL
// (pgx) and on SQLite (modernc.org/sqlite): a missing row, the two kinds of unique violation,
// a constraint that is not one (passed on as it is), and a transaction that lost a race (a
// serialization failure on PostgreSQL, a busy database on SQLite).
func TestInterpretError(t *testing.T) {
	require.NoError(t, interpretError(nil, keyRows))
	other := errors.New("anything else")
	require.Equal(t, other, interpretError(other, keyRows))

	for _, b := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqltest.SQLite}, {"postgres", sqltest.Postgres}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := b.url(t)
			db, err := Open(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, db.Close()) })
			insert := func(name, hash any) error {
				_, err := db.sql.ExecContext(ctx, db.rebind(`INSERT INTO admin_keys (name, key_hash, created_at) VALUES (?, ?, ?)`),
					name, hash, db.timeArg(time.Now()))
				return err
			}

			var name string
			err = db.sql.QueryRowContext(ctx, `SELECT name FROM admin_keys`).Scan(&name)
			require.ErrorIs(t, err, sql.ErrNoRows, "the driver's own error")
			require.Equal(t, admin.ErrKeyNotFound, interpretError(err, keyRows))
			require.Equal(t, event.ErrNotFound, interpretError(err, eventRows))
			require.ErrorIs(t, interpretError(err, rowKind{}), sql.ErrNoRows, "a kind without a sentinel passes it on")

			require.NoError(t, insert("a", "h1"))
			for _, dup := range []struct{ what, name, hash string }{{"primary key", "a", "h2"}, {"unique", "b", "h1"}} {
				err := insert(dup.name, dup.hash)
				require.Error(t, err, dup.what)
				got := interpretError(err, keyRows)
				require.ErrorIs(t, got, admin.ErrKeyExists, "%s: %v", dup.what, err)
				require.ErrorIs(t, got, err, "the driver's error is kept")
				require.False(t, retryable(err))
				require.Equal(t, err, interpretError(err, eventRows), "a kind without exists passes it on")
			}
			err = insert("c", nil) // NOT NULL: a constraint, not a duplicate
			require.Error(t, err)
			require.Equal(t, err, interpretError(err, keyRows))

			err = lostRace(t, db, url)
			require.True(t, retryable(err), "%v", err)
			got := interpretError(err, keyRows)
			require.ErrorIs(t, got, errRetry)
			require.ErrorIs(t, got, err)
			require.NotErrorIs(t, got, admin.ErrKeyExists)
		})
	}
}

// lostRace returns the error of a transaction that lost a race with another, as the driver
// gives it: on PostgreSQL two serializable transactions that each read what the other writes
// (a write skew: the second to commit fails with a serialization failure); on SQLite a second
// connection, that does not wait, asking for the write lock db holds (SQLITE_BUSY).
func lostRace(t *testing.T, db *DB, url string) error {
	ctx := t.Context()
	if db.Dialect() == DialectSQLite {
		tx, err := db.sql.BeginTx(ctx, nil) // BEGIN IMMEDIATE: takes the write lock
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback()) }()
		other, err := sql.Open("sqlite", "file:"+url+"?_pragma=busy_timeout(0)") // url: a plain path
		require.NoError(t, err)
		defer other.Close()
		_, err = other.ExecContext(ctx, `INSERT INTO settings (name, value, created_at) VALUES ('x', 'x', 0)`)
		return err
	}
	begin := func() *sql.Tx {
		tx, err := db.sql.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		var n int
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM settings WHERE name LIKE 'skew%'`).Scan(&n))
		return tx
	}
	write := func(tx *sql.Tx, name string) error {
		_, err := tx.ExecContext(context.WithoutCancel(ctx), `INSERT INTO settings (name, value, created_at) VALUES ($1, 'x', now())`, name)
		return err
	}
	a, b := begin(), begin()
	require.NoError(t, write(a, "skew-a"))
	if err := write(b, "skew-b"); err != nil {
		return err
	}
	require.NoError(t, a.Commit())
	return b.Commit()
}
