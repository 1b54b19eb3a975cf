package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestOpenWithTimeouts: OpenWith sets PostgreSQL's statement_timeout on every connection (a
// statement running longer is aborted by the server), unless the URL sets it.
func TestOpenWithTimeouts(t *testing.T) {
	url := sqltest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqlstore.OpenWith(ctx, url, sqlstore.Options{ConnectTimeout: 1500 * time.Millisecond, StatementTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer db.Close()
	var v string
	require.NoError(t, db.SQL().QueryRowContext(ctx, "SHOW statement_timeout").Scan(&v))
	require.Equal(t, "300ms", v)
	start := time.Now()
	_, err = db.SQL().ExecContext(ctx, "SELECT pg_sleep(5)")
	require.ErrorContains(t, err, "statement timeout")
	require.Less(t, time.Since(start), 3*time.Second)

	own, err := sqlstore.OpenWith(ctx, url+"&statement_timeout=7000", sqlstore.Options{StatementTimeout: time.Second})
	require.NoError(t, err)
	defer own.Close()
	require.NoError(t, own.SQL().QueryRowContext(ctx, "SHOW statement_timeout").Scan(&v))
	require.Equal(t, "7s", v, "the URL's own setting wins")
}
